//! The library API (`hopscore::jobs`): a job fed Arrow batches through `process`
//! yields the rows and bad rows of the CLI's output and quarantine files, with the
//! same columns, and the run metadata as schema metadata.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use arrow_select::concat::concat_batches;
use hopscore::cli::job::{run, JobArgs};
use hopscore::jobs::{build, DeviceConfig, JobConfig, Stream};
use hopscore::pipeline::files::FileRun;
use hopscore::pipeline::SchedulerConfig;

fn strings(n: usize, f: impl Fn(usize) -> Option<String>) -> Arc<StringArray> {
    Arc::new((0..n).map(f).collect::<StringArray>())
}

/// Every row of a Parquet file (none or more) as one record batch, and the file's
/// key-value metadata.
fn read_file(path: &Path) -> (RecordBatch, HashMap<String, String>) {
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap();
    let footer = builder.metadata().file_metadata().key_value_metadata();
    let footer = footer
        .into_iter()
        .flatten()
        .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
        .collect();
    let schema = builder.schema().clone();
    let batches: Vec<RecordBatch> = builder.build().unwrap().map(Result::unwrap).collect();
    (concat_batches(&schema, &batches).unwrap(), footer)
}

/// Feeds `input` to `job` in batches of `rows` rows and checks the concatenated
/// outputs against the CLI's `output` file and its quarantine file.
fn assert_process_matches_files(job: &mut Stream, input: &RecordBatch, rows: usize, output: &Path) {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    let mut at = 0;
    while at < input.num_rows() {
        let n = rows.min(input.num_rows() - at);
        let out = job.process(&input.slice(at, n)).unwrap();
        assert_eq!(
            out.rows.schema(),
            job.output_schema(&input.schema()).unwrap()
        );
        assert_eq!(out.quarantine.schema(), job.quarantine_schema());
        good.push(out.rows);
        bad.push(out.quarantine);
        at += n;
    }
    let good = concat_batches(&good[0].schema(), &good).unwrap();
    let bad = concat_batches(&bad[0].schema(), &bad).unwrap();
    let (file, footer) = read_file(output);
    let (quarantine, _) = read_file(&output.with_extension("quarantine.parquet"));
    assert_eq!(good.num_rows() + bad.num_rows(), input.num_rows());
    assert_eq!(good.columns(), file.columns());
    assert_eq!(bad.columns(), quarantine.columns());
    let fields = |s: &Schema| s.fields().clone();
    assert_eq!(fields(&good.schema()), fields(&file.schema()));
    let meta: std::collections::HashMap<String, String> = job.metadata().iter().cloned().collect();
    assert_eq!(good.schema().metadata(), &meta);
    // The footer holds the job's metadata (question runs add the input's).
    assert!(meta.contains_key("hopscore.version"));
    for (k, v) in &meta {
        assert_eq!(footer.get(k), Some(v), "{k}");
    }
}

#[test]
fn classify_job_batches_equal_the_cli_files() {
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = common::word_tokenizer(tmp.path());
    let n = 40;
    let words = |i: usize| {
        (0..i % 11 + 2)
            .map(|k| format!("w{}", (i * 7 + k) % 900 + 3))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let input = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("text_a", DataType::Utf8, true),
            Field::new("text_b", DataType::Utf8, true),
        ])),
        vec![
            strings(n, |i| (i != 5).then(|| format!("r{i}"))),
            strings(n, |i| match i {
                7 => None,
                8 => Some("  ".into()),
                _ => Some(words(i)),
            }),
            strings(n, |i| (i % 3 != 0).then(|| words(i + 3))),
        ],
    )
    .unwrap();
    let path = tmp.path().join("pairs.parquet");
    common::write_parquet(&path, &input);
    let output = tmp.path().join("scores.parquet");
    let config = hopscore::jobs::classify::ClassifyConfig {
        tokenizer: Some(tokenizer),
        max_batch_tokens: 100,
        ..hopscore::jobs::classify::ClassifyConfig::new(common::fixture("deberta/v3_seqcls"))
    };
    let summary = run(common::job_args(config.clone(), &path, &output)).unwrap();
    assert_eq!(common::scored_and_quarantined(&summary), (37, 3));
    let mut job = Stream::new(build(JobConfig::new(config), &DeviceConfig::CPU).unwrap());
    assert_process_matches_files(&mut job, &input, 16, &output);
    // A batch without the required column is a job-level error naming it.
    let err = job.process(&input.project(&[0, 2]).unwrap()).unwrap_err();
    assert!(format!("{err:#}").contains("text_a"), "{err:#}");
}

