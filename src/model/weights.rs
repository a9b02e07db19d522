//! Checkpoint access: safetensors files memory-mapped with memmap2, tensors converted
//! to f32 on request (f32, f16, bf16 stored), and the name maps of the checkpoint
//! layouts hopscore reads.
//!
//! Layouts (after an optional DataParallel `module.` prefix is stripped):
//! - HF: `deberta.` + encoder names (task models) or bare encoder names (`DebertaV2Model`);
//!   heads `pooler.dense`, `classifier`.
//! - Beam Retrieval: `encoder.` + encoder names; heads `hop_classifier_layer`,
//!   `hop_n_classifier_layer`.
//! - EfficientRAG labeler: `deberta.` + encoder names; heads `pooler.dense`,
//!   `sequence_classifier`, `token_classifier`.
//!
//! The encoder prefix is found from the word-embedding tensor, so every layout above
//! resolves through the same [`Weights::pp`] calls.
//!
//! Decoders read HF names (`model.layers.N.self_attn.q_proj.weight`, `transformer.h.N.…`)
//! from safetensors, or from a GGUF file through [`super::gguf::gguf_name`], with
//! llama.cpp's Q/K row permutation undone at read time.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use thiserror::Error;

use super::gguf::{GgufError, GgufFile};
use crate::tensor::HostTensor;

/// A weight file or tensor that cannot be used (`Io` keeps the OS error as its
/// `source`, out of the message: callers print the chain once).
#[derive(Debug, Error)]
pub enum WeightError {
    #[error("cannot open {path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a valid safetensors file: {reason}")]
    Format { path: String, reason: String },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(
        "no safetensors weights in {0}: expected model.safetensors or model.safetensors.index.json \
         (convert PyTorch .bin/.pt checkpoints with tools/convert_to_safetensors.py; see weights/README.md)"
    )]
    NotFound(String),
    #[error("tensor `{name}` is missing from the checkpoint ({count} tensors; {hint})")]
    Missing {
        name: String,
        count: usize,
        hint: String,
    },
    #[error("tensor `{name}` has shape {found:?}, the config implies {expected:?}")]
    Shape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor `{name}` has dtype {dtype}; hopscore reads f32, f16 and bf16 weights")]
    Dtype { name: String, dtype: String },
    #[error(
        "tensor `{name}` holds {count} non-finite values (NaN or ±inf; the first at flat \
         index {first}): the checkpoint is damaged or was saved from a diverged run"
    )]
    NonFinite {
        name: String,
        count: usize,
        first: usize,
    },
    #[error(
        "{count} tensors of the checkpoint are not part of the model that config.json \
         describes: {names}. Check config.json (its layer count, heads or sizes) against \
         the checkpoint"
    )]
    Unused { count: usize, names: String },
}

/// Refuses a tensor with NaN or infinite values.
fn check_finite(name: &str, t: HostTensor) -> Result<HostTensor, WeightError> {
    let mut bad = t.data.iter().enumerate().filter(|(_, v)| !v.is_finite());
    match bad.next() {
        None => Ok(t),
        Some((first, _)) => Err(WeightError::NonFinite {
            name: name.to_string(),
            count: 1 + bad.count(),
            first,
        }),
    }
}

/// Tensors that checkpoints carry as buffers, not parameters (never read).
const BUFFERS: [&str; 4] = [
    "position_ids",
    "inv_freq",
    ".attn.bias",
    ".attn.masked_bias",
];

struct Entry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Byte range inside the memory-mapped file.
    start: usize,
    end: usize,
}

