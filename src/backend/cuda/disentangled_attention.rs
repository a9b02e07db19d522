//! Launcher of `kernels/disentangled_attention.cu` and `_v5.cu` (CPU twin:
//! `backend/cpu/disentangled_attention.rs`): flash-style DeBERTa attention with the
//! c2p/p2c position scores computed on chip. f32 runs v1 (one block per 32-row query
//! tile, head and sequence); bf16/f16 run v3 (64-row query tiles on mma.sync, the head
//! size padded to 64 or 128, the position band of every tile diagonal from a
//! [`band_table`] computed once per forward pass by `prepare_batch`) or, on compute
//! capability 9.0, v5 (the same tiles and band table on wgmma, warp-specialised: TMA
//! loads, a producer and two consumer warpgroups; head size 64): [`Version`].

use cudarc::driver::LaunchConfig;

use super::device::u32_bytes;
use super::memory::{require_16_byte_aligned, CudaTensor};
use super::params::{DisentangledAttentionParams, DisentangledV5Params};
use super::tensor_map::{tensor_map_2d, Swizzle};
use super::DType;
use super::{ptr_or_null, CudaBackend};
use crate::backend::check::Dims;
use crate::backend::kernels::geometry as g;
use crate::backend::{AttentionShape, Input, OpError, OpResult, RelAttention, SeqLayout};

const OP: &str = "disentangled_attention";
/// Query rows per block (and key rows per step of its loop) of v1.
const TILE: usize = g::DA_V1_TILE as usize;
/// Largest head size: a lane holds 4 columns of each of its output rows.
pub const MAX_HEAD_SIZE: usize = g::ATTENTION_MAX_D as usize;
/// v3: query rows per block and keys per tile (`kRows`, `kKeys`).
const V3_TILE: usize = g::V3_ROWS as usize;
/// v3: band table entries per tile diagonal: 128 table rows, then 128 slots
/// (`kBandRows`).
const V3_BAND: usize = g::DA_V3_BAND_ROWS as usize;

/// The bf16/f16 kernel: v3 (mma.sync, any GPU from sm_80) or v5 (wgmma with TMA and warp
/// specialisation, sm_90a: compute capability 9.0 only; head size 64 with consecutive
/// band rows, else v3 runs the call). v4 (wgmma without the warp specialisation, 0.66×
/// v3 on an H200) is gone (kernels/NOTES.md). f32 always runs v1. Chosen when
/// the backend opens, from `--attention` ([`crate::backend::gpu_kernels::Attention`];
/// `auto`: [`Version::DEFAULT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V3,
    V5,
}

impl Version {
    pub const DEFAULT: Version = Version::V3;
    pub const ALL: [Version; 2] = [Version::V3, Version::V5];

    /// Whether a device of compute capability `cc` runs this version.
    pub fn runs_on(self, cc: (i32, i32)) -> bool {
        self == Version::V3 || cc == (9, 0)
    }

    /// Its position in [`Version::ALL`].
    pub fn index(self) -> u8 {
        self as u8
    }

    /// The version that runs a call of head size `d` with relative index `index`: v5
    /// needs d = 64 and an index that rises by at most 1 per offset (DeBERTa's buckets),
    /// so that each tile diagonal's band rows are consecutive table rows; v3 runs the
    /// other calls v5 was asked for (said once in the log).
    pub fn for_call(self, d: usize, index: Option<&[u32]>) -> Version {
        let consecutive = |i: &[u32]| i.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1);
        if self != Version::V5 || (d == 64 && index.is_none_or(consecutive)) {
            return self;
        }
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            log::warn!(
                "--attention v5 runs head size 64 with consecutive relative buckets only; v3 \
                 runs head size {d} or this relative index"
            )
        });
        Version::V3
    }
}

/// The bf16/f16 instance for head size `d`: its padded head size and kernel name (64,
/// the head size of every DeBERTa, or 128; smaller heads are zero-padded).
fn tensor_core_kernel(version: Version, d: usize) -> (usize, &'static str) {
    match (version, d <= 64) {
        (Version::V3, true) => (64, "disentangled_attention_v3_d64"),
        (Version::V3, false) => (128, "disentangled_attention_v3_d128"),
        (Version::V5, _) => (64, "disentangled_attention_v5"),
    }
}

/// The kernel run for `dtype` and head size `d` (v1 for f32, `version` for bf16/f16).
pub(super) fn kernel(dtype: DType, version: Version, d: usize) -> &'static str {
    match dtype {
        DType::F32 => OP,
        DType::Bf16 | DType::F16 => tensor_core_kernel(version, d).1,
    }
}

