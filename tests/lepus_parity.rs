//! LEPUS against a Python re-implementation of PromptRank's scoring and search with
//! HF transformers (tests/fixtures/lepus/*.json, written by tools/goldens/make_lepus_goldens.py)
//! on real HotpotQA questions (the 16 of the goldens' 20 that are in the data slice of
//! tests/fixtures/data), pools of their first 6 passages, K1 = K2 = 2:
//!
//! - every scored text (sha256 of `prompt.strip() + " " + question`, in request order;
//!   the first differing text is printed on failure) and its score;
//! - the document ranking, document scores and scored paths;
//! - `gpt2`: a tiny random GPT-2 with a byte-level tokenizer (documents cut at 150
//!   tokens, prompts at 500, so question tails are cut too), two templates (instruction
//!   after and before), max ensemble, titles, T = 1.4; tolerance 1e-4;
//! - `smollm2`: SmolLM2-135M-Instruct GGUF Q4_1 (weights/smollm2/) against HF on the
//!   dequantised weights, hopscore's first template, T = 1; tolerance 1e-3;
//! - and `hopscore lepus` end to end (pipeline, writer) on the GPT-2 case.
//!
//! The texts are rebuilt from the HotpotQA slice.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int32Type};
use arrow_array::Array;
use clap::Parser;
use hopscore::backend::cpu::{CpuBackend, CpuGemm};
use hopscore::cli::job::JobArgs;
use hopscore::io::questions::{Dataset, Question, QuestionWriter};
use hopscore::jobs::lepus::instruction_search::InstructionSearchConfig;
use hopscore::jobs::lepus::{demo_templates, score_requests, templates as templates_of, LmSetup};
use hopscore::model::language_model::LanguageModelSource;
use hopscore::pipeline::Strategy;
use hopscore::strategy::lepus::{parse_templates, Ensemble, InstructionPosition, LepusConfig};
use hopscore::text::causal_tokenizer;
use hopscore::text::prompt::LmEncoder;
use serde_json::Value;
use sha2::{Digest, Sha256};

struct Case {
    golden: Value,
    /// The golden questions that are in the data slice, in golden order.
    expected: Vec<Value>,
    questions: Vec<Question>,
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The golden file and its questions in the data slice, rebuilt from the data (first
/// `pool` passages).
fn case(name: &str) -> Case {
    let golden = common::fixture_json(&format!("lepus/{name}.json"));
    let rows = common::data_records("hotpotqa");
    let pool = golden["pool"].as_u64().unwrap() as usize;
    let (expected, questions) = golden["questions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| {
            let mut row = common::find_record(&rows, g["id"].as_str().unwrap())?.clone();
            let context: Vec<Value> = row["context"].as_array().unwrap()[..pool].to_vec();
            let kept: Vec<&str> = context.iter().map(|c| c[0].as_str().unwrap()).collect();
            let facts: Vec<Value> = row["supporting_facts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| kept.contains(&f[0].as_str().unwrap()))
                .cloned()
                .collect();
            row["context"] = Value::Array(context);
            row["supporting_facts"] = Value::Array(facts);
            let q = hopscore::io::import::convert(Dataset::HotpotQa, &row).unwrap();
            Some((g.clone(), q))
        })
        .unzip();
    Case {
        golden,
        expected,
        questions,
    }
}

/// A JSON list of templates as an instruction file.
fn templates_text(templates: &Value) -> String {
    templates
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string() + "\n")
        .collect()
}

fn json_list<T>(v: &Value, item: impl Fn(&Value) -> T) -> Vec<T> {
    v.as_array().unwrap().iter().map(item).collect()
}

fn usize_list(v: &Value) -> Vec<usize> {
    json_list(v, |x| x.as_u64().unwrap() as usize)
}

fn f32_list(v: &Value) -> Vec<f32> {
    json_list(v, |x| x.as_f64().unwrap() as f32)
}

/// The largest `|got − want|` (the lengths must agree).
fn max_diff(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "lengths");
    got.iter()
        .zip(want)
        .fold(0f32, |m, (g, w)| m.max((g - w).abs()))
}

