//! The key-value run metadata written into the footer of every output file:
//! `hopscore.version`, the model, its content hash, the compute dtype and the run's
//! options, all as `hopscore.<key>` entries.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::backend::Backend;

/// The model, its content hash ([`super::fingerprint::model_sha256`]), the dtype the
/// backend computes in, then `options`, after `hopscore.version`.
pub fn run_metadata<B: Backend>(
    be: &B,
    model_dir: &Path,
    weights: &[PathBuf],
    options: &[(&str, String)],
) -> Result<Vec<(String, String)>> {
    let mut m = tool_metadata(&[
        ("model", model_dir.display().to_string()),
        (
            "model_sha256",
            super::fingerprint::model_sha256(model_dir, weights)?,
        ),
        ("dtype", be.dtype().suffix().to_string()),
    ]);
    m.extend(tool_metadata(options).into_iter().skip(1));
    Ok(m)
}

/// `hopscore.version` followed by `options` as `hopscore.<key>` metadata entries.
pub fn tool_metadata(options: &[(&str, String)]) -> Vec<(String, String)> {
    std::iter::once(("version", env!("CARGO_PKG_VERSION").to_string()))
        .chain(options.iter().cloned())
        .map(|(k, v)| (format!("hopscore.{k}"), v))
        .collect()
}
