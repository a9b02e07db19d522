//! Models by their Hugging Face Hub id (`--model org/name[@rev][:file]`) against a
//! local stand-in of the hub on 127.0.0.1 (`HF_ENDPOINT`), which answers the routes
//! the hub client uses (`/api/models/{repo}/revision/{rev}`, `/{repo}/resolve/{rev}/
//! {file}` with ranges) from the test fixtures: the download lands in the hub cache in
//! `huggingface_hub`'s layout and is fetched once; later runs take the cache (also
//! with `HF_HUB_OFFLINE=1` and with the hub gone); the run records the repository and
//! the commit, so a moved revision is not merged into a run; revisions pin; gated
//! repositories need `HF_TOKEN`; a missing file or a `.bin`-only repository is named;
//! an interrupted or stalled download resumes; and the stand-in misbehaves as an
//! untrusted server may (hostile `ETag`s, commit ids and shard names, damaged bytes,
//! redirects to another host, two clients at once): nothing it sends reaches outside
//! the cache, an unchecked file never enters the snapshot, the token never leaves the
//! endpoint's host and no secret is printed.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{FixedSizeListArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use sha2::{Digest, Sha256};

/// One commit of a repository: its files by name.
#[derive(Clone, Default)]
struct Commit {
    sha: String,
    files: Vec<(String, Vec<u8>)>,
}

#[derive(Clone, Default)]
struct Repo {
    /// Branch or tag → commit sha.
    refs: HashMap<String, String>,
    commits: Vec<Commit>,
    /// A gated repository answers 401 unless this token is sent.
    token: Option<String>,
}

#[derive(Default)]
struct State {
    repos: HashMap<String, Repo>,
    /// Request lines served, in order.
    log: Vec<String>,
    /// The paths of the requests that carried an `Authorization` header.
    authorized: Vec<String>,
    faults: Faults,
}

/// How the stand-in misbehaves.
#[derive(Default)]
struct Faults {
    /// A file whose next full download is cut off halfway.
    cut_once: Option<String>,
    /// A file whose next full download sends half, then stalls (for a minute).
    stall_once: Option<String>,
    /// A file sent in 12 pieces with this pause after each.
    slow: Option<(String, std::time::Duration)>,
    /// A file served with one byte changed (its size as listed).
    damaged: Option<String>,
    /// The `ETag` of every file, instead of its hash.
    etag: Option<String>,
    /// The listing's commit id, instead of the commit's.
    listing_sha: Option<String>,
    /// File → the `Location` its download redirects to (`{sha}` is replaced).
    redirects: HashMap<String, String>,
}

/// The stand-in hub: a thread answering one connection at a time.
struct Hub {
    endpoint: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
}

impl Hub {
    fn start() -> Hub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(conn) = conn {
                    let s = s.clone();
                    std::thread::spawn(move || serve(conn, &s));
                }
            }
        });
        Hub {
            endpoint: format!("http://{addr}"),
            state,
            stop,
            addr,
        }
    }

    /// Closes the listener: the hub is unreachable from now on.
    fn shut_down(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    fn add(&self, repo: &str, branch: &str, sha: &str, files: Vec<(String, Vec<u8>)>) {
        let mut state = self.state.lock().unwrap();
        let r = state.repos.entry(repo.to_string()).or_default();
        r.refs.insert(branch.to_string(), sha.to_string());
        r.commits.push(Commit {
            sha: sha.to_string(),
            files,
        });
    }

    fn gate(&self, repo: &str, token: &str) {
        self.state
            .lock()
            .unwrap()
            .repos
            .get_mut(repo)
            .unwrap()
            .token = Some(token.into());
    }

    /// File downloads served so far (ranged GETs of `/resolve/`, the 1-byte probes left
    /// out).
    fn downloads(&self) -> Vec<String> {
        let state = self.state.lock().unwrap();
        state
            .log
            .iter()
            .filter(|l| l.contains("/resolve/") && !l.ends_with("bytes=0-0"))
            .cloned()
            .collect()
    }

    fn requests(&self) -> usize {
        self.state.lock().unwrap().log.len()
    }
}

fn respond(conn: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head += &format!("{k}: {v}\r\n");
    }
    head += &format!("Content-Length: {}\r\n\r\n", body.len());
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(body);
}

