//! `hopscore review` against an OpenAI-compatible server started by the test on
//! 127.0.0.1, whose scripted replies depend on the prompt and on how often it was sent:
//! 429 with `Retry-After`, 500s, replies slower than the client's timeout, malformed
//! JSON bodies, garbage text and a 401. Every question ends answered or failed with a
//! reason, bad rows go to the quarantine file, and a second run with the server gone is
//! served entirely from the response cache.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use hopscore::io::questions::{Passage, Question, QuestionWriter};

/// What the server does with one request.
enum Act {
    Reply(&'static str),
    Status(u16, Option<&'static str>),
    /// A 200 whose body is not JSON.
    Malformed,
    /// Replies after this many milliseconds (the client gives up after 300).
    Slow(u64, &'static str),
}

/// The scripted model: `attempt` is how often this exact prompt was seen before.
fn script(prompt: &str, attempt: usize) -> Act {
    let review = prompt.contains("Work in three steps");
    if review && prompt.contains("[1] Echo:") {
        return match attempt {
            0 => Act::Status(429, Some("600")),
            _ => Act::Reply("Relevance: [RELEVANT]\nSupport: [SUPPORTED]\nAction: [ANSWER] bronze"),
        };
    }
    if prompt.contains("Assertion: bronze") {
        return Act::Reply("The answer is bronze.");
    }
    if prompt.contains("Which river flows through Bravo?") {
        return Act::Status(500, None);
    }
    if prompt.contains("Which lamp did Charlie sell?") {
        return Act::Status(401, None);
    }
    if review && prompt.contains("[2] Zed Zimmer:") {
        return match attempt {
            0 => Act::Slow(800, "too late"),
            _ => Act::Reply("Relevance: [RELEVANT]\nSupport: [SUPPORTED]\nAction: [ANSWER] Quebec"),
        };
    }
    if review && prompt.contains("[1] Alpha:") {
        return match attempt {
            0 => Act::Status(429, Some("1")),
            1 => Act::Status(500, None),
            _ => Act::Reply(
                "Relevance: [RELEVANT]\nSupport: [UNSUPPORTED]\nAction: [QUERY] zimmer birthplace",
            ),
        };
    }
    if review && prompt.contains("[1] Bravo:") {
        return match attempt {
            0 => Act::Malformed,
            _ => Act::Reply("¯\\_(ツ)_/¯ banana"),
        };
    }
    if review && prompt.contains("[1] Delta:") {
        return Act::Reply("Relevance: [RELEVANT]\nSupport: [SUPPORTED]\nAction: [ANSWER] green");
    }
    if prompt.contains("Assertion: Quebec") {
        return Act::Reply("Zed Zimmer founded Alpha.\nThe answer is Quebec.");
    }
    if prompt.contains("Assertion: green") {
        return Act::Reply("The answer is green.");
    }
    // ALLIES on the Delta question.
    if prompt.contains("sub-questions") {
        return Act::Reply("1. What is Delta?");
    }
    if prompt.contains("Candidate answer: green") {
        return Act::Reply("0.9");
    }
    if prompt.contains("The answer is") {
        return Act::Reply("green");
    }
    Act::Reply("unexpected prompt")
}

/// A minimal HTTP/1.1 server (one thread per connection, `Connection: close`).
struct Server {
    port: u16,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let (count, halt) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if halt.load(Ordering::SeqCst) {
                    break; // drop the listener: later connections are refused
                }
                let (stream, count, seen) = (stream.unwrap(), count.clone(), seen.clone());
                std::thread::spawn(move || handle(stream, &count, &seen));
            }
        });
        Self {
            port,
            requests,
            stop,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops accepting connections.
    fn shut_down(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accept loop
    }
}

fn handle(stream: TcpStream, count: &AtomicUsize, seen: &Mutex<HashMap<String, usize>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(request["model"], "scripted");
    let prompt = request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    count.fetch_add(1, Ordering::SeqCst);
    let attempt = {
        let mut seen = seen.lock().unwrap();
        let n = seen.entry(prompt.clone()).or_default();
        *n += 1;
        *n - 1
    };
    let completion = |text: &str| {
        serde_json::json!({
            "choices": [{"message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt.len() / 4, "completion_tokens": text.len() / 4}
        })
        .to_string()
    };
    let (status, extra, body) = match script(&prompt, attempt) {
        Act::Reply(text) => (200, String::new(), completion(text)),
        Act::Status(code, retry_after) => (
            code,
            retry_after.map_or(String::new(), |s| format!("Retry-After: {s}\r\n")),
            "{\"error\": \"scripted\"}".to_string(),
        ),
        Act::Malformed => (200, String::new(), "{\"choices\": [".to_string()),
        Act::Slow(ms, text) => {
            std::thread::sleep(Duration::from_millis(ms));
            (200, String::new(), completion(text))
        }
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n{extra}\r\n{body}",
        body.len()
    );
}

fn question(id: &str, text: &str, passages: &[(&str, &str)]) -> Question {
    Question {
        passages: passages
            .iter()
            .map(|(t, x)| Passage {
                title: t.to_string(),
                text: x.to_string(),
                sentences: None,
            })
            .collect(),
        hops: Some(2),
        ..common::bare_question(id, text)
    }
}

/// Hand-written questions (no dataset text): four usable, one without passages.
fn write_questions(path: &Path, only_delta: bool) {
    let delta = question(
        "q4",
        "What colour is Delta?",
        &[("Delta", "Delta is a green parrot.")],
    );
    let all = vec![
        question(
            "q1",
            "Where was the founder of Alpha born?",
            &[
                ("Alpha", "Alpha is a rock band founded by Zed Zimmer."),
                ("Bravo", "Bravo is a river town with a harbour."),
                ("Zed Zimmer", "Zed Zimmer was born in Quebec."),
            ],
        ),
        question(
            "q2",
            "Which river flows through Bravo?",
            &[("Bravo", "Bravo is a river town with a harbour.")],
        ),
        question(
            "q3",
            "Which lamp did Charlie sell?",
            &[("Charlie", "Charlie sells lamps.")],
        ),
        delta.clone(),
        question("q5", "Is this row usable?", &[]),
    ];
    let mut w = QuestionWriter::create(path, &[]).unwrap();
    w.write(if only_delta {
        std::slice::from_ref(&delta)
    } else {
        &all
    })
    .unwrap();
    w.finish().unwrap();
}

fn write_chains(path: &Path) {
    use arrow_array::builder::{Int32Builder, ListBuilder};
    use arrow_array::{ArrayRef, StringArray};
    let mut chains = ListBuilder::new(Int32Builder::new());
    chains.values().append_slice(&[0, 1]);
    chains.append(true);
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            std::sync::Arc::new(StringArray::from(vec!["q1"])) as ArrayRef,
        ),
        ("chain", std::sync::Arc::new(chains.finish()) as ArrayRef),
    ])
    .unwrap();
    let mut w = hopscore::io::parquet_io::create_writer(path, batch.schema(), &[]).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// The arguments of the tests' `hopscore review` (short timeouts and waits).
fn review_line(server: &Server, input: &Path, output: &Path, extra: &[&str]) -> Vec<String> {
    let mut line: Vec<String> = ["review", "--llm-model", "scripted", "--endpoint"]
        .map(String::from)
        .to_vec();
    line.push(server.url());
    for (flag, path) in [("--input", input), ("--output", output)] {
        line.extend([flag.to_string(), path.to_str().unwrap().to_string()]);
    }
    let waits = [
        "--timeout",
        "0.3",
        "--max-retries",
        "2",
        "--backoff",
        "0.01",
    ];
    line.extend(waits.map(String::from));
    line.extend(["--backoff-max", "0.05", "--concurrency", "3"].map(String::from));
    line.extend(extra.iter().map(|s| s.to_string()));
    line
}

fn review_command(server: &Server, input: &Path, output: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hopscore"));
    c.args(review_line(server, input, output, extra))
        .env_remove("OPENAI_API_KEY");
    c
}

fn review(server: &Server, input: &Path, output: &Path, extra: &[&str]) -> std::process::Output {
    let out = review_command(server, input, output, extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn strings(b: &RecordBatch, col: &str) -> Vec<Option<String>> {
    let c = b.column_by_name(col).unwrap().as_string::<i32>();
    (0..c.len())
        .map(|i| (!c.is_null(i)).then(|| c.value(i).to_string()))
        .collect()
}

fn u32s(b: &RecordBatch, col: &str) -> Vec<u32> {
    let c = b.column_by_name(col).unwrap().as_primitive::<UInt32Type>();
    c.values().to_vec()
}

fn u64s(b: &RecordBatch, col: &str) -> Vec<u64> {
    let c = b.column_by_name(col).unwrap().as_primitive::<UInt64Type>();
    c.values().to_vec()
}

#[test]
fn tor_survives_faults_and_a_rerun_is_served_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (input, chains) = (dir.path().join("q.parquet"), dir.path().join("c.parquet"));
    write_questions(&input, false);
    write_chains(&chains);
    let server = Server::start();
    let output = dir.path().join("tor.parquet");
    let flags = [
        "--strategy",
        "tor",
        "--depth",
        "2",
        "--widths",
        "2,1",
        "--expansion",
        "cot",
    ];
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["--chains", chains.to_str().unwrap()]);
    review(&server, &input, &output, &args);

    let b = common::read_parquet(&output);
    assert_eq!(
        strings(&b, "id"),
        ["q1", "q2", "q3", "q4"].map(|s| Some(s.into()))
    );
    assert_eq!(
        strings(&b, "answer"),
        [Some("Quebec".into()), None, None, Some("green".into())]
    );
    assert_eq!(
        strings(&b, "status"),
        ["answered", "failed", "failed", "answered"].map(|s| Some(s.into()))
    );
    let failure = strings(&b, "failure");
    assert_eq!((&failure[0], &failure[3]), (&None, &None));
    let f1 = failure[1].as_deref().unwrap();
    assert!(
        f1.contains("gave up after 3 attempts") && f1.contains("HTTP 500"),
        "{f1}"
    );
    let f2 = failure[2].as_deref().unwrap();
    assert!(f2.contains("HTTP 401"), "{f2}");
    // q1: Alpha (429 → 500 → reply: 2 retries), Zed Zimmer (timeout → reply: 1), Bravo
    // (malformed body → garbage text: 1 retry, 1 parse failure), fusion. q2: three 500s.
    assert_eq!(u32s(&b, "llm_calls"), [4, 1, 1, 2]);
    assert_eq!(u32s(&b, "retries"), [4, 2, 0, 0]);
    assert_eq!(u32s(&b, "parse_failures"), [1, 0, 0, 0]);
    assert_eq!(u32s(&b, "cached_calls"), [0, 0, 0, 0]);
    let notes = b
        .column_by_name("parse_failure_notes")
        .unwrap()
        .as_list::<i32>();
    assert_eq!(
        notes.value(0).as_string::<i32>().value(0),
        "tor.review: no relevance, support or action tag"
    );
    let chain = b.column_by_name("chain").unwrap().as_list::<i32>();
    assert_eq!(chain.value(0).as_primitive::<Int32Type>().values(), &[0, 2]);
    let trace: serde_json::Value =
        serde_json::from_str(strings(&b, "trace")[0].as_deref().unwrap()).unwrap();
    assert_eq!(trace["initial"], "chain");
    let verdicts: Vec<&str> = trace["search"]["tree"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["expanded", "unparsed"]);
    // 3 + 2 + 2 + 1 requests for q1, 3 for q2, 1 for q3, 2 for q4.
    assert_eq!(server.requests.load(Ordering::SeqCst), 14);
    let quarantine = common::read_parquet(&dir.path().join("tor.quarantine.parquet"));
    assert_eq!(strings(&quarantine, "id"), [Some("q5".into())]);
    assert!(strings(&quarantine, "reason")[0]
        .as_deref()
        .unwrap()
        .contains("no passages"));

    // The rerun reaches no server: answered questions come from the cache, the others
    // fail again (connection refused) with the same bookkeeping.
    server.shut_down();
    let again = dir.path().join("again.parquet");
    let cache = dir.path().join("tor.llm-cache");
    let mut args2 = args.clone();
    args2.extend(["--cache", cache.to_str().unwrap()]);
    review(&server, &input, &again, &args2);
    assert_eq!(server.requests.load(Ordering::SeqCst), 14);
    let b2 = common::read_parquet(&again);
    assert_eq!(u32s(&b2, "cached_calls")[0], 4);
    assert_eq!(u32s(&b2, "cached_calls")[3], 2);
    assert_eq!(u32s(&b2, "llm_calls"), [4, 1, 1, 2]);
    assert_eq!(u32s(&b2, "retries")[0], 0);
    for col in ["answer", "trace", "evidence_titles"] {
        let (a, b) = (
            b.column_by_name(col).unwrap(),
            b2.column_by_name(col).unwrap(),
        );
        assert_eq!(&a.slice(0, 1), &b.slice(0, 1), "{col}");
        assert_eq!(&a.slice(3, 1), &b.slice(3, 1), "{col}");
    }
    assert_eq!(u64s(&b2, "prompt_tokens")[0], u64s(&b, "prompt_tokens")[0]);
    assert!(strings(&b2, "failure")[1]
        .as_deref()
        .unwrap()
        .contains("request failed"));
}

#[test]
fn allies_runs_through_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("q.parquet");
    write_questions(&input, true);
    let server = Server::start();
    let output = dir.path().join("allies.parquet");
    let out = review(
        &server,
        &input,
        &output,
        &["--strategy", "allies", "--no-cache", "--top-n", "1"],
    );
    let b = common::read_parquet(&output);
    assert_eq!(strings(&b, "answer"), [Some("green".into())]);
    // Direct answer + score, grounded answer + score, 2 asks, 2 × (answer + score); the
    // first round's best scores 0.9 ≥ 0.8.
    assert_eq!(u32s(&b, "llm_calls"), [10]);
    assert_eq!(server.requests.load(Ordering::SeqCst), 10);
    let trace: serde_json::Value =
        serde_json::from_str(strings(&b, "trace")[0].as_deref().unwrap()).unwrap();
    assert_eq!(trace["search"]["exit"], "threshold");
    assert!(!dir.path().join("allies.llm-cache").exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 answered, 0 failed"), "{stderr}");
}

#[test]
fn a_review_stopped_by_ctrl_c_resumes_with_the_questions_left() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("q.parquet");
    let delta = |id: &str, text: &str| question(id, text, &[("Delta", "Delta is a green parrot.")]);
    let mut w = QuestionWriter::create(&input, &[]).unwrap();
    w.write(&[
        delta("d1", "What colour is Delta?"),
        question(
            "e1",
            "Which bell rings at Echo?",
            &[("Echo", "Echo is a bronze bell.")],
        ),
        delta("d2", "Which colour has Delta?"),
    ])
    .unwrap();
    w.finish().unwrap();
    let server = Server::start();
    let output = dir.path().join("r.parquet");
    let flags = [
        "--strategy",
        "tor",
        "--depth",
        "1",
        "--widths",
        "1",
        "--expansion",
        "cot",
    ];
    let mut args = flags.to_vec();
    args.extend(["--part-rows", "1"]);
    // d1 and d2 take two calls each; e1's first call gets a 429 with `Retry-After: 600`.
    let mut child = review_command(&server, &input, &output, &args)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..1500 {
        if server.requests.load(Ordering::SeqCst) >= 5 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        5,
        "no retry after Ctrl-C"
    );
    // The rows finished so far are in the output; the parts stay for --resume.
    assert_eq!(
        strings(&common::read_parquet(&output), "id"),
        [Some("d1".into()), Some("d2".into())]
    );
    assert!(dir.path().join("r.parquet.parts/manifest.json").is_file());

