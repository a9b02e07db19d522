//! Helpers shared by the integration tests: fixture paths, golden tensors, the real-data
//! slices of `tests/fixtures/data`, and the downloaded weights.
//!
//! A test never skips silently: when a download of `weights/` is absent it fails,
//! unless `HOPSCORE_ALLOW_SKIP=1`, which turns that into a skip with a message. (A
//! missing GPU is a hardware matter: see [`gpu`] and `HOPSCORE_REQUIRE_GPU`.)

#![allow(dead_code)] // each test binary uses a subset

use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// A file under `weights/` that a tools/ script downloads (ignored by git).
pub struct WeightsFile {
    rel: &'static str,
    fetch: &'static str,
}

/// The DeBERTa-v3 tokenizer fetched by tools/fetch_tokenizer.sh.
pub const DEBERTA_V3_TOKENIZER: WeightsFile = WeightsFile {
    rel: "deberta-v3-tokenizer/tokenizer.json",
    fetch: "tools/fetch_tokenizer.sh",
};

/// SmolLM2-135M-Instruct (GGUF Q4_1) fetched by tools/fetch_smollm2.sh.
pub const SMOLLM2_GGUF: WeightsFile = WeightsFile {
    rel: "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    fetch: "tools/fetch_smollm2.sh",
};

/// all-MiniLM-L6-v2 (sentence-transformers, safetensors) fetched by tools/fetch_minilm.sh.
pub const MINILM: WeightsFile = WeightsFile {
    rel: "all-minilm-l6-v2/model.safetensors",
    fetch: "tools/fetch_minilm.sh",
};

impl WeightsFile {
    /// Its path, whether or not it is there (for tests that called [`Self::require`]).
    pub fn path(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("weights")
            .join(self.rel)
    }

    /// Its path when present. When absent the test fails, or, with
    /// `HOPSCORE_ALLOW_SKIP=1`, `None` after printing "skipped: …".
    pub fn require(&self) -> Option<PathBuf> {
        let p = self.path();
        if p.is_file() {
            return Some(p);
        }
        let why = format!(
            "{} is missing: run {} first (the README's test command does)",
            p.display(),
            self.fetch
        );
        if std::env::var("HOPSCORE_ALLOW_SKIP").is_ok_and(|v| v == "1") {
            eprintln!("skipped: {why}");
            None
        } else {
            panic!("{why}; HOPSCORE_ALLOW_SKIP=1 skips the tests that need it instead");
        }
    }
}

/// The real-data slice of a dataset (`hotpotqa`, `musique`, `2wiki`) in
/// tests/fixtures/data, in the dataset's native format.
pub fn data_file(dataset: &str) -> PathBuf {
    fixture(match dataset {
        "hotpotqa" => "data/hotpot_dev_distractor_slice.json.gz",
        "musique" => "data/musique_ans_v1.0_dev_slice.jsonl.gz",
        "2wiki" => "data/2wikimultihopqa_dev_slice.json.gz",
        other => panic!("no data slice for `{other}`"),
    })
}

/// The records of a dataset's slice.
pub fn data_records(dataset: &str) -> Vec<Value> {
    read_json_gz(&data_file(dataset))
}

/// The record whose `_id` (HotpotQA, 2Wiki) or `id` (MuSiQue) is `id`, if the slice
/// holds it.
pub fn find_record<'a>(records: &'a [Value], id: &str) -> Option<&'a Value> {
    records
        .iter()
        .find(|r| r.get("_id").or_else(|| r.get("id")).and_then(Value::as_str) == Some(id))
}

/// The sequences of a golden that stores them concatenated: `input_ids` and
/// `token_type_ids` of all, and each one's length in `lengths`
/// (tools/goldens/make_reranker_goldens.py).
pub fn concatenated_sequences(
    g: &std::collections::HashMap<String, Golden>,
) -> Vec<hopscore::model::batch::Sequence> {
    let (ids, types) = (&g["input_ids"].i64, &g["token_type_ids"].i64);
    let mut start = 0;
    g["lengths"]
        .i64
        .iter()
        .map(|&n| {
            let r = start..start + n as usize;
            start = r.end;
            hopscore::model::batch::Sequence {
                ids: ids[r.clone()].iter().map(|&i| i as u32).collect(),
                type_ids: types[r].iter().map(|&t| t as u32).collect(),
                mask: Vec::new(),
            }
        })
        .collect()
}