/// The git blob id of `bytes` (the listing's `blobId`).
fn git_blob_id(bytes: &[u8]) -> String {
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn serve(mut conn: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").cloned();
    let mut st = state.lock().unwrap();
    st.log.push(format!(
        "{path} {}",
        range.clone().unwrap_or_default().replace(' ', "")
    ));
    if headers.contains_key("authorization") {
        st.authorized.push(path.clone());
    }
    let (path, _query) = path.split_once('?').unwrap_or((&path, ""));
    let (repo_id, route): (String, Vec<&str>) =
        if let Some(rest) = path.strip_prefix("/api/models/") {
            let parts: Vec<&str> = rest.splitn(4, '/').collect();
            (
                parts[..2.min(parts.len())].join("/"),
                parts.iter().skip(2).copied().collect(),
            )
        } else {
            let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
            (
                parts[..2.min(parts.len())].join("/"),
                parts.iter().skip(2).copied().collect(),
            )
        };
    let Some(repo) = st.repos.get(&repo_id).cloned() else {
        respond(
            &mut conn,
            "404 Not Found",
            &[],
            b"{\"error\":\"Repository not found\"}",
        );
        return Ok(());
    };
    let bearer = headers.get("authorization").cloned();
    if let Some(token) = &repo.token {
        if bearer.as_deref() != Some(&format!("Bearer {token}")) {
            respond(&mut conn, "401 Unauthorized", &[], b"{\"error\":\"gated\"}");
            return Ok(());
        }
    }
    let rev = route.get(1).copied().unwrap_or("main").replace("%2F", "/");
    let sha = repo.refs.get(&rev).cloned().unwrap_or(rev);
    let Some(commit) = repo.commits.iter().find(|c| c.sha == sha) else {
        respond(
            &mut conn,
            "404 Not Found",
            &[],
            b"{\"error\":\"Revision not found\"}",
        );
        return Ok(());
    };
    match route.first().copied() {
        Some("revision") => {
            let siblings: Vec<serde_json::Value> = commit
                .files
                .iter()
                .map(|(name, bytes)| {
                    let mut s = serde_json::json!({
                        "rfilename": name, "size": bytes.len(), "blobId": git_blob_id(bytes)
                    });
                    if name.ends_with(".safetensors") {
                        s["lfs"] =
                            serde_json::json!({"sha256": sha256(bytes), "size": bytes.len()});
                    }
                    s
                })
                .collect();
            let sha = st.faults.listing_sha.clone().unwrap_or(commit.sha.clone());
            let body = serde_json::json!({"id": repo_id, "sha": sha, "siblings": siblings});
            respond(
                &mut conn,
                "200 OK",
                &[("Content-Type", "application/json".into())],
                body.to_string().as_bytes(),
            );
        }
        Some("resolve") => {
            let file = route.get(2).copied().unwrap_or("");
            // `cached/<file>`: where a redirect on the same host leads.
            let (file, redirected) = match file.strip_prefix("cached/") {
                Some(f) => (f, true),
                None => (file, false),
            };
            if let Some(location) = st.faults.redirects.get(file).filter(|_| !redirected) {
                let location = location.replace("{sha}", &commit.sha);
                respond(&mut conn, "302 Found", &[("Location", location)], b"");
                return Ok(());
            }
            let Some((_, bytes)) = commit.files.iter().find(|(n, _)| n == file) else {
                respond(
                    &mut conn,
                    "404 Not Found",
                    &[("X-Error-Code", "EntryNotFound".into())],
                    b"",
                );
                return Ok(());
            };
            let start: usize = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.split('-').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let end = match range.as_deref() {
                Some("bytes=0-0") => 1,
                _ => bytes.len(),
            };
            let mut bytes = bytes.clone();
            if st.faults.damaged.as_deref() == Some(file) {
                bytes[end / 2] ^= 1;
            }
            let etag = st.faults.etag.clone().unwrap_or(sha256(&bytes));
            let common_headers = vec![
                ("ETag", format!("\"{etag}\"")),
                ("X-Repo-Commit", commit.sha.clone()),
                (
                    "Content-Range",
                    format!("bytes {start}-{}/{}", end.max(1) - 1, bytes.len()),
                ),
            ];
            let whole = start == 0 && end > 1;
            let once = |fault: &mut Option<String>| {
                let hit = whole && fault.as_deref() == Some(file);
                if hit {
                    *fault = None;
                }
                hit
            };
            let (cut, stall) = (
                once(&mut st.faults.cut_once),
                once(&mut st.faults.stall_once),
            );
            let pause = st
                .faults
                .slow
                .as_ref()
                .filter(|(f, _)| f == file)
                .map(|(_, pause)| *pause);
            drop(st);
            if cut || stall || pause.is_some() {
                // Promise the whole body, then send half and hang up (or stall), or
                // send it slowly.
                let mut head = "HTTP/1.1 206 Partial Content\r\nConnection: close\r\n".to_string();
                for (k, v) in &common_headers {
                    head += &format!("{k}: {v}\r\n");
                }
                head += &format!("Content-Length: {}\r\n\r\n", end - start);
                conn.write_all(head.as_bytes())?;
                if let Some(pause) = pause {
                    for piece in bytes[start..end].chunks((end - start).div_ceil(12)) {
                        conn.write_all(piece)?;
                        conn.flush()?;
                        std::thread::sleep(pause);
                    }
                    return Ok(());
                }
                conn.write_all(&bytes[..bytes.len() / 2])?;
                conn.flush()?;
                if stall {
                    std::thread::sleep(std::time::Duration::from_secs(60));
                }
                return conn.shutdown(std::net::Shutdown::Both);
            }
            respond(
                &mut conn,
                "206 Partial Content",
                &common_headers,
                &bytes[start..end],
            );
        }
        _ => respond(&mut conn, "404 Not Found", &[], b""),
    }
    Ok(())
}

/// The files of a local model directory (and its `N_Name/` module directories), as a
/// repository holds them; `extra` adds files that the loader must not fetch.
fn repo_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            for inner in std::fs::read_dir(&p).unwrap() {
                let q = inner.unwrap().path();
                let inner_name = q.file_name().unwrap().to_string_lossy().to_string();
                files.push((format!("{name}/{inner_name}"), std::fs::read(&q).unwrap()));
            }
        } else {
            files.push((name, std::fs::read(&p).unwrap()));
        }
    }
    files.sort();
    files
}