#[test]
fn loglik_job_batches_equal_the_cli_files() {
    let Some(gguf) = common::SMOLLM2_GGUF.require() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let n = 12;
    let text = |i: usize| ["river", "city", "film", "born", "year", "who"][i % 6];
    let input = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("prompt", DataType::Utf8, true),
            Field::new("target", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(
                (0..n as i64)
                    .map(|i| (i != 4).then_some(i))
                    .collect::<Int64Array>(),
            ),
            strings(n, |i| {
                Some(if i == 9 {
                    String::new()
                } else {
                    format!("Document: the {} of the {}.", text(i), text(i + 1))
                })
            }),
            strings(n, |i| (i != 2).then(|| format!(" which {}?", text(i + 2)))),
        ],
    )
    .unwrap();
    let path = tmp.path().join("ll.parquet");
    common::write_parquet(&path, &input);
    let output = tmp.path().join("ll_out.parquet");
    let config = hopscore::jobs::loglik::LoglikConfig {
        temperature: 1.4,
        min_shared_prefix: 4,
        max_batch_tokens: 128,
        ..hopscore::jobs::loglik::LoglikConfig::new(gguf)
    };
    run(common::job_args(config.clone(), &path, &output)).unwrap();
    let mut job = Stream::new(build(JobConfig::new(config), &DeviceConfig::CPU).unwrap());
    assert_process_matches_files(&mut job, &input, 5, &output);
    assert!(
        job.output_schema(&input.schema())
            .unwrap()
            .field(0)
            .data_type()
            == &DataType::Int64
    );
}

/// The HotpotQA slice as a question file in `dir`, and its rows as one batch.
fn question_file(dir: &Path) -> (std::path::PathBuf, RecordBatch) {
    let path = dir.join("questions.parquet");
    hopscore::io::importer::import(&hopscore::io::importer::ImportOptions {
        dataset: hopscore::io::questions::Dataset::HotpotQa,
        files: vec![common::data_file("hotpotqa")],
        output: path.clone(),
        quarantine: None,
        row_group_rows: 1024,
    })
    .unwrap();
    (path.clone(), common::read_parquet(&path))
}

/// The question runs' files: parts of 5 questions.
fn run_args(input: &Path, output: &Path) -> FileRun {
    FileRun {
        part_rows: Some(5),
        ..common::file_args(input, output)
    }
}

/// The question runs' scheduler: small batches, few questions in flight.
const SCHEDULER: SchedulerConfig = SchedulerConfig {
    max_batch_tokens: 4096,
    max_active: 8,
};

#[test]
fn question_job_batches_equal_the_cli_files() {
    let Some(tokenizer) = common::DEBERTA_V3_TOKENIZER.require() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (input, questions) = question_file(tmp.path());
    let output = tmp.path().join("chains.parquet");
    let config = hopscore::jobs::beam::BeamConfig {
        tokenizer: Some(tokenizer),
        scheduler: SCHEDULER,
        ..hopscore::jobs::beam::BeamConfig::new(common::fixture("beam/model"))
    };
    run(JobArgs {
        files: run_args(&input, &output),
        ..common::job_args(config.clone(), &input, &output)
    })
    .unwrap();
    let mut job = Stream::new(build(JobConfig::new(config), &DeviceConfig::CPU).unwrap());
    assert_process_matches_files(&mut job, &questions, 7, &output);

    let bm25 = tmp.path().join("bm25.parquet");
    let cli = <hopscore::cli::Cli as clap::Parser>::parse_from([
        "hopscore", "lepus", "--scorer", "bm25", "--input", "i", "--output", "o",
    ]);
    let hopscore::cli::Command::Job(job) = cli.command else {
        unreachable!("a lepus command line")
    };
    let mut args: JobArgs<hopscore::jobs::lepus::LepusConfig> = job.args().unwrap();
    args.files = run_args(&input, &bm25);
    args.config.scheduler = SCHEDULER;
    run(args.clone()).unwrap();
    let mut job = Stream::new(build(JobConfig::new(args.config), &DeviceConfig::CPU).unwrap());
    assert_process_matches_files(&mut job, &questions, 11, &bm25);
}

