//! T5 encoder-decoders against HF transformers' `T5ForConditionalGeneration`
//! (tests/fixtures/t5/, written by tools/goldens/make_t5_goldens.py): random
//! checkpoints of the v1.0 layout (relu, tied head scaled by d_model^-0.5, one file)
//! and the v1.1 layout (gated-gelu, untied head, d_kv·heads ≠ d_model, more decoder
//! blocks, two shards), with a Unigram tokenizer trained on HotpotQA in T5's layout,
//! on LEPUS prompts of 10 real HotpotQA questions (encoder inputs up to 1,072 tokens,
//! past both bucket distances):
//!
//! - the relative-position buckets for positions −700..700, both directions;
//! - every label token's log-probability at T = 1 and 1.7 within 1e-5 (f32, CPU);
//! - the prompts rebuilt from the data slice tokenise to the golden ids;
//! - config fields and tensors that do not fit are refused by name.

use crate::common;

use std::path::PathBuf;

use hopscore::backend::cpu::CpuBackend;
use hopscore::model::decoder::ScoredSequence;
use hopscore::model::language_model::{load_language_model, LanguageModel};
use hopscore::model::t5::{relative_position_bucket, T5Config};
use hopscore::strategy::lepus::{
    parse_templates, question_text, InstructionPosition, DEFAULT_INSTRUCTIONS,
};
use hopscore::text::prompt::LmEncoder;
use serde_json::Value;

fn golden() -> Value {
    common::fixture_json("t5/logprobs.json")
}

fn model_dir(name: &str) -> PathBuf {
    common::fixture(&format!("t5/{name}"))
}

