//! The key-value run metadata written into the footer of every output file:
//! `hopscore.version`, the model, its content hash, the compute dtype and the run's
//! options, all as `hopscore.<key>` entries.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::backend::Backend;

/// The model, its content hash ([`super::fingerprint::model_sha256`]), the dtype the
/// backend computes in, the hub repository and commit of a model taken from the hub
/// cache ([`hub_snapshot`]), then `options`, after `hopscore.version`, and on a GPU the
/// kernels chosen for each op (`hopscore.gpu_kernels`, [`Backend::kernel_plan`]).
pub fn run_metadata<B: Backend, K: AsRef<str>>(
    be: &B,
    model_dir: &Path,
    weights: &[PathBuf],
    options: &[(K, String)],
) -> Result<Vec<(String, String)>> {
    let mut m = tool_metadata(&[
        ("model", model_dir.display().to_string()),
        (
            "model_sha256",
            super::fingerprint::model_sha256(model_dir, weights)?,
        ),
        ("dtype", be.dtype().suffix().to_string()),
    ]);
    if let Some((repo, commit)) = hub_snapshot(model_dir) {
        m.extend(prefixed(&[("model_repo", repo), ("model_commit", commit)]));
    }
    let known = |k: &str| {
        m.iter()
            .any(|(key, _)| key.strip_prefix("hopscore.") == Some(k))
    };
    let options: Vec<(&str, String)> = options
        .iter()
        .map(|(k, v)| (k.as_ref(), v.clone()))
        .filter(|(k, _)| !known(k))
        .collect();
    m.extend(prefixed(&options));
    if let Some(plan) = be.kernel_plan() {
        m.push(("hopscore.gpu_kernels".into(), plan));
    }
    Ok(m)
}

/// The repository and commit of a path in a Hugging Face Hub cache snapshot
/// (`…/models--org--name/snapshots/<commit>[/file]`).
pub fn hub_snapshot(path: &Path) -> Option<(String, String)> {
    let parts: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let at = parts.iter().rposition(|p| p == "snapshots")?;
    let repo = parts.get(at.checked_sub(1)?)?.strip_prefix("models--")?;
    let commit = parts.get(at + 1)?;
    Some((repo.replacen("--", "/", 1), commit.clone()))
}

/// `hopscore.version` followed by `options` as `hopscore.<key>` metadata entries.
pub fn tool_metadata<K: AsRef<str>>(options: &[(K, String)]) -> Vec<(String, String)> {
    let mut m = vec![(
        "hopscore.version".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    )];
    m.extend(prefixed(options));
    m
}

/// `options` as `hopscore.<key>` metadata entries (to add to a [`tool_metadata`]).
pub fn prefixed<K: AsRef<str>>(options: &[(K, String)]) -> Vec<(String, String)> {
    options
        .iter()
        .map(|(k, v)| (format!("hopscore.{}", k.as_ref()), v.clone()))
        .collect()
}

/// `metadata` with each of `settings` (`hopscore.<key>` entries: the device's, which the
/// run adds to the job's) whose key it does not hold yet: the job records what ran
/// (`hopscore.device`, `hopscore.dtype`), the settings what was asked for.
pub fn add_settings(metadata: &mut Vec<(String, String)>, settings: &[(String, String)]) {
    for (key, value) in settings {
        if !metadata.iter().any(|(k, _)| k == key) {
            metadata.push((key.clone(), value.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_paths_name_their_repo_and_commit() {
        let p = Path::new("/c/hub/models--org--na-me/snapshots/abc123/1_Pooling/config.json");
        assert_eq!(
            hub_snapshot(p),
            Some(("org/na-me".to_string(), "abc123".to_string()))
        );
        assert_eq!(hub_snapshot(Path::new("/weights/model")), None);
    }
}
