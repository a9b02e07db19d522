//! Launcher of `kernels/disentangled_attention.cu` (CPU twin:
//! `backend/cpu/disentangled_attention.rs`): flash-style DeBERTa attention with the
//! c2p/p2c position scores computed on chip, one block per (32-row query tile, head,
//! sequence).

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::LaunchConfig;

use super::memory::{device_err, CudaTensor};
use super::DType;
use super::{ptr_or_null, Arg, CudaBackend};
use crate::backend::check::Dims;
use crate::backend::{AttentionShape, OpError, OpResult, RelAttention, SeqLayout};

const OP: &str = "disentangled_attention";
/// Query rows per block (and key rows per step of its loop).
const TILE: usize = 32;
/// Threads per block (4 warps, 8 query rows each).
const THREADS: u32 = 128;
/// Largest head size: a lane holds 4 columns of each of its output rows.
pub const MAX_HEAD_SIZE: usize = 128;
/// Dynamic shared memory a kernel gets without opting in.
const DEFAULT_SMEM: usize = 48 * 1024;

/// Dynamic shared memory of the kernel for `dtype` and head size `d`, in bytes, with
/// or without the position band (the layouts in the kernel's header comment: v1 for
/// f32, v2 with wmma tiles for bf16/f16).
pub fn smem_bytes(dtype: DType, d: usize, band: bool) -> usize {
    match dtype {
        DType::F32 => {
            let (ld, band_rows) = (d + 1, if band { 2 * TILE - 1 } else { TILE });
            4 * ((2 * TILE + band_rows) * ld + 2048 + 192)
        }
        DType::Bf16 | DType::F16 => {
            let dp = d.next_multiple_of(16);
            let band_rows = if band { 64 } else { TILE };
            4 * TILE * (dp + 4)
                + 4 * TILE * 36
                + 4 * 2048
                + 2 * (2 * TILE + band_rows) * (dp + 8)
                + 4 * 192
        }
    }
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
    layout: &SeqLayout,
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
    let cu: Vec<u32> = layout.cu_seqlens.iter().map(|&c| c as u32).collect();
    let cu = dev.upload_u32(OP, &cu)?;
    let mask = dev.upload_f32(OP, &layout.mask)?;
    let index_buf = index.map(|i| dev.upload_u32(OP, i)).transpose()?;

    let smem = smem_bytes(dev.dtype, d, band);
    if smem > DEFAULT_SMEM {
        // Opt in to more than 48 KiB of dynamic shared memory (head sizes above 64).
        dev.typed(OP, dev.dtype)?
            .set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
            .map_err(|e| device_err(OP, format!("{smem} bytes of shared memory: {e}")))?;
    }
    let cfg = LaunchConfig {
        grid_dim: (
            layout.max_len().div_ceil(TILE) as u32,
            heads as u32,
            seqs as u32,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let args = [
        Arg::Ptr(q.ptr()),
        Arg::Ptr(k.ptr()),
        Arg::Ptr(v.ptr()),
        Arg::Ptr(if band { ptr_or_null(pos_key) } else { 0 }),
        Arg::Ptr(if band { ptr_or_null(pos_query) } else { 0 }),
        Arg::Ptr(index_buf.as_ref().map_or(0, |b| b.ptr())),
        Arg::U32(base as u32),
        Arg::Ptr(cu.ptr()),
        Arg::Ptr(mask.ptr()),
        Arg::Ptr(out.ptr()),
        Arg::U32(seqs as u32),
        Arg::U32(heads as u32),
        Arg::U32(d as u32),
        Arg::F32(score_scale),
    ];
    be.launch(OP, cfg, &args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_fits_the_default_for_deberta_heads() {
        for dt in [DType::F32, DType::Bf16, DType::F16] {
            for d in [32, 64] {
                assert!(smem_bytes(dt, d, true) <= DEFAULT_SMEM, "{dt:?} d={d}");
            }
            // sm_80 allows 163 KiB per block once opted in.
            assert!(smem_bytes(dt, MAX_HEAD_SIZE, true) <= 160 * 1024);
        }
        assert_eq!(smem_bytes(DType::F32, 64, true), 41_980);
        assert_eq!(smem_bytes(DType::Bf16, 64, true), 40_704);
    }
}