/// The random BERT of the fixtures with a word tokenizer and a README (never fetched).
fn tiny_bert(dir: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::create_dir_all(dir).unwrap();
    let src = common::fixture("bert/random_plain");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    common::word_tokenizer(dir);
    let mut files = repo_files(dir);
    files.push(("README.md".into(), b"# a tiny BERT".to_vec()));
    files
}

fn write_passages(path: &Path, texts: &[(&str, String)]) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("text", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(texts.iter().map(|t| t.0))),
            Arc::new(StringArray::from_iter_values(
                texts.iter().map(|t| t.1.clone()),
            )),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn word_passages(path: &Path) {
    let texts: Vec<(&str, String)> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, format!("w{} w{} w{}", 5 + i, 40 + 3 * i, 900 - i)))
        .collect();
    write_passages(path, &texts);
}

/// A stand-in hub serving the tiny BERT ([`tiny_bert`]) as `repo` at [`SHA1`], an
/// empty hub cache (`home`) and a passage file in its words (`input`).
struct TinyCase {
    hub: Hub,
    tmp: tempfile::TempDir,
    files: Vec<(String, Vec<u8>)>,
    home: std::path::PathBuf,
    input: std::path::PathBuf,
}

fn tiny_case(repo: &str) -> TinyCase {
    let hub = Hub::start();
    let tmp = tempfile::tempdir().unwrap();
    let files = tiny_bert(&tmp.path().join("m"));
    hub.add(repo, "main", SHA1, files.clone());
    let (home, input) = (tmp.path().join("hf"), tmp.path().join("p.parquet"));
    word_passages(&input);
    TinyCase {
        hub,
        tmp,
        files,
        home,
        input,
    }
}

fn vectors(path: &Path) -> Vec<Vec<f32>> {
    let batch = common::read_parquet(path);
    let list: &FixedSizeListArray = batch
        .column_by_name("embedding")
        .unwrap()
        .as_fixed_size_list();
    let dim = list.value_length() as usize;
    list.values()
        .as_primitive::<Float32Type>()
        .values()
        .chunks(dim)
        .map(<[f32]>::to_vec)
        .collect()
}

/// `hopscore embed` against `hub`, with the hub cache under `home`, `env` set and
/// `args` after the input and output.
fn embed_with(
    hub: &Hub,
    home: &Path,
    (input, output): (&Path, &Path),
    env: &[(&str, &str)],
    args: &[&str],
) -> std::process::Output {
    let mut c = against(hub, home);
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(["embed", "--input"])
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(args)
        .output()
        .unwrap()
}

/// `hopscore` against `hub`, with the hub cache under `home` and no token.
fn against(hub: &Hub, home: &Path) -> std::process::Command {
    let mut c = common::hopscore();
    c.env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_HUB_CACHE")
        .env("HF_HOME", home)
        .env("HF_ENDPOINT", &hub.endpoint);
    c
}

/// `hopscore embed --model <model>` ([`embed_with`]).
fn embed(
    hub: &Hub,
    home: &Path,
    model: &str,
    input: &Path,
    output: &Path,
    env: &[(&str, &str)],
) -> std::process::Output {
    embed_with(hub, home, (input, output), env, &["--model", model])
}

fn ok(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    err
}

fn failed(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "expected a failure: {err}");
    err
}

const SHA1: &str = "1111111111111111111111111111111111111111";
const SHA2: &str = "2222222222222222222222222222222222222222";