/// Drives each question's search with the model, checking every step against the
/// golden prompts and scores, then the result; `counts` = (questions, prompts) checked.
fn check_case(name: &str, model: &Path, tol: f32, counts: (usize, usize)) {
    let out = run_case(name, model, &CpuBackend::F32);
    assert!(out.changed.is_empty(), "{name}: {:?} differ", out.changed);
    assert!(
        out.worst <= tol,
        "{name}: max |score error| {:e}",
        out.worst
    );
    assert_eq!((out.questions, out.prompts), counts);
    eprintln!(
        "{name}: {} questions, {} prompts, max |score error| {:.2e}",
        out.questions, out.prompts, out.worst
    );
}

/// What a run over a case's goldens found: the largest score error over the questions
/// whose search went as the reference's, and the questions whose prompts (a first-hop
/// ranking that picked other documents to extend), ranking or best paths differ.
struct Outcome {
    worst: f32,
    changed: Vec<String>,
    questions: usize,
    prompts: usize,
}

/// The case's questions scored on `be`: prompt texts are checked where the search has
/// not diverged from the reference's.
fn run_case(name: &str, model: &Path, be: &CpuBackend) -> Outcome {
    let Case {
        golden,
        expected,
        questions,
    } = case(name);
    let source = LanguageModelSource::open(model).unwrap();
    let tokenizer = causal_tokenizer::for_model(&source, model, None).unwrap();
    let lm = source.load(be).unwrap();
    let ensemble = match golden["ensemble"].as_str().unwrap() {
        "max" => Ensemble::Max,
        _ => Ensemble::Mean,
    };
    let templates = templates_text(&golden["templates"]);
    let n_templates = golden["templates"].as_array().unwrap().len();
    let seq2seq = lm.is_seq2seq();
    let trailing_specials = if seq2seq { tokenizer.added_tokens() } else { 0 };
    let tok = Arc::new(tokenizer);
    let setup = LmSetup {
        encoder: Arc::new(LmEncoder {
            tok: tok.clone(),
            max_tokens: golden["max_prompt_tokens"].as_u64().unwrap() as usize,
            seq2seq,
        }),
        tok,
        templates: parse_templates(&templates, InstructionPosition::After, n_templates)
            .unwrap()
            .into(),
        config: LepusConfig {
            first_hops: golden["first_hops"].as_u64().unwrap() as usize,
            ensemble,
            path_ensemble: Ensemble::Mean,
        },
        second_hops: golden["second_hops"].as_u64().unwrap() as usize,
        title: golden["title"].as_bool().unwrap(),
        max_doc_tokens: golden["max_doc_tokens"].as_u64().unwrap() as usize,
        trailing_specials,
    };
    let temperature = golden["temperature"].as_f64().unwrap() as f32;
    let (mut prompts, mut worst, mut changed) = (0, 0f32, Vec::new());
    'questions: for (q, g) in questions.iter().zip(&expected) {
        assert!(
            g.get("error").is_none(),
            "the goldens hold no failed question"
        );
        let want_prompts = g["prompts"].as_array().unwrap();
        let mut search = setup.search(q).unwrap();
        let mut at = 0;
        loop {
            let requests = search.requests();
            if requests.is_empty() {
                break;
            }
            for (k, text) in search.pending_texts().iter().enumerate() {
                let want = want_prompts.get(at + k).map(|w| w[0].as_str().unwrap());
                if want != Some(sha256(text).as_str()) {
                    assert!(
                        at > 0,
                        "{}: prompt {} differs from the reference; hopscore's text:\n{text}",
                        q.id,
                        at + k
                    );
                    // A first-hop score order that extends other documents.
                    changed.push(q.id.clone());
                    continue 'questions;
                }
            }
            let seqs: Vec<_> = requests.into_iter().map(|(s, _)| s).collect();
            let logprobs = score_requests(be, &lm, &seqs, temperature).unwrap();
            let means: Vec<f32> = logprobs
                .iter()
                .map(|lp| (lp.iter().map(|&x| f64::from(x)).sum::<f64>() / lp.len() as f64) as f32)
                .collect();
            let want: Vec<f32> = want_prompts[at..at + means.len()]
                .iter()
                .map(|p| p[1].as_f64().unwrap() as f32)
                .collect();
            worst = worst.max(max_diff(&means, &want));
            at += means.len();
            Strategy::feed(&mut search, logprobs);
        }
        assert_eq!(at, want_prompts.len(), "{}: number of prompts", q.id);
        prompts += at;
        let r = search.take_output().unwrap().unwrap();
        let paths = g["top_paths"].as_array().unwrap();
        let same = r.ranking == usize_list(&g["ranking"])
            && r.top_paths.len() == paths.len()
            && r.top_paths
                .iter()
                .zip(paths)
                .all(|(p, w)| p.chain == usize_list(&w["chain"]));
        if !same {
            changed.push(q.id.clone());
            continue;
        }
        worst = worst.max(max_diff(&r.doc_scores, &f32_list(&g["doc_scores"])));
        let path_scores: Vec<f32> = r.top_paths.iter().map(|p| p.score).collect();
        let want: Vec<f32> = paths
            .iter()
            .map(|w| w["score"].as_f64().unwrap() as f32)
            .collect();
        worst = worst.max(max_diff(&path_scores, &want));
    }
    Outcome {
        worst,
        changed,
        questions: questions.len(),
        prompts,
    }
}

