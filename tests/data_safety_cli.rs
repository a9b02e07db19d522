//! Issue 17, "no command can lose data": one regression test per way data was lost,
//! corrupted or a run hung, each named after what it guards. Most run `hopscore lepus
//! --scorer bm25` (no model) on small question files written here.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use hopscore::io::questions::{Dataset, Passage, Question, QuestionWriter};

/// A two-passage HotpotQA-style question; `tag` makes the texts differ between files.
fn question(id: &str, tag: &str) -> Question {
    let passage = |t: &str, body: &str| Passage {
        title: t.into(),
        text: body.into(),
        sentences: Some(vec![body.into()]),
    };
    Question {
        id: id.into(),
        dataset: Dataset::HotpotQa,
        question: format!("Which river runs past the {tag} mill?"),
        passages: vec![
            passage("Mill", &format!("The {tag} mill stands on the Avon river.")),
            passage("Avon", "The Avon is a river in England."),
            passage("Other", "Nothing to see here."),
        ],
        supporting: vec![0, 1],
        hops: Some(2),
        answer: Some("Avon".into()),
        answer_aliases: Vec::new(),
        question_type: Some("bridge".into()),
        level: None,
        supporting_facts: None,
        issues: Vec::new(),
    }
}

fn write_questions(path: &Path, qs: &[Question]) {
    let mut w = QuestionWriter::create(path, &[]).unwrap();
    w.write(qs).unwrap();
    w.finish().unwrap();
}

fn questions(n: usize, tag: &str) -> Vec<Question> {
    (0..n).map(|i| question(&format!("q{i}"), tag)).collect()
}

/// A temporary directory holding `q.parquet`, a question file of `n` questions.
fn question_file(n: usize) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let q = tmp.path().join("q.parquet");
    write_questions(&q, &questions(n, "red"));
    (tmp, q)
}

fn bm25(input: &Path, output: &Path, extra: &[&str]) -> Command {
    let mut c = common::hopscore();
    c.args(["lepus", "--scorer", "bm25", "--input"])
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(extra);
    c
}

fn run(c: &mut Command) -> (Option<i32>, String) {
    let Output { status, stderr, .. } = c.output().unwrap();
    (status.code(), String::from_utf8_lossy(&stderr).into_owned())
}

/// Rows of a Parquet file (from its footer).
fn rows(path: &Path) -> i64 {
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap()
    .metadata()
    .file_metadata()
    .num_rows()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A quarantine path that cannot be created (its directory is a regular file).
fn unwritable(dir: &Path) -> PathBuf {
    let blocker = dir.join("blocker");
    std::fs::write(&blocker, b"a file, not a directory").unwrap();
    blocker.join("q.parquet")
}

#[test]
fn output_equal_to_input_is_refused() {
    let (tmp, q) = question_file(3);
    let before = std::fs::read(&q).unwrap();
    let same_file_spellings = [
        q.clone(),
        tmp.path().join("sub/../q.parquet"),
        tmp.path().join("./q.parquet"),
    ];
    for out in &same_file_spellings {
        let (code, err) = run(&mut bm25(&q, out, &[]));
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("--output") && err.contains("--input"), "{err}");
    }
    // The quarantine file and the parts directory are outputs too.
    let (code, err) = run(&mut bm25(
        &q,
        &tmp.path().join("o.parquet"),
        &["--quarantine", q.to_str().unwrap()],
    ));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("quarantine"), "{err}");
    let inside = tmp.path().join("o.parquet.parts");
    std::fs::create_dir(&inside).unwrap();
    let q_inside = inside.join("q.parquet");
    std::fs::copy(&q, &q_inside).unwrap();
    let (code, err) = run(&mut bm25(&q_inside, &tmp.path().join("o.parquet"), &[]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("parts directory"), "{err}");
    // review and import check the same way, before any request or read.
    let (code, err) = run(common::hopscore()
        .args(["review", "--strategy", "tor", "--llm-model", "m"])
        .args(["--endpoint", "http://127.0.0.1:9", "--no-cache", "--input"])
        .arg(&q)
        .arg("--output")
        .arg(&q));
    assert_eq!(code, Some(1), "{err}");
    let json = tmp.path().join("x.json");
    std::fs::write(&json, b"[]").unwrap();
    let (code, err) = run(common::hopscore()
        .args(["import", "hotpotqa"])
        .arg(&json)
        .arg("-o")
        .arg(&json));
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(std::fs::read(&json).unwrap(), b"[]");
    assert_eq!(std::fs::read(&q).unwrap(), before, "the input is unchanged");
}

#[test]
fn resume_refuses_other_input_with_same_row_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.parquet"), tmp.path().join("b.parquet"));
    write_questions(&a, &questions(4, "red"));
    write_questions(&b, &questions(4, "blue"));
    let out = tmp.path().join("o.parquet");
    // A run whose final merge fails keeps its committed parts.
    let bad_q = unwritable(tmp.path());
    let args = ["--part-rows", "1", "--quarantine", bad_q.to_str().unwrap()];
    let (code, _) = run(&mut bm25(&a, &out, &args));
    assert_eq!(code, Some(1));
    assert!(tmp.path().join("o.parquet.parts/manifest.json").is_file());
    let good_q = tmp.path().join("o.q.parquet");
    let resume = ["--resume", "--quarantine", good_q.to_str().unwrap()];
    let (code, err) = run(&mut bm25(&b, &out, &resume));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("hopscore.input_sha256"), "{err}");
    // The same input resumes.
    let (code, err) = run(&mut bm25(&a, &out, &resume));
    assert_eq!(code, Some(0), "{err}");
    // merge: shards of two inputs with the same row count.
    let s0 = tmp.path().join("s0.parquet");
    let s1 = tmp.path().join("s1.parquet");
    assert_eq!(run(&mut bm25(&a, &s0, &["--shard", "0/2"])).0, Some(0));
    assert_eq!(run(&mut bm25(&b, &s1, &["--shard", "1/2"])).0, Some(0));
    let (code, err) = run(common::hopscore()
        .arg("merge")
        .arg(&s0)
        .arg(&s1)
        .arg("-o")
        .arg(tmp.path().join("m.parquet")));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("hopscore.input_sha256"), "{err}");
}