/// The real all-MiniLM-L6-v2 served as `sentence-transformers/all-MiniLM-L6-v2`: the
/// loader's files are fetched once into the cache layout of `huggingface_hub`, the
/// vectors are the local directory's bit for bit (and sentence-transformers' within
/// 1e-5), the run records repository and commit; later runs download nothing, run
/// with `HF_HUB_OFFLINE=1`, and run after the hub is gone.
#[test]
fn a_hub_id_downloads_once_and_then_runs_from_the_cache() {
    let Some(weights) = common::MINILM.require() else {
        return;
    };
    let local = weights.parent().unwrap();
    let hub = Hub::start();
    let repo = "sentence-transformers/all-MiniLM-L6-v2";
    let mut files = repo_files(local);
    files.push(("pytorch_model.bin".into(), vec![0u8; 1000]));
    files.push(("onnx/model.onnx".into(), vec![0u8; 1000]));
    hub.add(repo, "main", SHA1, files);
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("hf");
    let input = tmp.path().join("passages.parquet");
    let texts: Vec<(String, String)> = common::minilm_golden_texts()
        .into_iter()
        .enumerate()
        .map(|(i, (title, text))| {
            (
                format!("t{i}"),
                title.map_or(text.clone(), |t| format!("{t}. {text}")),
            )
        })
        .collect();
    let rows: Vec<(&str, String)> = texts
        .iter()
        .map(|(id, t)| (id.as_str(), t.clone()))
        .collect();
    write_passages(&input, &rows);

    let by_path = tmp.path().join("by_path.parquet");
    ok(&embed(
        &hub,
        &home,
        local.to_str().unwrap(),
        &input,
        &by_path,
        &[],
    ));
    assert_eq!(hub.requests(), 0, "a local path never asks the hub");

    let first = tmp.path().join("first.parquet");
    ok(&embed(&hub, &home, repo, &input, &first, &[]));
    let mut fetched: Vec<String> = hub
        .downloads()
        .iter()
        .map(|l| {
            l.split("/resolve/")
                .nth(1)
                .unwrap()
                .split_once('/')
                .unwrap()
                .1
                .split(' ')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    fetched.sort();
    assert_eq!(
        fetched,
        [
            "1_Pooling/config.json",
            "config.json",
            "model.safetensors",
            "modules.json",
            "sentence_bert_config.json",
            "special_tokens_map.json",
            "tokenizer.json",
            "tokenizer_config.json",
        ],
        "the loader's files, each once (no .bin, onnx/ or vocab.txt)"
    );
    assert_eq!(
        vectors(&first),
        vectors(&by_path),
        "the same vectors as the local directory"
    );
    let meta = common::key_values(&first);
    assert_eq!(meta["hopscore.model_repo"], repo);
    assert_eq!(meta["hopscore.model_commit"], SHA1);
    assert_eq!(
        common::key_values(&by_path)["hopscore.model_sha256"],
        meta["hopscore.model_sha256"]
    );
    let snapshot = home.join("hub/models--sentence-transformers--all-MiniLM-L6-v2");
    assert_eq!(
        std::fs::read_to_string(snapshot.join("refs/main")).unwrap(),
        SHA1
    );
    assert!(snapshot
        .join("snapshots")
        .join(SHA1)
        .join("1_Pooling/config.json")
        .is_file());

    let before = hub.downloads().len();
    let second = tmp.path().join("second.parquet");
    ok(&embed(&hub, &home, repo, &input, &second, &[]));
    assert_eq!(
        hub.downloads().len(),
        before,
        "a cached model is not downloaded again"
    );

    let offline = tmp.path().join("offline.parquet");
    let requests = hub.requests();
    ok(&embed(
        &hub,
        &home,
        repo,
        &input,
        &offline,
        &[("HF_HUB_OFFLINE", "1")],
    ));
    assert_eq!(
        hub.requests(),
        requests,
        "HF_HUB_OFFLINE=1 never asks the hub"
    );
    assert_eq!(vectors(&offline), vectors(&by_path));

    hub.shut_down();
    let gone = tmp.path().join("gone.parquet");
    let err = ok(&embed(&hub, &home, repo, &input, &gone, &[]));
    assert!(
        err.contains("cannot reach the hub") && err.contains("using the cached"),
        "{err}"
    );
    assert_eq!(vectors(&gone), vectors(&by_path));
}

/// `@revision` pins a commit; a branch that moved gives another commit in the
/// metadata, and `merge` refuses to join shards of the two.
#[test]
fn revisions_pin_and_a_moved_revision_is_not_merged() {
    let TinyCase {
        hub,
        tmp,
        files,
        home,
        input,
    } = tiny_case("org/tiny-bert");
    let shard = |name: &str, model: &str, s: &str| {
        let out = tmp.path().join(name);
        let args = ["--model", model, "--shard", s];
        ok(&embed_with(&hub, &home, (&input, &out), &[], &args));
        out
    };
    let s0 = shard("s0.parquet", "org/tiny-bert", "0/2");
    // The branch moves to a commit with the same weights and another README.
    let mut moved = files.clone();
    moved.retain(|(n, _)| n != "README.md");
    moved.push(("README.md".into(), b"# moved".to_vec()));
    hub.add("org/tiny-bert", "main", SHA2, moved);
    let s1 = shard("s1.parquet", "org/tiny-bert", "1/2");
    assert_eq!(common::key_values(&s0)["hopscore.model_commit"], SHA1);
    assert_eq!(common::key_values(&s1)["hopscore.model_commit"], SHA2);
    let merge = |a: &Path, b: &Path| {
        let merged = tmp.path().join("merged.parquet");
        let mut c = common::hopscore();
        c.arg("merge").arg(a).arg(b).arg("--output").arg(merged);
        c.output().unwrap()
    };
    let err = failed(&merge(&s0, &s1));
    assert!(err.contains("model_commit"), "{err}");

    let pinned = shard("pinned.parquet", &format!("org/tiny-bert@{SHA1}"), "1/2");
    assert_eq!(common::key_values(&pinned)["hopscore.model_commit"], SHA1);
    ok(&merge(&s0, &pinned));
}

/// A gated repository needs `HF_TOKEN`; a wrong token, an unknown repository, a file
/// the repository lacks and a `.bin`-only repository are named; offline without a
/// cached copy names the cache searched.
#[test]
fn refusals_say_what_to_do() {
    let TinyCase {
        hub,
        tmp,
        files,
        home,
        input,
    } = tiny_case("org/gated");
    hub.gate("org/gated", "secret");
    let bin_only: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter(|(n, _)| n != "model.safetensors")
        .cloned()
        .chain([("pytorch_model.bin".to_string(), vec![0u8; 16])])
        .collect();
    hub.add("org/bin-only", "main", SHA1, bin_only);
    hub.add(
        "org/ggufs",
        "main",
        SHA1,
        vec![("m.Q4_0.gguf".into(), vec![0u8; 16])],
    );
    let out = |name: &str| tmp.path().join(name);

    let cache = home.join("hub").display().to_string();
    /// A model, the environment, what the error must say.
    type Refusal<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Refusal; 7] = [
        ("org/gated", &[], &["gated or private", "HF_TOKEN"]),
        (
            "org/gated",
            &[("HF_TOKEN", "wrong")],
            &["may not read org/gated"],
        ),
        (
            "org/nothing",
            &[],
            &["neither a local path nor a model", "404"],
        ),
        ("org/bin-only", &[], &["convert_to_safetensors.py"]),
        ("org/ggufs", &[], &["org/ggufs:FILE.gguf", "m.Q4_0.gguf"]),
        (
            "org/ggufs:other.gguf",
            &[],
            &["no file other.gguf", "m.Q4_0.gguf"],
        ),
        (
            "org/never-fetched",
            &[("HF_HUB_OFFLINE", "1")],
            &["HF_HUB_OFFLINE", &cache],
        ),
    ];
    for (model, env, needles) in cases {
        let err = failed(&embed(&hub, &home, model, &input, &out("b.parquet"), env));
        assert!(needles.iter().all(|n| err.contains(n)), "{model}: {err}");
    }
    let gated = [("HF_TOKEN", "secret")];
    ok(&embed(
        &hub,
        &home,
        "org/gated",
        &input,
        &out("a.parquet"),
        &gated,
    ));
    // As a --tokenizer the bin-only repository serves: only its JSON files are fetched.
    let plain = common::fixture("bert/random_plain");
    let before = hub.downloads().len();
    let args = [
        "--model",
        plain.to_str().unwrap(),
        "--tokenizer",
        "org/bin-only",
    ];
    ok(&embed_with(
        &hub,
        &home,
        (&input, &out("tok.parquet")),
        &[],
        &args,
    ));
    let fetched: Vec<String> = hub.downloads()[before..].to_vec();
    assert!(
        fetched.len() == 2 && fetched.iter().all(|l| l.contains(".json")),
        "{fetched:?}"
    );
    assert_eq!(vectors(&out("tok.parquet")), vectors(&out("a.parquet")));
    assert!(!out("b.parquet").exists(), "no output from a refused model");
}

/// The requests for `file` that downloaded bytes, with their `Range`.
fn fetches_of(hub: &Hub, file: &str) -> Vec<String> {
    let suffix = format!("/{file} ");
    hub.downloads()
        .into_iter()
        .filter(|l| l.contains(&suffix))
        .collect()
}

/// A download cut off halfway, or one whose server stalls after half the bytes, is
/// resumed from where it stopped within the same run (after the read timeout,
/// `HF_HUB_DOWNLOAD_TIMEOUT`, for the stall) and gives the local directory's vectors.
#[test]
fn an_interrupted_or_stalled_download_resumes_where_it_stopped() {
    let TinyCase {
        hub,
        tmp,
        home,
        input,
        ..
    } = tiny_case("org/tiny-bert");
    let local = tmp.path().join("m");
    let half = std::fs::metadata(local.join("model.safetensors"))
        .unwrap()
        .len()
        / 2;
    let by_path = tmp.path().join("by_path.parquet");
    let args = ["--model", local.to_str().unwrap()];
    ok(&embed_with(&hub, &home, (&input, &by_path), &[], &args));
    for (i, stall) in [false, true].into_iter().enumerate() {
        let home = home.join(i.to_string());
        {
            let faults = &mut hub.state.lock().unwrap().faults;
            match stall {
                false => faults.cut_once = Some("model.safetensors".into()),
                true => faults.stall_once = Some("model.safetensors".into()),
            }
        }
        let before = fetches_of(&hub, "model.safetensors").len();
        let out = tmp.path().join(format!("{i}.parquet"));
        let timeout = [("HF_HUB_DOWNLOAD_TIMEOUT", "1")];
        let err = ok(&embed(&hub, &home, "org/tiny-bert", &input, &out, &timeout));
        assert!(err.contains("resuming in 1 s"), "{err}");
        let fetched = fetches_of(&hub, "model.safetensors")[before..].to_vec();
        assert_eq!(fetched.len(), 2, "{fetched:?}");
        assert!(
            fetched[1].ends_with(&format!("bytes={half}-")),
            "resumed from the cut: {fetched:?}"
        );
        assert_eq!(vectors(&out), vectors(&by_path));
    }
}

/// A download whose bytes are not the listed ones (one byte changed, the size right)
/// never enters the snapshot, nor the blobs: the run fails naming it, and the next run
/// downloads it anew; a cached file damaged later is found out by the next run.
#[test]
fn a_file_enters_the_snapshot_only_once_its_hash_is_checked() {
    let TinyCase {
        hub,
        tmp,
        home,
        input,
        ..
    } = tiny_case("org/tiny-bert");
    hub.state.lock().unwrap().faults.damaged = Some("model.safetensors".into());
    let out = tmp.path().join("a.parquet");
    let err = failed(&embed(&hub, &home, "org/tiny-bert", &input, &out, &[]));
    assert!(
        err.contains("model.safetensors") && err.contains("damaged") && err.contains("run again"),
        "{err}"
    );
    let repo = home.join("hub/models--org--tiny-bert");
    assert!(!repo
        .join("snapshots")
        .join(SHA1)
        .join("model.safetensors")
        .exists());
    let blobs: Vec<String> = std::fs::read_dir(repo.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    let weights = std::fs::read(tmp.path().join("m/model.safetensors")).unwrap();
    assert!(
        !blobs.iter().any(|b| b.starts_with(&sha256(&weights))),
        "no blob, complete or not, of the damaged file: {blobs:?}"
    );
    assert!(!out.exists());
    hub.state.lock().unwrap().faults.damaged = None;
    ok(&embed(&hub, &home, "org/tiny-bert", &input, &out, &[]));

    // A cached file damaged since (or left unchecked by another client, or by a run
    // killed before its check) is checked again, found out and downloaded anew.
    let link = repo.join("snapshots").join(SHA1).join("model.safetensors");
    let blob = link.canonicalize().unwrap();
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&blob, &bytes).unwrap();
    // Offline, the damaged blob is found out by its name (the hash it was listed with)
    // and refused, never loaded.
    let offline_out = tmp.path().join("offline.parquet");
    let offline = [("HF_HUB_OFFLINE", "1")];
    let refused = |what: &str| {
        let err = failed(&embed(
            &hub,
            &home,
            "org/tiny-bert",
            &input,
            &offline_out,
            &offline,
        ));
        assert!(
            err.contains(&format!("the cached {what} of org/tiny-bert"))
                && err.contains("does not hash to its blob's name")
                && err.contains("run once with the network"),
            "{err}"
        );
        assert!(!offline_out.exists());
    };
    refused("model.safetensors");
    let again = tmp.path().join("again.parquet");
    let err = ok(&embed(&hub, &home, "org/tiny-bert", &input, &again, &[]));
    assert!(
        err.contains("the cached model.safetensors of org/tiny-bert is damaged"),
        "{err}"
    );
    assert_eq!(std::fs::read(&blob).unwrap(), weights);
    assert_eq!(vectors(&again), vectors(&out));
    // A small file's blob is named by its git blob id, and checked by it offline too.
    let config = repo.join("snapshots").join(SHA1).join("config.json");
    let config_blob = config.canonicalize().unwrap();
    let mut text = std::fs::read(&config_blob).unwrap();
    text.push(b' ');
    std::fs::write(&config_blob, &text).unwrap();
    refused("config.json");
}

/// The names a server sends are checked before they touch the disk: an `ETag` is never
/// a file name (`../../../../victim.txt` leaves the victim as it was and the blob is
/// named by the listing's hash), a commit id that is not 40 hex digits and a shard
/// named by an absolute path are refused, naming the server and the field, and nothing
/// is written outside the cache.
#[test]
fn names_a_server_sends_never_reach_outside_the_cache() {
    let TinyCase {
        hub,
        tmp,
        files,
        home,
        input,
    } = tiny_case("org/tiny-bert");
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, b"keep me").unwrap();
    hub.state.lock().unwrap().faults.etag = Some("../../../../victim.txt".into());
    let out = |name: &str| tmp.path().join(name);
    ok(&embed(
        &hub,
        &home,
        "org/tiny-bert",
        &input,
        &out("a.parquet"),
        &[],
    ));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    let repo = home.join("hub/models--org--tiny-bert");
    for blob in std::fs::read_dir(repo.join("blobs")).unwrap() {
        let name = blob.unwrap().file_name().to_string_lossy().to_string();
        assert!(name.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    }
    let weights = std::fs::read(tmp.path().join("m/model.safetensors")).unwrap();
    let link = repo.join("snapshots").join(SHA1).join("model.safetensors");
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        Path::new("../../blobs").join(sha256(&weights))
    );

    hub.state.lock().unwrap().faults.listing_sha = Some("../../outside".into());
    hub.add("org/other", "main", SHA2, files.clone());
    let err = failed(&embed(
        &hub,
        &home,
        "org/other",
        &input,
        &out("b.parquet"),
        &[],
    ));
    assert!(
        err.contains(&hub.endpoint) && err.contains("`sha`") && err.contains("../../outside"),
        "{err}"
    );
    assert!(!home.join("hub/outside").exists() && !home.join("outside").exists());
    hub.state.lock().unwrap().faults.listing_sha = None;

    let evil = tmp.path().join("evil.safetensors");
    let mut sharded: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter(|(n, _)| n != "model.safetensors")
        .cloned()
        .collect();
    let index = serde_json::json!({"weight_map": {"w": evil.display().to_string()}});
    sharded.push((
        "model.safetensors.index.json".into(),
        index.to_string().into_bytes(),
    ));
    sharded.push((evil.display().to_string(), weights.clone()));
    hub.add("org/sharded", "main", SHA1, sharded);
    let err = failed(&embed(
        &hub,
        &home,
        "org/sharded",
        &input,
        &out("c.parquet"),
        &[],
    ));
    assert!(
        err.contains("weight_map") && err.contains("evil.safetensors"),
        "{err}"
    );
    assert!(!evil.exists());
}