fn gpt2_dir() -> PathBuf {
    common::fixture("lepus/gpt2_bytes")
}

/// The random T5 v1.1-layout checkpoint (tests/fixtures/t5/v1_1).
fn t5_dir() -> PathBuf {
    common::fixture("t5/v1_1")
}

#[test]
fn tiny_gpt2_prompts_and_scores_match_the_python_reference() {
    check_case("gpt2", &gpt2_dir(), 1e-4, (16, 320));
}

#[test]
fn smollm2_prompts_and_scores_match_the_python_reference() {
    let Some(gguf) = common::SMOLLM2_GGUF.require() else {
        return;
    };
    check_case("smollm2", &gguf, 1e-3, (16, 160));
}

/// The accuracy cost of the low-precision dense layers on the LEPUS goldens (the
/// figures of docs/parity.md): `(gemm, largest score error allowed, questions whose
/// prompts, ranking or best paths change)` on the real SmolLM2 and the tiny GPT-2.
/// Per-row int8 activations lose SmolLM2's outlier channels (12 of 16 questions move);
/// 32-input blocks (`q8`, SmolLM2's Q4_1 blocks multiplied as stored) keep more (7).
#[test]
fn lepus_with_bf16_and_int8_dense_layers() {
    let smollm2 = common::SMOLLM2_GGUF.require();
    let cases = [
        ("gpt2", Some(gpt2_dir()), CpuGemm::Bf16, 2e-3, 1),
        ("gpt2", Some(gpt2_dir()), CpuGemm::Int8, 1e-2, 3),
        ("smollm2", smollm2.clone(), CpuGemm::Bf16, 0.025, 2),
        ("smollm2", smollm2.clone(), CpuGemm::Int8, 0.4, 12),
        ("gpt2", Some(gpt2_dir()), CpuGemm::Q8, 1e-2, 2),
        ("smollm2", smollm2, CpuGemm::Q8, 0.1, 7),
    ];
    let mut failures = Vec::new();
    for (name, model, gemm, bound, changes) in cases {
        let be = CpuBackend::new(gemm);
        let Some(model) = model.filter(|_| be.gemm() == gemm) else {
            eprintln!("skipped {name} {gemm:?}: no model or no CPU support");
            continue;
        };
        let out = run_case(name, &model, &be);
        eprintln!(
            "lepus {name} {gemm:?}: max |score error| {:.3e} over the unchanged questions; \
             changed {:?}",
            out.worst, out.changed
        );
        failures.extend(
            (out.worst > bound || out.changed.len() != changes)
                .then(|| format!("{name} {gemm:?}: {:e}, {:?}", out.worst, out.changed)),
        );
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// `hopscore lepus` arguments on `questions` (written to `dir/q.parquet`) with
/// `model`, output `dir/ranked.parquet`, and `extra` flags.
/// `dir/q.parquet` holding `questions`.
fn question_file(dir: &Path, questions: &[Question]) -> PathBuf {
    let input = dir.join("q.parquet");
    let mut w = QuestionWriter::create(&input, &[]).unwrap();
    w.write(questions).unwrap();
    w.finish().unwrap();
    input
}

fn lepus_args(
    dir: &Path,
    model: &Path,
    questions: &[Question],
    extra: &[String],
) -> JobArgs<hopscore::jobs::lepus::LepusConfig> {
    let input = question_file(dir, questions);
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let mut argv: Vec<String> = [
        "hopscore",
        "lepus",
        "--model",
        &path(model),
        "--input",
        &path(&input),
        "--output",
        &path(&dir.join("ranked.parquet")),
    ]
    .map(String::from)
    .to_vec();
    argv.extend_from_slice(extra);
    let cli = hopscore::cli::Cli::try_parse_from(&argv).unwrap();
    let hopscore::cli::Command::Job(job) = cli.command else {
        unreachable!()
    };
    job.args().expect("a lepus command")
}

/// `hopscore instruction-search` with the settings of `lepus` and the cut-offs `k`.
fn search_args(
    lepus: JobArgs<hopscore::jobs::lepus::LepusConfig>,
    k: Vec<usize>,
) -> JobArgs<InstructionSearchConfig> {
    JobArgs {
        config: InstructionSearchConfig {
            lepus: lepus.config,
            k,
        },
        files: lepus.files,
        device: lepus.device,
    }
}

/// The search settings of a golden as flags: K1, K2, the document budget and T.
fn search_flags(golden: &Value) -> Vec<String> {
    ["first_hops", "second_hops", "max_doc_tokens", "temperature"]
        .iter()
        .flat_map(|k| [format!("--{}", k.replace('_', "-")), golden[*k].to_string()])
        .collect()
}

/// `hopscore lepus` on the questions of case `name` with `model`, its settings and
/// `extra` flags writes the golden rankings, document scores and best paths.
fn lepus_command_writes_the_rankings_of(name: &str, model: &Path, extra: &[String]) {
    let Case {
        golden,
        expected,
        questions,
    } = case(name);
    let dir = tempfile::tempdir().unwrap();
    let templates = dir.path().join("templates.txt");
    let listed = golden.get("instructions").unwrap_or(&golden["templates"]);
    std::fs::write(&templates, templates_text(listed)).unwrap();
    let output = dir.path().join("ranked.parquet");
    let num = |k: &str| golden[k].to_string();
    let mut flags: Vec<String> = [
        "--max-batch-tokens",
        "4096",
        "--max-active",
        "4",
        "--part-rows",
        "7",
        "--templates",
        templates.to_str().unwrap(),
        "--num-templates",
        &listed.as_array().unwrap().len().to_string(),
        "--ensemble",
        golden["ensemble"].as_str().unwrap(),
        "--max-prompt-tokens",
        &num("max_prompt_tokens"),
    ]
    .map(String::from)
    .to_vec();
    flags.extend(search_flags(&golden));
    if golden["title"].as_bool().unwrap() {
        flags.push("--title".into());
    }
    flags.extend_from_slice(extra);
    let args = lepus_args(dir.path(), model, &questions, &flags);
    let summary = hopscore::cli::job::run(args).unwrap();
    assert_eq!((summary.stats.rows, summary.stats.bad_rows), (16, 0));
    let batch = common::read_parquet(&output);
    assert_eq!(batch.num_rows(), 16);
    let ids = batch
        .column_by_name("id")
        .unwrap()
        .as_string::<i32>()
        .clone();
    let list = |name: &str| batch.column_by_name(name).unwrap().as_list::<i32>().clone();
    let (chains, scores, best) = (list("chain"), list("doc_scores"), list("best_path"));
    let indices = |col: &arrow_array::ListArray, r: usize| -> Vec<usize> {
        let v = col.value(r);
        v.as_primitive::<Int32Type>()
            .values()
            .iter()
            .map(|&x| x as usize)
            .collect()
    };
    for (r, g) in expected.iter().enumerate() {
        assert_eq!(ids.value(r), g["id"].as_str().unwrap());
        assert_eq!(
            indices(&chains, r),
            usize_list(&g["ranking"]),
            "{}",
            ids.value(r)
        );
        let got = scores
            .value(r)
            .as_primitive::<Float32Type>()
            .values()
            .to_vec();
        let err = max_diff(&got, &f32_list(&g["doc_scores"]));
        assert!(err <= 1e-4, "{}: document scores {got:?}", ids.value(r));
        assert_eq!(indices(&best, r), usize_list(&g["top_paths"][0]["chain"]));
    }
    assert!(batch.column_by_name("top_paths").unwrap().null_count() == 0);
}

#[test]
fn lepus_command_writes_the_reference_rankings() {
    lepus_command_writes_the_rankings_of("gpt2", &gpt2_dir(), &[]);
}

/// The demonstration settings of the `gpt2_demos` golden as flags.
fn demo_flags(golden: &Value) -> Vec<String> {
    let mut flags = vec![
        "--demos".to_string(),
        common::fixture("lepus/demos.json")
            .to_str()
            .unwrap()
            .to_string(),
        "--demo-max-doc-tokens".into(),
        golden["demo_max_doc_tokens"].to_string(),
        "--demo-max-prompt-tokens".into(),
        golden["max_prompt_tokens"].to_string(),
    ];
    for set in golden["demo_ids"].as_array().unwrap() {
        let ids: Vec<String> = usize_list(set).iter().map(usize::to_string).collect();
        flags.extend(["--demo-ids".to_string(), ids.join(",")]);
    }
    if golden["truncate_demos"].as_bool().unwrap() {
        flags.push("--truncate-demos".into());
    }
    flags
}

#[test]
fn demonstrations_are_put_before_the_template_as_run_py_does() {
    let golden = common::fixture_json("lepus/gpt2_demos.json");
    let dir = tempfile::tempdir().unwrap();
    let templates = dir.path().join("templates.txt");
    std::fs::write(&templates, templates_text(&golden["instructions"])).unwrap();
    let mut argv: Vec<String> = ["hopscore", "lepus", "--input", "q", "--output", "o"]
        .map(String::from)
        .to_vec();
    argv.extend([
        "--model".into(),
        gpt2_dir().to_str().unwrap().into(),
        "--templates".into(),
        templates.to_str().unwrap().into(),
    ]);
    argv.extend(demo_flags(&golden));
    let cli = hopscore::cli::Cli::try_parse_from(&argv).unwrap();
    let hopscore::cli::Command::Job(job) = cli.command else {
        unreachable!()
    };
    let args: JobArgs<hopscore::jobs::lepus::LepusConfig> = job.args().expect("a lepus command");
    let config = args.config;
    let tokenizer = common::scoring_tokenizer(&gpt2_dir());
    let got = demo_templates(&config, templates_of(&config).unwrap(), &tokenizer, 0).unwrap();
    let want: Vec<String> = json_list(&golden["templates"], |t| t.as_str().unwrap().to_string());
    assert_eq!(got.iter().map(|t| t.0.clone()).collect::<Vec<_>>(), want);
}

#[test]
fn tiny_gpt2_with_demonstrations_matches_the_python_reference() {
    check_case("gpt2_demos", &gpt2_dir(), 1e-4, (16, 320));
}

/// Questions whose demonstrations and documents leave no room for the question are
/// quarantined with the reason, and the run's summary counts them.
#[test]
fn prompts_over_the_demonstration_budget_are_quarantined_and_counted() {
    over_budget_prompts_are_quarantined(
        "gpt2_demos",
        &gpt2_dir(),
        None,
        "no question token fits in the prompt budget of 1000",
    );
}

/// Issue 40: T5's encoder prompt is cut from its end to the budget (as the official
/// code cuts it); with demonstrations that fill the budget the cut removed every
/// passage, and every passage of a question scored the same, unnoticed. Such
/// questions are quarantined and counted like the causal path's.
#[test]
fn t5_prompts_cut_to_their_demonstrations_are_quarantined_and_counted() {
    over_budget_prompts_are_quarantined(
        "t5_demos",
        &t5_dir(),
        Some(150),
        "the cut removed the passages",
    );
}

/// Runs the demonstration case `name` with documents of up to 230 tokens (and the
/// prompt budget `budget`, when given): some questions are quarantined with `reason`,
/// counted, and the others written.
fn over_budget_prompts_are_quarantined(
    name: &str,
    model: &Path,
    budget: Option<usize>,
    reason: &str,
) {
    let Case { questions, .. } = case(name);
    let golden = common::fixture_json(&format!("lepus/{name}.json"));
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("ranked.parquet");
    let mut flags = vec!["--max-doc-tokens".to_string(), "230".into()];
    flags.extend(demo_flags(&golden));
    if let Some(budget) = budget {
        let at = flags
            .iter()
            .position(|f| f == "--demo-max-prompt-tokens")
            .unwrap();
        flags[at + 1] = budget.to_string();
    }
    let args = lepus_args(dir.path(), model, &questions, &flags);
    let summary = hopscore::cli::job::run(args).unwrap();
    let bad = common::read_parquet(&summary.quarantine_path);
    assert!(bad.num_rows() > 0, "some prompts are over the budget");
    assert_eq!(summary.stats.bad_rows, bad.num_rows() as u64);
    let written = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&output).unwrap(),
    )
    .unwrap()
    .metadata()
    .file_metadata()
    .num_rows() as usize;
    assert_eq!(written + bad.num_rows(), questions.len());
    let reasons = bad.column_by_name("reason").unwrap().as_string::<i32>();
    assert!(reasons.value(0).contains(reason), "{}", reasons.value(0));
}

