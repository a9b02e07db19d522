//! `hopscore loglik` end to end on SmolLM2 (GGUF) and HotpotQA pairs: the output's
//! per-row sums and means equal HF transformers' target log-probabilities
//! (tests/fixtures/decoder/smollm2_lepus) within 1e-3 per token, whether the
//! separating space ends the prompt or starts the target; bad rows are quarantined
//! with their reason. Needs weights/smollm2/; the texts come from the HotpotQA slice.

use crate::common;

use std::sync::Arc;

use arrow_array::{Array, Float64Array, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use hopscore::cli::job::run;
use hopscore::jobs::loglik::LoglikConfig;

#[test]
fn loglik_cli_matches_transformers_and_quarantines_bad_rows() {
    let Some(gguf) = common::SMOLLM2_GGUF.require() else {
        return;
    };
    let gguf = gguf.parent().unwrap().to_path_buf(); // weights/smollm2
    let (pairs, _) = common::smollm2_lepus_pairs();
    let g = common::read_golden(&common::fixture("decoder/smollm2_lepus/golden.safetensors"));
    let (lens, starts, lp) = (
        &g["lengths"].i64,
        &g["target_start"].i64,
        &g["target_logprobs"].f32,
    );

    // The first 8 golden pairs; odd rows move the space to the end of the prompt.
    let (mut ids, mut prompts, mut targets, mut want) = (vec![], vec![], vec![], vec![]);
    let mut at = 0;
    for (k, pair) in pairs.iter().take(8).enumerate() {
        assert_eq!(pair.index, k);
        let prompt = pair.prompt.clone();
        let q = pair.question.as_str();
        let n = (lens[k] - starts[k]) as usize;
        want.push(lp[at..at + n].to_vec());
        at += n;
        ids.push(Some(format!("q{k}")));
        if k % 2 == 1 {
            prompts.push(Some(format!("{prompt} ")));
            targets.push(Some(q.to_string()));
        } else {
            prompts.push(Some(prompt));
            targets.push(Some(format!(" {q}")));
        }
    }
    // Bad rows: null target, whitespace-only target, null id, empty prompt (no BOS).
    for (id, p, t) in [
        (Some("bad_null"), Some("Document: x."), None),
        (Some("bad_empty"), Some("Document: x."), Some("   ")),
        (None, Some("Document: x."), Some(" why?")),
        (Some("bad_noctx"), Some(""), Some(" why?")),
    ] {
        ids.push(id.map(String::from));
        prompts.push(p.map(String::from));
        targets.push(t.map(String::from));
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("prompt", DataType::Utf8, true),
        Field::new("target", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(ids)),
            Arc::new(StringArray::from(prompts)),
            Arc::new(StringArray::from(targets)),
        ],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("pairs.parquet");
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&input).unwrap(), schema, None)
            .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();

    let output = dir.path().join("out.parquet");
    let config = LoglikConfig {
        temperature: 1.0,
        min_shared_prefix: 16,
        max_batch_tokens: 1024,
        ..LoglikConfig::new(gguf)
    };
    let summary = run(common::job_args(config, &input, &output)).unwrap();
    assert_eq!(common::scored_and_quarantined(&summary), (8, 4));

    let out = &common::read_parquet(&output);
    let col = |n: &str| out.column_by_name(n).unwrap().clone();
    let id = col("id");
    let id = id.as_any().downcast_ref::<StringArray>().unwrap();
    let sum = col("loglik_sum");
    let sum = sum.as_any().downcast_ref::<Float64Array>().unwrap();
    let mean = col("loglik_mean");
    let mean = mean.as_any().downcast_ref::<Float64Array>().unwrap();
    let n = col("n_tokens");
    let n = n.as_any().downcast_ref::<UInt32Array>().unwrap();
    assert_eq!(out.num_rows(), 8);
    for (k, gold) in want.iter().enumerate() {
        assert_eq!(id.value(k), format!("q{k}"), "input order is kept");
        assert_eq!(n.value(k) as usize, gold.len(), "q{k}: scored token count");
        let gsum: f64 = gold.iter().map(|&v| f64::from(v)).sum();
        let tol = 1e-3 * gold.len() as f64;
        assert!(
            (sum.value(k) - gsum).abs() <= tol,
            "q{k}: sum {} vs HF {gsum}",
            sum.value(k)
        );
        assert!(
            (mean.value(k) - gsum / gold.len() as f64).abs() <= 1e-3,
            "q{k}: mean"
        );
    }

    let q = &common::read_parquet(&summary.quarantine_path);
    let reasons = q.column_by_name("reason").unwrap();
    let reasons = reasons.as_any().downcast_ref::<StringArray>().unwrap();
    let rows = q.column_by_name("row").unwrap();
    let rows = rows
        .as_any()
        .downcast_ref::<arrow_array::UInt64Array>()
        .unwrap();
    let got: Vec<(u64, &str)> = (0..q.num_rows())
        .map(|i| (rows.value(i), reasons.value(i)))
        .collect();
    assert_eq!(got[0], (8, "target is null"));
    assert_eq!(got[1], (9, "target is empty"));
    assert_eq!(got[2], (10, "id is null"));
    assert!(
        got[3].0 == 11 && got[3].1.contains("no BOS"),
        "{:?}",
        got[3]
    );
}

/// A model directory's tokenizer: `add_bos_token` / `bos_token` come from the
/// tokenizer_config.json beside tokenizer.json, and BOS leads the prompt.
#[test]
fn directory_tokenizer_reads_bos_policy_from_tokenizer_config() {
    use hopscore::text::causal_tokenizer::CausalTokenizer;
    let Some(src) = common::DEBERTA_V3_TOKENIZER.require() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&src, dir.path().join("tokenizer.json")).unwrap();
    let plain = CausalTokenizer::from_dir(dir.path(), None).unwrap();
    assert!(!plain.add_bos);
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"add_bos_token": true, "bos_token": {"content": "[CLS]"}}"#,
    )
    .unwrap();
    let tok = CausalTokenizer::from_dir(dir.path(), None).unwrap();
    assert!(tok.add_bos);
    // [CLS] is id 1 in the DeBERTa-v3 vocabulary.
    assert_eq!(tok.bos_id, Some(1));
    let pair = tok.encode_pair("Document: x. Question: ", "who?").unwrap();
    let prompt = tok.encode("Document: x. Question:").unwrap();
    assert_eq!(pair.ids[0], 1);
    assert_eq!(&pair.ids[1..pair.target_start], prompt.as_slice());
    assert_eq!(
        &pair.ids[pair.target_start..],
        tok.encode(" who?").unwrap().as_slice()
    );
    // The file truncates to 128 tokens; the causal tokenizer must not.
    let long = "word ".repeat(300);
    assert!(tok.encode(&long).unwrap().len() >= 300);
}
