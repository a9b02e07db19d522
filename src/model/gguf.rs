//! GGUF v2/v3 files (llama.cpp's single-file checkpoints), read directly through a
//! memory map: metadata, tensor table, dequantisation to f32, and the llama.cpp →
//! HF transformers name map of decoder tensors.
//!
//! File layout (all little-endian; `gguf.h` in ggml-org/llama.cpp):
//! 1. magic `GGUF`, `u32` version (2 or 3), `u64` tensor count, `u64` key-value count;
//! 2. key-value pairs: key (`u64` length + UTF-8), `u32` value type, value (arrays are
//!    `u32` element type + `u64` count + elements);
//! 3. tensor infos: name, `u32` n_dims, `u64` dims (`ne[0]` first: the fastest-varying
//!    dimension, so dims are the reverse of the row-major shape), `u32` ggml type,
//!    `u64` offset relative to the data section;
//! 4. padding to `general.alignment` (default 32), then the tensor data.
//!
//! Quantised blocks (`ggml-common.h`): `Q8_0`, `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1` hold 32
//! weights per block; the k-quants `Q4_K`, `Q5_K`, `Q6_K` hold 256 per super-block.
//! Every type but `Q6_K` (16-weight sub-blocks) shares one scale and one min per 32
//! weights: those tensors also keep their blocks as stored ([`HostTensor::stored`]).
//!
//! A leaf of `model`: it depends on nothing of hopscore but [`HostTensor`], and has its
//! own error type ([`super::weights`] wraps it).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use memmap2::Mmap;
use thiserror::Error;

use crate::quant::QuantRows;
use crate::tensor::HostTensor;