#[test]
fn failed_run_leaves_earlier_outputs_untouched() {
    let (tmp, q) = question_file(3);
    let out = tmp.path().join("o.parquet");
    assert_eq!(run(&mut bm25(&q, &out, &[])).0, Some(0));
    let good = std::fs::read(&out).unwrap();
    // The same output with an unwritable quarantine file: the run fails.
    let bad_q = unwritable(tmp.path());
    let (code, _) = run(&mut bm25(
        &q,
        &out,
        &["--quarantine", bad_q.to_str().unwrap()],
    ));
    assert_eq!(code, Some(1));
    assert_eq!(std::fs::read(&out).unwrap(), good);
    // import from a truncated gzip over an existing question file.
    let gz = tmp.path().join("t.json.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(br#"[{"_id": "a", "question": "Q?", "context": [["T", ["S."]]]}]"#)
        .unwrap();
    let bytes = enc.finish().unwrap();
    std::fs::write(&gz, &bytes[..bytes.len() / 2]).unwrap();
    let (code, err) = run(common::hopscore()
        .args(["import", "hotpotqa"])
        .arg(&gz)
        .arg("-o")
        .arg(&q));
    assert_eq!(code, Some(1), "{err}");
    let before = std::fs::read(&q).unwrap();
    assert!(!before.is_empty());
    write_questions(&tmp.path().join("again.parquet"), &questions(3, "red"));
    assert_eq!(
        before,
        std::fs::read(tmp.path().join("again.parquet")).unwrap()
    );
    let leftovers: Vec<String> = files_in(tmp.path())
        .into_iter()
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn zero_negative_and_nan_numeric_flags_are_refused_naming_the_flag() {
    let (tmp, q) = question_file(2);
    let out = tmp.path().join("o.parquet");
    for (flag, value) in [
        ("--max-active", "0"),
        ("--max-batch-tokens", "0"),
        ("--part-rows", "0"),
        ("--temperature", "nan"),
        ("--temperature=-1", ""),
        ("--first-hops", "0"),
    ] {
        let args: Vec<&str> = [flag, value]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let (code, err) = run(&mut bm25(&q, &out, &args));
        assert_eq!(code, Some(2), "{flag} {value}: {err}");
        let name = flag.split('=').next().unwrap();
        assert!(err.contains(name), "{flag}: {err}");
    }
    // (The model must exist: model flags are resolved as they are parsed.)
    let model = common::fixture("beam/model");
    let (code, err) = run(common::hopscore()
        .args(["beam", "--model"])
        .arg(&model)
        .args(["--input", "i", "--output", "o", "--tau", "nan"]));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--tau"), "{err}");
    let (code, err) = run(common::hopscore().args([
        "review",
        "--strategy",
        "tor",
        "--input",
        "i",
        "--output",
        "o",
        "--endpoint",
        "http://x",
        "--llm-model",
        "m",
        "--backoff=-1",
    ]));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--backoff"), "{err}");
    assert!(!out.exists());
}

#[test]
fn a_run_killed_during_clean_up_resumes_to_completion() {
    let (tmp, q) = question_file(3);
    let out = tmp.path().join("o.parquet");
    let good_q = tmp.path().join("o.q.parquet");
    assert_eq!(
        run(&mut bm25(
            &q,
            &out,
            &["--quarantine", good_q.to_str().unwrap()]
        ))
        .0,
        Some(0)
    );
    let done = std::fs::read(&out).unwrap();
    // Leave a parts directory with every part committed, then put it in the state a
    // kill between the final rename and the removal of the parts leaves.
    let bad_q = unwritable(tmp.path());
    let args = ["--part-rows", "1", "--quarantine", bad_q.to_str().unwrap()];
    assert_eq!(run(&mut bm25(&q, &out, &args)).0, Some(1));
    let parts = tmp.path().join("o.parquet.parts");
    let manifest = parts.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["finished"] = serde_json::Value::Bool(true);
    std::fs::write(&manifest, m.to_string()).unwrap();
    std::fs::remove_file(parts.join("part-000000.parquet")).unwrap();
    let resume = ["--resume", "--quarantine", good_q.to_str().unwrap()];
    let (code, err) = run(&mut bm25(&q, &out, &resume));
    assert_eq!(code, Some(0), "{err}");
    assert!(!parts.exists(), "the clean-up is completed");
    assert_eq!(std::fs::read(&out).unwrap(), done);
}

#[test]
fn broken_gold_labels_are_scored_and_skipped_by_eval() {
    let tmp = tempfile::tempdir().unwrap();
    let q = tmp.path().join("q.parquet");
    let mut qs = questions(3, "red");
    qs[1].supporting = vec![0, 7];
    qs[2].supporting_facts = Some(vec![hopscore::io::questions::SupportingFact {
        title: "Nowhere".into(),
        sent_idx: 0,
    }]);
    write_questions(&q, &qs);
    let out = tmp.path().join("o.parquet");
    assert_eq!(run(&mut bm25(&q, &out, &[])).0, Some(0));
    assert_eq!(rows(&out), 3, "every row is scored");
    assert_eq!(rows(&tmp.path().join("o.quarantine.parquet")), 0);
    let report = hopscore::metrics::eval::evaluate(&q, &out, &[2]).unwrap();
    assert_eq!(report.gold_questions, 1);
    assert_eq!(report.gold_bad_rows.count, 2);
    assert_eq!(report.unknown.count, 0, "their predictions are not unknown");
    let shown = format!("{:?}", report.gold_bad_rows);
    assert!(shown.contains("index 7 is out of range"), "{shown}");
    assert!(shown.contains("Nowhere"), "{shown}");
}

#[test]
fn invalid_utf8_row_goes_to_quarantine_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let q = tmp.path().join("q.parquet");
    let mut qs = questions(3, "red");
    qs[1].question = "Which river runs past the ZZ\u{c6}ZZ mill?".into();
    // Uncompressed, so that the text's bytes can be edited in place.
    let batch = hopscore::io::questions::to_batch(&qs).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&q).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let mut bytes = std::fs::read(&q).unwrap();
    let (marker, broken) = ("ZZ\u{c6}ZZ".as_bytes(), b"ZZ\xff\xfeZZ");
    let mut hits = 0;
    for i in 0..bytes.len() - marker.len() {
        if &bytes[i..i + marker.len()] == marker {
            bytes[i..i + marker.len()].copy_from_slice(broken);
            hits += 1;
        }
    }
    assert!(hits >= 1);
    std::fs::write(&q, bytes).unwrap();
    let out = tmp.path().join("o.parquet");
    let (code, err) = run(&mut bm25(&q, &out, &[]));
    assert_eq!(code, Some(0), "{err}");
    let ids = common::read_parquet(&out);
    let ids: Vec<&str> = ids.column(0).as_string::<i32>().iter().flatten().collect();
    assert_eq!(ids, vec!["q0", "q2"]);
    let bad = common::read_parquet(&tmp.path().join("o.quarantine.parquet"));
    assert_eq!(bad.num_rows(), 1);
    assert_eq!(bad.column(1).as_string::<i32>().value(0), "q1");
    let reason = bad.column(2).as_string::<i32>().value(0);
    assert!(
        reason.contains("`question`") && reason.contains("UTF-8"),
        "{reason}"
    );
}

#[test]
fn merge_refuses_a_missing_shard_quarantine_and_names_a_truncated_shard() {
    let (tmp, q) = question_file(4);
    let s0 = tmp.path().join("s0.parquet");
    let s1 = tmp.path().join("s1.parquet");
    assert_eq!(run(&mut bm25(&q, &s0, &["--shard", "0/2"])).0, Some(0));
    assert_eq!(run(&mut bm25(&q, &s1, &["--shard", "1/2"])).0, Some(0));
    let merged = tmp.path().join("m.parquet");
    let merge = |a: &Path, b: &Path| {
        run(common::hopscore()
            .arg("merge")
            .arg(a)
            .arg(b)
            .arg("-o")
            .arg(&merged))
    };
    let q1 = tmp.path().join("s1.quarantine.parquet");
    let kept = std::fs::read(&q1).unwrap();
    std::fs::remove_file(&q1).unwrap();
    let (code, err) = merge(&s0, &s1);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("s1.quarantine.parquet"), "{err}");
    std::fs::write(&q1, kept).unwrap();
    let bytes = std::fs::read(&s1).unwrap();
    std::fs::write(&s1, &bytes[..bytes.len() / 2]).unwrap();
    let (code, err) = merge(&s0, &s1);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("s1.parquet"), "{err}");
    assert!(!merged.exists());
}

/// The [`fake_llm`] status that never answers (the connection stays open).
const HANG: u16 = 0;

/// A server on 127.0.0.1 that answers every request with `status` (and
/// `Retry-After: 600` for a 429), or never when `status` is [`HANG`]; counts requests.
fn fake_llm(status: u16) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = std::io::Read::read_exact(&mut reader, &mut body);
            seen.fetch_add(1, Ordering::SeqCst);
            if status == HANG {
                std::mem::forget(stream); // held open, never answered
                continue;
            }
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nRetry-After: 600\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            );
        }
    });
    (url, count)
}

