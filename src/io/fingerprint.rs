//! Run fingerprints: what a resumed run and the shards given to `merge` must share.
//!
//! A fingerprint is the run metadata (`hopscore.*` key-values) without the entries
//! that only say where a file was (`hopscore.model`, `hopscore.input`, …): inputs and
//! models are identified by the SHA-256 of their bytes (`hopscore.input_sha256`,
//! `hopscore.model_sha256`, …), so a moved model directory with the same bytes matches
//! and another input file with the same row count does not.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

/// Metadata keys that record locations, not contents (left out of fingerprints).
pub const LOCATION_KEYS: [&str; 6] = [
    "hopscore.model",
    "hopscore.filter",
    "hopscore.corpus",
    "hopscore.tokenizer",
    "hopscore.input",
    "hopscore.chains",
];

/// SHA-256 of a file's bytes, in hex.
pub fn file_sha256(path: &Path) -> Result<String> {
    crate::model::weights::sha256_file(path)
        .with_context(|| format!("cannot read {} to checksum it", path.display()))
}

/// The identity-bearing entries of `metadata`, sorted by key.
pub fn identity(metadata: &[(String, String)]) -> BTreeMap<String, String> {
    metadata
        .iter()
        .filter(|(k, _)| !LOCATION_KEYS.contains(&k.as_str()))
        .cloned()
        .collect()
}

/// The fingerprint of `metadata` as stored in a parts manifest (JSON).
pub fn of(metadata: &[(String, String)]) -> String {
    serde_json::to_string(&identity(metadata)).expect("string maps serialise")
}

/// The entries that differ between two identities, each as `key: a ≠ b` (`a` from
/// `before`, `b` from `now`; `(none)` when absent).
pub fn diff(before: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(now.keys()).collect();
    let show = |v: Option<&String>| v.map_or("(none)".to_string(), |v| format!("{v:?}"));
    keys.into_iter()
        .filter(|k| before.get(*k) != now.get(*k))
        .map(|k| format!("{k}: {} ≠ {}", show(before.get(k)), show(now.get(k))))
        .collect()
}

/// [`diff`] of two stored fingerprints, joined for a message (`then ≠ now`).
pub fn differences(before: &str, now: &str) -> String {
    match (
        serde_json::from_str::<BTreeMap<String, String>>(before),
        serde_json::from_str::<BTreeMap<String, String>>(now),
    ) {
        (Ok(b), Ok(n)) => diff(&b, &n).join("; "),
        _ => format!("the stored fingerprint {before} is not of this hopscore version"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn locations_do_not_count_and_contents_are_named() {
        let a = meta(&[
            ("hopscore.model", "/a/model"),
            ("hopscore.model_sha256", "m1"),
            ("hopscore.input_sha256", "i1"),
        ]);
        let moved = meta(&[
            ("hopscore.model", "/b/model"),
            ("hopscore.model_sha256", "m1"),
            ("hopscore.input_sha256", "i1"),
        ]);
        assert_eq!(of(&a), of(&moved));
        let other = meta(&[
            ("hopscore.model_sha256", "m1"),
            ("hopscore.input_sha256", "i2"),
        ]);
        assert_eq!(
            differences(&of(&a), &of(&other)),
            "hopscore.input_sha256: \"i1\" ≠ \"i2\""
        );
    }
}
