//! Listing and downloading a hub model (feature `hub`): the revision's commit and
//! files from `/api/models/{repo}/revision/{rev}?blobs=true`, each missing file through
//! the `hf-hub` crate into the cache, checked against the listing.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use super::{target, Fetch, HubId, HubSettings, Need};
use crate::model::weights::shard_names;

/// The snapshot path of `id` (downloading what the cache lacks), or why not.
pub(super) fn fetch(
    hub: &HubSettings,
    id: &HubId,
    need: Need,
    repo_dir: &Path,
) -> Result<PathBuf, Fetch> {
    let listing = list(hub, id)?;
    download(hub, id, need, repo_dir, &listing).map_err(Fetch::Refused)
}

/// A file of the listing (`GET /api/models/{repo}/revision/{rev}?blobs=true`).
#[derive(Debug, Clone, Deserialize)]
struct Sibling {
    rfilename: String,
    size: Option<u64>,
    lfs: Option<Lfs>,
}

#[derive(Debug, Clone, Deserialize)]
struct Lfs {
    sha256: String,
}

#[derive(Debug, Deserialize)]
struct Listing {
    sha: String,
    siblings: Vec<Sibling>,
}

/// The repository's commit and files at the revision asked for.
fn list(hub: &HubSettings, id: &HubId) -> Result<Listing, Fetch> {
    let url = format!(
        "{}/api/models/{}/revision/{}?blobs=true",
        hub.endpoint,
        id.repo,
        id.revision().replace('/', "%2F")
    );
    let agent = ureq2::AgentBuilder::new()
        .try_proxy_from_env(true)
        .timeout_connect(std::time::Duration::from_secs(30))
        .timeout(std::time::Duration::from_secs(120))
        .build();
    let mut request = agent.get(&url);
    if let Some(token) = &hub.token {
        request = request.set("Authorization", &format!("Bearer {token}"));
    }
    match request.call() {
        Ok(response) => response.into_json::<Listing>().map_err(|e| {
            Fetch::Refused(anyhow!(
                "the hub's listing of {} at {url} is not valid: {e}",
                id.repo
            ))
        }),
        // A server error: the hub is down, as far as this run goes.
        Err(ureq2::Error::Status(status, _)) if status >= 500 => Err(Fetch::Unreachable(format!(
            "HTTP {status} from {}",
            hub.endpoint
        ))),
        Err(ureq2::Error::Status(status, _)) => {
            Err(Fetch::Refused(anyhow!(refusal(hub, id, status))))
        }
        Err(e) => Err(Fetch::Unreachable(e.to_string())),
    }
}

fn refusal(hub: &HubSettings, id: &HubId, status: u16) -> String {
    match status {
        401 | 403 if hub.token.is_none() => format!(
            "{} is gated or private (HTTP {status} from {}): set HF_TOKEN to a token that \
             may read it (or log in with `huggingface-cli login`)",
            id.repo, hub.endpoint
        ),
        401 | 403 => format!(
            "the token (HF_TOKEN or the token file) may not read {} (HTTP {status} from {}): \
             request access on its page, or use another token",
            id.repo, hub.endpoint
        ),
        404 => format!(
            "{} is neither a local path nor a model on {} at revision {} (HTTP 404): check \
             the path, the id and the revision",
            id.repo,
            hub.endpoint,
            id.revision()
        ),
        _ => format!(
            "the hub at {} answered HTTP {status} for {}",
            hub.endpoint, id.repo
        ),
    }
}

/// Whether `name` is a top-level file or one in a sentence-transformers module
/// directory (`1_Pooling/config.json`).
fn is_config_file(name: &str) -> bool {
    let json = name.ends_with(".json");
    match name.split_once('/') {
        None => json,
        Some((dir, file)) => {
            json && !file.contains('/')
                && dir
                    .split_once('_')
                    .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        }
    }
}