fn review(input: &Path, output: &Path, url: &str) -> Command {
    let mut c = common::hopscore();
    c.args([
        "review",
        "--strategy",
        "tor",
        "--llm-model",
        "m",
        "--no-cache",
    ])
    .args(["--endpoint", url, "--max-retries", "2", "--input"])
    .arg(input)
    .arg("--output")
    .arg(output);
    c
}

#[test]
fn review_exits_3_and_counts_failures_when_no_question_is_answered() {
    let (tmp, q) = question_file(2);
    let (url, _) = fake_llm(401);
    let out = tmp.path().join("r.parquet");
    let (code, err) = run(&mut review(&q, &out, &url));
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("no question was answered (2 failed"), "{err}");
    let status = common::read_parquet(&out);
    let status: Vec<&str> = status
        .column(2)
        .as_string::<i32>()
        .iter()
        .flatten()
        .collect();
    assert_eq!(status, vec!["failed", "failed"]);
}

/// Runs `review` on one question against [`fake_llm`]`(status)` with `extra` flags,
/// sends SIGINT once the first request has arrived, and returns the exit code, the
/// number of requests the server saw and the rows written.
fn review_interrupted(status: u16, extra: &[&str]) -> (Option<i32>, usize, i64) {
    let (tmp, q) = question_file(1);
    let (url, requests) = fake_llm(status);
    let out = tmp.path().join("r.parquet");
    let mut child = review(&q, &out, &url)
        .args(extra)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while requests.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    // A hang guard, not a speed limit: unfixed, each wait lasts its 600 s.
    let mut status = None;
    for _ in 0..6000 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let Some(status) = status else {
        child.kill().unwrap();
        panic!("the Ctrl-C did not end the run");
    };
    (status.code(), requests.load(Ordering::SeqCst), rows(&out))
}

#[test]
fn review_stops_a_retry_after_wait_at_the_first_ctrl_c() {
    // Once the first 429 (Retry-After: 600) is answered, the client is waiting.
    let (code, requests, rows) = review_interrupted(429, &[]);
    assert_eq!(code, Some(130));
    assert_eq!(requests, 1, "no retry after the Ctrl-C");
    assert_eq!(rows, 0, "the interrupted question is left out");
}

/// Issue 26: a Ctrl-C while the endpoint hung kept sending new requests, each waiting
/// the whole `--timeout` (481 s to exit). Now no request starts after the signal and
/// the one in flight is abandoned.
#[test]
fn review_abandons_a_hung_request_and_starts_none_after_ctrl_c() {
    let (code, requests, rows) = review_interrupted(HANG, &["--timeout", "600"]);
    assert_eq!(code, Some(130));
    assert_eq!(requests, 1, "no request after the Ctrl-C");
    assert_eq!(rows, 0, "the interrupted question is left out");
}

/// A question that needs three model steps of one 10-token request each.
struct ThreeSteps {
    id: String,
    step: usize,
}

impl hopscore::pipeline::Strategy for ThreeSteps {
    type Output = String;
    fn requests(&self) -> Vec<(hopscore::model::batch::Sequence, usize)> {
        if self.step == 3 {
            return Vec::new();
        }
        let seq = hopscore::model::batch::Sequence {
            ids: vec![1; 10],
            ..Default::default()
        };
        vec![(seq, 0)]
    }
    fn feed(&mut self, _: Vec<Vec<f32>>) {
        self.step += 1;
    }
    fn take_output(&mut self) -> Option<String> {
        (self.step == 3).then(|| std::mem::take(&mut self.id))
    }
}

/// [`ThreeSteps`] searches with a scorer that notes, at its 10th batch, how many parts
/// the writer has committed.
struct ThreeStepsScorer {
    manifest: PathBuf,
    batches: usize,
    committed_midway: Option<usize>,
}

impl ThreeStepsScorer {
    /// Parts committed so far: lines of the parts directory's `committed.jsonl`.
    fn committed(&self) -> usize {
        std::fs::read_to_string(self.manifest.with_file_name("committed.jsonl"))
            .map_or(0, |log| log.lines().count())
    }
}

impl hopscore::jobs::questions::QuestionScorer for ThreeStepsScorer {
    type Task = ThreeSteps;
    type Row = String;
    fn metadata(&self) -> &[(String, String)] {
        &[]
    }
    fn schema(&self) -> arrow_schema::SchemaRef {
        use arrow_schema::{DataType, Field, Schema};
        Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false)]))
    }
    fn prepare(&self) -> hopscore::jobs::questions::Prepare<ThreeSteps> {
        Arc::new(|q: &Question| {
            Ok(ThreeSteps {
                id: q.id.clone(),
                step: 0,
            })
        })
    }
    fn finish(id: String) -> Result<String, (String, String)> {
        Ok(id)
    }
    fn to_batch(&self) -> hopscore::pipeline::files::ToBatch<String> {
        let schema = self.schema();
        Arc::new(move |chunk: &[String]| {
            Ok(arrow_array::RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(arrow_array::StringArray::from_iter_values(chunk))],
            )?)
        })
    }
    fn score(
        &mut self,
        seqs: &[hopscore::model::batch::Sequence],
        _: &[usize],
    ) -> anyhow::Result<Vec<Vec<f32>>> {
        self.batches += 1;
        if self.batches == 10 {
            // Wait for the writer (a hang guard, not a speed limit).
            let mut seen = self.committed();
            for _ in 0..3000 {
                if seen >= 3 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
                seen = self.committed();
            }
            self.committed_midway = Some(seen);
        }
        Ok(vec![vec![0.0]; seqs.len()])
    }
}

/// A file run of `input` into `output` in parts of `part_rows`, nothing else set.
fn fresh_run(input: &Path, output: &Path, part_rows: u64) -> hopscore::pipeline::files::FileRun {
    hopscore::pipeline::files::FileRun {
        part_rows: Some(part_rows),
        ..hopscore::pipeline::files::FileRun::new(input, output)
    }
}

#[test]
fn parts_commit_as_soon_as_their_rows_finish() {
    use hopscore::jobs::questions::QuestionJob;
    use hopscore::pipeline::files::run;
    let (tmp, q) = question_file(6);
    let out = tmp.path().join("o.parquet");
    let mut job = QuestionJob::new(
        ThreeStepsScorer {
            manifest: tmp.path().join("o.parquet.parts/manifest.json"),
            batches: 0,
            committed_midway: None,
        },
        hopscore::pipeline::SchedulerConfig {
            // One request per batch: 6 questions × 3 steps = 18 batches.
            max_batch_tokens: 10,
            max_active: 64,
        },
    );
    let opts = fresh_run(&q, &out, 1);
    run(&mut job, &opts).unwrap();
    let (batches, committed_midway) = (job.scorer.batches, job.scorer.committed_midway);
    assert_eq!(batches, 18);
    let midway = committed_midway.unwrap();
    // Questions 0–2 finished in batches 3, 6 and 9 (oldest first).
    assert_eq!(midway, 3, "parts committed after 10 of 18 batches");
    assert_eq!(rows(&out), 6);
}

#[test]
fn an_output_over_a_model_input_is_refused() {
    let (tmp, q) = question_file(2);
    let model = tmp.path().join("model.bin");
    std::fs::write(&model, b"weights").unwrap();
    let labeler = tmp.path().join("labeler-dir");
    std::fs::create_dir(&labeler).unwrap();
    let label = |output: &Path| {
        let mut c = common::hopscore();
        c.args(["label", "--labeler"])
            .arg(&labeler)
            .arg("--filter")
            .arg(&model)
            .arg("--input")
            .arg(&q)
            .arg("--output")
            .arg(output);
        c
    };
    let (code, err) = run(&mut label(&model));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--filter") && err.contains("--output"),
        "{err}"
    );
    // The parts directory may not hold the model either.
    let parts = tmp.path().join("o.parquet.parts");
    std::fs::create_dir(&parts).unwrap();
    std::fs::copy(&model, parts.join("model.bin")).unwrap();
    let (code, err) = run(common::hopscore()
        .args(["classify", "--model"])
        .arg(parts.join("model.bin"))
        .arg("--input")
        .arg(&q)
        .arg("--output")
        .arg(tmp.path().join("o.parquet")));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--model") && err.contains("parts directory"),
        "{err}"
    );
    assert_eq!(std::fs::read(&model).unwrap(), b"weights");
}