#[test]
fn lepus_command_with_demonstrations_writes_the_reference_rankings() {
    let golden = common::fixture_json("lepus/gpt2_demos.json");
    lepus_command_writes_the_rankings_of("gpt2_demos", &gpt2_dir(), &demo_flags(&golden));
}

#[test]
fn t5_with_demonstrations_matches_the_python_reference() {
    check_case("t5_demos", &t5_dir(), 2e-5, (16, 320));
}

/// The T5 run end to end: the golden rankings through the pipeline in parts of 7,
/// then a run whose final merge fails resumed from its parts, and three shards merged,
/// each with the bytes (rows) of the whole run.
#[test]
fn lepus_command_with_t5_demonstrations_and_an_ensemble_writes_the_reference_rankings() {
    let golden = common::fixture_json("lepus/t5_demos.json");
    let flags = demo_flags(&golden);
    lepus_command_writes_the_rankings_of("t5_demos", &t5_dir(), &flags);

    let Case { questions, .. } = case("t5_demos");
    let dir = tempfile::tempdir().unwrap();
    let run_to = |name: &str, extra: &[&str]| {
        let mut all = flags.clone();
        all.extend(extra.iter().map(|s| s.to_string()));
        all.extend([
            "--max-doc-tokens".into(),
            golden["max_doc_tokens"].to_string(),
        ]);
        let mut args = lepus_args(dir.path(), &t5_dir(), &questions, &all);
        args.files.output = dir.path().join(format!("{name}.parquet"));
        hopscore::cli::job::run(args)
    };
    run_to("whole", &["--part-rows", "5"]).unwrap();
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"a file").unwrap();
    let quarantine = blocker.join("q.parquet");
    let q = quarantine.to_str().unwrap();
    assert!(run_to("parts", &["--part-rows", "5", "--quarantine", q]).is_err());
    assert!(dir
        .path()
        .join("parts.parquet.parts/manifest.json")
        .is_file());
    run_to("parts", &["--part-rows", "5", "--resume"]).unwrap();
    common::assert_parts_equal_whole(dir.path());
    for i in 0..3 {
        let shard = format!("{i}/3");
        run_to(&format!("s{i}"), &["--part-rows", "5", "--shard", &shard]).unwrap();
    }
    common::assert_merged_shards_equal_whole(dir.path(), 3);
}

