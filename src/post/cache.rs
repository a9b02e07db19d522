//! The on-disk response cache: one JSON file per request, named by the SHA-256 of the
//! request body (model, messages, sampling settings — not the endpoint URL or the key),
//! under `<dir>/<first two hex digits>/<hash>.json`. Files are written to a unique
//! temporary name and renamed, so concurrent workers and killed runs never leave a torn
//! entry; an unreadable entry counts as a miss and is rewritten. A resumed or repeated
//! run therefore sends no request twice.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Usage;

/// A stored reply, with the request it answers (for auditing a run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub request: serde_json::Value,
    pub text: String,
    pub usage: Usage,
}

/// A cache directory.
pub struct ResponseCache {
    dir: PathBuf,
    tmp_counter: AtomicU64,
}

/// Hex SHA-256 of `body`: the cache key of a request.
pub fn key(body: &str) -> String {
    crate::io::fingerprint::hex(&Sha256::digest(body.as_bytes()))
}

impl ResponseCache {
    /// Opens (creating) `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the cache directory {}", dir.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            tmp_counter: AtomicU64::new(0),
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2]).join(format!("{key}.json"))
    }

    /// The stored entry for `key`, if any (a damaged file reads as absent).
    pub fn get(&self, key: &str) -> Option<Entry> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Stores `entry` under `key` atomically (temporary file + rename).
    pub fn put(&self, key: &str, entry: &Entry) -> Result<()> {
        let path = self.path(key);
        let dir = path.parent().expect("entries live in a subdirectory");
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{key}.{}.{n}.tmp", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec(entry)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_reads_as_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ResponseCache::open(dir.path()).unwrap();
        let k = key("{\"model\":\"m\"}");
        assert_eq!(k.len(), 64);
        assert_eq!(cache.get(&k), None);
        let entry = Entry {
            request: serde_json::json!({"model": "m"}),
            text: "hello".into(),
            usage: Usage {
                prompt_tokens: 3,
                completion_tokens: 1,
                cut_at_max_tokens: false,
            },
        };
        cache.put(&k, &entry).unwrap();
        assert_eq!(cache.get(&k), Some(entry));
        std::fs::write(cache.path(&k), b"{trunc").unwrap();
        assert_eq!(cache.get(&k), None);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join(&k[..2]))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary files left: {leftovers:?}");
    }
}
