//! Models by their Hugging Face Hub id beside local paths: `org/name`,
//! `org/name@revision` (a branch, tag or commit) and `org/name:file.gguf` (one GGUF
//! file of a repository). A local path that exists always wins.
//!
//! Files are looked for in, and downloaded into, the cache `huggingface_hub` writes
//! (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`:
//! `models--org--name/{refs,snapshots,blobs}`), so a model downloaded from Python is
//! found as it is. Downloads ([`download`], on ureq) resume from `.incomplete` files,
//! wait for another process downloading the same blob, time out when the server
//! stalls (`HF_HUB_DOWNLOAD_TIMEOUT`), retry, stop on Ctrl-C, and enter the snapshot
//! only once their size and hash equal the listing's. The server is not trusted:
//! every name it sends (commit, file and shard names, blob hashes) is checked before
//! it touches the disk, the token goes only to the endpoint's own host, and no
//! message prints the token or the endpoint's credentials. `HF_TOKEN` (else
//! `$HF_HOME/token`) authenticates, `HF_HUB_OFFLINE=1` never touches the network,
//! `HF_ENDPOINT` names a mirror.
//!
//! Only what the loaders read is fetched: the top-level JSON files (config,
//! tokenizer, sentence-transformers `modules.json`, …), the modules' `N_Name/*.json`,
//! and `model.safetensors` or the shards its index names (or the one GGUF file asked
//! for). Progress: a log line per file and every 10 % of a large one, with rate and
//! ETA. The run metadata records the repository and commit of a snapshot path
//! ([`crate::io::metadata::hub_snapshot`]), so `--resume` and `merge` refuse a model
//! whose revision moved.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::model::weights::shard_names;

/// The hub's address when `HF_ENDPOINT` is not set.
const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A model named by its hub id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubId {
    /// `org/name`.
    pub repo: String,
    /// Branch, tag or commit (`main` when not given).
    pub revision: Option<String>,
    /// One file of the repository (`org/name:file.gguf`).
    pub file: Option<String>,
}

impl HubId {
    /// Parses `org/name[@revision][:file]`; `None` for anything else (an absolute or
    /// dotted path, one or three path components, characters a repo id cannot hold).
    pub fn parse(spec: &str) -> Option<Self> {
        let (rest, file) = match spec.split_once(':') {
            Some((rest, file)) => (rest, Some(file)),
            None => (spec, None),
        };
        let (repo, revision) = match rest.split_once('@') {
            Some((repo, rev)) => (repo, Some(rev)),
            None => (rest, None),
        };
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 96
                && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                && !s.ends_with('.')
                && !s.contains("--")
                && !s.contains("..")
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        let (org, name) = repo.split_once('/')?;
        if !name_ok(org) || !name_ok(name) {
            return None;
        }
        let path_ok = |s: &str| {
            !s.is_empty()
                && !s.starts_with('/')
                && !s.split('/').any(|c| c.is_empty() || c == "." || c == "..")
        };
        if revision.is_some_and(|r| !path_ok(r)) || file.is_some_and(|f| !path_ok(f)) {
            return None;
        }
        Some(HubId {
            repo: repo.to_string(),
            revision: revision.map(str::to_string),
            file: file.map(str::to_string),
        })
    }

    fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or("main")
    }
}

/// Where the hub is and how to reach it, from the environment variables
/// `huggingface_hub` reads.
#[derive(Debug, Clone)]
pub struct HubSettings {
    pub endpoint: Endpoint,
    /// The hub cache (`…/huggingface/hub`).
    pub cache: PathBuf,
    pub token: Option<String>,
    pub offline: bool,
    /// How long a download may wait for the server's next bytes before it is retried.
    pub download_timeout: Duration,
}

/// The longest `HF_HUB_DOWNLOAD_TIMEOUT` taken.
const MAX_DOWNLOAD_TIMEOUT_SECS: f64 = 3600.0;