/// Issue 40: SIGTERM on `lepus` searched every admitted question (up to
/// `--max-active`) to the end before exiting. It now stops before the next forward
/// pass: exit 130 with the questions in flight left for `--resume` (here every question
/// is admitted at once, so the old run committed them all), and the resumed output
/// has the bytes of a whole run.
#[test]
fn sigterm_leaves_the_questions_in_flight_for_resume() {
    let Case { questions, .. } = case("t5_demos");
    let dir = tempfile::tempdir().unwrap();
    let input = question_file(dir.path(), &questions);
    let lepus = |name: &str, extra: &[&str]| {
        let mut c = common::hopscore();
        c.args(["lepus", "--max-batch-tokens", "64", "--part-rows", "1"])
            .args(["--max-doc-tokens", "40", "--num-templates", "2"])
            .arg("--model")
            .arg(t5_dir())
            .arg("--input")
            .arg(&input)
            .arg("--output")
            .arg(dir.path().join(format!("{name}.parquet")))
            .args(extra)
            .stderr(std::process::Stdio::piped());
        c
    };
    assert!(lepus("whole", &[]).status().unwrap().success());
    let child = lepus("parts", &[]).spawn().unwrap();
    let parts = dir.path().join("parts.parquet.parts");
    // The first part is committed: the other questions are in flight.
    let committed = || std::fs::read_to_string(parts.join("committed.jsonl")).unwrap_or_default();
    common::wait_until("the first commit", || !committed().is_empty());
    let (code, err) = common::signal_and_wait(child, "TERM");
    assert_eq!(code, Some(130), "{err}");
    let lines = committed().lines().count();
    assert!(
        lines < questions.len(),
        "{lines} of {} questions committed: the ones in flight were finished first",
        questions.len()
    );
    let resumed = lepus("parts", &["--resume"]).output().unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    common::assert_parts_equal_whole(dir.path());
}