/// The files a loader reads of `listing`: the configs ([`is_config_file`]) and, for a
/// model, the weights (`model.safetensors`, else the shards
/// `model.safetensors.index.json` names), or only `file` when one was asked for.
fn wanted<'a>(
    id: &HubId,
    need: Need,
    listing: &'a Listing,
    index: Option<&Path>,
) -> Result<Vec<&'a Sibling>> {
    let find = |name: &str| listing.siblings.iter().find(|s| s.rfilename == name);
    if let Some(file) = &id.file {
        let found = find(file).ok_or_else(|| {
            let gguf: Vec<&str> = listing
                .siblings
                .iter()
                .map(|s| s.rfilename.as_str())
                .filter(|n| n.ends_with(".gguf"))
                .collect();
            anyhow!(
                "{} has no file {file} at {}{}",
                id.repo,
                id.revision(),
                if gguf.is_empty() {
                    String::new()
                } else {
                    format!("; its GGUF files: {}", gguf.join(", "))
                }
            )
        })?;
        return Ok(vec![found]);
    }
    let mut files: Vec<&Sibling> = listing
        .siblings
        .iter()
        .filter(|s| is_config_file(&s.rfilename))
        .collect();
    if need == Need::Tokenizer {
        files.retain(|s| !s.rfilename.contains('/'));
        return Ok(files);
    }
    if let Some(weights) = find("model.safetensors") {
        files.push(weights);
    } else if let Some(index) = index {
        for shard in shard_names(index)? {
            files.push(find(&shard).ok_or_else(|| {
                anyhow!(
                    "{}: model.safetensors.index.json names {shard}, which the repository lacks",
                    id.repo
                )
            })?);
        }
    } else if find("model.safetensors.index.json").is_none() {
        let names: Vec<&str> = listing
            .siblings
            .iter()
            .map(|s| s.rfilename.as_str())
            .collect();
        if names.iter().any(|n| n.ends_with(".gguf")) {
            bail!(
                "{} holds GGUF files, no safetensors: name one as {}:FILE.gguf ({})",
                id.repo,
                id.repo,
                names
                    .iter()
                    .filter(|n| n.ends_with(".gguf"))
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if names
            .iter()
            .any(|n| n.ends_with(".bin") || n.ends_with(".pt"))
        {
            bail!(
                "{} has PyTorch weights only (pytorch_model.bin): download it and convert \
                 it with tools/convert_to_safetensors.py, then give the directory",
                id.repo
            );
        }
        bail!(
            "{} has no model.safetensors (files: {})",
            id.repo,
            names.join(", ")
        );
    }
    Ok(files)
}

/// Downloads what `listing` needs that the snapshot lacks, records the revision's
/// commit under `refs/`, and returns the snapshot directory (or the file asked for).
fn download(
    hub: &HubSettings,
    id: &HubId,
    need: Need,
    repo_dir: &Path,
    listing: &Listing,
) -> Result<PathBuf> {
    let terminal = std::io::stderr().is_terminal();
    let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(hub.cache.clone()))
        .with_endpoint(hub.endpoint.clone())
        .with_token(hub.token.clone())
        // hf-hub's own bar on a terminal; log lines with rate and ETA elsewhere.
        .with_progress(terminal)
        .build()
        .context("cannot set up the hub client")?;
    let pinned = api.repo(hf_hub::Repo::with_revision(
        id.repo.clone(),
        hf_hub::RepoType::Model,
        listing.sha.clone(),
    ));
    let snapshot = repo_dir.join("snapshots").join(&listing.sha);
    let fetch = |file: &Sibling| -> Result<()> {
        if snapshot.join(&file.rfilename).is_file() {
            return Ok(());
        }
        let path = if terminal {
            pinned.download(&file.rfilename)
        } else {
            pinned.download_with_progress(&file.rfilename, LogProgress::new(&id.repo))
        };
        let path = path.map_err(|e| {
            anyhow!(
                "downloading {} of {} from {} failed: {e}; run again to resume it",
                file.rfilename,
                id.repo,
                hub.endpoint
            )
        })?;
        verify(&path, file, &id.repo)
    };
    // The index first: it names the shards.
    let index_name = "model.safetensors.index.json";
    let index = match listing.siblings.iter().find(|s| s.rfilename == index_name) {
        Some(f) if id.file.is_none() && need == Need::Model => {
            fetch(f)?;
            Some(snapshot.join(index_name))
        }
        _ => None,
    };
    for file in wanted(id, need, listing, index.as_deref())? {
        fetch(file)?;
    }
    if id.revision() != listing.sha {
        let refs = repo_dir.join("refs").join(id.revision());
        if let Some(parent) = refs.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&refs, &listing.sha)
            .with_context(|| format!("cannot write {}", refs.display()))?;
    }
    Ok(target(&snapshot, id))
}