/// A GGUF file or tensor that cannot be read (`Io` keeps the OS error as its
/// `source`, out of the message: callers print the chain once).
#[derive(Debug, Error)]
pub enum GgufError {
    #[error("cannot open {path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a valid GGUF file: {reason}")]
    Format { path: String, reason: String },
    #[error("tensor `{name}` is missing from the checkpoint ({count} tensors; {hint})")]
    Missing {
        name: String,
        count: usize,
        hint: String,
    },
    #[error("tensor `{name}` has dtype {dtype}; hopscore reads f32, f16 and bf16 weights")]
    Dtype { name: String, dtype: String },
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

impl Value {
    /// Integer value (any integer type, non-negative).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            Value::I64(v) => u64::try_from(*v).ok(),
            _ => None,
        }
    }
    /// Numeric value as f64 (floats and integers).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(v) => Some(*v),
            Value::U64(v) => Some(*v as f64),
            Value::I64(v) => Some(*v as f64),
            _ => None,
        }
    }
    /// String value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    /// Boolean value.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
    /// Array elements.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// The tensor types hopscore dequantises (ggml type ids in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl GgmlType {
    /// The type of a ggml type id, `None` when hopscore cannot dequantise it.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            30 => GgmlType::BF16,
            _ => return None,
        })
    }

    /// `(weights per block, bytes per block)`.
    pub fn block(self) -> (usize, usize) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
        }
    }

    /// Dequantises whole blocks: `bytes.len()` must be a multiple of the block size.
    pub fn dequantize(self, bytes: &[u8]) -> Vec<f32> {
        let (n, size) = self.block();
        if let Some(blocks) = self.quant_rows(bytes, 1, bytes.len() / size * n) {
            return blocks.dequantize();
        }
        let mut out = Vec::with_capacity(bytes.len() / size * n);
        for b in bytes.chunks_exact(size) {
            match self {
                GgmlType::F32 => out.push(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                GgmlType::F16 => out.push(f16_at(b, 0)),
                GgmlType::BF16 => out.push(bf16::from_le_bytes([b[0], b[1]]).to_f32()),
                GgmlType::Q6K => dequant_q6_k(b, &mut out),
                _ => unreachable!("{self:?} has 32-weight blocks"),
            }
        }
        out
    }

    /// The `[rows, cols]` tensor in `bytes` as its 32-weight blocks (`q · scale + min`,
    /// exactly as ggml's `dequantize_row_*` computes each weight); `None` for the types
    /// without them (floats, `Q6_K`). `bytes` must hold whole rows of whole blocks.
    pub fn quant_rows(self, bytes: &[u8], rows: usize, cols: usize) -> Option<QuantRows> {
        let decode: fn(&[u8], &mut Blocks32) = match self {
            GgmlType::Q4_0 => decode_q4_0,
            GgmlType::Q4_1 => decode_q4_1,
            GgmlType::Q5_0 => decode_q5_0,
            GgmlType::Q5_1 => decode_q5_1,
            GgmlType::Q8_0 => decode_q8_0,
            GgmlType::Q4K => decode_q4_k,
            GgmlType::Q5K => decode_q5_k,
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q6K => return None,
        };
        let (n, size) = self.block();
        let mut out = Blocks32::with_capacity(bytes.len() / size * n);
        bytes.chunks_exact(size).for_each(|b| decode(b, &mut out));
        let asymmetric = matches!(
            self,
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K
        );
        Some(QuantRows {
            rows,
            cols,
            block: 32,
            q: out.q,
            scale: out.scale,
            min: asymmetric.then_some(out.min),
        })
    }
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Decoded 32-weight blocks: `w = q · scale + min`.
struct Blocks32 {
    q: Vec<i8>,
    scale: Vec<f32>,
    min: Vec<f32>,
}

impl Blocks32 {
    fn with_capacity(weights: usize) -> Self {
        Self {
            q: Vec::with_capacity(weights),
            scale: Vec::with_capacity(weights / 32),
            min: Vec::with_capacity(weights / 32),
        }
    }

    /// One block: its scale, min and 32 values.
    fn push(&mut self, scale: f32, min: f32, q: impl IntoIterator<Item = i8>) {
        self.scale.push(scale);
        self.min.push(min);
        self.q.extend(q);
    }

    /// A block whose 32 values are the low nibbles of `qs` then the high ones, each
    /// plus `high_bit(i)` (0 or 16) minus `offset`.
    fn push_nibbles(
        &mut self,
        (scale, min): (f32, f32),
        qs: &[u8],
        high_bit: impl Fn(usize) -> u8,
        offset: i8,
    ) {
        let lo = qs
            .iter()
            .enumerate()
            .map(|(i, &v)| ((v & 0xF) | high_bit(i)) as i8);
        let hi = qs
            .iter()
            .enumerate()
            .map(|(i, &v)| ((v >> 4) | high_bit(i + qs.len())) as i8);
        self.push(scale, min, lo.chain(hi).map(|q| q - offset));
    }
}

/// `d: f16, qs: [u8; 16]`; `x[j] = d·(lo(qs[j]) − 8)`, `x[j+16] = d·(hi(qs[j]) − 8)`.
fn decode_q4_0(b: &[u8], out: &mut Blocks32) {
    out.push_nibbles((f16_at(b, 0), 0.0), &b[2..18], |_| 0, 8);
}

/// `d, m: f16, qs: [u8; 16]`; `x[j] = d·lo(qs[j]) + m`, `x[j+16] = d·hi(qs[j]) + m`.
fn decode_q4_1(b: &[u8], out: &mut Blocks32) {
    out.push_nibbles((f16_at(b, 0), f16_at(b, 2)), &b[4..20], |_| 0, 0);
}

/// Bit `i` of the little-endian `u32` at `qh`, as 16 or 0 (the fifth bit of `Q5_*`
/// weight `i`).
fn fifth_bit(qh: &[u8], i: usize) -> u8 {
    let bits = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    (((bits >> i) & 1) << 4) as u8
}

/// `d: f16, qh: u32, qs: [u8; 16]`: as `Q4_0` with a fifth bit per weight from `qh`,
/// minus 16.
fn decode_q5_0(b: &[u8], out: &mut Blocks32) {
    out.push_nibbles(
        (f16_at(b, 0), 0.0),
        &b[6..22],
        |i| fifth_bit(&b[2..6], i),
        16,
    );
}

/// `d, m: f16, qh: u32, qs: [u8; 16]`: as `Q4_1` with a fifth bit per weight from `qh`.
fn decode_q5_1(b: &[u8], out: &mut Blocks32) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    out.push_nibbles((d, m), &b[8..24], |i| fifth_bit(&b[4..8], i), 0);
}