/// `hopscore instruction-search` with the T5 fixture and the `t5_demos` settings over
/// three candidates (the golden's instruction among them): each candidate's Recall@2
/// and @10, the golden's equal to those of the reference rankings; the ranking sorted
/// and the best template written for `--templates`; a second search reuses the
/// finished runs, and a changed setting runs them again.
#[test]
fn instruction_search_ranks_candidates_by_the_recall_of_their_rankings() {
    use hopscore::metrics::retrieval::recall_at_k;
    let Case {
        golden,
        expected,
        questions,
    } = case("t5_demos");
    let dir = tempfile::tempdir().unwrap();
    let instruction = golden["instructions"][0].as_str().unwrap();
    let candidates = dir.path().join("candidates.txt");
    std::fs::write(
        &candidates,
        format!(
            "# candidates\nDocument: <P> Banana banana banana. Question:\n{instruction}\n\
             Read the document and write a question it answers.\n"
        ),
    )
    .unwrap();
    let mut flags = vec![
        "--templates".to_string(),
        candidates.to_str().unwrap().into(),
    ];
    flags.extend(search_flags(&golden));
    flags.extend(demo_flags(&golden));
    let mut lepus = lepus_args(dir.path(), &t5_dir(), &questions, &flags);
    lepus.files.output = dir.path().join("search.json");
    let args = search_args(lepus, vec![2, 10]);
    let run = |args: &JobArgs<InstructionSearchConfig>| hopscore::cli::job::run(args.clone());
    let report = run(&args).unwrap();
    assert_eq!(report.candidates.len(), 3);
    // Over the questions with a gold passage in their pool (as `hopscore eval`).
    let recall = |k: usize| {
        let with_gold: Vec<f64> = questions
            .iter()
            .zip(&expected)
            .filter(|(q, _)| !q.supporting.is_empty())
            .map(|(q, g)| recall_at_k(&usize_list(&g["ranking"]), &q.supporting, k))
            .collect();
        with_gold.iter().sum::<f64>() / with_gold.len() as f64
    };
    let of = |index: usize| report.candidates.iter().find(|c| c.index == index).unwrap();
    let golden_one = of(1);
    assert_eq!(golden_one.template, instruction);
    for k in [2, 10] {
        assert!(
            (golden_one.recall_at_k[&k] - recall(k)).abs() < 1e-12,
            "R@{k}: {} vs the reference rankings' {}",
            golden_one.recall_at_k[&k],
            recall(k)
        );
    }
    let keys: Vec<(f64, f64)> = report
        .candidates
        .iter()
        .map(|c| (c.recall_at_k[&2], c.recall_at_k[&10]))
        .collect();
    assert!(keys.windows(2).all(|w| w[0] >= w[1]), "{keys:?}");
    let best = std::fs::read_to_string(&report.best_file).unwrap();
    assert_eq!(best.trim(), report.candidates[0].template);
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("search.json")).unwrap())
            .unwrap();
    assert_eq!(saved["candidates"].as_array().unwrap().len(), 3);

    // Finished runs are reused; a changed setting runs every candidate again.
    let modified = |c: &hopscore::jobs::lepus::instruction_search::Candidate| {
        std::fs::metadata(&c.output).unwrap().modified().unwrap()
    };
    let before: Vec<_> = report.candidates.iter().map(modified).collect();
    let again = run(&args).unwrap();
    assert_eq!(
        again.candidates.iter().map(modified).collect::<Vec<_>>(),
        before
    );
    let mut changed = args.clone();
    changed.config.lepus.temperature = 1.0;
    let rerun = run(&changed).unwrap();
    assert!(rerun
        .candidates
        .iter()
        .zip(&before)
        .all(|(c, t)| modified(c) != *t));
    // Issue 40: the development file replaced in place (same path, other content)
    // reran nothing; compared by content, as `--resume` does, every candidate runs.
    let before: Vec<_> = rerun.candidates.iter().map(modified).collect();
    let mut w = QuestionWriter::create(&changed.files.input, &[]).unwrap();
    w.write(&questions[..questions.len() - 1]).unwrap();
    w.finish().unwrap();
    let replaced = run(&changed).unwrap();
    assert!(replaced
        .candidates
        .iter()
        .zip(&before)
        .all(|(c, t)| modified(c) != *t));
    // `--limit` ranks on the first N questions: a finished candidate of the whole file
    // is not reused for it.
    let before: Vec<_> = replaced.candidates.iter().map(modified).collect();
    changed.files.limit = Some(3);
    let limited = run(&changed).unwrap();
    for (c, t) in limited.candidates.iter().zip(&before) {
        assert_ne!(modified(c), *t, "{} was reused", c.output.display());
        assert_eq!(common::read_parquet(&c.output).num_rows(), 3);
    }
}