/// Refuses a downloaded file whose size or SHA-256 (large files) is not the listing's,
/// removing it so the next run downloads it again.
fn verify(path: &Path, file: &Sibling, repo: &str) -> Result<()> {
    let blob = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let size = std::fs::metadata(&blob).map(|m| m.len()).unwrap_or(0);
    let mut problem = file
        .size
        .filter(|&want| want != size)
        .map(|want| format!("{size} bytes of {want}"));
    if let (None, Some(lfs)) = (&problem, &file.lfs) {
        let got = crate::io::fingerprint::read_sha256(&blob)?;
        if !got.eq_ignore_ascii_case(&lfs.sha256) {
            problem = Some(format!("SHA-256 {got}, the hub lists {}", lfs.sha256));
        }
    }
    if let Some(problem) = problem {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(&blob);
        bail!(
            "the download of {} of {repo} is damaged ({problem}); it was removed: run again \
             to download it anew",
            file.rfilename
        );
    }
    Ok(())
}

/// Download progress as log lines when stderr is not a terminal (a log file): the file
/// and its size, then every 10 % with rate and ETA.
struct LogProgress {
    repo: String,
    file: String,
    size: usize,
    done: usize,
    next_report: usize,
    started: Instant,
}

impl LogProgress {
    fn new(repo: &str) -> Self {
        LogProgress {
            repo: repo.to_string(),
            file: String::new(),
            size: 0,
            done: 0,
            next_report: 0,
            started: Instant::now(),
        }
    }
}

impl hf_hub::api::Progress for LogProgress {
    fn init(&mut self, size: usize, filename: &str) {
        if self.file.is_empty() {
            log::info!(
                "downloading {} of {} ({:.1} MB)",
                filename,
                self.repo,
                size as f64 / 1e6
            );
        }
        self.file = filename.to_string();
        self.size = size;
        self.done = 0;
        self.next_report = size / 10;
        self.started = Instant::now();
    }

    fn update(&mut self, bytes: usize) {
        self.done += bytes;
        if self.size >= 10 << 20 && self.done >= self.next_report && self.done < self.size {
            self.next_report += self.size / 10;
            let secs = self.started.elapsed().as_secs_f64().max(1e-3);
            let rate = self.done as f64 / secs;
            log::info!(
                "{}: {:.0} % ({:.1} MB/s, ETA {:.0} s)",
                self.file,
                100.0 * self.done as f64 / self.size as f64,
                rate / 1e6,
                (self.size - self.done) as f64 / rate
            );
        }
    }

    fn finish(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_files_are_top_level_or_module_json() {
        for yes in ["config.json", "tokenizer.json", "1_Pooling/config.json"] {
            assert!(is_config_file(yes), "{yes}");
        }
        for no in [
            "onnx/config.json",
            "model.safetensors",
            "2_Dense/x/config.json",
            "README.md",
        ] {
            assert!(!is_config_file(no), "{no}");
        }
    }
}
