//! Listing and downloading a hub model (feature `hub`), on ureq: the revision's commit
//! and files from `/api/models/{repo}/revision/{rev}?blobs=true`, then each file the
//! snapshot lacks from `/{repo}/resolve/{commit}/{file}`, in `huggingface_hub`'s
//! layout (`blobs/<hash>`, `snapshots/<commit>/<file>` a relative link to it).
//!
//! Written here rather than through the `hf-hub` crate, whose sync client names a blob
//! by the server's `ETag` header unchecked, sends the token along redirects to other
//! hosts, puts a blob in place before it can be checked, has no read timeout and gives
//! up on another process's blob lock after a few seconds (docs/models.md).
//!
//! What the server sends is checked before it touches the disk: the commit is 40 hex
//! digits, every file name a plain relative path, every blob named by the listing's
//! hash (`lfs.sha256`, else the git `blobId`), never by a header. A download goes to
//! `blobs/<hash>.incomplete` under the lock `.locks/models--org--name/<hash>.lock`
//! (`huggingface_hub`'s; a second process waits), resumes with `Range`, is retried when the server stalls past
//! `HF_HUB_DOWNLOAD_TIMEOUT` or hangs up, stops on Ctrl-C, and becomes the blob (then
//! the snapshot's link) only after its size and hash equal the listing's.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use ureq::http::{Response, Uri};

use super::{is_commit_id, target, Fetch, HubId, HubSettings, Need};
use crate::io::paths::is_plain_relative;
use crate::model::weights::shard_names;
use crate::stop::{stop_point, Interrupted};

/// Tries of one file before the run gives up (it resumes on the next run).
const ATTEMPTS: u32 = 5;
/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 10;
/// The largest listing read, and the most bytes taken of a file whose size the listing
/// does not give.
const MAX_LISTING_BYTES: u64 = 64 << 20;
const MAX_UNLISTED_BYTES: u64 = 1 << 30;

/// The snapshot path of `id` (downloading what the cache lacks), or why not.
pub(super) fn fetch(
    hub: &HubSettings,
    id: &HubId,
    need: Need,
    repo_dir: &Path,
) -> Result<PathBuf, Fetch> {
    let client = Client::new(hub).map_err(Fetch::Refused)?;
    let listing = client.list(id)?;
    download(&client, id, need, repo_dir, &listing).map_err(Fetch::Refused)
}

/// A file of the listing.
#[derive(Debug, Clone, Deserialize)]
struct Sibling {
    rfilename: String,
    size: Option<u64>,
    /// The git object id of the file (the blob's name for a file outside LFS).
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
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

/// How a file is checked once downloaded, and the blob name that follows from it.
enum Hash {
    /// SHA-256 of the content (LFS files).
    Sha256(String),
    /// The git blob id: SHA-1 of `blob <size>\0` and the content.
    GitBlob(String),
}

impl Hash {
    /// The listed hash of `file`, refused (naming the server and the field) unless it
    /// is hex of the right length.
    fn of(file: &Sibling, client: &Client) -> Result<Hash> {
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        let (field, value, hash) = match (&file.lfs, &file.blob_id) {
            (Some(lfs), _) => ("lfs.sha256", &lfs.sha256, Hash::Sha256(lfs.sha256.clone())),
            (None, Some(id)) => ("blobId", id, Hash::GitBlob(id.clone())),
            (None, None) => bail!(
                "the hub at {} lists {} without a blobId or lfs.sha256: hopscore names and \
                 checks each file by them; use the hub or a mirror that lists them",
                client.hub.endpoint,
                file.rfilename
            ),
        };
        let want = if matches!(hash, Hash::Sha256(_)) {
            64
        } else {
            40
        };
        if !hex(value, want) {
            bail!(
                "the hub at {} lists {} with {field} {:?}, which is not {want} hex digits: \
                 refused (a blob is named by it)",
                client.hub.endpoint,
                file.rfilename,
                shorten(value)
            );
        }
        Ok(hash)
    }

    fn blob_name(&self) -> String {
        match self {
            Hash::Sha256(h) | Hash::GitBlob(h) => h.to_ascii_lowercase(),
        }
    }