    args.push("--resume");
    let out = review(&server, &input, &output, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("resuming: 2 rows already committed"),
        "{stderr}"
    );
    let b = common::read_parquet(&output);
    assert_eq!(
        strings(&b, "id"),
        ["d1", "e1", "d2"].map(|s| Some(s.into()))
    );
    assert_eq!(
        strings(&b, "answer"),
        ["green", "bronze", "green"].map(|s| Some(s.into()))
    );
    // Only e1 is asked again: its review (the 429 was not cached) and its answer.
    assert_eq!(u32s(&b, "llm_calls"), [2, 2, 2]);
    assert_eq!(server.requests.load(Ordering::SeqCst), 5 + 2);
    assert!(!dir.path().join("r.parquet.parts").exists());
}

#[test]
fn review_job_batches_equal_the_cli_file() {
    use hopscore::jobs::{build, DeviceConfig, Stream};
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("q.parquet");
    write_questions(&input, false);
    let output = dir.path().join("tor.parquet");
    let flags = [
        "--strategy",
        "tor",
        "--depth",
        "2",
        "--widths",
        "2,1",
        "--no-cache",
    ];
    let first = Server::start();
    review(&first, &input, &output, &flags);

    // The same questions through the library, in batches of 2, against a fresh server.
    let server = Server::start();
    let mut line = vec!["hopscore".to_string()];
    line.extend(review_line(&server, &input, &output, &flags));
    let cli = <hopscore::cli::Cli as clap::Parser>::parse_from(line);
    let hopscore::cli::Command::Job(job) = cli.command else {
        unreachable!("a review command line")
    };
    let (config, _) = job.into_config();
    let mut job = Stream::new(build(config, &DeviceConfig::CPU).unwrap());
    let questions = common::read_parquet(&input);
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for at in (0..questions.num_rows()).step_by(2) {
        let n = 2.min(questions.num_rows() - at);
        let out = job.process(&questions.slice(at, n)).unwrap();
        good.push(out.rows);
        bad.push(out.quarantine);
    }
    let concat =
        |v: &[RecordBatch]| arrow_select::concat::concat_batches(&v[0].schema(), v).unwrap();
    let (good, file) = (concat(&good), common::read_parquet(&output));
    for (i, field) in file.schema().fields().iter().enumerate() {
        if field.name() != "failure" {
            assert_eq!(good.column(i), file.column(i), "{}", field.name());
        }
    }
    // The failures name the endpoint, whose port differs.
    let unported = |b: &RecordBatch, url: &str| -> Vec<Option<String>> {
        let f = strings(b, "failure");
        f.into_iter()
            .map(|x| x.map(|x| x.replace(url, "URL")))
            .collect()
    };
    assert_eq!(
        unported(&good, &server.url()),
        unported(&file, &first.url())
    );
    let quarantine = common::read_parquet(&dir.path().join("tor.quarantine.parquet"));
    assert_eq!(concat(&bad).columns(), quarantine.columns());
    assert_eq!(strings(&quarantine, "id"), [Some("q5".into())]);
    assert_eq!(
        quarantine.column(0).as_primitive::<UInt64Type>().values(),
        &[4]
    );
}