/// The token ids of the sequences a golden stores concatenated under
/// `input_ids{suffix}`, with their lengths under `lengths{suffix}`.
pub fn id_sequences(g: &std::collections::HashMap<String, Golden>, suffix: &str) -> Vec<Vec<u32>> {
    let ids = &g[&format!("input_ids{suffix}")].i64;
    let mut start = 0;
    g[&format!("lengths{suffix}")]
        .i64
        .iter()
        .map(|&n| {
            let s = ids[start..start + n as usize]
                .iter()
                .map(|&i| i as u32)
                .collect();
            start += n as usize;
            s
        })
        .collect()
}

/// A tensor read from a golden safetensors file.
pub struct Golden {
    pub shape: Vec<usize>,
    pub f32: Vec<f32>,
    pub i64: Vec<i64>,
    /// F64 tensors (the float64 references of tools/goldens/make_reranker_goldens.py).
    pub f64: Vec<f64>,
}

pub fn read_golden(path: &Path) -> std::collections::HashMap<String, Golden> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = SafeTensors::deserialize(&bytes).expect("valid safetensors");
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let data = view.data();
            let g = match view.dtype() {
                Dtype::F32 => Golden {
                    shape: view.shape().to_vec(),
                    f32: data
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                        .collect(),
                    i64: Vec::new(),
                    f64: Vec::new(),
                },
                Dtype::F64 => Golden {
                    shape: view.shape().to_vec(),
                    f32: Vec::new(),
                    i64: Vec::new(),
                    f64: data
                        .chunks_exact(8)
                        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                        .collect(),
                },
                Dtype::I64 => Golden {
                    shape: view.shape().to_vec(),
                    f32: Vec::new(),
                    i64: data
                        .chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                        .collect(),
                    f64: Vec::new(),
                },
                other => panic!("unexpected golden dtype {other:?}"),
            };
            (name, g)
        })
        .collect()
}

pub struct GoldenCase {
    pub seqs: Vec<hopscore::model::batch::Sequence>,
    /// Padded length of the golden tensors.
    pub padded: usize,
}

/// The packed sequences of a DeBERTa golden file (`input_ids`, `token_type_ids`,
/// `attention_mask`, padded with id 0).
pub fn golden_sequences(g: &std::collections::HashMap<String, Golden>) -> GoldenCase {
    let ids = &g["input_ids"];
    let (b, l) = (ids.shape[0], ids.shape[1]);
    let seqs = (0..b)
        .map(|r| {
            let row = |name: &str| g[name].i64[r * l..(r + 1) * l].to_vec();
            let id_row = row("input_ids");
            let len = id_row.iter().rposition(|&x| x != 0).unwrap() + 1; // pad id 0
            hopscore::model::batch::Sequence {
                ids: id_row[..len].iter().map(|&x| x as u32).collect(),
                type_ids: row("token_type_ids")[..len]
                    .iter()
                    .map(|&x| x as u32)
                    .collect(),
                mask: row("attention_mask")[..len]
                    .iter()
                    .map(|&x| x as u8)
                    .collect(),
            }
        })
        .collect();
    GoldenCase { seqs, padded: l }
}

/// The `hopscore` binary of this build, on 2 worker threads.
pub fn hopscore() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_hopscore"));
    c.env("HOPSCORE_THREADS", "2");
    c
}

/// Writes `batch` as a Parquet file at `path`.
pub fn write_parquet(path: &Path, batch: &arrow_array::RecordBatch) {
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// Asserts that a finished command succeeded, showing its stderr when not.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls `ready` every 5 ms until it holds; panics naming `what` after 300 s (a hang
/// guard, not a speed limit: a run that never gets there would hold the suite).
pub fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "waited 300 s for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Sends `signal` (`INT`, `TERM`) to `child` and waits for it to end: its exit code and
/// stderr (piped by the caller).
pub fn signal_and_wait(child: std::process::Child, signal: &str) -> (Option<i32>, String) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let done = child.wait_with_output().unwrap();
    (
        done.status.code(),
        String::from_utf8_lossy(&done.stderr).into_owned(),
    )
}