/// Dynamic shared memory of the kernel for `dtype`, `version` and head size `d`, in
/// bytes, with or without the position band (geometry.cuh).
pub fn smem_bytes(dtype: DType, version: Version, d: usize, band: bool) -> usize {
    let band = u32::from(band);
    let padded = tensor_core_kernel(version, d).0 as u32;
    (match (dtype, version) {
        (DType::F32, _) => g::disentangled_v1_smem(d as u32, band),
        (_, Version::V3) => g::disentangled_v3_smem(padded, band),
        (_, Version::V5) => g::DA_V5_SMEM,
    }) as usize
}

/// v3's position band of every tile diagonal: for diagonal `e` (query tile minus key
/// tile plus `tiles − 1`, offsets r = 64·(e − tiles + 1) − 63 + o for o = 0..127,
/// clamped to the index), 128 table rows (the distinct `index` rows of those offsets,
/// non-decreasing, the last one repeated) followed by 128 slots (slot[o] = rank of
/// offset o's row). `tiles` = ⌈max_len / 64⌉; `index[r + base]` is offset r's row.
pub fn band_table(index: &[u32], base: usize, tiles: usize) -> Vec<u32> {
    let tiles = tiles.max(1);
    let mut table = vec![0u32; (2 * tiles - 1) * 2 * V3_BAND];
    let base = base as isize;
    for (e, entry) in table.chunks_exact_mut(2 * V3_BAND).enumerate() {
        let delta = V3_TILE as isize * (e as isize - tiles as isize + 1);
        let (rows, slots) = entry.split_at_mut(V3_BAND);
        let mut n = 0usize;
        for (o, slot) in slots[..2 * V3_TILE - 1].iter_mut().enumerate() {
            let r = (delta - (V3_TILE as isize - 1) + o as isize).clamp(-base, base);
            let x = index[(r + base) as usize];
            if n == 0 || rows[n - 1] != x {
                rows[n] = x;
                n += 1;
            }
            *slot = (n - 1) as u32;
        }
        slots[V3_BAND - 1] = slots[V3_BAND - 2];
        let last = rows[n - 1];
        rows[n..].fill(last);
    }
    table
}

/// The input of every layer's disentangled attention over sequences up to `max_len`
/// tokens with relative index `index`, staged once per forward pass: v3's band table
/// (bf16/f16), or the index itself (v1, f32).
pub(super) fn rel_segment(dtype: DType, index: &[u32], max_len: usize) -> Vec<u8> {
    if dtype == DType::F32 || index.is_empty() {
        return u32_bytes(index);
    }
    let tiles = max_len.div_ceil(V3_TILE);
    let base = index.len().div_ceil(2) - 1;
    u32_bytes(&band_table(index, base, tiles))
}

fn shape_err(msg: String) -> OpError {
    OpError::Shape { op: OP, msg }
}