    /// The hash of `path`'s content, in this hash's kind.
    fn compute(&self, path: &Path) -> Result<String> {
        match self {
            Hash::Sha256(_) => Ok(crate::io::fingerprint::read_sha256(path)?),
            Hash::GitBlob(_) => super::git_blob_id(path),
        }
    }
}

/// A value a server sent, cut for a message.
fn shorten(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The HTTP client: an agent that follows no redirect by itself, the endpoint's
/// origin (where the token may go) and the settings.
struct Client<'a> {
    hub: &'a HubSettings,
    agent: ureq::Agent,
    origin: Origin,
}

/// Scheme, host and port: a token goes only to the endpoint's.
#[derive(Debug, PartialEq, Eq)]
struct Origin(String, String, u16);

impl Origin {
    fn of(uri: &Uri) -> Option<Origin> {
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let port = match (uri.port_u16(), scheme.as_str()) {
            (Some(p), _) => p,
            (None, "http") => 80,
            (None, "https") => 443,
            _ => return None,
        };
        Some(Origin(scheme, uri.host()?.to_ascii_lowercase(), port))
    }
}

/// How one request ended, when it did not give a response to read.
enum Failure {
    /// The network or the server failed: worth another try.
    Transient(String),
    /// Final.
    Fatal(anyhow::Error),
}

impl<'a> Client<'a> {
    fn new(hub: &'a HubSettings) -> Result<Self> {
        let uri: Uri = hub
            .endpoint
            .url()
            .parse()
            .ok()
            .filter(|u: &Uri| matches!(u.scheme_str(), Some("http" | "https")))
            .with_context(|| {
                format!(
                    "HF_ENDPOINT {} is not an http:// or https:// URL",
                    hub.endpoint
                )
            })?;
        let origin = Origin::of(&uri)
            .with_context(|| format!("HF_ENDPOINT {} names no host", hub.endpoint))?;
        if let Some(token) = &hub.token {
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                bail!(
                    "HF_TOKEN (or the token file) holds a space, a control character or a \
                     non-ASCII character, which an HTTP header cannot carry: set it to the \
                     token alone"
                );
            }
        }
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_per_read(Some(hub.download_timeout))
            .max_redirects(0)
            .http_status_as_error(false)
            .accept_encoding(ureq::config::AutoHeaderValue::None)
            .build()
            .into();
        Ok(Client { hub, agent, origin })
    }

    /// GET `url`, following up to [`MAX_REDIRECTS`] redirects by hand: the token is
    /// sent only to the endpoint's origin; a redirect to another scheme is refused.
    fn get(&self, url: &str, from: u64) -> Result<Response<ureq::Body>, Failure> {
        let mut uri: Uri = url
            .parse()
            .map_err(|e| Failure::Fatal(anyhow!("bad URL {}: {e}", self.hub.scrub(url))))?;
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self.agent.get(&uri);
            if let (Some(token), true) = (
                &self.hub.token,
                Origin::of(&uri).as_ref() == Some(&self.origin),
            ) {
                request = request.header("Authorization", format!("Bearer {token}"));
            }
            if from > 0 {
                request = request.header("Range", format!("bytes={from}-"));
            }
            let response = request
                .call()
                .map_err(|e| Failure::Transient(self.hub.scrub(&e.to_string())))?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| {
                    Failure::Fatal(anyhow!(
                        "the hub at {} answered HTTP {} without a Location",
                        self.hub.endpoint,
                        response.status().as_u16()
                    ))
                })?;
            uri = redirect(&uri, location).ok_or_else(|| {
                Failure::Fatal(anyhow!(
                    "the hub at {} redirected to {:?}, which is not an http:// or https:// \
                     URL: refused",
                    self.hub.endpoint,
                    shorten(&self.hub.scrub(location))
                ))
            })?;
        }
        Err(Failure::Fatal(anyhow!(
            "the hub at {} redirected more than {MAX_REDIRECTS} times",
            self.hub.endpoint
        )))
    }

    /// The repository's commit and files at the revision asked for.
    fn list(&self, id: &HubId) -> Result<Listing, Fetch> {
        let url = format!(
            "{}/api/models/{}/revision/{}?blobs=true",
            self.hub.endpoint.url(),
            id.repo,
            id.revision().replace('/', "%2F")
        );
        let mut response = match self.get(&url, 0) {
            Ok(r) => r,
            Err(Failure::Transient(reason)) => return Err(Fetch::Unreachable(reason)),
            Err(Failure::Fatal(e)) => return Err(Fetch::Refused(e)),
        };
        let status = response.status().as_u16();
        match status {
            200 => {}
            500.. => {
                return Err(Fetch::Unreachable(format!(
                    "HTTP {status} from {}",
                    self.hub.endpoint
                )))
            }
            _ => return Err(Fetch::Refused(anyhow!(self.refusal(id, status)))),
        }
        let invalid = |e: String| {
            Fetch::Refused(anyhow!(
                "the hub's listing of {} at {} is not valid: {e}",
                id.repo,
                self.hub.endpoint
            ))
        };
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_LISTING_BYTES)
            .read_to_string()
            .map_err(|e| invalid(self.hub.scrub(&e.to_string())))?;
        let listing: Listing = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        if !is_commit_id(&listing.sha) {
            return Err(invalid(format!(
                "its commit `sha` is {:?}, not 40 hex digits; refused (the snapshot \
                 directory is named by it)",
                shorten(&listing.sha)
            )));
        }
        Ok(listing)
    }

    fn refusal(&self, id: &HubId, status: u16) -> String {
        let endpoint = &self.hub.endpoint;
        match status {
            401 | 403 if self.hub.token.is_none() => format!(
                "{} is gated or private (HTTP {status} from {endpoint}): set HF_TOKEN to a \
                 token that may read it (or log in with `huggingface-cli login`)",
                id.repo
            ),
            401 | 403 => format!(
                "the token (HF_TOKEN or the token file) may not read {} (HTTP {status} from \
                 {endpoint}): request access on its page, or use another token",
                id.repo
            ),
            404 => format!(
                "{} is neither a local path nor a model on {endpoint} at revision {} (HTTP \
                 404): check the path, the id and the revision",
                id.repo,
                id.revision()
            ),
            _ => format!(
                "the hub at {endpoint} answered HTTP {status} for {}",
                id.repo
            ),
        }
    }
}