/// A HotpotQA question with only an id and a text (no passages, gold or answer), for
/// tests to fill in with struct update syntax.
pub fn bare_question(id: &str, text: &str) -> hopscore::io::questions::Question {
    hopscore::io::questions::Question {
        id: id.into(),
        dataset: hopscore::io::questions::Dataset::HotpotQa,
        question: text.into(),
        passages: Vec::new(),
        supporting: Vec::new(),
        hops: None,
        answer: None,
        answer_aliases: Vec::new(),
        question_type: None,
        level: None,
        supporting_facts: None,
        issues: Vec::new(),
    }
}

/// `hopscore <command> --<flag> <fixture>… --tokenizer <DeBERTa-v3> --input … --output …`
/// followed by `extra`: a question-file command on fixture models (the caller has
/// called `DEBERTA_V3_TOKENIZER.require()`).
pub fn question_command(
    command: &str,
    models: &[(&str, &str)],
    input: &Path,
    output: &Path,
    extra: &[&str],
) -> std::process::Command {
    let mut c = hopscore();
    c.arg(command);
    for (flag, dir) in models {
        c.arg(flag).arg(fixture(dir));
    }
    c.arg("--tokenizer")
        .arg(DEBERTA_V3_TOKENIZER.path())
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(extra);
    c
}

/// A JSON fixture (`tests/fixtures/<rel>`).
pub fn fixture_json(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(rel)).unwrap()).unwrap()
}

/// The HotpotQA and MuSiQue slices by dataset name (`hotpotqa`, `musique`).
pub fn hotpot_and_musique_records() -> std::collections::HashMap<&'static str, Vec<Value>> {
    ["hotpotqa", "musique"]
        .into_iter()
        .map(|name| (name, data_records(name)))
        .collect()
}