impl HubSettings {
    /// `HF_ENDPOINT`, `HF_HUB_CACHE` / `HF_HOME`, `HF_TOKEN` / `HF_TOKEN_PATH` /
    /// `$HF_HOME/token` (trimmed: a token file or secret ends in a newline),
    /// `HF_HUB_OFFLINE`, `HF_HUB_DOWNLOAD_TIMEOUT` (seconds, default 10, as
    /// `huggingface_hub`'s).
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"))
                .join("huggingface")
        });
        let token_file = var("HF_TOKEN_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("token"));
        let download_timeout = match var("HF_HUB_DOWNLOAD_TIMEOUT") {
            None => Duration::from_secs(10),
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= MAX_DOWNLOAD_TIMEOUT_SECS)
                .map(Duration::from_secs_f64)
                .with_context(|| {
                    format!(
                        "HF_HUB_DOWNLOAD_TIMEOUT={v:?}: expected seconds, more than 0 and at \
                         most {MAX_DOWNLOAD_TIMEOUT_SECS}"
                    )
                })?,
        };
        Ok(HubSettings {
            endpoint: Endpoint::new(
                var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            ),
            cache: var("HF_HUB_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join("hub")),
            token: var("HF_TOKEN")
                .or_else(|| std::fs::read_to_string(token_file).ok())
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            }),
            download_timeout,
        })
    }

    /// `text` with the token and the endpoint's credentials replaced by `***`: for an
    /// error message that quotes what the HTTP layer said.
    pub fn scrub(&self, text: &str) -> String {
        let secrets = self.token.as_deref().into_iter();
        secrets
            .chain(self.endpoint.credentials())
            .filter(|s| !s.is_empty())
            .fold(text.to_string(), |t, secret| t.replace(secret, "***"))
    }
}

/// The hub's base URL (`HF_ENDPOINT`). Shown (`{}`), credentials in it
/// (`https://user:password@host`) read `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint(String);

impl Endpoint {
    pub fn new(url: impl Into<String>) -> Self {
        Endpoint(url.into().trim().trim_end_matches('/').to_string())
    }

    /// The URL requests go to.
    pub fn url(&self) -> &str {
        &self.0
    }

    /// The `user:password` part of the URL, if any.
    fn credentials(&self) -> Option<&str> {
        self.userinfo().map(|r| &self.0[r])
    }

    /// The byte range of `user:password` in the URL.
    fn userinfo(&self) -> Option<std::ops::Range<usize>> {
        let start = self.0.find("://")? + 3;
        let authority = self.0[start..].split(['/', '?', '#']).next()?;
        let at = authority.rfind('@')?;
        Some(start..start + at)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.userinfo() {
            Some(r) => write!(f, "{}***{}", &self.0[..r.start], &self.0[r.end..]),
            None => f.write_str(&self.0),
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({self})")
    }
}

/// What a path names, and so which files of a repository it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A model: its configs and weights.
    Model,
    /// A tokenizer: the repository's top-level JSON files (`tokenizer.json`, …) only.
    Tokenizer,
}

/// `spec` as a local path: itself when it exists, else the snapshot directory (or the
/// file, for `org/name:file`) of the hub repository it names, with the files `need`
/// asks for taken from the cache or downloaded into it (settings from the
/// environment).
pub fn local_path(spec: &Path, need: Need) -> Result<PathBuf> {
    if spec.exists() {
        return Ok(spec.to_path_buf());
    }
    local_path_with(spec, need, &HubSettings::from_env()?)
}

/// Refuses `spec` unless it is an existing path or a hub id: the syntax only, no
/// network and no cache (what a flag's value parser checks; [`local_path`] resolves it
/// when the run starts).
pub fn check_spec(spec: &Path) -> Result<()> {
    hub_id(spec).map(|_| ())
}

/// `None` for a path that exists, else the hub id `spec` names, or why it is neither.
fn hub_id(spec: &Path) -> Result<Option<HubId>> {
    if spec.exists() {
        return Ok(None);
    }
    let text = spec.to_string_lossy();
    let id = HubId::parse(&text)
        // `weights/foo` where `weights/` exists is a mistyped local path.
        .filter(|id| !Path::new(id.repo.split('/').next().unwrap_or_default()).is_dir());
    match id {
        Some(id) => Ok(Some(id)),
        None => bail!(
            "{} does not exist (a model is a local path or a hub id such as \
             `org/name`, `org/name@revision` or `org/name:file.gguf`)",
            spec.display()
        ),
    }
}

/// [`local_path`] with explicit settings.
pub fn local_path_with(spec: &Path, need: Need, hub: &HubSettings) -> Result<PathBuf> {
    let Some(id) = hub_id(spec)? else {
        return Ok(spec.to_path_buf());
    };
    let repo_dir = hub
        .cache
        .join(format!("models--{}", id.repo.replace('/', "--")));
    if hub.offline {
        let found = cached(&id, need, &repo_dir).map_err(|missing| {
            anyhow!(
                "HF_HUB_OFFLINE is set and {} is not in the hub cache {} ({missing}): \
                 download it once with the network, or give a local directory",
                display(&id),
                hub.cache.display()
            )
        })?;
        check_cached_blobs(&found, &id)?;
        return Ok(found);
    }
    match download::fetch(hub, &id, need, &repo_dir) {
        Ok(path) => Ok(path),
        Err(Fetch::Refused(e)) => Err(e),
        Err(Fetch::Unreachable(reason)) => {
            let found = cached(&id, need, &repo_dir).map_err(|missing| {
                anyhow!(
                    "cannot reach the hub at {} ({reason}) and {} is not in the hub cache {} \
                     ({missing})",
                    hub.endpoint,
                    display(&id),
                    hub.cache.display()
                )
            })?;
            check_cached_blobs(&found, &id)?;
            log::warn!(
                "cannot reach the hub at {} ({reason}); using the cached {} ({})",
                hub.endpoint,
                display(&id),
                found.display()
            );
            Ok(found)
        }
    }
}

