//! Launcher of `kernels/causal_attention.cu` (flash-style varlen causal attention with
//! grouped-query heads; bf16/f16 with head_dim a multiple of 8 on tensor cores: v3,
//! `mma.sync` tiles of 64 query rows; f32 and other widths: v1 on CUDA cores).
//! CPU twin: `src/backend/cpu/causal_attention.rs`.

use cudarc::driver::LaunchConfig;

use super::memory::require_16_byte_aligned;
use super::params::CausalAttentionParams;
use super::{CudaBackend, CudaTensor, DType};
use crate::backend::check::Dims;
use crate::backend::kernels::geometry as g;
use crate::backend::{CausalShape, Input, OpError, OpResult, SeqLayout};

/// The op (profiled and reported under this name, whichever version runs).
const OP: &str = "causal_attention";
/// Largest head dimension the kernel's per-thread accumulators hold (`MAX_D`).
const MAX_D: usize = g::ATTENTION_MAX_D as usize;

/// The version run for `dtype` and head dimension `d`: (query rows per block, kernel,
/// dynamic shared memory in bytes).
///
/// v3: padded head size 64 or 128 (45 KB at D = 64, 85 KB at D = 128, opted in above
/// 48 KiB); v1: f32 tiles, 37 KB at d = 128 (layouts: geometry.cuh).
pub(super) fn version(dtype: DType, d: usize) -> (usize, &'static str, u32) {
    if dtype != DType::F32 && d.is_multiple_of(8) {
        let (dp, kernel) = if d <= 64 {
            (64, "causal_attention_v3_d64")
        } else {
            (128, "causal_attention_v3_d128")
        };
        (g::V3_ROWS as usize, kernel, g::causal_v3_smem(dp))
    } else {
        let kernel = if dtype == DType::F32 {
            OP
        } else {
            "causal_attention_fma"
        };
        let rows = g::CAUSAL_V1_ROWS as usize;
        (rows, kernel, g::causal_v1_smem(d as u32))
    }
}

/// Context `[tokens, heads·d]` of `qkv` (shapes already checked); rows before a
/// sequence's `first_query` are zeros, their tiles not computed.
pub(super) fn launch(
    be: &CudaBackend,
    qkv: &CudaTensor,
    shape: CausalShape,
    layout: Input<'_, SeqLayout>,
    first_query: Option<Input<'_, [u32]>>,
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
            op: OP,
            msg: format!("head_dim {d} exceeds the kernel's {MAX_D}"),
        });
    }
    let seqs = layout.num_seqs();
    let (cu, mask) = be.dev.input_layout(OP, layout)?;
    let first_query = first_query.map(|f| be.dev.input_u32(OP, f)).transpose()?;
    let (rows, kernel, smem) = version(be.dev.dtype, d);
    if kernel.starts_with("causal_attention_v3") {
        require_16_byte_aligned(OP, &[("qkv", qkv.ptr())])?;
    }
    let cfg = LaunchConfig {
        grid_dim: (
            seqs as u32,
            layout.max_len().div_ceil(rows) as u32,
            heads as u32,
        ),
        // 4 warps: v1's 32 rows × 4 threads, v3's 16 rows per warp.
        block_dim: (g::ATTENTION_THREADS, 1, 1),
        shared_mem_bytes: smem,
    };
    let params = CausalAttentionParams {
        out: out.ptr(),
        qkv: qkv.ptr(),
        cu_seqlens: cu.ptr(),
        mask: mask.ptr(),
        first_query: first_query.as_ref().map_or(0, |f| f.ptr()),
        heads: heads as u32,
        kv_heads: kv_heads as u32,
        d: d as u32,
        scale,
    };
    be.launch_params(OP, kernel, cfg, &params)?;
    Ok(out)
}
