//! Run fingerprints: what a resumed run and the shards given to `merge` must share.
//!
//! A fingerprint is the run metadata (`hopscore.*` key-values) without the entries
//! that only say where a file was (`hopscore.model`, `hopscore.input`, …): inputs and
//! models are identified by the SHA-256 of their bytes (`hopscore.input_sha256`,
//! `hopscore.model_sha256`, …), so a moved model directory with the same bytes matches
//! and another input file with the same row count does not.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use super::paths::Named;

/// Metadata keys that record locations, not contents (left out of fingerprints). An
/// option whose file's contents the run records (`hopscore.sha256.<option>`) is a
/// location too ([`identity`]).
pub const LOCATION_KEYS: [&str; 7] = [
    "hopscore.model",
    "hopscore.filter",
    "hopscore.corpus",
    "hopscore.tokenizer",
    "hopscore.input",
    "hopscore.chains",
    "hopscore.cache",
];

/// Options that pace a run but cannot change a row (batch budgets, questions in
/// flight, threads, retries and waits of the LLM client, CUDA graphs, the response
/// cache): recorded, and left out of fingerprints, so that a run killed for memory can
/// resume with a smaller `--max-batch-tokens` and shards made with other budgets merge
/// (docs/data-safety.md: the same bits in any batch).
pub const PACING_KEYS: [&str; 11] = [
    "hopscore.max_batch_tokens",
    "hopscore.max_active",
    "hopscore.threads",
    "hopscore.cuda_graphs",
    "hopscore.concurrency",
    "hopscore.timeout",
    "hopscore.max_retries",
    "hopscore.backoff",
    "hopscore.backoff_max",
    "hopscore.no_cache",
    "hopscore.question_rows",
];

/// SHA-256 of a file's bytes, in hex. Remembered per file (path, size and
/// modification time) for the life of the process, so that a model hashed for its
/// identity and again as a run's input is read once. A file rewritten with the same
/// size within one timestamp tick keeps its old entry: checks of files this process
/// writes and rereads (committed parts) use [`read_sha256`].
pub fn file_sha256(path: &Path) -> Result<String> {
    type Key = (std::path::PathBuf, u64, Option<std::time::SystemTime>);
    static SEEN: Mutex<BTreeMap<Key, String>> = Mutex::new(BTreeMap::new());
    let key = || -> std::io::Result<Key> {
        let meta = std::fs::metadata(path)?;
        Ok((path.canonicalize()?, meta.len(), meta.modified().ok()))
    };
    let key = key().with_context(|| format!("cannot read {} to checksum it", path.display()))?;
    if let Some(hash) = SEEN.lock().map_or(None, |seen| seen.get(&key).cloned()) {
        return Ok(hash);
    }
    let hash = read_sha256(path)?;
    if let Ok(mut seen) = SEEN.lock() {
        seen.insert(key, hash.clone());
    }
    Ok(hash)
}

/// SHA-256 of a file's bytes, in hex, read now.
pub fn read_sha256(path: &Path) -> Result<String> {
    let hash = || -> std::io::Result<String> {
        let mut h = Sha256::new();
        std::io::copy(
            &mut std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?),
            &mut h,
        )?;
        Ok(hex(&h.finalize()))
    };
    hash().with_context(|| format!("cannot read {} to checksum it", path.display()))
}

/// Checkpoint formats hopscore never reads, left out of a directory's content hash
/// (a directory holding `pytorch_model.bin` next to the safetensors it loads).
const UNREAD: [&str; 8] = ["bin", "pt", "pth", "h5", "msgpack", "onnx", "ckpt", "ot"];

/// Whether `path` is in one of the checkpoint formats of [`UNREAD`].
pub fn is_unread(path: &Path) -> bool {
    let ext = path.extension().unwrap_or_default().to_string_lossy();
    UNREAD.contains(&ext.as_ref())
}