/// The token goes only to the endpoint's host: a redirect on the same host keeps it (a
/// gated repository's files), one to another host (a CDN: here a second stand-in on
/// another port) drops it; a token read with a newline at its end works, one with a
/// space inside is refused without being printed, and credentials in `HF_ENDPOINT`
/// are never printed.
#[test]
fn the_token_stays_on_the_endpoints_host_and_no_secret_is_printed() {
    let TinyCase {
        hub,
        tmp,
        files,
        home,
        input,
    } = tiny_case("org/gated");
    hub.gate("org/gated", "secret");
    let cdn = Hub::start();
    cdn.add("org/gated", "main", SHA1, files.clone());
    {
        let redirects = &mut hub.state.lock().unwrap().faults.redirects;
        redirects.insert(
            "config.json".into(),
            "/org/gated/resolve/{sha}/cached/config.json".into(),
        );
        redirects.insert(
            "model.safetensors".into(),
            format!(
                "{}/org/gated/resolve/{{sha}}/model.safetensors",
                cdn.endpoint
            ),
        );
    }
    let out = |name: &str| tmp.path().join(name);
    let newline = [("HF_TOKEN", "secret\n")];
    ok(&embed(
        &hub,
        &home,
        "org/gated",
        &input,
        &out("a.parquet"),
        &newline,
    ));
    assert!(
        fetches_of(&cdn, "model.safetensors").len() == 1
            && cdn.state.lock().unwrap().authorized.is_empty(),
        "the CDN got the weights and no token"
    );
    let authorized = hub.state.lock().unwrap().authorized.clone();
    assert!(
        authorized.iter().any(|p| p.contains("/cached/config.json")),
        "the same host's redirect kept the token: {authorized:?}"
    );

    let spaced = [("HF_TOKEN", "tok3n zz9")];
    let err = failed(&embed(
        &hub,
        &home.join("x"),
        "org/gated",
        &input,
        &out("b.parquet"),
        &spaced,
    ));
    assert!(err.contains("HF_TOKEN") && !err.contains("zz9"), "{err}");

    let with_password = hub.endpoint.replace("http://", "http://bob:hunter2@");
    let gone = "http://bob:hunter2@127.0.0.1:9";
    for endpoint in [with_password.as_str(), gone] {
        let mut c = common::hopscore();
        c.env("HF_HOME", tmp.path().join("y"))
            .env("HF_ENDPOINT", endpoint)
            .env("HF_TOKEN", "hf_zz9")
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_HUB_OFFLINE")
            .args(["embed", "--model", "org/nothing", "--input"])
            .arg(&input)
            .arg("--output")
            .arg(out("c.parquet"));
        let err = failed(&c.output().unwrap());
        assert!(
            err.contains("***@127.0.0.1") && !err.contains("hunter2") && !err.contains("zz9"),
            "{err}"
        );
    }
}