/// Issue 40: `instruction-search --shard` scored half the development file against
/// all of it, and a development file without gold scored every candidate 0 and named
/// a "best". Both are refused before any candidate runs.
#[test]
fn instruction_search_refuses_a_shard_and_a_development_file_without_gold() {
    let Case { questions, .. } = case("t5_demos");
    let dir = tempfile::tempdir().unwrap();
    let candidates = dir.path().join("candidates.txt");
    std::fs::write(&candidates, "Document: <P> Question:\n").unwrap();
    let flags = [
        "--templates".to_string(),
        candidates.to_str().unwrap().into(),
    ];
    let mut lepus = lepus_args(dir.path(), &t5_dir(), &questions, &flags);
    lepus.files.output = dir.path().join("search.json");
    let mut args = search_args(lepus, vec![2]);
    let run = |args: &JobArgs<InstructionSearchConfig>| hopscore::cli::job::run(args.clone());
    args.files.shard = Some(hopscore::io::shard::parse_shard("0/2").unwrap());
    let err = format!("{:#}", run(&args).unwrap_err());
    assert!(err.contains("--shard does not apply"), "{err}");
    args.files.shard = None;
    let no_gold: Vec<Question> = questions
        .iter()
        .cloned()
        .map(|mut q| {
            q.supporting.clear();
            q.supporting_facts = None;
            q
        })
        .collect();
    let mut w = QuestionWriter::create(&args.files.input, &[]).unwrap();
    w.write(&no_gold).unwrap();
    w.finish().unwrap();
    let err = format!("{:#}", run(&args).unwrap_err());
    assert!(err.contains("has no question with gold passages"), "{err}");
    assert!(!dir.path().join("search.json.runs").exists());
}