/// `location` (absolute, or a path on the current host) resolved against `current`;
/// `None` for another scheme.
fn redirect(current: &Uri, location: &str) -> Option<Uri> {
    let uri: Uri = if location.starts_with('/') && !location.starts_with("//") {
        format!(
            "{}://{}{location}",
            current.scheme_str()?,
            current.authority()?.as_str()
        )
        .parse()
        .ok()?
    } else {
        location.parse().ok()?
    };
    matches!(uri.scheme_str(), Some("http" | "https"))
        .then_some(uri)
        .filter(|u| u.host().is_some())
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
            // A local checkpoint may share a shard with `../`; a server's may not.
            if !is_plain_relative(&shard) {
                bail!(
                    "{}: model.safetensors.index.json names the shard {:?} in its weight_map, \
                     which is not a plain relative path inside the snapshot: refused",
                    id.repo,
                    shorten(&shard)
                );
            }
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
        let gguf: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.ends_with(".gguf"))
            .collect();
        if !gguf.is_empty() {
            bail!(
                "{} holds GGUF files, no safetensors: name one as {}:FILE.gguf ({})",
                id.repo,
                id.repo,
                gguf.join(", ")
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
    client: &Client,
    id: &HubId,
    need: Need,
    repo_dir: &Path,
    listing: &Listing,
) -> Result<PathBuf> {
    let snapshot = repo_dir.join("snapshots").join(&listing.sha);
    let files = Files {
        client,
        repo: &id.repo,
        commit: &listing.sha,
        blobs: repo_dir.join("blobs"),
        locks: repo_dir
            .parent()
            .unwrap_or(repo_dir)
            .join(".locks")
            .join(repo_dir.file_name().unwrap_or_default()),
        snapshot: snapshot.clone(),
    };
    // The index first: it names the shards.
    let index_name = "model.safetensors.index.json";
    let index = match listing.siblings.iter().find(|s| s.rfilename == index_name) {
        Some(f) if id.file.is_none() && need == Need::Model => {
            files.fetch(f)?;
            Some(snapshot.join(index_name))
        }
        _ => None,
    };
    for file in wanted(id, need, listing, index.as_deref())? {
        files.fetch(file)?;
    }
    if id.revision() != listing.sha {
        let refs = repo_dir.join("refs").join(id.revision());
        if let Some(parent) = refs.parent() {
            std::fs::create_dir_all(parent)?;
        }
        crate::io::atomic::write_file(&refs, listing.sha.as_bytes())
            .with_context(|| format!("cannot write {}", refs.display()))?;
    }
    Ok(target(&snapshot, id))
}

/// Where one commit's files go.
struct Files<'a> {
    client: &'a Client<'a>,
    repo: &'a str,
    commit: &'a str,
    blobs: PathBuf,
    /// `huggingface_hub`'s lock directory (`<cache>/.locks/models--org--name`), so that
    /// it and hopscore wait for each other.
    locks: PathBuf,
    snapshot: PathBuf,
}