/// Two processes fetching one model at once (a job array's shards): the second waits
/// for the first's download of the weights (slower here than the 5 s hf-hub waited)
/// and loads the same file; the weights are downloaded once.
#[test]
fn two_processes_fetching_one_model_wait_for_each_other() {
    let TinyCase {
        hub,
        tmp,
        home,
        input,
        ..
    } = tiny_case("org/tiny-bert");
    hub.state.lock().unwrap().faults.slow = Some((
        "model.safetensors".into(),
        std::time::Duration::from_millis(500),
    ));
    let spawn = |name: &str| {
        let mut c = against(&hub, &home);
        c.args(["embed", "--model", "org/tiny-bert", "--input"])
            .arg(&input)
            .arg("--output")
            .arg(tmp.path().join(name))
            .stderr(std::process::Stdio::piped());
        c.spawn().unwrap()
    };
    let first = spawn("a.parquet");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let second = spawn("b.parquet");
    let errs: Vec<String> = [first, second]
        .into_iter()
        .map(|child| ok(&child.wait_with_output().unwrap()))
        .collect();
    assert!(
        errs.iter()
            .any(|e| e.contains("waiting for another process downloading")),
        "{errs:?}"
    );
    assert_eq!(fetches_of(&hub, "model.safetensors").len(), 1);
    assert_eq!(
        vectors(&tmp.path().join("a.parquet")),
        vectors(&tmp.path().join("b.parquet"))
    );
}

