//! Launcher of `kernels/causal_attention.cu` (flash-style varlen causal attention with
//! grouped-query heads; bf16/f16 with head_dim a multiple of 16 on tensor cores).
//! CPU twin: `src/backend/cpu/causal_attention.rs`.

use cudarc::driver::LaunchConfig;

use super::{Arg, CudaBackend, CudaTensor, DType};
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
    let wmma = be.dev.dtype != DType::F32 && d % 16 == 0;
    let smem = if wmma {
        // v2 (wmma): Q and K/V tiles [rows][d + 8] and P [BQ][BK + 8] in the 16-bit
        // type, S [BQ][BK + 4] and the context O [BQ][d + 4] in f32: 41.5 KB at d = 128.
        (BQ + BK) * (d + 8) * 2 + BQ * (BK + 4) * 4 + BQ * (BK + 8) * 2 + BQ * (d + 4) * 4
    } else {
        // v1: Q tile and K/V tile ([rows][d + 1], padded against bank conflicts) and
        // the probabilities [BQ][BK + 1], all f32: 37 KB at d = 128.
        ((BQ + BK) * (d + 1) + BQ * (BK + 1)) * 4
    };
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
    // `causal_attention_<dtype>` is v1 for f32 and the wmma v2 for bf16/f16; 16-bit
    // heads that are not a multiple of 16 wide take v1 (`causal_attention_fma_<dtype>`).
    let op = if wmma || be.dev.dtype == DType::F32 {
        "causal_attention"
    } else {
        "causal_attention_fma"
    };
    be.launch(op, cfg, &args)?;
    Ok(out)
}