// Issue 26, "data safety, round two".

/// Two runs writing one `--output` from different inputs corrupted it. The parts
/// directory is locked for the life of a run (the lock held here stands for a run in
/// progress); a second writer is refused naming the holder's pid and changes nothing.
/// Creates the parts directory `parts` and holds its lock as run 4242 would.
fn hold_lock(parts: &Path) -> std::fs::File {
    std::fs::create_dir(parts).unwrap();
    let mut lock = std::fs::File::create(parts.join("lock")).unwrap();
    lock.try_lock().unwrap();
    writeln!(lock, "4242").unwrap();
    lock
}

#[test]
fn a_second_writer_of_one_output_is_refused_naming_the_holder() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.parquet"), tmp.path().join("b.parquet"));
    write_questions(&a, &questions(3, "red"));
    write_questions(&b, &questions(3, "blue"));
    let out = tmp.path().join("o.parquet");
    let parts = tmp.path().join("o.parquet.parts");
    let lock = hold_lock(&parts);
    let (code, err) = run(&mut bm25(&b, &out, &[]));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("(pid 4242) is writing") && err.contains("o.parquet"),
        "{err}"
    );
    assert_eq!(files_in(&parts), ["lock"], "the refused run wrote nothing");
    assert!(!out.exists());
    // The lock goes with its holder (the OS releases it on any exit, SIGKILL too).
    drop(lock);
    let (code, err) = run(&mut bm25(&a, &out, &[]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rows(&out), 3);
    assert!(!parts.exists());
}

/// An `--output` that was a character device or a FIFO was replaced by a regular file,
/// and an existing directory was found only at the final rename. All are refused
/// before any work.
#[test]
fn an_output_that_is_a_device_fifo_or_directory_is_refused_at_start() {
    let (tmp, q) = question_file(2);
    let fifo = tmp.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let dir = tmp.path().join("dir.parquet");
    std::fs::create_dir(&dir).unwrap();
    for (output, found) in [
        (Path::new("/dev/null"), "a character device"),
        (fifo.as_path(), "a FIFO"),
        (dir.as_path(), "a directory"),
    ] {
        let (code, err) = run(&mut bm25(&q, output, &[]));
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(found) && err.contains("not a regular file"),
            "{err}"
        );
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
    assert!(!tmp.path().join("dir.parquet.parts").exists());
}

/// A committed part missing or replaced inside `<output>.parts/` was found only at
/// merge, or merged silently. `--resume` verifies every committed part (rows and
/// SHA-256 recorded at commit) before any work.
#[test]
fn resume_verifies_the_committed_parts_before_any_work() {
    let (tmp, q) = question_file(4);
    let out = tmp.path().join("o.parquet");
    let parts = tmp.path().join("o.parquet.parts");
    let bad_q = unwritable(tmp.path());
    let failing = ["--part-rows", "1", "--quarantine", bad_q.to_str().unwrap()];
    let good_q = tmp.path().join("o.q.parquet");
    let resume = ["--resume", "--quarantine", good_q.to_str().unwrap()];
    // Missing, then replaced by another part's file.
    for damage in ["remove", "replace"] {
        let _ = std::fs::remove_dir_all(&parts);
        assert_eq!(run(&mut bm25(&q, &out, &failing)).0, Some(1));
        let part = parts.join("part-000002.parquet");
        match damage {
            "remove" => std::fs::remove_file(&part).unwrap(),
            _ => {
                std::fs::copy(parts.join("part-000000.parquet"), &part).unwrap();
            }
        }
        let log = std::fs::read(parts.join("committed.jsonl")).unwrap();
        let (code, err) = run(&mut bm25(&q, &out, &resume));
        assert_eq!(code, Some(1), "{err}");
        let why = if damage == "remove" {
            "is missing"
        } else {
            "has changed"
        };
        assert!(
            err.contains("part-000002.parquet") && err.contains(why),
            "{err}"
        );
        assert_eq!(std::fs::read(parts.join("committed.jsonl")).unwrap(), log);
        assert!(!out.exists());
    }
}

/// Killed runs left hidden `.tmp` files that no later run removed. A run removes the
/// temporaries of its own output and parts directory left by dead processes.
#[test]
fn a_run_removes_the_temporaries_killed_runs_left() {
    let (tmp, q) = question_file(2);
    let out = tmp.path().join("o.parquet");
    let parts = tmp.path().join("o.parquet.parts");
    std::fs::create_dir(&parts).unwrap();
    let dead = (1u32 << 22) + 7; // above Linux's largest pid_max: no such process
    let stale = [
        tmp.path().join(format!(".o.parquet.{dead}-0.tmp")),
        tmp.path()
            .join(format!(".o.quarantine.parquet.{dead}-1.tmp")),
        parts.join(format!(".part-000000.parquet.{dead}-2.tmp")),
    ];
    let unrelated = tmp.path().join(format!(".other.parquet.{dead}-0.tmp"));
    for p in stale.iter().chain([&unrelated]) {
        std::fs::write(p, b"half a file").unwrap();
    }
    let (code, err) = run(&mut bm25(&q, &out, &[]));
    assert_eq!(code, Some(0), "{err}");
    for p in &stale {
        assert!(!p.exists(), "{} is left", p.display());
    }
    assert!(unrelated.exists(), "another output's temporary is not ours");
}

/// The question file pyarrow or pandas writes from the rows of `src`: every nested
/// field nullable, `answer_aliases` as `list<null>` (what an always-empty list column
/// becomes), passage 0 of row 1 with a null title, and `hops` 0 and −1 in rows 2, 3.
fn pandas_like(src: &Path, dest: &Path) {
    use arrow_array::{
        Array, ArrayRef, Int32Array, ListArray, NullArray, StringArray, StructArray,
    };
    use arrow_buffer::OffsetBuffer;
    use arrow_schema::{DataType, Field, Fields, Schema};
    let batch = common::read_parquet(src);
    let passages = batch.column_by_name("passages").unwrap().as_list::<i32>();
    let ps = passages.values().as_struct();
    let titles = ps.column(0).as_string::<i32>();
    let null_at = passages.value_offsets()[1] as usize;
    let titles: StringArray = (0..titles.len())
        .map(|i| (i != null_at).then(|| titles.value(i)))
        .collect();
    let fields: Fields = ps
        .fields()
        .iter()
        .map(|f| Field::new(f.name(), f.data_type().clone(), true))
        .collect();
    let mut columns = ps.columns().to_vec();
    columns[0] = Arc::new(titles);
    let ps = StructArray::try_new(fields.clone(), columns, None).unwrap();
    let item = Arc::new(Field::new("item", DataType::Struct(fields), true));
    let passages =
        ListArray::try_new(item, passages.offsets().clone(), Arc::new(ps), None).unwrap();
    let n = batch.num_rows();
    let aliases = ListArray::try_new(
        Arc::new(Field::new("element", DataType::Null, true)),
        OffsetBuffer::new_zeroed(n),
        Arc::new(NullArray::new(0)),
        None,
    )
    .unwrap();
    let hops = Int32Array::from_iter_values((0..n as i32).map(|r| [2, 2, 0, -1][r as usize % 4]));
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        let c: ArrayRef = match f.name().as_str() {
            "passages" => Arc::new(passages.clone()),
            "answer_aliases" => Arc::new(aliases.clone()),
            "hops" => Arc::new(hops.clone()),
            _ => c.clone(),
        };
        fields.push(Field::new(f.name(), c.data_type().clone(), true));
        columns.push(c);
    }
    let batch = arrow_array::RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    common::write_parquet(dest, &batch);
}