/// `CudaBackend::disentangled_attention`: shapes are already checked against `layout`.
pub fn disentangled_attention(
    be: &CudaBackend,
    [q, k, v]: [&CudaTensor; 3],
    rel: Option<&RelAttention<'_, CudaTensor>>,
    shape: AttentionShape,
    layout: Input<'_, SeqLayout>,
) -> OpResult<CudaTensor> {
    let AttentionShape {
        heads,
        head_size: d,
        score_scale,
    } = shape;
    if d == 0 || d > MAX_HEAD_SIZE || d % 8 != 0 {
        return Err(shape_err(format!(
            "head size {d} unsupported by the CUDA kernel (a multiple of 8 up to {MAX_HEAD_SIZE})"
        )));
    }
    let width = heads * d;
    let tokens = layout.num_tokens();
    let seqs = layout.num_seqs();
    let out = be.tensor(tokens, width)?;
    if tokens == 0 || heads == 0 {
        return Ok(out);
    }
    if seqs > 65_535 || heads > 65_535 {
        return Err(shape_err(format!(
            "{seqs} sequences × {heads} heads exceed the grid (65,535 each)"
        )));
    }

    // Relative positions: index[r + base] for |r| ≤ base; tables [rows, width].
    let (index, pos_key, pos_query) = match rel {
        Some(r) => (Some(r.index), r.pos_key, r.pos_query),
        None => (None, None, None),
    };
    let mut base = 0usize;
    if let Some(index) = index {
        if index.is_empty() {
            return Err(shape_err("empty relative index".into()));
        }
        base = index.len().div_ceil(2) - 1;
        let max_len = layout.max_len();
        if max_len > base + 1 {
            return Err(shape_err(format!(
                "relative index table covers sequences up to {} tokens, got {max_len}",
                base + 1
            )));
        }
        let top = index.iter().copied().max().unwrap_or(0) as usize;
        for t in [pos_key, pos_query].into_iter().flatten() {
            let (r, c) = t.dims();
            if c != width || top >= r {
                return Err(shape_err(format!(
                    "relative table [{r}, {c}] for width {width} and index rows up to {top}"
                )));
            }
        }
    }
    let band = index.is_some() && (pos_key.is_some() || pos_query.is_some());

    let dev = &be.dev;
    let (cu, mask) = dev.input_layout(OP, layout)?;
    let v3 = dev.dtype != DType::F32;
    let tile = if v3 { V3_TILE } else { TILE };
    let tiles = layout.max_len().div_ceil(tile);
    // v1 reads the index itself; v3 the band table of every tile diagonal.
    let index_buf = match index {
        Some(i) if v3 && band => {
            let bytes = (2 * tiles - 1) * 2 * V3_BAND * 4;
            Some(dev.input(OP, i.slot, bytes, || {
                u32_bytes(&band_table(&i, base, tiles))
            })?)
        }
        Some(i) if !v3 => Some(dev.input_u32(OP, i)?),
        _ => None,
    };
    let version = if v3 {
        be.disentangled_version().for_call(d, index.map(|i| i.host))
    } else {
        Version::V3
    };
    let kernel = kernel(dev.dtype, version, d);
    if v3 {
        require_16_byte_aligned(
            OP,
            &[
                ("q", q.ptr()),
                ("k", k.ptr()),
                ("v", v.ptr()),
                ("pos_key", ptr_or_null(pos_key)),
                ("pos_query", ptr_or_null(pos_query)),
            ],
        )?;
    }
    let smem = smem_bytes(dev.dtype, version, d, band);
    if version == Version::V5 {
        let tables = [pos_key, pos_query].map(|t| t.filter(|_| band));
        let v5 = V5Call {
            qkv: [q, k, v],
            tables,
            band_table: index_buf.as_ref().map_or(0, |b| b.ptr()),
            cu_seqlens: cu.ptr(),
            mask: mask.ptr(),
            out: &out,
            heads,
            tiles,
            seqs,
            scale: score_scale,
        };
        launch_v5(be, kernel, smem, v5)?;
        return Ok(out);
    }
    let cfg = LaunchConfig {
        grid_dim: (tiles as u32, heads as u32, seqs as u32),
        block_dim: (g::ATTENTION_THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let params = DisentangledAttentionParams {
        q: q.ptr(),
        k: k.ptr(),
        v: v.ptr(),
        pos_key: if band { ptr_or_null(pos_key) } else { 0 },
        pos_query: if band { ptr_or_null(pos_query) } else { 0 },
        rel_index: index_buf.as_ref().map_or(0, |b| b.ptr()),
        cu_seqlens: cu.ptr(),
        mask: mask.ptr(),
        out: out.ptr(),
        // v1 reads the index itself at offset `base`; v3's band table starts at 0.
        rel_base: if v3 { 0 } else { base as u32 },
        heads: heads as u32,
        head_size: d as u32,
        scale: score_scale,
    };
    be.launch_params(OP, kernel, cfg, &params)?;
    Ok(out)
}

/// One call of v5: its tensors (q, k and v, the tables already checked, the output) and
/// the device addresses of its staged inputs.
struct V5Call<'a> {
    qkv: [&'a CudaTensor; 3],
    /// PK and PQ when the band is on and the table is given.
    tables: [Option<&'a CudaTensor>; 2],
    band_table: u64,
    cu_seqlens: u64,
    mask: u64,
    out: &'a CudaTensor,
    heads: usize,
    /// Key tiles of the longest sequence (the band table's).
    tiles: usize,
    seqs: usize,
    scale: f32,
}

/// v5: TMA tensor maps of q, k, v ([tokens, heads·64], boxes of 64 rows) and the tables
/// (boxes of 128 rows: one band), a block of 3 warpgroups per 128 query rows.
fn launch_v5(
    be: &CudaBackend,
    kernel: &'static str,
    smem: usize,
    call: V5Call<'_>,
) -> OpResult<()> {
    let dtype = be.dev.dtype;
    let box_of = |t: &CudaTensor, rows: u32| {
        tensor_map_2d(
            OP,
            t.ptr(),
            dtype,
            [t.dims().0, t.dims().1],
            [rows, 64],
            Swizzle::B128,
        )
    };
    let [q, k, v] = call.qkv;
    let q_map = box_of(q, V3_TILE as u32)?;
    // An absent table's map is never read (its flag is clear): q's stands in.
    let table_map = |t: Option<&CudaTensor>| t.map_or(Ok(q_map), |t| box_of(t, V3_BAND as u32));
    let [pk, pq] = call.tables;
    let params = DisentangledV5Params {
        q_map,
        k_map: box_of(k, V3_TILE as u32)?,
        v_map: box_of(v, V3_TILE as u32)?,
        pk_map: table_map(pk)?,
        pq_map: table_map(pq)?,
        band_table: call.band_table,
        cu_seqlens: call.cu_seqlens,
        mask: call.mask,
        out: call.out.ptr(),
        heads: call.heads as u32,
        band_tiles: call.tiles as u32,
        flags: u32::from(pk.is_some()) | u32::from(pq.is_some()) << 1,
        scale: call.scale,
        pad: [0; 4],
    };
    let blocks = call.tiles.div_ceil(g::DA_V5_CONSUMERS as usize);
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, call.heads as u32, call.seqs as u32),
        block_dim: (g::DA_V5_THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    be.launch_params(OP, kernel, cfg, &params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::device::DEFAULT_SMEM;

    #[test]
    fn shared_memory_fits_the_limits() {
        let v3 = Version::V3;
        for dt in [DType::F32, DType::Bf16, DType::F16] {
            // sm_80 allows 163 KiB per block once opted in.
            assert!(
                smem_bytes(dt, v3, MAX_HEAD_SIZE, true) <= 160 * 1024,
                "{dt:?}"
            );
        }
        assert_eq!(smem_bytes(DType::F32, v3, 64, true), 41_980);
        assert!(smem_bytes(DType::F32, v3, 64, true) <= DEFAULT_SMEM as usize);
        // v3 at d = 64: two blocks per SM on an H100 (228 KiB, 1 KiB reserved each).
        assert_eq!(smem_bytes(DType::Bf16, v3, 64, true), 97_280);
        assert!(2 * (smem_bytes(DType::Bf16, v3, 64, true) + 1024) <= 228 * 1024);
    }

    #[test]
    fn v5_runs_head_size_64_with_consecutive_bucket_rows_only() {
        let steps = [0u32, 0, 1, 2, 2, 3];
        assert_eq!(Version::V5.for_call(64, Some(&steps)), Version::V5);
        assert_eq!(Version::V5.for_call(64, None), Version::V5);
        assert_eq!(Version::V5.for_call(32, Some(&steps)), Version::V3);
        assert_eq!(Version::V5.for_call(128, None), Version::V3);
        assert_eq!(Version::V5.for_call(64, Some(&[0, 2, 3])), Version::V3);
        assert_eq!(Version::V5.for_call(64, Some(&[3, 2, 1])), Version::V3);
        assert_eq!(Version::V3.for_call(40, Some(&[0, 2])), Version::V3);
        // One block of 3 warpgroups per SM (227 KiB per block on Hopper).
        assert_eq!(smem_bytes(DType::Bf16, Version::V5, 64, true), 218_280);
        assert!(smem_bytes(DType::Bf16, Version::V5, 64, true) <= 227 * 1024);
    }

    #[test]
    fn band_table_ranks_the_distinct_rows_of_each_diagonal() {
        // A saturating index over offsets −3..=3: rows 0,0,1,2,3,4,4.
        let index = [0u32, 0, 1, 2, 3, 4, 4];
        let t = band_table(&index, 3, 1);
        assert_eq!(t.len(), 2 * V3_BAND);
        let (rows, slots) = t.split_at(V3_BAND);
        // Offsets −63..=63 clamp to −3..=3: rows 0..=4, the last repeated.
        assert_eq!(&rows[..5], &[0, 1, 2, 3, 4]);
        assert!(rows[5..].iter().all(|&r| r == 4));
        // Offset o = 63 is r = 0 (row 2, rank 2); o = 0 is r = −63 → −3 (row 0).
        assert_eq!(
            (slots[0], slots[61], slots[62], slots[63], slots[64], slots[65], slots[66]),
            (0, 0, 1, 2, 3, 4, 4)
        );
        assert_eq!(slots[126], 4);
        assert_eq!(slots[127], 4);
        // Two tiles: diagonal 0 is δ = −64, offsets −127..=−1.
        let index: Vec<u32> = (0..255).collect();
        let t = band_table(&index, 127, 2);
        assert_eq!(t.len(), 3 * 2 * V3_BAND);
        assert_eq!(t[0], 0); // r = −127
        assert_eq!(t[126], 126); // r = −1
        assert_eq!(t[127], 126); // repeated
        assert_eq!(t[V3_BAND + 100], 100);
        // Diagonal 2 (δ = 64): offsets 1..=127.
        assert_eq!(t[4 * V3_BAND], 128);
    }
}