/// Why a model could not be fetched.
enum Fetch {
    /// The hub answered no (401/403, 404, a file it lacks) or a download failed: final.
    #[cfg_attr(not(feature = "hub"), allow(dead_code))]
    Refused(anyhow::Error),
    /// The hub could not be reached: the cache may still serve.
    Unreachable(String),
}

#[cfg(feature = "hub")]
mod download;

#[cfg(not(feature = "hub"))]
mod download {
    /// Built without the `hub` feature: only the cache serves.
    pub(super) fn fetch(
        _: &super::HubSettings,
        _: &super::HubId,
        _: super::Need,
        _: &std::path::Path,
    ) -> Result<std::path::PathBuf, super::Fetch> {
        Err(super::Fetch::Unreachable(
            "hopscore was built without the `hub` feature".to_string(),
        ))
    }
}

/// Checks the cached files a run would read (`found`: one file, or a snapshot's files
/// and those of its module folders, the formats hopscore never reads left out) against
/// their blobs' names, which are the hashes the listing gave when they were downloaded
/// (the SHA-256 of an LFS file, the git blob id of another): a file damaged since, or
/// left unchecked by another client or a killed run, is refused rather than loaded.
/// What is not a link to a blob named by a hash (a cache written by hand) is taken as
/// it is. Online, the listing checks the same files ([`download`]).
fn check_cached_blobs(found: &Path, id: &HubId) -> Result<()> {
    let mut files = Vec::new();
    if found.is_dir() {
        for entry in std::fs::read_dir(found)?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path)?.flatten().map(|e| e.path()));
            } else {
                files.push(path);
            }
        }
    } else {
        files.push(found.to_path_buf());
    }
    for file in files {
        let is_link = std::fs::symlink_metadata(&file).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link || !file.is_file() || crate::io::fingerprint::is_unread(&file) {
            continue;
        }
        let blob = file.canonicalize()?;
        let name = blob.file_name().unwrap_or_default().to_string_lossy();
        let hex = name.bytes().all(|b| b.is_ascii_hexdigit());
        let got = match name.len() {
            64 if hex => crate::io::fingerprint::file_sha256(&blob)?,
            40 if hex => git_blob_id(&blob)?,
            _ => continue,
        };
        if got != name.to_ascii_lowercase() {
            bail!(
                "the cached {} of {} does not hash to its blob's name ({}: {got}): it was \
                 damaged, or never checked; run once with the network to download it anew, \
                 or remove {}",
                file.file_name().unwrap_or_default().to_string_lossy(),
                display(id),
                blob.display(),
                blob.display()
            );
        }
    }
    Ok(())
}

/// The git blob id of `path`: the SHA-1 of `blob <size>\0` and the content (what the
/// hub lists as a non-LFS file's `blobId`).
fn git_blob_id(path: &Path) -> Result<String> {
    use sha1::Digest;
    let mut file = std::fs::File::open(path)
        .with_context(|| format!("cannot read {} to checksum it", path.display()))?;
    let size = file.metadata()?.len();
    let mut hasher = sha1::Sha1::new();
    hasher.update(format!("blob {size}\0").as_bytes());
    std::io::copy(&mut file, &mut hasher)?;
    Ok(crate::io::fingerprint::hex(&hasher.finalize()))
}

/// `snapshot` or the file of it that `id` names.
fn target(snapshot: &Path, id: &HubId) -> PathBuf {
    match &id.file {
        Some(f) => snapshot.join(f),
        None => snapshot.to_path_buf(),
    }
}

fn display(id: &HubId) -> String {
    let mut s = format!("{}@{}", id.repo, id.revision());
    if let Some(f) = &id.file {
        s += &format!(":{f}");
    }
    s
}