impl Files<'_> {
    /// Makes `file` a checked file of the snapshot: kept when its link is there with
    /// the listed size, else linked to its blob, downloaded (and checked) first when
    /// the blob is missing.
    fn fetch(&self, file: &Sibling) -> Result<()> {
        let endpoint = &self.client.hub.endpoint;
        if !is_plain_relative(&file.rfilename) {
            bail!(
                "the hub at {endpoint} lists a file {:?} of {}, which is not a plain relative \
                 path: refused",
                shorten(&file.rfilename),
                self.repo
            );
        }
        let link = self.snapshot.join(&file.rfilename);
        let hash = Hash::of(file, self.client)?;
        if link.is_file() {
            // Checked again each run (the weights' hash is remembered for the run's
            // fingerprint, so this reads nothing twice): a file another client left
            // unchecked, or one damaged since, is downloaded anew.
            match self.problem(file, &hash, &link, true)? {
                None => return Ok(()),
                Some(problem) => {
                    log::warn!(
                        "the cached {} of {} is damaged ({problem}): downloading it again",
                        file.rfilename,
                        self.repo
                    );
                    let blob = link.canonicalize().ok();
                    let _ = std::fs::remove_file(&link);
                    if let Some(blob) = blob.filter(|b| b.starts_with(&self.blobs)) {
                        let _ = std::fs::remove_file(blob);
                    }
                }
            }
        }
        let blob = self.blobs.join(hash.blob_name());
        std::fs::create_dir_all(&self.blobs)
            .with_context(|| format!("cannot create {}", self.blobs.display()))?;
        let _lock = self.lock(&blob, &file.rfilename)?;
        if !blob.is_file() {
            let part = blob.with_extension("incomplete");
            self.transfer(file, &part)?;
            self.check(file, &hash, &part, false)?;
            File::open(&part)?.sync_all()?;
            std::fs::rename(&part, &blob)?;
        } else {
            // A blob another client left: checked once, before it enters the snapshot
            // (its SHA-256 remembered for the run's fingerprint).
            self.check(file, &hash, &blob, true)?;
        }
        self.link(&link, &blob)
    }

    /// Holds `blob`'s lock, waiting (and saying so) while another process downloads it.
    fn lock(&self, blob: &Path, name: &str) -> Result<File> {
        let path = self
            .locks
            .join(blob.file_name().unwrap_or_default())
            .with_extension("lock");
        std::fs::create_dir_all(&self.locks)
            .with_context(|| format!("cannot create {}", self.locks.display()))?;
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open the lock {}", path.display()))?;
        let mut say_at = Instant::now();
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(lock),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("cannot lock {}", path.display()))
                }
            }
            // Said at once, then once a minute.
            if Instant::now() >= say_at {
                log::info!(
                    "waiting for another process downloading {name} of {} (lock {})",
                    self.repo,
                    path.display()
                );
                say_at += Duration::from_secs(60);
            }
            stop_point()?;
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Downloads `file` into `part`, resuming what it holds, retrying a stalled or cut
    /// transfer up to [`ATTEMPTS`] times.
    fn transfer(&self, file: &Sibling, part: &Path) -> Result<()> {
        let url = format!(
            "{}/{}/resolve/{}/{}",
            self.client.hub.endpoint.url(),
            self.repo,
            self.commit,
            file.rfilename
        );
        let mut progress = LogProgress::new(self.repo, &file.rfilename, file.size);
        for attempt in 1..=ATTEMPTS {
            stop_point()?;
            let reason = match self.attempt(&url, file, part, &mut progress) {
                Ok(()) => return Ok(()),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Transient(reason)) => reason,
            };
            if attempt == ATTEMPTS {
                bail!(
                    "downloading {} of {} from {} failed {ATTEMPTS} times (last: {reason}); \
                     run again to resume it",
                    file.rfilename,
                    self.repo,
                    self.client.hub.endpoint
                );
            }
            let wait = Duration::from_secs(1 << (attempt - 1));
            log::warn!(
                "downloading {} of {}: {reason}; resuming in {} s (try {} of {ATTEMPTS})",
                file.rfilename,
                self.repo,
                wait.as_secs(),
                attempt + 1
            );
            let until = Instant::now() + wait;
            while Instant::now() < until {
                stop_point()?;
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        unreachable!("the last attempt returns")
    }

    /// One request for the rest of `file` after what `part` holds.
    fn attempt(
        &self,
        url: &str,
        file: &Sibling,
        part: &Path,
        progress: &mut LogProgress,
    ) -> Result<(), Failure> {
        let io =
            |e: std::io::Error| Failure::Fatal(anyhow!("cannot write {}: {e}", part.display()));
        let bound = file.size.unwrap_or(MAX_UNLISTED_BYTES);
        let mut have = std::fs::metadata(part).map(|m| m.len()).unwrap_or(0);
        if have > bound {
            have = 0;
        }
        if file.size == Some(have) {
            return Ok(());
        }
        let mut response = self.client.get(url, have)?;
        let status = response.status().as_u16();
        match status {
            206 if have > 0 => {
                let range = response
                    .headers()
                    .get("content-range")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                if !range.starts_with(&format!("bytes {have}-")) {
                    // Not the range asked for: start again from the first byte.
                    std::fs::remove_file(part).map_err(io)?;
                    return Err(Failure::Transient(format!(
                        "the server sent the range {range:?}, not bytes {have}-"
                    )));
                }
            }
            // The whole file (a server that ignores ranges): the part starts anew.
            200 | 206 => have = 0,
            416 => {
                std::fs::remove_file(part).map_err(io)?;
                return Err(Failure::Transient("HTTP 416 for the resumed range".into()));
            }
            408 | 429 | 500.. => {
                return Err(Failure::Transient(format!(
                    "HTTP {status} from {}",
                    self.client.hub.endpoint
                )))
            }
            _ => {
                return Err(Failure::Fatal(anyhow!(
                    "the hub at {} answered HTTP {status} for {} of {}",
                    self.client.hub.endpoint,
                    file.rfilename,
                    self.repo
                )))
            }
        }
        let mut out = File::options()
            .create(true)
            .append(have > 0)
            .write(true)
            .truncate(have == 0)
            .open(part)
            .map_err(io)?;
        progress.start(have);
        let mut body = response.body_mut().as_reader();
        let mut buf = vec![0u8; 1 << 18];
        loop {
            if stop_point().is_err() {
                return Err(Failure::Fatal(Interrupted.into()));
            }
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    let _ = out.flush();
                    return Err(Failure::Transient(self.client.hub.scrub(&e.to_string())));
                }
            };
            if have + n as u64 > bound {
                return Err(Failure::Fatal(anyhow!(
                    "the hub at {} sent more than the {bound} bytes {} has{}: refused",
                    self.client.hub.endpoint,
                    file.rfilename,
                    if file.size.is_some() {
                        " by its listing"
                    } else {
                        " at most when unlisted"
                    }
                )));
            }
            out.write_all(&buf[..n]).map_err(io)?;
            have += n as u64;
            progress.update(have);
        }
        out.flush().map_err(io)?;
        match file.size {
            Some(size) if have < size => Err(Failure::Transient(format!(
                "the connection closed after {have} of {size} bytes"
            ))),
            _ => Ok(()),
        }
    }

    /// How `path` differs from the listing (its size, then its hash), if it does;
    /// `remembered`: the SHA-256 may come from the process's memo of unchanged files.
    fn problem(
        &self,
        file: &Sibling,
        hash: &Hash,
        path: &Path,
        remembered: bool,
    ) -> Result<Option<String>> {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if let Some(want) = file.size.filter(|&want| want != size) {
            return Ok(Some(format!("{size} bytes of {want}")));
        }
        let got = match hash {
            Hash::Sha256(_) if remembered => crate::io::fingerprint::file_sha256(path)?,
            _ => hash.compute(path)?,
        };
        Ok((got != hash.blob_name())
            .then(|| format!("hash {got}, the hub lists {}", hash.blob_name())))
    }

    /// Refuses `path` unless its size and hash are the listing's, removing it so that
    /// the next run downloads it anew.
    fn check(&self, file: &Sibling, hash: &Hash, path: &Path, remembered: bool) -> Result<()> {
        if let Some(problem) = self.problem(file, hash, path, remembered)? {
            let _ = std::fs::remove_file(path);
            bail!(
                "the download of {} of {} is damaged ({problem}); it was removed: run again \
                 to download it anew",
                file.rfilename,
                self.repo
            );
        }
        Ok(())
    }

    /// Points `link` at `blob` by a relative path, as `huggingface_hub` does; the link
    /// appears whole (made beside it, then renamed over).
    fn link(&self, link: &Path, blob: &Path) -> Result<()> {
        let parent = link.parent().unwrap_or(&self.snapshot);
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
        let depth = link
            .strip_prefix(self.snapshot.parent().unwrap_or(&self.snapshot))
            .map(|p| p.components().count())
            .unwrap_or(1);
        let mut relative = PathBuf::new();
        for _ in 0..depth {
            relative.push("..");
        }
        relative.push("blobs");
        relative.push(blob.file_name().unwrap_or_default());
        let temp = parent.join(format!(
            ".{}.{}.link",
            link.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&temp);
        std::os::unix::fs::symlink(&relative, &temp)
            .with_context(|| format!("cannot link {}", link.display()))?;
        std::fs::rename(&temp, link).with_context(|| format!("cannot link {}", link.display()))
    }
}