/// Issue 40: an instruction search killed inside a candidate and run again with a
/// changed flag failed ("… was started with other inputs or options … Delete it"),
/// although every candidate reruns when a setting changes. The interrupted candidate
/// now starts again under the new settings.
#[test]
fn an_instruction_search_killed_inside_a_candidate_reruns_with_changed_flags() {
    let Case { questions, .. } = case("t5_demos");
    let dir = tempfile::tempdir().unwrap();
    let input = question_file(dir.path(), &questions);
    let candidates = dir.path().join("candidates.txt");
    std::fs::write(
        &candidates,
        "Document: <P> Question:\nPassage: <P> Review the passage and ask a question:\n",
    )
    .unwrap();
    let search = |extra: &[&str]| {
        let mut c = common::hopscore();
        c.args([
            "instruction-search",
            "--part-rows",
            "1",
            "--max-batch-tokens",
            "64",
        ])
        .arg("--model")
        .arg(t5_dir())
        .arg("--input")
        .arg(&input)
        .arg("--templates")
        .arg(&candidates)
        .arg("--output")
        .arg(dir.path().join("search.json"))
        .args(extra)
        .stderr(std::process::Stdio::piped());
        c
    };
    let mut child = search(&[]).spawn().unwrap();
    let log = dir
        .path()
        .join("search.json.runs/instruction-000.parquet.parts/committed.jsonl");
    common::wait_until("the first candidate's first commit", || {
        !std::fs::read_to_string(&log).unwrap_or_default().is_empty()
    });
    child.kill().unwrap(); // SIGKILL, inside the first candidate
    child.wait().unwrap();
    let done = search(&["--temperature", "2"]).output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{err}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("search.json")).unwrap())
            .unwrap();
    assert_eq!(report["candidates"].as_array().unwrap().len(), 2);
}