/// One null passage title stopped the whole run with a message naming neither file
/// nor row; an always-empty list column (`list<null>`) was refused; `hops` 0 and −1
/// were handled by two different rules. Now: the null is a bad row, `list<null>` is
/// read as empty lists, and a `hops` below 1 is one recorded gold problem, taken as
/// absent.
#[test]
fn nulls_where_pyarrow_allows_them_are_bad_rows_and_hops_below_1_one_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = tmp.path().join("clean.parquet");
    write_questions(&clean, &questions(5, "red"));
    let q = tmp.path().join("q.parquet");
    pandas_like(&clean, &q);
    let out = tmp.path().join("o.parquet");
    let (code, err) = run(&mut bm25(&q, &out, &[]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rows(&out), 4);
    let bad = common::read_parquet(&tmp.path().join("o.quarantine.parquet"));
    assert_eq!(bad.num_rows(), 1);
    let reason = bad
        .column_by_name("reason")
        .unwrap()
        .as_string::<i32>()
        .value(0);
    assert_eq!(reason, "title of passage 0 is null");
    let read: Vec<_> = hopscore::io::questions::QuestionReader::open(&q, 16)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for (row, want) in [(2, "hops is 0 ("), (3, "hops is -1 (")] {
        let q = read[row].as_ref().unwrap();
        assert_eq!(q.hops, None);
        assert_eq!(q.hop_count(), q.supporting.len());
        assert!(q.issues.iter().any(|i| i.contains(want)), "{:?}", q.issues);
    }
    assert!(read[0].as_ref().unwrap().answer_aliases.is_empty());
}

/// A merge refusal printed a base64 Arrow schema blob first; it now says in words
/// which column differs (here a shard rewritten with one more column).
#[test]
fn merge_refusal_names_the_differing_column_not_the_schema_blob() {
    use parquet::file::reader::FileReader;
    let (tmp, q) = question_file(4);
    let (s0, s1) = (tmp.path().join("s0.parquet"), tmp.path().join("s1.parquet"));
    assert_eq!(run(&mut bm25(&q, &s0, &["--shard", "0/2"])).0, Some(0));
    assert_eq!(run(&mut bm25(&q, &s1, &["--shard", "1/2"])).0, Some(0));
    let footer = parquet::file::serialized_reader::SerializedFileReader::new(
        std::fs::File::open(&s1).unwrap(),
    )
    .unwrap()
    .metadata()
    .file_metadata()
    .key_value_metadata()
    .unwrap()
    .iter()
    .filter(|kv| kv.key.starts_with("hopscore."))
    .cloned()
    .collect::<Vec<_>>();
    let batch = common::read_parquet(&s1);
    let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(arrow_schema::Field::new(
        "extra",
        arrow_schema::DataType::Int32,
        true,
    )));
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(arrow_array::Int32Array::from(vec![
        7;
        batch
            .num_rows()
    ])));
    let batch =
        arrow_array::RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)
            .unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(footer))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&s1).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let (code, err) = run(common::hopscore()
        .arg("merge")
        .arg(&s0)
        .arg(&s1)
        .arg("-o")
        .arg(tmp.path().join("m.parquet")));
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("ARROW:schema"), "{err}");
    assert!(
        err.contains("column `extra` is only in") && err.contains("s1.parquet"),
        "{err}"
    );
}

// Issue 40: the newer commands (retrieve, instruction-search, embed) held to the same
// promises. Dense-index cases are in embed_cli.rs, lepus and instruction-search with a
// model in lepus_parity.rs.

/// Runs `c`, which must fail (exit 1); its stderr.
fn refused(c: &mut Command) -> String {
    let (code, err) = run(c);
    assert_eq!(code, Some(1), "{err}");
    err
}

/// A passage corpus (`id`, `title`, `text`).
fn write_corpus(path: &Path, rows: &[(&str, &str, &str)]) {
    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    let col = |i: usize| {
        let field = |r: &(&str, &str, &str)| [r.0, r.1, r.2][i].to_string();
        Arc::new(StringArray::from_iter_values(rows.iter().map(field))) as ArrayRef
    };
    let batch =
        RecordBatch::try_from_iter([("id", col(0)), ("title", col(1)), ("text", col(2))]).unwrap();
    common::write_parquet(path, &batch);
}

/// The passages of [`question`] and two more, as a corpus.
fn mill_corpus(path: &Path) {
    write_corpus(
        path,
        &[
            ("p0", "Mill", "The red mill stands on the Avon river."),
            ("p1", "Avon", "The Avon is a river in England."),
            ("p2", "Other", "Nothing to see here."),
            ("p3", "Thames", "The Thames runs through London."),
            (
                "p4",
                "Severn",
                "The Severn is the longest river in Britain.",
            ),
        ],
    );
}

fn retrieve(questions: &Path, corpus: &Path, output: &Path, extra: &[&str]) -> Command {
    let mut c = common::hopscore();
    c.args(["retrieve", "--retriever", "bm25", "--questions"])
        .arg(questions)
        .arg("--corpus")
        .arg(corpus)
        .arg("--output")
        .arg(output)
        .args(extra);
    c
}

