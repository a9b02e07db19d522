//! Models by their Hugging Face Hub id beside local paths: `org/name`,
//! `org/name@revision` (a branch, tag or commit) and `org/name:file.gguf` (one GGUF
//! file of a repository). A local path that exists always wins.
//!
//! Files are looked for in, and downloaded into, the cache `huggingface_hub` writes
//! (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`:
//! `models--org--name/{refs,snapshots,blobs}`), so a model downloaded from Python is
//! found as it is. Downloads go through the `hf-hub` crate (resumable `.part` files,
//! a lock per blob) and are checked against the listing's size and SHA-256 before a
//! loader sees them. `HF_TOKEN` (else `$HF_HOME/token`) authenticates,
//! `HF_HUB_OFFLINE=1` never touches the network, `HF_ENDPOINT` names a mirror.
//!
//! Only what the loaders read is fetched: the top-level JSON files (config,
//! tokenizer, sentence-transformers `modules.json`, …), the modules' `N_Name/*.json`,
//! and `model.safetensors` or the shards its index names (or the one GGUF file asked
//! for). Progress: hf-hub's bar on a terminal, log lines elsewhere. The run metadata
//! records the repository and commit of a snapshot path
//! ([`crate::io::metadata::hub_snapshot`]), so `--resume` and `merge` refuse a model
//! whose revision moved.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

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
    pub endpoint: String,
    /// The hub cache (`…/huggingface/hub`).
    pub cache: PathBuf,
    pub token: Option<String>,
    pub offline: bool,
}

impl HubSettings {
    /// `HF_ENDPOINT`, `HF_HUB_CACHE` / `HF_HOME`, `HF_TOKEN` / `HF_TOKEN_PATH` /
    /// `$HF_HOME/token`, `HF_HUB_OFFLINE`.
    pub fn from_env() -> Self {
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
        HubSettings {
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
                .trim_end_matches('/')
                .to_string(),
            cache: var("HF_HUB_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join("hub")),
            token: var("HF_TOKEN").or_else(|| {
                std::fs::read_to_string(token_file)
                    .ok()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
            }),
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            }),
        }
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
    local_path_with(spec, need, &HubSettings::from_env())
}

/// [`local_path`] with explicit settings.
pub fn local_path_with(spec: &Path, need: Need, hub: &HubSettings) -> Result<PathBuf> {
    if spec.exists() {
        return Ok(spec.to_path_buf());
    }
    let text = spec.to_string_lossy();
    let id = HubId::parse(&text)
        // `weights/foo` where `weights/` exists is a mistyped local path.
        .filter(|id| !Path::new(id.repo.split('/').next().unwrap_or_default()).is_dir());
    let Some(id) = id else {
        bail!(
            "{} does not exist (a model is a local path or a hub id such as \
             `org/name`, `org/name@revision` or `org/name:file.gguf`)",
            spec.display()
        );
    };
    let repo_dir = hub
        .cache
        .join(format!("models--{}", id.repo.replace('/', "--")));
    if hub.offline {
        return cached(&id, need, &repo_dir).map_err(|missing| {
            anyhow!(
                "HF_HUB_OFFLINE is set and {} is not in the hub cache {} ({missing}): \
                 download it once with the network, or give a local directory",
                display(&id),
                hub.cache.display()
            )
        });
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

/// The cached snapshot of `id`: its revision's commit (`refs/<revision>`, or the
/// revision itself when it is a commit) and, in that snapshot, the file asked for, a
/// `tokenizer.json`, or a config with its weights. `Err` says what is missing.
fn cached(id: &HubId, need: Need, repo_dir: &Path) -> Result<PathBuf, String> {
    let rev = id.revision();
    let is_commit = rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit());
    let commit = if is_commit {
        rev.to_string()
    } else {
        let refs = repo_dir.join("refs").join(rev);
        std::fs::read_to_string(&refs)
            .map(|s| s.trim().to_string())
            .map_err(|_| format!("no {}", refs.display()))?
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
                && shard_names(&index)
                    .is_ok_and(|names| names.iter().all(|n| snapshot.join(n).is_file())));
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
    fn a_mistyped_local_path_is_not_sent_to_the_hub() {
        let dir = tempfile::tempdir().unwrap();
        let hub = HubSettings {
            endpoint: "http://127.0.0.1:9".into(),
            cache: dir.path().join("hub"),
            token: None,
            offline: false,
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