/// An output over the blob a snapshot's link points to is refused (it would replace
/// the model's weights with Parquet), and so is a hub id's `--help` or a flag typo
/// after it reaching the network: arguments are checked before any download.
#[test]
fn outputs_never_replace_cache_blobs_and_arguments_are_checked_first() {
    let TinyCase {
        hub,
        tmp,
        home,
        input,
        ..
    } = tiny_case("org/tiny-bert");
    ok(&embed(
        &hub,
        &home,
        "org/tiny-bert",
        &input,
        &tmp.path().join("a.parquet"),
        &[],
    ));
    let link = home
        .join("hub/models--org--tiny-bert/snapshots")
        .join(SHA1)
        .join("model.safetensors");
    let blob = link.canonicalize().unwrap();
    let before = std::fs::read(&blob).unwrap();
    let err = failed(&embed(&hub, &home, "org/tiny-bert", &input, &blob, &[]));
    assert!(err.contains("--output") && err.contains("--model"), "{err}");
    assert_eq!(std::fs::read(&blob).unwrap(), before);

    let requests = hub.requests();
    let b = tmp.path().join("b.parquet");
    let help = ["--model", "org/new-model", "--help"];
    assert!(embed_with(&hub, &home, (&input, &b), &[], &help)
        .status
        .success());
    let typo = ["--model", "org/new-model", "--no-such-flag"];
    let out = embed_with(&hub, &home, (&input, &b), &[], &typo);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        hub.requests(),
        requests,
        "no request before the arguments are checked"
    );
}