/// `d: f16, qs: [i8; 32]`; `x[j] = d·qs[j]`.
fn decode_q8_0(b: &[u8], out: &mut Blocks32) {
    out.push(f16_at(b, 0), 0.0, b[2..34].iter().map(|&q| q as i8));
}

/// The 6-bit scale and min of sub-block `j` (0..8) packed in the 12 `scales` bytes of
/// `Q4_K`/`Q5_K` (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (sc, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (f32::from(sc), f32::from(m))
}

/// The scale and min of `Q4_K`/`Q5_K` sub-block `j`: `(d·sc, −dmin·m)`.
fn k_quant_sub_block(b: &[u8], j: usize) -> (f32, f32) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, m) = scale_min_k4(j, &b[4..16]);
    (d * sc, -(dmin * m))
}

/// `d, dmin: f16, scales: [u8; 12], qs: [u8; 128]`: 8 sub-blocks of 32 weights,
/// `x = d·sc·q − dmin·m`; each 32 bytes of `qs` hold two sub-blocks (low, high nibbles).
fn decode_q4_k(b: &[u8], out: &mut Blocks32) {
    for (pair, q) in b[16..144].chunks_exact(32).enumerate() {
        for (half, shift) in [(0, 0), (1, 4)] {
            let (scale, min) = k_quant_sub_block(b, 2 * pair + half);
            out.push(scale, min, q.iter().map(|&v| ((v >> shift) & 0xF) as i8));
        }
    }
}

/// `d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]`: as `Q4_K`, with a
/// fifth bit per weight from `qh` (bit `2·pair` for the low nibbles, `2·pair + 1` for
/// the high ones).
fn decode_q5_k(b: &[u8], out: &mut Blocks32) {
    let qh = &b[16..48];
    for (pair, q) in b[48..176].chunks_exact(32).enumerate() {
        for (half, shift) in [(0, 0), (1, 4)] {
            let (scale, min) = k_quant_sub_block(b, 2 * pair + half);
            let bit = 2 * pair + half;
            let values = q
                .iter()
                .zip(qh)
                .map(|(&v, &h)| (((v >> shift) & 0xF) | (((h >> bit) & 1) << 4)) as i8);
            out.push(scale, min, values);
        }
    }
}