#[test]
fn relative_position_buckets_match_transformers() {
    let g = golden();
    let mut checked = 0;
    for (key, want) in g["buckets"].as_object().unwrap() {
        let parts: Vec<&str> = key.split('_').collect();
        let (n, dist) = (parts[0].parse().unwrap(), parts[1].parse().unwrap());
        let bidirectional = parts[2] == "bidirectional";
        for (k, b) in want.as_array().unwrap().iter().enumerate() {
            let rel = k as i64 - 700;
            assert_eq!(
                relative_position_bucket(rel, bidirectional, n, dist),
                b.as_u64().unwrap() as u32,
                "{key}: relative position {rel}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4 * 1401);
}

/// Scores every golden prompt of `name` in batches of `batch` sequences.
fn check_logprobs(name: &str, batch: usize) {
    let g = golden();
    let be = CpuBackend::F32;
    let lm = load_language_model(&be, &model_dir(name)).unwrap();
    assert!(matches!(lm, LanguageModel::Seq2Seq(_)));
    let cases = common::t5_golden_sequences(name);
    let temps: Vec<f32> = g["temperatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap() as f32)
        .collect();
    let mut worst = 0f64;
    let mut tokens = 0;
    for (ti, &t) in temps.iter().enumerate() {
        for chunk in cases.chunks(batch) {
            let seqs: Vec<ScoredSequence> = chunk.iter().map(|(s, _)| s.clone()).collect();
            let got = lm.target_logprobs(&be, &seqs, t).unwrap();
            for ((_, want), got) in chunk.iter().zip(&got) {
                assert_eq!(got.len(), want[ti].len());
                for (a, b) in got.iter().zip(&want[ti]) {
                    worst = worst.max((f64::from(*a) - b).abs());
                    tokens += 1;
                }
            }
        }
    }
    assert!(worst <= 1e-5, "{name}: max |Δ log p| {worst:e}");
    eprintln!("{name}: {tokens} label tokens, max |Δ log p| {worst:.2e}");
}

#[test]
fn t5_v1_0_relu_tied_matches_transformers() {
    check_logprobs("v1_0", 7);
}

#[test]
fn t5_v1_1_gated_gelu_untied_sharded_matches_transformers() {
    check_logprobs("v1_1", 40);
}

/// The golden prompts rebuilt from the data slice: (index in the goldens, prompt,
/// question) for the golden questions in the slice.
fn data_prompts(g: &Value) -> Vec<(usize, String, String)> {
    let rows = common::data_records("hotpotqa");
    let template = parse_templates(DEFAULT_INSTRUCTIONS, InstructionPosition::After, 1)
        .unwrap()
        .remove(0);
    let mut out = Vec::new();
    for (q, id) in g["questions"].as_array().unwrap().iter().enumerate() {
        let Some(row) = common::find_record(&rows, id.as_str().unwrap()) else {
            continue;
        };
        let texts: Vec<String> = row["context"].as_array().unwrap()[..3]
            .iter()
            .map(|c| {
                c[1].as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap())
                    .collect()
            })
            .collect();
        let question = question_text(row["question"].as_str().unwrap());
        let paths: [&[usize]; 4] = [&[0], &[1], &[0, 1], &[2, 0]];
        for (k, path) in paths.iter().enumerate() {
            let docs: Vec<&str> = path.iter().map(|&i| texts[i].as_str()).collect();
            out.push((4 * q + k, template.render(&docs), question.clone()));
        }
    }
    assert!(out.len() >= 24, "{} prompts in the data slice", out.len());
    out
}

#[test]
fn prompts_from_the_data_tokenise_to_the_golden_ids() {
    let g = golden();
    let tokenizer = common::scoring_tokenizer(&model_dir("v1_1"));
    let encoder = LmEncoder {
        tok: std::sync::Arc::new(tokenizer),
        max_tokens: 2048,
        seq2seq: true,
    };
    let cases = common::t5_golden_sequences("v1_1");
    for (at, prompt, question) in data_prompts(&g) {
        let seq = encoder.encode(&prompt, &question).unwrap();
        let want = &cases[at].0;
        assert_eq!(seq.ids, want.ids, "prompt {at}");
        assert_eq!(
            seq.type_ids.iter().position(|&t| t == 1),
            Some(want.target_start)
        );
    }
}

/// `hopscore loglik` on (prompt, question) rows with the v1.0 checkpoint: each row's
/// sum and count of label log-probabilities are the golden's; a row without target
/// goes to the quarantine file.
#[test]
fn loglik_command_scores_t5_rows_as_transformers() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, UInt32Type};
    use arrow_array::{Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    let g = golden();
    let prompts = data_prompts(&g);
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("rows.parquet");
    let mut targets: Vec<Option<String>> = prompts.iter().map(|p| Some(p.2.clone())).collect();
    targets[3] = None;
    let batch = RecordBatch::try_new(
        std::sync::Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("prompt", DataType::Utf8, true),
            Field::new("target", DataType::Utf8, true),
        ])),
        vec![
            std::sync::Arc::new(StringArray::from_iter_values(
                prompts.iter().map(|p| format!("p{}", p.0)),
            )),
            std::sync::Arc::new(StringArray::from_iter_values(prompts.iter().map(|p| &p.1))),
            std::sync::Arc::new(StringArray::from(targets)),
        ],
    )
    .unwrap();
    let file = std::fs::File::create(&input).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let output = tmp.path().join("out.parquet");
    let status = common::hopscore()
        .args(["loglik", "--max-batch-tokens", "1500", "--model"])
        .arg(model_dir("v1_0"))
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .status()
        .unwrap();
    assert!(status.success());
    let out = common::read_parquet(&output);
    assert_eq!(out.num_rows(), prompts.len() - 1);
    let bad = common::read_parquet(&tmp.path().join("out.quarantine.parquet"));
    assert_eq!(bad.num_rows(), 1);
    let cases = common::t5_golden_sequences("v1_0");
    let ids = out.column_by_name("id").unwrap().as_string::<i32>();
    let sums = out
        .column_by_name("loglik_sum")
        .unwrap()
        .as_primitive::<Float64Type>();
    let counts = out
        .column_by_name("n_tokens")
        .unwrap()
        .as_primitive::<UInt32Type>();
    let mut worst = 0f64;
    for r in 0..out.num_rows() {
        let at: usize = ids.value(r)[1..].parse().unwrap();
        let want = &cases[at].1[0];
        assert_eq!(counts.value(r) as usize, want.len());
        worst = worst.max((sums.value(r) - want.iter().sum::<f64>()).abs());
    }
    assert!(worst < 1e-4, "max |Δ sum| {worst:e}");
    assert!(!sums.is_null(0));
}