/// Reads a gzip-compressed JSON array or JSON-lines file.
pub fn read_json_gz(path: &Path) -> Vec<Value> {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    if text.trim_start().starts_with('[') {
        serde_json::from_str(&text).unwrap()
    } else {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// One LEPUS prompt of the SmolLM2 golden set (tests/fixtures/decoder/smollm2_lepus).
pub struct LepusPair {
    /// Position of the pair in the golden set.
    pub index: usize,
    pub id: String,
    /// `Document: {title}. {text} {instruction} Question:` (no trailing space).
    pub prompt: String,
    pub question: String,
}

/// The SmolLM2 golden pairs whose question is in the HotpotQA slice (16 of the 24,
/// golden positions 0–15), rebuilt from `refs.json`, and `add_bos`.
pub fn smollm2_lepus_pairs() -> (Vec<LepusPair>, bool) {
    const INSTRUCTION: &str =
        "Review the previous document and ask a question to which the document provides the answer.";
    let rows = data_records("hotpotqa");
    let refs = fixture_json("decoder/smollm2_lepus/refs.json");
    let pairs: Vec<LepusPair> = refs["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter_map(|(index, r)| {
            let id = r["_id"].as_str().unwrap();
            let row = find_record(&rows, id)?;
            let passage = &row["context"][r["passage"].as_u64().unwrap() as usize];
            let body: String = passage[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            Some(LepusPair {
                index,
                id: id.to_string(),
                prompt: format!(
                    "Document: {}. {} {INSTRUCTION} Question:",
                    passage[0].as_str().unwrap(),
                    body.trim()
                ),
                question: row["question"].as_str().unwrap().to_string(),
            })
        })
        .collect();
    assert_eq!(pairs.len(), 16, "golden pairs in the HotpotQA slice");
    (pairs, refs["add_bos"].as_bool().unwrap())
}

/// Every row of a Parquet file as one record batch (empty files included).
pub fn read_parquet(path: &Path) -> arrow_array::RecordBatch {
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
    .build()
    .unwrap();
    let schema = arrow_array::RecordBatchReader::schema(&r);
    let batches: Vec<_> = r.map(Result::unwrap).collect();
    arrow_select::concat::concat_batches(&schema, &batches).unwrap()
}

/// Asserts that a run killed and resumed into `dir/resumed.parquet` left no parts and
/// the same output and quarantine bytes as the uninterrupted `dir/whole.parquet`.
pub fn assert_resumed_equals_whole(dir: &Path) {
    assert!(
        !dir.join("resumed.parquet.parts").exists(),
        "parts are merged and removed at the end"
    );
    assert!(
        std::fs::read(dir.join("whole.parquet")).unwrap()
            == std::fs::read(dir.join("resumed.parquet")).unwrap(),
        "resumed output differs from the uninterrupted one"
    );
    assert_eq!(
        std::fs::read(dir.join("whole.quarantine.parquet")).unwrap(),
        std::fs::read(dir.join("resumed.quarantine.parquet")).unwrap()
    );
}

/// The CUDA backend on device 0 (NaN-poisoned buffers), or `None` after printing
/// "no GPU: skipped". With `HOPSCORE_REQUIRE_GPU=1` (CI's emulator step) a missing
/// device is a failure instead.
#[cfg(feature = "cuda")]
pub fn gpu(dtype: hopscore::backend::cuda::DType) -> Option<hopscore::backend::cuda::CudaBackend> {
    match hopscore::backend::cuda::CudaBackend::poisoned(0, dtype) {
        Ok(be) => Some(be),
        Err(e) if std::env::var("HOPSCORE_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("HOPSCORE_REQUIRE_GPU=1 but no CUDA device: {e:#}")
        }
        Err(e) => {
            eprintln!("no GPU: skipped ({e:#})");
            None
        }
    }
}

/// A word-level tokenizer where word `w<i>` is token id `i` (ids 3..1000; `w3` doubles
/// as the unknown token), with DeBERTa's pair template. It turns the golden token
/// sequences back into text, so classify can be checked against HF's logits.
pub fn word_tokenizer(dir: &Path) -> PathBuf {
    let mut vocab = serde_json::Map::new();
    for (i, t) in ["[PAD]", "[CLS]", "[SEP]"].iter().enumerate() {
        vocab.insert(t.to_string(), i.into());
    }
    for i in 3..1000 {
        vocab.insert(format!("w{i}"), i.into());
    }
    let special =
        |t: &str, type_id: u32| serde_json::json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let seq =
        |s: &str, type_id: u32| serde_json::json!({"Sequence": {"id": s, "type_id": type_id}});
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"}, "decoder": null,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)],
            "pair": [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]}
            }
        },
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w3"}
    });
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tok.to_string()).unwrap();
    path
}

/// The 60 texts of the MiniLM golden (tests/fixtures/bert/minilm/refs.json), rebuilt
/// from the HotpotQA slice: `(title, text)`, a question without a title, a gold
/// passage as its title and its sentences joined.
pub fn minilm_golden_texts() -> Vec<(Option<String>, String)> {
    let records = data_records("hotpotqa");
    let refs = fixture_json("bert/minilm/refs.json");
    refs.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let rec = find_record(&records, r["id"].as_str().unwrap()).unwrap();
            if r["kind"] == "question" {
                return (None, rec["question"].as_str().unwrap().to_string());
            }
            let title = r["title"].as_str().unwrap();
            let ctx = rec["context"].as_array().unwrap();
            let sents = &ctx.iter().find(|c| c[0] == title).unwrap()[1];
            let body: String = sents
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            (Some(title.to_string()), body)
        })
        .collect()
}

/// Asserts that `dir/parts.parquet` (a run cut into committed parts, then resumed) has
/// the bytes of `dir/whole.parquet`, quarantine files included.
pub fn assert_parts_equal_whole(dir: &Path) {
    let bytes = |name: &str| std::fs::read(dir.join(name)).unwrap();
    assert!(
        bytes("whole.parquet") == bytes("parts.parquet"),
        "parts differ from the whole run"
    );
    assert!(
        bytes("whole.quarantine.parquet") == bytes("parts.quarantine.parquet"),
        "the parts' quarantine differs from the whole run's"
    );
}