/// The embed job of the random BERT fixture with the word tokenizer, on `device`.
fn embed_job(dir: &Path, device: &DeviceConfig) -> anyhow::Result<Stream> {
    let mut config = hopscore::jobs::embed::EmbedConfig::new(common::fixture("bert/random_plain"));
    config.tokenizer = Some(common::word_tokenizer(dir));
    Ok(Stream::new(build(JobConfig::new(config), device)?))
}

/// Three passage rows `p0`, `p1`, `p2`; `text` gives row 1's text bytes.
fn passages(text: &[u8]) -> RecordBatch {
    let mut values = b"w5 w6".to_vec();
    let mut offsets = vec![0i32, values.len() as i32];
    values.extend_from_slice(text);
    offsets.push(values.len() as i32);
    values.extend_from_slice(b"w9 w10 w11");
    offsets.push(values.len() as i32);
    // Safety: the offsets are in bounds and ascending; the bytes may be invalid
    // UTF-8 on purpose (what an array from Python can hold: arrow does not check
    // arrays imported across the C data interface).
    let texts = unsafe {
        StringArray::new_unchecked(
            arrow_buffer::OffsetBuffer::new(offsets.into()),
            values.into(),
            None,
        )
    };
    RecordBatch::try_from_iter([
        (
            "id",
            strings(3, |i| Some(format!("p{i}"))) as arrow_array::ArrayRef,
        ),
        ("text", Arc::new(texts) as _),
    ])
    .unwrap()
}

/// Issue 40: the library (and Python's `Embedder.embed`) embedded text that is not
/// valid UTF-8, which the CLI quarantines. The row goes to the quarantine naming the
/// column; the others are embedded as before.
#[test]
fn text_that_is_not_valid_utf8_goes_to_the_quarantine_in_the_library_too() {
    let tmp = tempfile::tempdir().unwrap();
    let mut job = embed_job(tmp.path(), &DeviceConfig::CPU).unwrap();
    let valid = job.process(&passages(b"w7 w8")).unwrap();
    let out = job.process(&passages(b"w7 \xff\xfe w8")).unwrap();
    assert_eq!(out.rows.num_rows(), 2);
    assert_eq!(out.quarantine.num_rows(), 1);
    let row = out
        .quarantine
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::UInt64Array>();
    assert_eq!(
        row.unwrap().value(0),
        4,
        "rows count on across batches (3 + 1)"
    );
    let reason = out
        .quarantine
        .column(2)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert!(reason
        .value(0)
        .contains("column `text` holds bytes that are not valid UTF-8"));
    // The good rows are those of the valid batch, rows 0 and 2.
    let embedding = |b: &RecordBatch| b.column_by_name("embedding").unwrap().clone();
    let keep = arrow_select::take::take(
        &embedding(&valid.rows),
        &arrow_array::UInt32Array::from(vec![0, 2]),
        None,
    )
    .unwrap();
    assert_eq!(&embedding(&out.rows), &keep);
}

/// Issue 40: `threads=0` was accepted, and a job with `threads=1` after one with
/// another count failed ("global thread pool has already been initialized"). Each job
/// runs in a pool of its own count; 0 is refused naming the option.
#[test]
fn jobs_in_one_process_keep_their_own_thread_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let on = |threads| DeviceConfig {
        threads,
        ..DeviceConfig::CPU
    };
    let input = passages(b"w7 w8");
    let two = embed_job(tmp.path(), &on(Some(2)))
        .unwrap()
        .process(&input)
        .unwrap();
    let one = embed_job(tmp.path(), &on(Some(1)))
        .unwrap()
        .process(&input)
        .unwrap();
    assert_eq!(one.rows.columns(), two.rows.columns());
    let err = format!("{:#}", embed_job(tmp.path(), &on(Some(0))).err().unwrap());
    assert!(err.contains("threads"), "{err}");
}