/// `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`: 6-bit weights (4 low bits
/// in `ql`, 2 high bits in `qh`) minus 32, 16 sub-blocks of 16 with an i8 scale each.
fn dequant_q6_k(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(b, 208);
    let start = out.len();
    out.resize(start + 256, 0.0);
    let y = &mut out[start..];
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = i32::from((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i32::from((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            let s = |k: usize| d * f32::from(sc[is + k] as i8);
            y[l] = s(0) * q1 as f32;
            y[l + 32] = s(2) * q2 as f32;
            y[l + 64] = s(4) * q3 as f32;
            y[l + 96] = s(6) * q4 as f32;
        }
    }
}

/// One entry of the tensor table.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// Row-major shape (the file's dims reversed).
    pub shape: Vec<usize>,
    /// ggml type id as stored.
    pub type_id: u32,
    /// Byte range in the file.
    pub start: usize,
    pub end: usize,
}

/// A memory-mapped GGUF file.
pub struct GgufFile {
    mmap: Mmap,
    path: PathBuf,
    /// GGUF format version (2 or 3).
    pub version: u32,
    /// Key-value metadata (`general.*`, `<arch>.*`, `tokenizer.ggml.*`).
    pub metadata: BTreeMap<String, Value>,
    /// Tensor table by GGUF name.
    pub tensors: BTreeMap<String, TensorInfo>,
}

/// Sequential reader over the header with bounds checks (a truncated file is an error).
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "unexpected end of file at byte {} (wanted {n} more bytes of {}): truncated?",
                    self.pos,
                    self.bytes.len()
                )
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn len(&mut self, what: &str) -> Result<usize, String> {
        let n = self.u64()?;
        // Each item takes at least one byte, so a larger count cannot be genuine.
        let left = (self.bytes.len() - self.pos) as u64;
        if n > left {
            return Err(format!(
                "{what} count {n} at byte {} exceeds the {left} bytes left: truncated or corrupt file",
                self.pos - 8
            ));
        }
        Ok(n as usize)
    }
    fn string(&mut self) -> Result<String, String> {
        let n = self.len("string length")?;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| format!("string at byte {} is not UTF-8", self.pos - n))
    }
    fn value(&mut self, ty: u32, depth: usize) -> Result<Value, String> {
        Ok(match ty {
            0 => Value::U64(u64::from(self.take(1)?[0])),
            1 => Value::I64(i64::from(self.take(1)?[0] as i8)),
            2 => Value::U64(u64::from(u16::from_le_bytes(
                self.take(2)?.try_into().expect("2"),
            ))),
            3 => Value::I64(i64::from(i16::from_le_bytes(
                self.take(2)?.try_into().expect("2"),
            ))),
            4 => Value::U64(u64::from(self.u32()?)),
            5 => Value::I64(i64::from(self.u32()? as i32)),
            6 => Value::F64(f64::from(f32::from_le_bytes(
                self.take(4)?.try_into().expect("4"),
            ))),
            7 => Value::Bool(self.take(1)?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                if depth > 4 {
                    return Err("arrays nested deeper than 4 levels".into());
                }
                let inner = self.u32()?;
                let n = self.len("array")?;
                let mut v = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    v.push(self.value(inner, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_le_bytes(self.take(8)?.try_into().expect("8"))),
            other => return Err(format!("unknown metadata value type {other}")),
        })
    }
}

impl GgufFile {
    /// Opens and validates a GGUF file (header, metadata, tensor table and that every
    /// tensor lies inside the file).
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let io = |source| GgufError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: opened read-only; hopscore never writes checkpoints while reading them.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let bad = |reason: String| GgufError::Format {
            path: path.display().to_string(),
            reason,
        };
        let (version, metadata, tensors) = parse(&mmap).map_err(bad)?;
        Ok(Self {
            mmap,
            path: path.to_path_buf(),
            version,
            metadata,
            tensors,
        })
    }

    /// The file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// A tensor dequantised to f32, in row-major shape `info.shape`.
    pub fn tensor(&self, name: &str) -> Result<HostTensor, GgufError> {
        let info = self.tensors.get(name).ok_or_else(|| GgufError::Missing {
            name: name.to_string(),
            count: self.tensors.len(),
            hint: format!(
                "GGUF tensors: {}",
                self.tensors
                    .keys()
                    .take(4)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
        let ty = GgmlType::from_id(info.type_id).ok_or_else(|| GgufError::Dtype {
            name: name.to_string(),
            dtype: format!(
                "ggml type {} ({})",
                info.type_id,
                ggml_type_name(info.type_id)
            ),
        })?;
        let bytes = &self.mmap[info.start..info.end];
        let matrix = match info.shape[..] {
            [rows, cols] => ty.quant_rows(bytes, rows, cols),
            _ => None,
        };
        Ok(match matrix {
            Some(stored) => {
                HostTensor::new(info.shape.clone(), stored.dequantize()).with_stored(stored)
            }
            None => HostTensor::new(info.shape.clone(), ty.dequantize(bytes)),
        })
    }

    /// Tensor count per ggml type name (for `inspect`-style summaries).
    pub fn type_summary(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for t in self.tensors.values() {
            *m.entry(ggml_type_name(t.type_id).to_string()).or_default() += 1;
        }
        m
    }
}

/// The ggml name of a type id (for messages).
pub fn ggml_type_name(id: u32) -> &'static str {
    const NAMES: [&str; 31] = [
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
        "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
        "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
    ];
    NAMES.get(id as usize).copied().unwrap_or("unknown")
}

type Parsed = (u32, BTreeMap<String, Value>, BTreeMap<String, TensorInfo>);

fn parse(bytes: &[u8]) -> Result<Parsed, String> {
    let mut c = Cursor { bytes, pos: 0 };
    if c.take(4)
        .map_err(|_| "file shorter than a GGUF header".to_string())?
        != b"GGUF"
    {
        return Err("not a GGUF file (magic is not `GGUF`)".into());
    }
    let version = c.u32()?;
    if !(2..=3).contains(&version) {
        return Err(format!(
            "GGUF version {version}; hopscore reads versions 2 and 3"
        ));
    }
    let n_tensors = c.len("tensor")?;
    let n_kv = c.len("metadata")?;
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = c.string()?;
        let ty = c.u32()?;
        let v = c
            .value(ty, 0)
            .map_err(|e| format!("metadata `{key}`: {e}"))?;
        metadata.insert(key, v);
    }
    let mut raw = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let name = c.string()?;
        let n_dims = c.u32()? as usize;
        if n_dims > 4 {
            return Err(format!(
                "tensor `{name}` has {n_dims} dims (ggml allows ≤ 4)"
            ));
        }
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            dims.push(c.u64()?);
        }
        let type_id = c.u32()?;
        let offset = c.u64()?;
        raw.push((name, dims, type_id, offset));
    }
    let alignment = metadata
        .get("general.alignment")
        .and_then(Value::as_u64)
        .unwrap_or(32) as usize;
    if alignment == 0 || !alignment.is_power_of_two() {
        return Err(format!(
            "general.alignment = {alignment} is not a power of two"
        ));
    }
    let data_start = c.pos.div_ceil(alignment) * alignment;
    let mut tensors = BTreeMap::new();
    for (name, dims, type_id, offset) in raw {
        let count = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("tensor `{name}`: element count overflows"))?;
        let shape: Vec<usize> = dims.iter().rev().map(|&d| d as usize).collect();
        // Unknown types are kept in the table (only reading them fails), but their size
        // is unknown, so their bounds cannot be checked here.
        let (start, end) = match GgmlType::from_id(type_id) {
            Some(ty) => {
                let (per, size) = ty.block();
                // ggml's blocks never straddle rows.
                let row = dims.first().copied().unwrap_or(1);
                if row % per as u64 != 0 {
                    return Err(format!(
                        "tensor `{name}`: rows of {row} elements are not whole {} blocks of {per}",
                        ggml_type_name(type_id)
                    ));
                }
                let len = count / per as u64 * size as u64;
                let start = (data_start as u64)
                    .checked_add(offset)
                    .ok_or_else(|| format!("tensor `{name}`: offset overflows"))?;
                let end = start.saturating_add(len);
                if end > bytes.len() as u64 {
                    return Err(format!(
                        "tensor `{name}` ({} bytes at offset {offset}) extends past the end of the \
                         file ({} bytes): truncated?",
                        len,
                        bytes.len()
                    ));
                }
                (start as usize, end as usize)
            }
            None => (0, 0),
        };
        tensors.insert(
            name,
            TensorInfo {
                shape,
                type_id,
                start,
                end,
            },
        );
    }
    Ok((version, metadata, tensors))
}