/// Download progress as log lines: the file and its size, then every 10 % of a file
/// of 10 MB or more, with rate and ETA.
struct LogProgress {
    size: Option<u64>,
    started: Instant,
    from: u64,
    next_report: u64,
    file: String,
}

impl LogProgress {
    fn new(repo: &str, file: &str, size: Option<u64>) -> Self {
        let mb = size.map_or("size not listed".to_string(), |s| {
            format!("{:.1} MB", s as f64 / 1e6)
        });
        log::info!("downloading {file} of {repo} ({mb})");
        LogProgress {
            size,
            started: Instant::now(),
            from: 0,
            next_report: 0,
            file: file.to_string(),
        }
    }

    /// A transfer starts (again) at byte `from`.
    fn start(&mut self, from: u64) {
        self.started = Instant::now();
        self.from = from;
        self.next_report = from + self.size.unwrap_or(u64::MAX) / 10;
    }

    fn update(&mut self, done: u64) {
        let Some(size) = self.size.filter(|&s| s >= 10 << 20) else {
            return;
        };
        if done >= self.next_report && done < size {
            self.next_report += size / 10;
            let secs = self.started.elapsed().as_secs_f64().max(1e-3);
            let rate = (done - self.from) as f64 / secs;
            log::info!(
                "{}: {:.0} % ({:.1} MB/s, ETA {:.0} s)",
                self.file,
                100.0 * done as f64 / size as f64,
                rate / 1e6,
                (size - done) as f64 / rate.max(1.0)
            );
        }
    }
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

    #[test]
    fn redirects_resolve_and_other_schemes_are_refused() {
        let here: Uri = "http://127.0.0.1:8000/org/m/resolve/x/config.json"
            .parse()
            .unwrap();
        let local = redirect(&here, "/api/resolve-cache/models/org/m/x/config.json").unwrap();
        assert_eq!(
            local.to_string(),
            "http://127.0.0.1:8000/api/resolve-cache/models/org/m/x/config.json"
        );
        let cdn = redirect(&here, "https://cdn.example/blob?sig=1").unwrap();
        assert_eq!(
            Origin::of(&cdn),
            Some(Origin("https".into(), "cdn.example".into(), 443))
        );
        assert_ne!(Origin::of(&cdn), Origin::of(&here));
        for bad in [
            "file:///etc/passwd",
            "ftp://x/y",
            "//evil.example/x",
            "not a url",
        ] {
            assert!(redirect(&here, bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_git_blob_id_is_the_sha1_git_computes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello\n").unwrap();
        // `printf 'hello\n' | git hash-object --stdin`
        let id = "ce013625030ba8dba906f756967f9e9ca394464a";
        assert_eq!(Hash::GitBlob(id.into()).compute(&path).unwrap(), id);
    }
}