/// SHA-256 of what `path` holds: a file's bytes, or for a directory (a model with its
/// tokenizer and config) the hash of the `hash  name` lines of its regular files, by
/// name (subdirectories and the checkpoint formats of [`UNREAD`] left out).
pub fn path_sha256(path: &Path) -> Result<String> {
    if !path.is_dir() {
        return file_sha256(path);
    }
    let mut names = std::fs::read_dir(path)
        .with_context(|| format!("cannot list {} to checksum it", path.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .map(|e| e.path())
        .filter(|p| p.is_file() && !is_unread(p))
        .collect::<Vec<_>>();
    names.sort();
    let lines = names
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            Ok(format!("{}  {name}", file_sha256(p)?))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(hex(&Sha256::digest(lines.join("\n"))))
}

/// The content entries of a run's other inputs: `hopscore.sha256.<flag>` (the flag
/// without its dashes, `-` as `_`) = [`path_sha256`] of each. One mechanism for every
/// file that shapes a job's rows: what the command takes as an input path is hashed.
pub fn contents(inputs: &[Named]) -> Result<Vec<(String, String)>> {
    inputs
        .iter()
        .map(|n| {
            let flag = n.what.trim_start_matches('-').replace('-', "_");
            Ok((format!("hopscore.sha256.{flag}"), path_sha256(&n.path)?))
        })
        .collect()
}

/// Lower-case hex of `bytes` (how every digest is written).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The identity of a model's bytes: the SHA-256 of its weights (one file: that file's
/// hash; a sharded checkpoint: the hash of the shards' `hash  name` lines, in order),
/// extended by `config.json` when `model` is a directory that has one, so that a
/// changed config with the same weights is another model.
pub fn model_sha256(model: &Path, weights: &[std::path::PathBuf]) -> Result<String> {
    let mut hashes = weights
        .iter()
        .map(|w| {
            let name = w.file_name().unwrap_or_default().to_string_lossy();
            Ok(format!("{}  {name}", file_sha256(w)?))
        })
        .collect::<Result<Vec<_>>>()?;
    let config = model.join("config.json");
    if model.is_dir() && config.is_file() {
        hashes.push(format!("{}  config.json", file_sha256(&config)?));
    }
    Ok(match hashes.as_slice() {
        [only] => only[..64].to_string(),
        _ => hex(&Sha256::digest(hashes.join("\n"))),
    })
}

/// The identity-bearing entries of `metadata`, sorted by key: the `hopscore.*` ones
/// other than locations and pacing options (Parquet's own keys, such as the Arrow
/// schema, are compared as schemas, not as text).
pub fn identity(metadata: &[(String, String)]) -> BTreeMap<String, String> {
    // The options whose file contents are recorded (`hopscore.sha256.<option>`).
    let hashed: std::collections::HashSet<&str> = metadata
        .iter()
        .filter_map(|(k, _)| k.strip_prefix("hopscore.sha256."))
        .collect();
    let hashed = |key: &str| hashed.contains(key.strip_prefix("hopscore.").unwrap_or(key));
    metadata
        .iter()
        .filter(|(k, _)| {
            k.starts_with("hopscore.")
                && !LOCATION_KEYS.contains(&k.as_str())
                && !PACING_KEYS.contains(&k.as_str())
                && !hashed(k)
        })
        .cloned()
        .collect()
}

/// The fingerprint of `metadata` as stored in a parts manifest (JSON).
pub fn of(metadata: &[(String, String)]) -> String {
    serde_json::to_string(&identity(metadata)).expect("string maps serialise")
}

/// The footer key of a finished output holding [`digest`] of its run's fingerprint: a
/// `--resume` of a finished run with the same settings is reported done, not redone.
pub const RUN_KEY: &str = "hopscore.run_fingerprint";

/// The SHA-256 of a run's fingerprint ([`of`]), for [`RUN_KEY`].
pub fn digest(fingerprint: &str) -> String {
    hex(&Sha256::digest(fingerprint.as_bytes()))
}

/// Whether the finished output `path` holds `fingerprint` under [`RUN_KEY`].
pub fn finished_with(path: &Path, fingerprint: &str) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(reader) = parquet::file::reader::SerializedFileReader::new(file) else {
        return false;
    };
    use parquet::file::reader::FileReader;
    let want = digest(fingerprint);
    reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .is_some_and(|kvs| {
            kvs.iter()
                .any(|kv| kv.key == RUN_KEY && kv.value.as_deref() == Some(&want))
        })
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
        // An option whose file's contents are recorded is a location; a pacing option
        // does not count.
        let with = |templates: &str, budget: &str| {
            meta(&[
                ("hopscore.templates", templates),
                ("hopscore.sha256.templates", "t1"),
                ("hopscore.max_batch_tokens", budget),
                ("hopscore.beam_size", "2"),
            ])
        };
        assert_eq!(of(&with("/a/t.txt", "4096")), of(&with("/b/t.txt", "512")));
        let wider = [
            with("/a/t.txt", "4096"),
            meta(&[("hopscore.beam_size", "3")]),
        ]
        .concat();
        assert_eq!(
            differences(&of(&with("/a/t.txt", "4096")), &of(&wider)),
            "hopscore.beam_size: \"2\" ≠ \"3\""
        );
        let other = meta(&[
            ("hopscore.model_sha256", "m1"),
            ("hopscore.input_sha256", "i2"),
        ]);
        assert_eq!(
            differences(&of(&a), &of(&other)),
            "hopscore.input_sha256: \"i1\" ≠ \"i2\""
        );
    }

    #[test]
    fn model_hash_covers_every_shard_and_the_config_but_not_the_path() {
        let root = tempfile::tempdir().unwrap();
        let write = |dir: &str, files: &[(&str, &str)]| {
            let d = root.path().join(dir);
            std::fs::create_dir_all(&d).unwrap();
            for (name, text) in files {
                std::fs::write(d.join(name), text).unwrap();
            }
            d
        };
        let shards = |d: &Path| vec![d.join("a.safetensors"), d.join("b.safetensors")];
        let base = [("a.safetensors", "A"), ("b.safetensors", "B")];
        let one = write("one", &[base[0], base[1], ("config.json", "{}")]);
        let moved = write("moved", &[base[0], base[1], ("config.json", "{}")]);
        let shard2 = write(
            "shard2",
            &[base[0], ("b.safetensors", "C"), ("config.json", "{}")],
        );
        let config = write("config", &[base[0], base[1], ("config.json", "{\"x\":1}")]);
        let h = |d: &Path| model_sha256(d, &shards(d)).unwrap();
        assert_eq!(h(&one), h(&moved));
        assert_ne!(h(&one), h(&shard2), "a changed second shard");
        assert_ne!(h(&one), h(&config), "a changed config.json");
        // A lone file (a GGUF) is identified by its own hash, as `sha256sum` prints it.
        let gguf = one.join("a.safetensors");
        assert_eq!(
            model_sha256(&gguf, std::slice::from_ref(&gguf)).unwrap(),
            "559aead08264d5795d3909718cdd05abd49572e84fe55590eef31a88a08fdffd"
        );
    }
}