/// Maps an HF transformers tensor name of a Llama-family decoder to its GGUF name
/// (llama.cpp's `convert_hf_to_gguf.py` names), e.g.
/// `model.layers.3.self_attn.q_proj.weight` → `blk.3.attn_q.weight`.
pub fn gguf_name(hf: &str) -> Option<String> {
    if let Some(rest) = hf.strip_prefix("model.layers.") {
        let (layer, leaf) = rest.split_once('.')?;
        let (module, kind) = leaf.rsplit_once('.')?;
        let g = match module {
            "self_attn.q_proj" => "attn_q",
            "self_attn.k_proj" => "attn_k",
            "self_attn.v_proj" => "attn_v",
            "self_attn.o_proj" => "attn_output",
            "mlp.gate_proj" => "ffn_gate",
            "mlp.up_proj" => "ffn_up",
            "mlp.down_proj" => "ffn_down",
            "input_layernorm" => "attn_norm",
            "post_attention_layernorm" => "ffn_norm",
            _ => return None,
        };
        return Some(format!("blk.{layer}.{g}.{kind}"));
    }
    Some(
        match hf {
            "model.embed_tokens.weight" => "token_embd.weight",
            "model.norm.weight" => "output_norm.weight",
            "lm_head.weight" => "output.weight",
            _ => return None,
        }
        .to_string(),
    )
}

