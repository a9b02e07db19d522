//! Launcher of `kernels/causal_attention.cu` (flash-style varlen causal attention with
//! grouped-query heads). CPU twin: `src/backend/cpu/causal_attention.rs`.

use cudarc::driver::LaunchConfig;

use super::{Arg, CudaBackend, CudaTensor};
use crate::backend::check::Dims;
use crate::backend::{CausalShape, OpError, OpResult, SeqLayout};

/// Query rows per block (`BQ` in the kernel).
const BQ: usize = 32;
/// Keys per tile (`BK`).
const BK: usize = 32;
/// Threads per query row (`TPR`).
const TPR: usize = 4;
/// Largest head dimension the kernel's per-thread accumulators hold (`MAX_D`).
const MAX_D: usize = 128;

/// Context `[tokens, heads·d]` of `qkv` (shapes already checked).
pub(super) fn launch(
    be: &CudaBackend,
    qkv: &CudaTensor,
    shape: CausalShape,
    layout: &SeqLayout,
) -> OpResult<CudaTensor> {
    let CausalShape {
        heads,
        kv_heads,
        head_dim: d,
        scale,
    } = shape;
    let out = be.tensor(layout.num_tokens(), heads * d)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    if d > MAX_D {
        return Err(OpError::Shape {
            op: "causal_attention",
            msg: format!("head_dim {d} exceeds the kernel's {MAX_D}"),
        });
    }
    let seqs = layout.num_seqs();
    let cu: Vec<u32> = layout.cu_seqlens.iter().map(|&c| c as u32).collect();
    let cu = be.dev.upload_u32("causal_attention", &cu)?;
    let mask = be.dev.upload_f32("causal_attention", &layout.mask)?;
    // Q tile and K/V tile ([rows][d + 1], padded against bank conflicts) and the
    // probabilities [BQ][BK + 1], all f32: 37 KB at d = 128.
    let smem = ((BQ + BK) * (d + 1) + BQ * (BK + 1)) * 4;
    let cfg = LaunchConfig {
        grid_dim: (
            seqs as u32,
            layout.max_len().div_ceil(BQ) as u32,
            heads as u32,
        ),
        block_dim: ((BQ * TPR) as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let args = [
        Arg::Ptr(out.ptr()),
        Arg::Ptr(qkv.ptr()),
        Arg::Ptr(cu.ptr()),
        Arg::Ptr(mask.ptr()),
        Arg::U32(heads as u32),
        Arg::U32(kv_heads as u32),
        Arg::U32(d as u32),
        Arg::F32(scale),
    ];
    be.launch("causal_attention", cfg, &args)?;
    Ok(out)
}