/// Issue 57: the metadata of every job names every option of its config (walked from
/// its serde fields) and every device setting (a job that runs no model: none), with
/// values as the flags take them (`hops` reads `3`); the CLI's files hold the same
/// entries (the tests above compare footers with `job.metadata()`).
#[test]
fn the_run_metadata_names_every_option_and_device_setting() {
    use hopscore::jobs::{beam, classify, embed, label, lepus, loglik, rerank, review};
    let Some(deberta) = common::DEBERTA_V3_TOKENIZER.require() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let words = common::word_tokenizer(tmp.path());
    let fixture = common::fixture;
    let mut bm25 = lepus::LepusConfig::new("unused".into());
    bm25.model = None;
    bm25.scorer = lepus::LepusScorer::Bm25;
    let configs = [
        JobConfig::new(beam::BeamConfig {
            tokenizer: Some(deberta.clone()),
            hops: beam::Hops::Fixed(3),
            ..beam::BeamConfig::new(fixture("beam/model"))
        }),
        JobConfig::new(label::LabelConfig {
            tokenizer: Some(deberta),
            ..label::LabelConfig::new(
                fixture("efficientrag/labeler"),
                fixture("efficientrag/filter"),
            )
        }),
        JobConfig::new(lepus::LepusConfig::new(fixture("lepus/gpt2_bytes"))),
        JobConfig::new(bm25),
        JobConfig::new(classify::ClassifyConfig {
            tokenizer: Some(words.clone()),
            ..classify::ClassifyConfig::new(fixture("deberta/v3_seqcls"))
        }),
        JobConfig::new(loglik::LoglikConfig::new(fixture("lepus/gpt2_bytes"))),
        JobConfig::new(embed::EmbedConfig {
            tokenizer: Some(words),
            ..embed::EmbedConfig::new(fixture("bert/random_plain"))
        }),
        JobConfig::new(rerank::RerankConfig {
            tokenizer: Some(fixture("rerank/wordpiece")),
            ..rerank::RerankConfig::new(fixture("rerank/bert_seqcls"))
        }),
        JobConfig::new(review::ReviewConfig::new(
            review::ReviewStrategy::Tor,
            "http://127.0.0.1:9/v1",
            "m",
        )),
    ];
    let device = DeviceConfig {
        attention: hopscore::backend::gpu_kernels::Attention::V3,
        ..DeviceConfig::CPU
    };
    for config in configs {
        let (name, options) = (
            config.name(),
            common::option_names(&config.options().unwrap()),
        );
        let job = build(config, &device).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let meta: HashMap<String, String> = job.metadata().iter().cloned().collect();
        for option in &options {
            assert!(
                meta.contains_key(&format!("hopscore.{option}")),
                "{name}: --{option} is not in the run metadata: {meta:?}"
            );
        }
        let settings = common::option_names(&device);
        for setting in &settings {
            let key = format!("hopscore.{setting}");
            assert_eq!(meta.contains_key(&key), name != "review", "{name}: {key}");
        }
        if name != "review" {
            assert_eq!(meta["hopscore.attention"], "v3", "{name}");
            assert_eq!(meta["hopscore.batch_invariant"], "true", "{name}");
            // A model's job records what ran, not what was asked: the CPU computes in
            // f32 (BM25 runs no model: the setting stays).
            if meta.get("hopscore.scorer").is_none_or(|s| s != "bm25") {
                assert_eq!(meta["hopscore.dtype"], "f32", "{name}");
            }
        }
        if name == "beam" {
            assert_eq!(meta["hopscore.hops"], "3");
            assert_eq!(meta["hopscore.beam_size"], "2");
        }
        if name == "review" {
            assert_eq!(meta["hopscore.widths"], "5,3,3");
        }
    }
}