/// `org/name:file.gguf` fetches that one file (none of the repository's other files)
/// and scores as the local file does (SmolLM2, `loglik`).
#[test]
fn a_gguf_file_is_named_after_the_colon() {
    let Some(gguf) = common::SMOLLM2_GGUF.require() else {
        return;
    };
    let name = gguf.file_name().unwrap().to_str().unwrap().to_string();
    let hub = Hub::start();
    let files = vec![
        (name.clone(), std::fs::read(&gguf).unwrap()),
        ("other.Q8_0.gguf".to_string(), vec![0u8; 64]),
        ("config.json".to_string(), b"{}".to_vec()),
    ];
    hub.add("org/smollm2", "main", SHA1, files);
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("rows.parquet");
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("prompt", DataType::Utf8, false),
        Field::new("target", DataType::Utf8, false),
    ]));
    let column = |v: [&str; 2]| Arc::new(StringArray::from_iter_values(v)) as _;
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            column(["a", "b"]),
            column([
                "Document: Paris is in France.",
                "Document: Ada wrote notes.",
            ]),
            column([" Where is Paris?", " Who wrote the notes?"]),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&input).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let loglik = |model: &str, out: &str| {
        let output = tmp.path().join(out);
        let mut c = common::hopscore();
        c.env("HF_HOME", tmp.path().join("hf"))
            .env("HF_ENDPOINT", &hub.endpoint)
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_HUB_OFFLINE");
        c.args(["loglik", "--model", model, "--input"])
            .arg(&input)
            .arg("--output")
            .arg(&output);
        ok(&c.output().unwrap());
        let batch = common::read_parquet(&output);
        let sums = batch.column_by_name("loglik_sum").unwrap();
        let sums = sums.as_primitive::<arrow_array::types::Float64Type>();
        sums.values().to_vec()
    };
    let local = loglik(gguf.to_str().unwrap(), "local.parquet");
    let by_id = loglik(&format!("org/smollm2:{name}"), "hub.parquet");
    assert_eq!(local, by_id);
    let fetched: Vec<String> = hub.downloads();
    assert!(
        fetched.len() == 1 && fetched[0].contains(&name),
        "{fetched:?}"
    );
}