/// `hopscore bench-loglik` reads T5 pairs (ids before `target_start` are the encoder
/// input) and reports the golden mean log-likelihood.
#[test]
fn bench_loglik_scores_t5_pairs() {
    use hopscore::bench::loglik::{run, LoglikBench};
    let cases = common::t5_golden_sequences("v1_1");
    let tmp = tempfile::tempdir().unwrap();
    let pairs: Vec<Value> = cases
        .iter()
        .map(|(s, _)| serde_json::json!({"ids": s.ids, "target_start": s.target_start}))
        .collect();
    let path = tmp.path().join("pairs.json");
    std::fs::write(&path, serde_json::json!({ "pairs": pairs }).to_string()).unwrap();
    let r = run(
        &CpuBackend::F32,
        &LoglikBench {
            model: model_dir("v1_1"),
            pairs: path,
            max_batch_tokens: 4096,
            temperature: 1.0,
            warmup: 0,
            iters: 1,
            scores: None,
        },
    )
    .unwrap();
    let means: Vec<f64> = cases
        .iter()
        .map(|(_, lp)| lp[0].iter().sum::<f64>() / lp[0].len() as f64)
        .collect();
    let want = means.iter().sum::<f64>() / means.len() as f64;
    assert!(
        (r.mean_loglik - want).abs() < 1e-5,
        "{} vs {want}",
        r.mean_loglik
    );
    assert_eq!((r.model_type.as_str(), r.pairs), ("t5", cases.len()));
}

/// A copy of the v1.1 fixture with `edit` applied to its config.json.
fn edited(edit: impl Fn(&mut Value)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(model_dir("v1_1")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    let path = dir.path().join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    dir
}

fn load_error(dir: &tempfile::TempDir) -> String {
    match load_language_model(&CpuBackend::F32, dir.path()) {
        Ok(_) => panic!("loaded"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn configs_and_checkpoints_that_do_not_fit_are_refused_by_name() {
    let e = load_error(&edited(|c| c["feed_forward_proj"] = "gated-relu6".into()));
    assert!(
        e.contains("feed_forward_proj") && e.contains("gated-relu6"),
        "{e}"
    );
    let e = load_error(&edited(|c| c["model_type"] = "umt5".into()));
    assert!(e.contains("model_type") && e.contains("umt5"), "{e}");
    let e = load_error(&edited(|c| {
        c.as_object_mut().unwrap().remove("decoder_start_token_id");
    }));
    assert!(e.contains("decoder_start_token_id"), "{e}");
    // Issue 40: a start id past the vocabulary loaded and failed at the first batch.
    let e = load_error(&edited(|c| {
        let vocab = c["vocab_size"].as_u64().unwrap();
        c["decoder_start_token_id"] = vocab.into();
    }));
    assert!(
        e.contains("decoder_start_token_id") && e.contains("below vocab_size"),
        "{e}"
    );
    // Tied: the stored lm_head is HF's to ignore, but the d_kv no longer fits.
    let e = load_error(&edited(|c| c["d_kv"] = 8.into()));
    assert!(e.contains("SelfAttention.q.weight"), "{e}");
    // One decoder block fewer than stored: the extra block is named.
    let e = load_error(&edited(|c| c["num_decoder_layers"] = 2.into()));
    assert!(e.contains("decoder.block.2"), "{e}");
    let config = T5Config::from_file(&model_dir("v1_1").join("config.json")).unwrap();
    assert!(!config.tie_word_embeddings && !config.scale_decoder_outputs);
    let config = T5Config::from_file(&model_dir("v1_0").join("config.json")).unwrap();
    assert!(config.tie_word_embeddings && config.scale_decoder_outputs);
}