/// Merges `dir/s0.parquet` … `dir/s{n-1}.parquet` (a run's `--shard i/n` outputs) into
/// `dir/merged.parquet` and asserts that its rows and quarantine rows are the columns
/// of `dir/whole.parquet` and its quarantine.
pub fn assert_merged_shards_equal_whole(dir: &Path, n: usize) {
    let status = hopscore()
        .arg("merge")
        .args((0..n).map(|i| dir.join(format!("s{i}.parquet"))))
        .arg("--output")
        .arg(dir.join("merged.parquet"))
        .status()
        .unwrap();
    assert!(status.success());
    for name in ["", ".quarantine"] {
        let (a, b) = (
            read_parquet(&dir.join(format!("whole{name}.parquet"))),
            read_parquet(&dir.join(format!("merged{name}.parquet"))),
        );
        assert_eq!(a.columns(), b.columns(), "{name}");
    }
}

/// A JSON list of token ids.
pub fn json_ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The golden prompts of T5 fixture `name` (`tests/fixtures/t5/logprobs.json`): each
/// as a scored sequence (encoder ids, then labels) with its per-token log-probabilities
/// at each golden temperature.
pub fn t5_golden_sequences(
    name: &str,
) -> Vec<(hopscore::model::decoder::ScoredSequence, Vec<Vec<f64>>)> {
    fixture_json("t5/logprobs.json")["models"][name]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut ids = json_ids(&s["encoder"]);
            let target_start = ids.len();
            ids.extend(json_ids(&s["labels"]));
            let logprobs = s["logprobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    t.as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap())
                        .collect()
                })
                .collect();
            (
                hopscore::model::decoder::ScoredSequence { ids, target_start },
                logprobs,
            )
        })
        .collect()
}

/// The key-value metadata of a Parquet file (the `hopscore.*` run metadata).
pub fn key_values(path: &Path) -> std::collections::HashMap<String, String> {
    let r = parquet::file::reader::SerializedFileReader::new(std::fs::File::open(path).unwrap())
        .unwrap();
    use parquet::file::reader::FileReader;
    r.metadata()
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
        .collect()
}

/// The files of a job's run: `input` to `output`, every other flag at its default.
pub fn file_args(input: &Path, output: &Path) -> hopscore::pipeline::files::FileRun {
    hopscore::pipeline::files::FileRun::new(input, output)
}

/// A job's subcommand arguments: `config` over `input` to `output` on the CPU.
pub fn job_args<C>(config: C, input: &Path, output: &Path) -> hopscore::cli::job::JobArgs<C>
where
    C: hopscore::jobs::JobKind<
        Device = hopscore::jobs::DeviceConfig,
        Files = hopscore::pipeline::files::FileRun,
    >,
{
    hopscore::cli::job::JobArgs {
        config,
        files: file_args(input, output),
        device: hopscore::jobs::DeviceConfig::CPU,
    }
}

/// Rows scored and rows quarantined by a run.
pub fn scored_and_quarantined(s: &hopscore::pipeline::files::RunSummary) -> (u64, u64) {
    (s.stats.rows - s.stats.bad_rows, s.stats.bad_rows)
}

/// The tokenizer of the scoring LM at `model` (its tokenizer.json or GGUF vocabulary).
pub fn scoring_tokenizer(model: &Path) -> hopscore::text::causal_tokenizer::CausalTokenizer {
    let source = hopscore::model::language_model::LanguageModelSource::open(model).unwrap();
    hopscore::text::causal_tokenizer::for_model(&source, model, None).unwrap()
}

/// The names of a config's options: the fields of its serde form, nested objects
/// (the scheduler's) flattened, as `options::record` writes them.
pub fn option_names(config: &impl serde::Serialize) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        for (name, value) in v.as_object().into_iter().flatten() {
            match value.is_object() {
                true => walk(value, out),
                false => out.push(name.clone()),
            }
        }
    }
    let mut out = Vec::new();
    walk(&serde_json::to_value(config).unwrap(), &mut out);
    out
}