/// Issue 40: `retrieve` quarantined every question without passages — the
/// open-domain input a first stage exists for. They are retrieved for like the others.
#[test]
fn retrieve_takes_open_domain_questions_without_passages() {
    let tmp = tempfile::tempdir().unwrap();
    let mut qs = questions(3, "red");
    for q in &mut qs {
        q.passages.clear();
        q.supporting.clear();
        q.hops = None;
    }
    let (q, corpus, out) = (
        tmp.path().join("q.parquet"),
        tmp.path().join("corpus.parquet"),
        tmp.path().join("out.parquet"),
    );
    write_questions(&q, &qs);
    mill_corpus(&corpus);
    let (code, err) = run(&mut retrieve(&q, &corpus, &out, &["--k", "2"]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rows(&out), 3);
    assert_eq!(rows(&tmp.path().join("out.quarantine.parquet")), 0);
    let got = hopscore::io::questions::QuestionReader::open(&out, 16)
        .unwrap()
        .map(|r| r.unwrap().unwrap())
        .collect::<Vec<_>>();
    // The pools are the BM25 index's top 2 over the corpus.
    let reference = hopscore::retrieve::Corpus::from_parquet(&corpus).unwrap();
    for q in got {
        let want: Vec<&str> = reference
            .index
            .search(&q.question, 2)
            .iter()
            .map(|h| reference.titles[h.doc].as_str())
            .collect();
        let titles: Vec<&str> = q.passages.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(titles, want, "{}", q.id);
        assert_eq!(titles.len(), 2);
    }
}

/// Issue 40: a corpus id on two rows put its passage twice in a pool (and hybrid
/// counted it twice). Refused, naming the id.
#[test]
fn retrieve_refuses_a_corpus_id_on_two_rows() {
    let (tmp, q) = question_file(1);
    let corpus = tmp.path().join("corpus.parquet");
    write_corpus(
        &corpus,
        &[
            ("p0", "Mill", "The red mill stands on the Avon river."),
            ("p1", "Avon", "The Avon is a river in England."),
            ("p0", "Mill", "The red mill stands on the Avon river."),
        ],
    );
    let out = tmp.path().join("out.parquet");
    let err = refused(&mut retrieve(&q, &corpus, &out, &[]));
    assert!(err.contains("id `p0` is on two rows"), "{err}");
    assert!(!out.exists());
}

/// Issue 40: `eval --gold <retrieve output>` skipped the questions whose gold passages
/// retrieval missed as "unusable gold" (or scored what was left of their gold), so
/// R@k read 1.00 where retrieve found half. A gold passage not retrieved is gold never
/// found.
#[test]
fn eval_counts_gold_that_retrieval_missed_as_a_miss() {
    let tmp = tempfile::tempdir().unwrap();
    let mut with_facts = question("q0", "red");
    with_facts.supporting_facts = Some(vec![
        hopscore::io::questions::SupportingFact {
            title: "Mill".into(),
            sent_idx: 0,
        },
        hopscore::io::questions::SupportingFact {
            title: "Avon".into(),
            sent_idx: 0,
        },
    ]);
    let mut other = question("q1", "red");
    other.question = "Which river is in England?".into();
    let (q, corpus, out) = (
        tmp.path().join("q.parquet"),
        tmp.path().join("corpus.parquet"),
        tmp.path().join("out.parquet"),
    );
    write_questions(&q, &[with_facts, other]);
    mill_corpus(&corpus);
    // k = 1: each question's pool holds one of its two gold passages.
    let (code, err) = run(&mut retrieve(&q, &corpus, &out, &["--k", "1"]));
    assert_eq!(code, Some(0), "{err}");
    let report = hopscore::metrics::eval::evaluate(&out, &out, &[1, 2]).unwrap();
    assert_eq!(report.overall.retrieval_questions, 2, "none skipped");
    assert_eq!(
        report.gold_bad_rows.count, 0,
        "{:?}",
        report.gold_bad_rows.examples
    );
    assert_eq!(report.overall.recall_at_k[&1], 0.0);
    assert_eq!(report.overall.recall_at_k[&2], 0.0);
    // Against the input's gold, the same.
    let report = hopscore::metrics::eval::evaluate(&q, &out, &[1]).unwrap();
    assert_eq!(report.overall.recall_at_k[&1], 0.0);
}

/// Issue 40: `retrieve` had none of the file runner's guards: a second run on one
/// output was not refused, and temporaries of killed runs stayed. It holds the
/// output's lock and clears them.
#[test]
fn retrieve_holds_the_output_lock_and_clears_stale_temporaries() {
    let (tmp, q) = question_file(2);
    let corpus = tmp.path().join("corpus.parquet");
    mill_corpus(&corpus);
    let out = tmp.path().join("o.parquet");
    let parts = tmp.path().join("o.parquet.parts");
    let lock = hold_lock(&parts);
    let err = refused(&mut retrieve(&q, &corpus, &out, &[]));
    assert!(err.contains("(pid 4242) is writing"), "{err}");
    assert!(!out.exists());
    drop(lock);
    // A killed run's temporary (a pid that is not running).
    let stale = tmp.path().join(".o.parquet.999999999-0.tmp");
    std::fs::write(&stale, b"half a file").unwrap();
    let (code, err) = run(&mut retrieve(&q, &corpus, &out, &[]));
    assert_eq!(code, Some(0), "{err}");
    assert!(!stale.exists(), "the stale temporary is removed");
    assert!(!parts.exists(), "the lock goes with the run");
    assert_eq!(rows(&out), 2);
}

/// Issue 40: Ctrl-C on `retrieve` exited 1 and suggested `--resume`, which retrieve
/// does not have. It exits 130, writes nothing, and says to run again.
#[test]
fn retrieve_stops_at_ctrl_c_writing_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let q = tmp.path().join("q.parquet");
    write_questions(&q, &questions(3000, "red"));
    let corpus = tmp.path().join("corpus.parquet");
    let texts: Vec<(String, String, String)> = (0..20_000)
        .map(|i| {
            (
                format!("p{i}"),
                format!("T{i}"),
                format!("river mill {i} w{}", i % 97),
            )
        })
        .collect();
    let rows_ref: Vec<(&str, &str, &str)> = texts
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    write_corpus(&corpus, &rows_ref);
    let out = tmp.path().join("o.parquet");
    let child = retrieve(&q, &corpus, &out, &["--question-rows", "1"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The lock is taken before the corpus loads; the run then takes seconds.
    let lock = tmp.path().join("o.parquet.parts/lock");
    common::wait_until("the output's lock", || lock.exists());
    let (code, err) = common::signal_and_wait(child, "INT");
    assert_eq!(code, Some(130), "{err}");
    assert!(!err.contains("--resume"), "{err}");
    assert!(err.contains("run the same command again"), "{err}");
    assert_eq!(files_in(tmp.path()), ["corpus.parquet", "q.parquet"]);
}

/// Issue 40: every file `instruction-search` writes (its report, `<stem>.best.txt`,
/// the runs directory) goes through the output guard: `--output` equal to `--input`,
/// to `--templates` or to a file of the model replaced it, and `--templates
/// s.best.txt --output s.json` shrank the candidates file to one line.
#[test]
fn every_file_instruction_search_writes_goes_through_the_output_guard() {
    let (tmp, q) = question_file(2);
    let model = tmp.path().join("t5");
    std::fs::create_dir(&model).unwrap();
    for e in std::fs::read_dir(common::fixture("t5/v1_1")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, model.join(p.file_name().unwrap())).unwrap();
    }
    let templates = tmp.path().join("s.best.txt");
    std::fs::write(
        &templates,
        "Document: <P> Question:\nPassage: <P> Question:\n",
    )
    .unwrap();
    let search = |output: &Path| {
        let mut c = common::hopscore();
        c.arg("instruction-search")
            .arg("--model")
            .arg(&model)
            .arg("--input")
            .arg(&q)
            .arg("--templates")
            .arg(&templates)
            .arg("--output")
            .arg(output);
        c
    };
    let before = |p: &Path| std::fs::read(p).unwrap();
    let (q0, t0, c0) = (
        before(&q),
        before(&templates),
        before(&model.join("config.json")),
    );
    for (output, names) in [
        (q.clone(), "--input"),
        (templates.clone(), "--templates"),
        (model.join("config.json"), "inside the --model"),
        (tmp.path().join("s.json"), "the best-instruction file"),
    ] {
        let err = refused(&mut search(&output));
        assert!(err.contains(names), "{output:?}: {err}");
    }
    assert_eq!(before(&q), q0);
    assert_eq!(before(&templates), t0);
    assert_eq!(before(&model.join("config.json")), c0);
    assert!(!tmp.path().join("s.json.runs").exists());
}

/// Issue 40: the guard compared outputs with input files and folders, not with the
/// files inside an input folder: `embed --output M/model.safetensors`, `retrieve
/// --output ENC/config.json` and `lepus --output T5/model.safetensors` replaced the
/// model's files.
#[test]
fn an_output_inside_a_model_directory_is_refused() {
    let (tmp, q) = question_file(2);
    let copy = |fixture: &str, name: &str| {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        for e in std::fs::read_dir(common::fixture(fixture)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
        }
        dir
    };
    let (bert, t5) = (copy("bert/random_plain", "bert"), copy("t5/v1_1", "t5"));
    let tokenizer = common::word_tokenizer(tmp.path());
    let corpus = tmp.path().join("corpus.parquet");
    mill_corpus(&corpus);
    let files = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        files_in(dir)
            .into_iter()
            .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap()))
            .collect()
    };
    let (bert0, t50) = (files(&bert), files(&t5));
    let mut embed = common::hopscore();
    embed
        .arg("embed")
        .arg("--model")
        .arg(&bert)
        .arg("--tokenizer")
        .arg(&tokenizer)
        .arg("--input")
        .arg(&corpus)
        .arg("--output")
        .arg(bert.join("model.safetensors"));
    let mut dense = common::hopscore();
    dense
        .args(["retrieve", "--retriever", "dense", "--questions"])
        .arg(&q)
        .arg("--corpus")
        .arg(&corpus)
        .arg("--output")
        .arg(bert.join("config.json"))
        .arg("--index")
        .arg(&corpus)
        .arg("--encoder")
        .arg(&bert)
        .arg("--tokenizer")
        .arg(&tokenizer);
    let mut lepus = common::hopscore();
    lepus
        .arg("lepus")
        .arg("--model")
        .arg(&t5)
        .arg("--input")
        .arg(&q)
        .arg("--output")
        .arg(t5.join("model.safetensors"));
    for (c, flag) in [
        (&mut embed, "--model"),
        (&mut dense, "--encoder"),
        (&mut lepus, "--model"),
    ] {
        let err = refused(c);
        assert!(err.contains(&format!("is inside the {flag}")), "{err}");
    }
    assert_eq!(files(&bert), bert0);
    assert_eq!(files(&t5), t50);
}