/// Whether `s` is a git commit id: 40 lowercase hex digits.
fn is_commit_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The cached snapshot of `id`: its revision's commit (`refs/<revision>`, or the
/// revision itself when it is a commit) and, in that snapshot, the file asked for, a
/// `tokenizer.json`, or a config with its weights. `Err` says what is missing.
fn cached(id: &HubId, need: Need, repo_dir: &Path) -> Result<PathBuf, String> {
    let rev = id.revision();
    let commit = if is_commit_id(rev) {
        rev.to_string()
    } else {
        let refs = repo_dir.join("refs").join(rev);
        let commit = std::fs::read_to_string(&refs)
            .map(|s| s.trim().to_string())
            .map_err(|_| format!("no {}", refs.display()))?;
        if !is_commit_id(&commit) {
            return Err(format!(
                "{} holds {:?}, not a commit id",
                refs.display(),
                commit.chars().take(80).collect::<String>()
            ));
        }
        commit
    };
    let snapshot = repo_dir.join("snapshots").join(&commit);
    let path = target(&snapshot, id);
    let mut missing = Vec::new();
    if id.file.is_some() {
        if !path.is_file() {
            missing.push(path.display().to_string());
        }
    } else if need == Need::Tokenizer {
        if !snapshot.join("tokenizer.json").is_file() {
            missing.push("tokenizer.json".to_string());
        }
    } else {
        if !snapshot.join("config.json").is_file() {
            missing.push("config.json".to_string());
        }
        let index = snapshot.join("model.safetensors.index.json");
        let weights = snapshot.join("model.safetensors").is_file()
            || (index.is_file()
                && shard_names(&index).is_ok_and(|names| {
                    names.iter().all(|n| {
                        crate::io::paths::is_plain_relative(n) && snapshot.join(n).is_file()
                    })
                }));
        if !weights {
            missing.push("model.safetensors or its shards".to_string());
        }
    }
    if missing.is_empty() {
        Ok(path)
    } else {
        Err(format!("snapshot {commit} lacks {}", missing.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_parse_and_paths_do_not() {
        let id = HubId::parse("BAAI/bge-base-en-v1.5@v2:q4.gguf").unwrap();
        assert_eq!(id.repo, "BAAI/bge-base-en-v1.5");
        assert_eq!(id.revision.as_deref(), Some("v2"));
        assert_eq!(id.file.as_deref(), Some("q4.gguf"));
        let plain = HubId::parse("google/flan-t5-large").unwrap();
        assert_eq!((plain.revision(), plain.file.as_deref()), ("main", None));
        for path in [
            "/abs/model",
            "./org/name",
            "../org/name",
            "gpt2",
            "a/b/c",
            "org/na--me",
            "org/name@",
            "org/name:",
            "org/name:../x",
            "org/.hidden",
            "org/name@refs/../x",
        ] {
            assert_eq!(HubId::parse(path), None, "{path}");
        }
        assert_eq!(
            HubId::parse("org/name@refs/pr/1").unwrap().revision(),
            "refs/pr/1"
        );
    }

    #[test]
    fn an_endpoints_credentials_and_the_token_are_never_shown() {
        let hub = HubSettings {
            endpoint: Endpoint::new("https://bob:hunter2@mirror.example:8443/hf/"),
            cache: PathBuf::from("/nowhere"),
            token: Some("hf_secret".into()),
            offline: false,
            download_timeout: Duration::from_secs(10),
        };
        assert_eq!(
            hub.endpoint.url(),
            "https://bob:hunter2@mirror.example:8443/hf"
        );
        let shown = format!("{} {:?}", hub.endpoint, hub.endpoint);
        assert_eq!(
            shown,
            "https://***@mirror.example:8443/hf Endpoint(https://***@mirror.example:8443/hf)"
        );
        assert_eq!(
            hub.scrub("GET https://bob:hunter2@mirror.example: Bearer hf_secret refused"),
            "GET https://***@mirror.example: Bearer *** refused"
        );
        let plain = Endpoint::new("http://127.0.0.1:5/a@b");
        assert_eq!(plain.to_string(), "http://127.0.0.1:5/a@b");
    }

    #[test]
    fn a_mistyped_local_path_is_not_sent_to_the_hub() {
        let dir = tempfile::tempdir().unwrap();
        let hub = HubSettings {
            endpoint: Endpoint::new("http://127.0.0.1:9"),
            cache: dir.path().join("hub"),
            token: None,
            offline: false,
            download_timeout: Duration::from_secs(10),
        };
        let spec = dir.path().join("missing");
        let err = local_path_with(&spec, Need::Model, &hub)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
        let offline = HubSettings {
            offline: true,
            ..hub
        };
        let err = local_path_with(Path::new("org/model"), Need::Model, &offline)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HF_HUB_OFFLINE") && err.contains("org/model@main"),
            "{err}"
        );
    }
}