/// Every tensor of a checkpoint (one file or an index of shards), memory-mapped.
pub struct WeightStore {
    files: Vec<Mmap>,
    paths: Vec<PathBuf>,
    /// Keyed by the name with any leading `module.` removed.
    entries: BTreeMap<String, Entry>,
    /// The names read so far ([`WeightStore::get`]).
    read: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl WeightStore {
    /// Opens `model.safetensors`, a sharded `model.safetensors.index.json`, or a file path.
    pub fn open(path: &Path) -> Result<Self, WeightError> {
        let files = if path.is_file() {
            vec![path.to_path_buf()]
        } else if path.join("model.safetensors").is_file() {
            vec![path.join("model.safetensors")]
        } else if path.join("model.safetensors.index.json").is_file() {
            shard_files(&path.join("model.safetensors.index.json"))?
        } else {
            return Err(WeightError::NotFound(path.display().to_string()));
        };
        let mut store = WeightStore {
            files: Vec::new(),
            paths: Vec::new(),
            entries: BTreeMap::new(),
            read: Default::default(),
        };
        for f in files {
            store.add_file(&f)?;
        }
        Ok(store)
    }

    fn add_file(&mut self, path: &Path) -> Result<(), WeightError> {
        let io = |source| WeightError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the file is opened read-only and hopscore never writes checkpoints while
        // reading them; a concurrent external truncation is the documented risk of mmap.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (header, meta) =
            SafeTensors::read_metadata(&mmap).map_err(|e| WeightError::Format {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        let data_start = 8 + header;
        let file_idx = self.files.len();
        for (name, info) in meta.tensors() {
            let (s, e) = info.data_offsets;
            if data_start + e > mmap.len() {
                return Err(WeightError::Format {
                    path: path.display().to_string(),
                    reason: format!(
                        "tensor `{name}` extends past the end of the file (truncated?)"
                    ),
                });
            }
            let key = name.strip_prefix("module.").unwrap_or(&name).to_string();
            self.entries.insert(
                key,
                Entry {
                    file: file_idx,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    start: data_start + s,
                    end: data_start + e,
                },
            );
        }
        self.files.push(mmap);
        self.paths.push(path.to_path_buf());
        Ok(())
    }

    /// Tensor names (without `module.`), sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Stored shape of a tensor, if present.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// Parameter count per stored dtype (e.g. `{"F32": 1234}`).
    pub fn dtype_summary(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for e in self.entries.values() {
            *m.entry(format!("{:?}", e.dtype)).or_default() += e.shape.iter().product::<usize>();
        }
        m
    }

    /// The files this store maps.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Reads a tensor as f32, checking its shape and that every value is finite.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<HostTensor, WeightError> {
        let e = self.entries.get(name).ok_or_else(|| self.missing(name))?;
        if let Ok(mut read) = self.read.lock() {
            read.insert(name.to_string());
        }
        if e.shape != shape {
            return Err(WeightError::Shape {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: e.shape.clone(),
            });
        }
        let bytes = &self.files[e.file][e.start..e.end];
        let data = match e.dtype {
            Dtype::F32 => convert(bytes, f32::from_le_bytes),
            Dtype::F16 => convert(bytes, |b| half::f16::from_le_bytes(b).to_f32()),
            Dtype::BF16 => convert(bytes, |b| half::bf16::from_le_bytes(b).to_f32()),
            other => {
                return Err(WeightError::Dtype {
                    name: name.to_string(),
                    dtype: format!("{other:?}"),
                })
            }
        };
        check_finite(name, HostTensor::new(shape.to_vec(), data))
    }

    /// Refuses tensors under any of `prefixes` that no [`WeightStore::get`] read (a
    /// config with fewer layers than the checkpoint), buffers aside.
    pub fn refuse_unread(&self, prefixes: &[String]) -> Result<(), WeightError> {
        let read = self.read.lock().map(|r| r.clone()).unwrap_or_default();
        let unread: Vec<&str> = self
            .names()
            .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
            .filter(|n| !read.contains(*n) && !BUFFERS.iter().any(|b| n.ends_with(b)))
            .collect();
        match unread.len() {
            0 => Ok(()),
            count => Err(WeightError::Unused {
                count,
                names: match count {
                    1..=4 => unread.join(", "),
                    _ => format!("{}, … {}", unread[..3].join(", "), unread[count - 1]),
                },
            }),
        }
    }

    fn missing(&self, name: &str) -> WeightError {
        let leaf = name.rsplit('.').nth(1).unwrap_or(name);
        let similar: Vec<&str> = self.names().filter(|n| n.contains(leaf)).take(3).collect();
        let hint = if similar.is_empty() {
            format!(
                "first tensors: {}",
                self.names().take(3).collect::<Vec<_>>().join(", ")
            )
        } else {
            format!("similar: {}", similar.join(", "))
        };
        WeightError::Missing {
            name: name.to_string(),
            count: self.entries.len(),
            hint,
        }
    }
}

fn convert<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f32) -> Vec<f32> {
    bytes
        .chunks_exact(N)
        .map(|c| f(c.try_into().expect("chunks_exact yields N bytes")))
        .collect()
}

fn shard_files(index: &Path) -> Result<Vec<PathBuf>, WeightError> {
    let dir = index.parent().unwrap_or(Path::new("."));
    Ok(shard_names(index)?
        .into_iter()
        .map(|s| dir.join(s))
        .collect())
}

/// The shard file names a `model.safetensors.index.json` names, each once, sorted.
pub(crate) fn shard_names(index: &Path) -> Result<Vec<String>, WeightError> {
    let text = std::fs::read_to_string(index).map_err(|source| WeightError::Io {
        path: index.display().to_string(),
        source,
    })?;
    let bad = |reason: String| WeightError::Format {
        path: index.display().to_string(),
        reason,
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no `weight_map` object".into()))?;
    let mut shards: Vec<String> = map
        .values()
        .filter_map(|s| s.as_str().map(String::from))
        .collect();
    shards.sort();
    shards.dedup();
    Ok(shards)
}

/// Where a [`Weights`] view reads from.
enum Source {
    Store(WeightStore),
    /// Deterministic pseudo-random tensors of whatever shape is asked for
    /// (benchmarks of model shapes that have no checkpoint).
    Random {
        seed: u64,
    },
    /// A GGUF file read through the HF → llama.cpp name map.
    Gguf(GgufSource),
}

/// A GGUF file and how to undo llama.cpp's layout changes.
pub struct GgufSource {
    pub file: GgufFile,
    /// `(heads, kv_heads)` when Q/K rows were permuted by llama.cpp's converter
    /// (architectures `llama` and `mistral`).
    pub permuted_qk: Option<(usize, usize)>,
}

impl GgufSource {
    fn get(&self, name: &str, shape: &[usize]) -> Result<HostTensor, WeightError> {
        let g = super::gguf::gguf_name(name).ok_or_else(|| WeightError::Missing {
            name: name.to_string(),
            count: self.file.tensors.len(),
            hint: "no GGUF name is known for this tensor".into(),
        })?;
        let t = self.file.tensor(&g)?;
        if t.shape != shape {
            return Err(WeightError::Shape {
                name: format!("{name} (GGUF `{g}`)"),
                expected: shape.to_vec(),
                found: t.shape,
            });
        }
        let heads = match self.permuted_qk {
            Some((h, _)) if g.contains(".attn_q.") => Some(h),
            Some((_, kv)) if g.contains(".attn_k.") => Some(kv),
            _ => None,
        };
        let t = match heads {
            Some(h) => super::gguf::unpermute_rows(&t, h).map_err(|reason| {
                WeightError::from(GgufError::Format {
                    path: self.file.path().display().to_string(),
                    reason: format!("`{g}`: {reason}"),
                })
            })?,
            None => t,
        };
        check_finite(&format!("{name} (GGUF `{g}`)"), t)
    }

    fn contains(&self, name: &str) -> bool {
        super::gguf::gguf_name(name).is_some_and(|g| self.file.tensors.contains_key(&g))
    }
}

/// A view of a checkpoint under a name prefix (candle's `VarBuilder` idea).
#[derive(Clone)]
pub struct Weights {
    source: Arc<Source>,
    prefix: String,
}

/// Suffix that locates the encoder inside any supported layout.
const WORD_EMBEDDINGS: &str = "embeddings.word_embeddings.weight";

impl Weights {
    pub fn new(store: WeightStore) -> Self {
        Self {
            source: Arc::new(Source::Store(store)),
            prefix: String::new(),
        }
    }

    /// Pseudo-random weights (uniform in ±0.05, LayerNorm weights near 1), the same
    /// for the same seed and tensor name. Only [`Weights::get`] and friends work.
    pub fn random(seed: u64) -> Self {
        Self {
            source: Arc::new(Source::Random { seed }),
            prefix: String::new(),
        }
    }

    /// Weights read from a GGUF file (HF tensor names are mapped to GGUF ones).
    pub fn gguf(source: GgufSource) -> Self {
        Self {
            source: Arc::new(Source::Gguf(source)),
            prefix: String::new(),
        }
    }

    /// The safetensors checkpoint behind this view (`None` for random or GGUF weights).
    pub fn store(&self) -> Option<&WeightStore> {
        match &*self.source {
            Source::Store(s) => Some(s),
            Source::Random { .. } | Source::Gguf(_) => None,
        }
    }

    /// A view one level deeper: `pp("encoder")` reads `…encoder.<name>`.
    pub fn pp(&self, name: impl std::fmt::Display) -> Self {
        Self {
            source: self.source.clone(),
            prefix: format!("{}{name}.", self.prefix),
        }
    }

    /// The view rooted at the encoder (`deberta.`, `encoder.` or bare), found through
    /// the word-embedding tensor.
    pub fn encoder(&self) -> Result<Self, WeightError> {
        let Some(store) = self.store() else {
            return Ok(self.clone());
        };
        let found: Vec<&str> = store
            .names()
            .filter(|n| n.ends_with(WORD_EMBEDDINGS))
            .collect();
        match found.as_slice() {
            [one] => Ok(Self {
                source: self.source.clone(),
                prefix: one[..one.len() - WORD_EMBEDDINGS.len()].to_string(),
            }),
            [] => Err(store.missing(WORD_EMBEDDINGS)),
            many => Err(WeightError::Format {
                path: store.paths[0].display().to_string(),
                reason: format!("several encoders found ({}); expected one", many.join(", ")),
            }),
        }
    }

    fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Whether `name` exists under this prefix (always true for random weights).
    pub fn contains(&self, name: &str) -> bool {
        match &*self.source {
            Source::Store(s) => s.contains(&self.full(name)),
            Source::Random { .. } => true,
            Source::Gguf(g) => g.contains(&self.full(name)),
        }
    }

    /// Stored shape of `name` under this prefix.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.store()?.shape(&self.full(name))
    }

    pub fn get(&self, name: &str, shape: &[usize]) -> Result<HostTensor, WeightError> {
        let full = self.full(name);
        match &*self.source {
            Source::Store(s) => s.get(&full, shape),
            Source::Random { seed } => Ok(random_tensor(*seed, &full, shape)),
            Source::Gguf(g) => g.get(&full, shape),
        }
    }

    /// Refuses checkpoint tensors under `{prefix}{part}` for each of `parts` that the
    /// model did not read (see [`WeightStore::refuse_unread`]); random and GGUF weights
    /// (whose metadata is the config) have nothing to check.
    pub fn refuse_unread(&self, parts: &[&str]) -> Result<(), WeightError> {
        match self.store() {
            Some(store) => store.refuse_unread(
                &parts
                    .iter()
                    .map(|p| format!("{}{p}", self.prefix))
                    .collect::<Vec<_>>(),
            ),
            None => Ok(()),
        }
    }

    /// Marks `names` as accounted for without reading them: tensors that HF's model
    /// creates for this config and never uses (see [`Weights::refuse_unread`]).
    pub fn unused_by_design(&self, names: &[&str]) {
        if let Some(Ok(mut read)) = self.store().map(|s| s.read.lock()) {
            read.extend(names.iter().map(|n| self.full(n)));
        }
    }

    /// Reads a LayerNorm parameter, accepting the old `gamma`/`beta` names.
    pub fn get_norm(&self, name: &str, shape: &[usize]) -> Result<HostTensor, WeightError> {
        let alias = match name {
            "weight" => "gamma",
            "bias" => "beta",
            _ => name,
        };
        if !self.contains(name) && self.contains(alias) {
            return self.get(alias, shape);
        }
        self.get(name, shape)
    }
}

/// Uniform values in ±0.05 from a SplitMix64 stream seeded by `seed` and the name;
/// LayerNorm weights (`…LayerNorm.weight`) are 1 + that, so activations stay O(1).
fn random_tensor(seed: u64, name: &str, shape: &[usize]) -> HostTensor {
    let mut state = name.bytes().fold(seed ^ 0x9E37_79B9_7F4A_7C15, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    });
    let offset = if name.ends_with("LayerNorm.weight") {
        1.0
    } else {
        0.0
    };
    let n = shape.iter().product();
    let data = (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let unit = (z >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            offset + (unit - 0.5) * 0.1
        })
        .collect();
    HostTensor::new(shape.to_vec(), data)
}