/// Issue 40: a damaged line of `committed.jsonl` was reported at "line 1" whatever
/// its place. The message names the line.
#[test]
fn a_damaged_commit_log_line_is_named_by_its_number() {
    let (tmp, q) = question_file(4);
    let out = tmp.path().join("o.parquet");
    let blocked = unwritable(tmp.path());
    let blocked = blocked.to_str().unwrap();
    // Parts of one row commit; the final quarantine cannot be written.
    let (code, _) = run(&mut bm25(
        &q,
        &out,
        &["--part-rows", "1", "--quarantine", blocked],
    ));
    assert_eq!(code, Some(1));
    let log = tmp.path().join("o.parquet.parts/committed.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 3, "{text}");
    lines[2] = "{\"first_row\": 2, oops}";
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let err = refused(&mut bm25(
        &q,
        &out,
        &["--part-rows", "1", "--resume", "--quarantine", blocked],
    ));
    assert!(
        err.contains("committed.jsonl is damaged at line 3"),
        "{err}"
    );
}

/// Issue 40: a damaged row group gave "cannot skip field type Map" (or the like)
/// without the file or the row group. Both are named, with the rows it holds.
#[test]
fn a_damaged_row_group_is_named_with_its_file_and_rows() {
    use parquet::file::reader::FileReader;
    let tmp = tempfile::tempdir().unwrap();
    let q = tmp.path().join("q.parquet");
    let mut w = QuestionWriter::create(&q, &[]).unwrap();
    for g in 0..3 {
        w.write(&questions(4, &format!("g{g}"))).unwrap(); // a row group each
    }
    w.finish().unwrap();
    let meta = parquet::file::serialized_reader::SerializedFileReader::new(
        std::fs::File::open(&q).unwrap(),
    )
    .unwrap()
    .metadata()
    .clone();
    let group = meta.row_group(1);
    let (start, len) = group.columns()[3].byte_range();
    let mut bytes = std::fs::read(&q).unwrap();
    for b in &mut bytes[start as usize..(start + len) as usize] {
        *b = 0xA5;
    }
    std::fs::write(&q, &bytes).unwrap();
    let err = refused(&mut bm25(&q, &tmp.path().join("o.parquet"), &[]));
    assert!(
        err.contains("q.parquet: row group 1 (rows 4..8) cannot be read"),
        "{err}"
    );
}

/// Issue 40: progress showed only on a terminal; with stderr in a file (a batch job,
/// nohup) nothing told how far a run was. A line with rate and ETA is logged.
#[test]
fn progress_lines_appear_when_stderr_is_a_file() {
    let (tmp, q) = question_file(5);
    let (code, err) =
        run(bm25(&q, &tmp.path().join("o.parquet"), &[]).env("HOPSCORE_PROGRESS_SECS", "0"));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("progress: 5/5 rows (100.0%)"), "{err}");
    assert!(err.contains("rows/s") && err.contains("ETA 0s"), "{err}");
}

/// Every count and wait has an upper bound, a flag that does nothing in the mode given
/// is named, and `--limit 0` and `review --shard` are refused: each a clear error before
/// any work (no panic, no allocation of what the count asks for, no retry), no output.
#[test]
fn bounds_and_flags_out_of_place_are_refused_before_any_work() {
    let (tmp, q) = question_file(2);
    let out = tmp.path().join("o.parquet");
    let refused = |c: &mut Command, needle: &str| {
        let (code, err) = run(c);
        assert!(matches!(code, Some(1 | 2)), "{needle}: {code:?} {err}");
        assert!(
            err.contains(needle) && !err.contains("panicked"),
            "{needle}: {err}"
        );
    };
    for (args, needle) in [
        (
            &["--max-active", "10000000"][..],
            "--max-active (max_active) must be at most 65536",
        ),
        (
            &["--temperature", "3"],
            "--temperature (temperature) does not apply with --scorer bm25",
        ),
        (
            &["--first-hops", "7"],
            "--first-hops (first_hops) does not apply",
        ),
        (&["--limit", "0"], "--limit"),
    ] {
        refused(&mut bm25(&q, &out, args), needle);
    }
    let url = "http://127.0.0.1:9";
    for (args, needle) in [
        (
            &["--concurrency", "10000000"][..],
            "--concurrency (concurrency) must be at most 1024",
        ),
        (&["--depth", "1000"], "--depth (depth) must be at most 16"),
        (
            &["--timeout", "1e30"],
            "--timeout (timeout) must be at most 86400",
        ),
        (
            &["--backoff", "1e20"],
            "--backoff (backoff) must be at most 86400",
        ),
        (
            &["--beam-size", "5"],
            "--beam-size (beam_size) does not apply with --strategy tor",
        ),
        (&["--shard", "0/2"], "review takes no --shard"),
    ] {
        refused(review(&q, &out, url).args(args), needle);
    }
    refused(&mut review(&q, &out, "http://[::1"), "not a valid URL");
    let eval = |k: &str, plot: bool| {
        let mut c = common::hopscore();
        c.args(["eval", "--gold"])
            .arg(&q)
            .arg("--pred")
            .arg(&q)
            .args(["--k", k]);
        if plot {
            c.arg("--plot").arg(tmp.path().join("r.svg"));
        }
        c
    };
    refused(
        &mut eval("9223372036854775807", false),
        "--k (k) must be at most 100000",
    );
    refused(&mut eval("20000", true), "--k (k) must be at most 1000 ");
    assert!(!out.exists() && !tmp.path().join("r.svg").exists());
    let tok = common::DEBERTA_V3_TOKENIZER.path();
    let label = |extra: &[&str]| {
        let mut c = common::hopscore();
        c.arg("label")
            .arg("--labeler")
            .arg(common::fixture("efficientrag/labeler"))
            .arg("--filter")
            .arg(common::fixture("efficientrag/filter"))
            .arg("--tokenizer")
            .arg(&tok)
            .arg("--input")
            .arg(&q)
            .arg("--output")
            .arg(&out)
            .args(extra);
        c
    };
    refused(
        &mut label(&["--query-prefix", "query: "]),
        "--query-prefix (query_prefix) does not apply with --retriever bm25",
    );
    assert!(!out.exists());

    // Past the cores a warning, past 4096 an error; a bad HOPSCORE_PROGRESS_SECS is named.
    let mut c = bm25(&q, &out, &[]);
    c.env("HOPSCORE_PROGRESS_SECS", "soon")
        .env_remove("HOPSCORE_THREADS");
    let with_threads = |n: &str| {
        let mut c = common::hopscore();
        c.env_remove("HOPSCORE_THREADS").args(["--threads", n]);
        c.args(["lepus", "--scorer", "bm25", "--input"])
            .arg(&q)
            .arg("--output")
            .arg(&out);
        run(&mut c)
    };
    let over = (std::thread::available_parallelism().unwrap().get() + 1).to_string();
    let (code, err) = with_threads(&over);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("--threads {over} is more than the")),
        "{err}"
    );
    std::fs::remove_file(&out).unwrap();
    let (code, err) = with_threads("5000");
    assert!(code == Some(1) && err.contains("at most 4096"), "{err}");
    let (code, err) = run(&mut c);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("HOPSCORE_PROGRESS_SECS=\"soon\""), "{err}");
}