/// Undoes llama.cpp's Q/K row permutation for `heads` heads: llama.cpp stores the two
/// rotary halves of each head interleaved (row `h·2d + 2i + j`), HF keeps them split
/// (row `h·2d + j·d + i`), as `LlamaTensorProcessor._reverse_permute_weights` in
/// transformers' `modeling_gguf_pytorch_utils.py` does. Works on weights `[rows, cols]`
/// and biases (`cols = 1`).
pub fn unpermute_rows(t: &HostTensor, heads: usize) -> Result<HostTensor, String> {
    let rows = t.shape[0];
    if heads == 0 || !rows.is_multiple_of(2 * heads) {
        return Err(format!(
            "{rows} rows do not split into {heads} heads of even size"
        ));
    }
    let d = rows / heads / 2;
    // `source[dst]`: the stored row that HF's row `dst` is.
    let mut source = vec![0; rows];
    for h in 0..heads {
        for i in 0..d {
            for j in 0..2 {
                source[h * 2 * d + j * d + i] = h * 2 * d + 2 * i + j;
            }
        }
    }
    Ok(t.select_rows(&source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_hf_names_to_gguf() {
        assert_eq!(
            gguf_name("model.layers.12.mlp.down_proj.weight").unwrap(),
            "blk.12.ffn_down.weight"
        );
        assert_eq!(
            gguf_name("model.layers.0.self_attn.q_proj.bias").unwrap(),
            "blk.0.attn_q.bias"
        );
        assert_eq!(
            gguf_name("model.norm.weight").unwrap(),
            "output_norm.weight"
        );
        assert!(gguf_name("model.layers.0.unknown.weight").is_none());
    }

    #[test]
    fn unpermute_splits_interleaved_halves() {
        // One head, d = 2: stored rows [r0 r1 r2 r3] = pairs (i0 j0, i0 j1, i1 j0, i1 j1).
        let t = HostTensor::new(vec![4, 1], vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(
            unpermute_rows(&t, 1).unwrap().data,
            vec![0.0, 2.0, 1.0, 3.0]
        );
        // Stored blocks move with their rows.
        let w: Vec<f32> = (0..4 * 32).map(|i| (i as f32 * 0.37).sin()).collect();
        let stored = QuantRows::quantize(&w, 4, 32, 32);
        let t = HostTensor::new(vec![4, 32], stored.dequantize()).with_stored(stored);
        let u = unpermute_rows(&t, 1).unwrap();
        assert_eq!(u.data[32..64], t.data[64..96]);
        assert_eq!(u.stored.unwrap().dequantize(), u.data);
    }

    #[test]
    fn matrices_of_32_weight_blocks_keep_them() {
        // Q4_1, two rows of one block: d = 0.5, m = −1, nibbles 0..15 then 15..0.
        let mut q4_1 = Vec::new();
        for _ in 0..2 {
            q4_1.extend(half::f16::from_f32(0.5).to_le_bytes());
            q4_1.extend(half::f16::from_f32(-1.0).to_le_bytes());
            q4_1.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
        }
        let bytes = build(&[("m", vec![32, 2], 3, q4_1), ("v", vec![32], 3, vec![0; 20])]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        std::fs::write(&path, &bytes).unwrap();
        let g = GgufFile::open(&path).unwrap();
        let m = g.tensor("m").unwrap();
        assert_eq!((m.data[1], m.data[16], m.data[63]), (-0.5, 6.5, -1.0));
        let stored = m.stored.as_ref().unwrap();
        assert_eq!((stored.rows, stored.cols, stored.q[16]), (2, 32, 15));
        assert_eq!(stored.min.as_deref(), Some(&[-1.0, -1.0][..]));
        assert_eq!(stored.dequantize(), m.data);
        // Vectors are not dense-layer weights.
        assert!(g.tensor("v").unwrap().stored.is_none());
    }

    /// A GGUF v3 file with `general.alignment = 32`, a string array, and tensors
    /// `(name, dims (ne order), type id, data)`.
    fn build(tensors: &[(&str, Vec<u64>, u32, Vec<u8>)]) -> Vec<u8> {
        let s = |b: &mut Vec<u8>, t: &str| {
            b.extend((t.len() as u64).to_le_bytes());
            b.extend(t.as_bytes());
        };
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((tensors.len() as u64).to_le_bytes());
        b.extend(2u64.to_le_bytes());
        s(&mut b, "general.alignment");
        b.extend(4u32.to_le_bytes());
        b.extend(32u32.to_le_bytes());
        s(&mut b, "names");
        b.extend(9u32.to_le_bytes());
        b.extend(8u32.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        s(&mut b, "a");
        s(&mut b, "bc");
        let mut offset = 0u64;
        for (name, dims, ty, data) in tensors {
            s(&mut b, name);
            b.extend((dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
            b.extend(ty.to_le_bytes());
            b.extend(offset.to_le_bytes());
            offset += (data.len() as u64).div_ceil(32) * 32;
        }
        for (_, _, _, data) in tensors {
            b.resize(b.len().div_ceil(32) * 32, 0);
            b.extend(data);
        }
        b
    }

    #[test]
    fn reads_tensors_and_names_unknown_types() {
        let f32s: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut q8 = half::f16::from_f32(0.5).to_le_bytes().to_vec();
        q8.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let bytes = build(&[
            ("w", vec![3, 2], 0, f32s),
            ("q", vec![32], 8, q8),
            ("iq", vec![256], 19, vec![0; 64]),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gguf");
        std::fs::write(&path, &bytes).unwrap();
        let g = GgufFile::open(&path).unwrap();
        let names = g.get("names").unwrap().as_array().unwrap();
        assert_eq!(names[1].as_str(), Some("bc"));
        let w = g.tensor("w").unwrap();
        assert_eq!((w.shape.clone(), w.data[5]), (vec![2, 3], 6.0));
        let q = g.tensor("q").unwrap();
        assert_eq!((q.data[0], q.data[31]), (-8.0, 7.5));
        let err = g.tensor("iq").unwrap_err().to_string();
        assert!(err.contains("ggml type 19 (IQ1_S)"), "{err}");
        assert!(g
            .tensor("nope")
            .unwrap_err()
            .to_string()
            .contains("missing"));
        // Cut inside `q`'s data (the unknown-type `iq` after it has no known size).
        std::fs::write(&path, &bytes[..bytes.len() - 64 - 40]).unwrap();
        let err = GgufFile::open(&path).err().unwrap().to_string();
        assert!(err.contains("`q`") && err.contains("truncated"), "{err}");
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert!(parse(b"GGU").unwrap_err().contains("shorter"));
        assert!(parse(b"GGML\x03\0\0\0").unwrap_err().contains("magic"));
        let mut h = b"GGUF".to_vec();
        h.extend(3u32.to_le_bytes());
        h.extend(1u64.to_le_bytes());
        assert!(parse(&h).unwrap_err().contains("truncated"));
        // 96 Q4_0 weights are 3 whole blocks, but rows of 48 would split one.
        let err = parse(&build(&[("w", vec![48, 2], 2, vec![0; 3 * 18])])).unwrap_err();
        assert!(
            err.contains("rows of 48 elements are not whole Q4_0 blocks"),
            "{err}"
        );
    }
}