/// A row scorer that records, at each call, how many parts of the run were committed.
struct CountingRows {
    log: PathBuf,
    calls: Arc<std::sync::Mutex<Vec<(usize, usize)>>>,
}

impl hopscore::jobs::rows::RowScorer for CountingRows {
    type Prepared = ();
    const COLUMNS: &'static [hopscore::jobs::rows::InputColumn] = &[("id", &["string"], true)];
    const BATCH_ROWS: usize = 4096;
    fn fields(&self) -> Vec<arrow_schema::Field> {
        vec![arrow_schema::Field::new(
            "x",
            arrow_schema::DataType::Float32,
            false,
        )]
    }
    fn metadata(&self) -> &[(String, String)] {
        &[]
    }
    fn prepare(&self, batch: &arrow_array::RecordBatch) -> anyhow::Result<Vec<Result<(), String>>> {
        Ok(vec![Ok(()); batch.num_rows()])
    }
    fn tokens(_: &()) -> usize {
        1
    }
    fn score(&mut self, rows: &[()]) -> anyhow::Result<Vec<arrow_array::ArrayRef>> {
        // The writer commits on its own thread: wait (a little) for the parts of the
        // groups already scored.
        let mut calls = self.calls.lock().unwrap();
        let committed = || std::fs::read_to_string(&self.log).map_or(0, |s| s.lines().count());
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while committed() < calls.len() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        calls.push((rows.len(), committed()));
        Ok(vec![Arc::new(arrow_array::Float32Array::from(
            vec![1.0; rows.len()],
        ))])
    }
}

/// Row jobs (classify, embed, loglik) score in groups no larger than `--part-rows`, so
/// a part commits as soon as its rows are scored, not once per 4,096-row group: a kill
/// loses at most what `--part-rows` says.
#[test]
fn row_jobs_commit_every_part_rows_not_every_group() {
    use hopscore::jobs::rows::RowJob;
    use hopscore::pipeline::files::run;
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("rows.parquet");
    let ids = arrow_array::StringArray::from_iter_values((0..6).map(|i| format!("r{i}")));
    let batch = arrow_array::RecordBatch::try_from_iter([("id", Arc::new(ids) as _)]).unwrap();
    common::write_parquet(&input, &batch);
    let out = tmp.path().join("o.parquet");
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut job = RowJob::new(CountingRows {
        log: tmp.path().join("o.parquet.parts/committed.jsonl"),
        calls: calls.clone(),
    });
    let opts = fresh_run(&input, &out, 2);
    let summary = run(&mut job, &opts).unwrap();
    assert_eq!(rows(&out), 6);
    // Groups of 2 rows; when the third is scored, the first two parts are committed.
    assert_eq!(*calls.lock().unwrap(), [(2, 0), (2, 1), (2, 2)]);
    assert!(
        summary.stats.forward > std::time::Duration::ZERO,
        "forward time is measured"
    );
}

/// `--resume` of a finished run with the same inputs and settings (a Slurm array
/// resubmitted after one shard failed) reports it done and rewrites nothing; with
/// other settings it runs.
#[test]
fn resume_of_a_finished_run_is_done_not_redone() {
    let (tmp, q) = question_file(3);
    let out = tmp.path().join("o.parquet");
    assert_eq!(run(&mut bm25(&q, &out, &[])).0, Some(0));
    let modified = || std::fs::metadata(&out).unwrap().modified().unwrap();
    let (before, bytes) = (modified(), std::fs::read(&out).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (code, err) = run(&mut bm25(&q, &out, &["--resume"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("already complete with these inputs and settings"),
        "{err}"
    );
    assert_eq!(modified(), before, "the output is not written again");
    let (code, err) = run(&mut bm25(&q, &out, &["--resume", "--limit", "2"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("already complete"), "{err}");
    assert_eq!(rows(&out), 2);
    assert_ne!(std::fs::read(&out).unwrap(), bytes);
}

/// A request the server refuses as it is (HTTP 400: a prompt past the model's context)
/// fails with what the server said and the likely cause, not a hint to check the
/// endpoint; an `--api-key-env` variable that is unset is said, not ignored.
#[test]
fn review_names_a_refused_request_and_a_missing_api_key() {
    let (tmp, q) = question_file(1);
    let out = tmp.path().join("o.parquet");
    let (url, _) = fake_llm(400);
    let (code, err) = run(review(&q, &out, &url)
        .env_remove("HOPSCORE_TEST_NO_KEY")
        .args(["--api-key-env", "HOPSCORE_TEST_NO_KEY"]));
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("HTTP 400") && err.contains("longer than the model's context"),
        "{err}"
    );
    assert!(
        err.contains("--api-key-env HOPSCORE_TEST_NO_KEY: HOPSCORE_TEST_NO_KEY is not set"),
        "{err}"
    );
}

/// A corpus holding one passage under two ids put both copies in a pool, each marked
/// gold (19 of 750 HotpotQA dev questions had 3–4 gold passages for 2): the copy ranked
/// lower is collapsed into the first, with a count.
#[test]
fn retrieve_collapses_a_passage_repeated_under_two_ids() {
    let (tmp, q) = question_file(2);
    let corpus = tmp.path().join("corpus.parquet");
    write_corpus(
        &corpus,
        &[
            ("p0", "Mill", "The red mill stands on the Avon river."),
            ("p0-copy", "Mill", "The red mill stands on the Avon river."),
            ("p1", "Avon", "The Avon is a river in England."),
            ("p2", "Other", "Nothing to see here."),
        ],
    );
    let out = tmp.path().join("out.parquet");
    let (code, err) = run(&mut retrieve(&q, &corpus, &out, &["--k", "3"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("2 hits repeated the title and text"), "{err}");
    for got in hopscore::io::questions::QuestionReader::open(&out, 16).unwrap() {
        let q = got.unwrap().unwrap();
        let titles: Vec<&str> = q.passages.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(titles, ["Mill", "Avon"], "{}", q.id);
    }
}

/// Two runs of one file name in two folders are told apart in `eval`'s table, and
/// beam's metadata spells `hops` as its flag takes it (`3`, not `Fixed(3)`).
#[test]
fn eval_names_runs_apart_and_beam_records_hops_as_given() {
    let (tmp, q) = question_file(2);
    for dir in ["a", "b"] {
        std::fs::create_dir(tmp.path().join(dir)).unwrap();
        std::fs::copy(&q, tmp.path().join(dir).join("ranked.parquet")).unwrap();
    }
    let out = common::hopscore()
        .args(["eval", "--gold"])
        .arg(&q)
        .arg("--pred")
        .arg(tmp.path().join("a/ranked.parquet"))
        .arg("--pred")
        .arg(tmp.path().join("b/ranked.parquet"))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = tmp.path().join("a/ranked").display().to_string();
    let b = tmp.path().join("b/ranked").display().to_string();
    assert!(table.contains(&a) && table.contains(&b), "{table}");

    let chains = tmp.path().join("chains.parquet");
    let (code, err) = run(common::hopscore()
        .args(["beam", "--model"])
        .arg(common::fixture("beam/model"))
        .arg("--tokenizer")
        .arg(common::DEBERTA_V3_TOKENIZER.path())
        .arg("--input")
        .arg(&q)
        .arg("--output")
        .arg(&chains)
        .args(["--hops", "2"]));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(common::key_values(&chains)["hopscore.hops"], "2");
}
