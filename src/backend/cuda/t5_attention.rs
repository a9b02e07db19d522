//! Launcher of `kernels/t5_attention.cu` (T5 self- and cross-attention with the
//! relative-position bucket bias looked up on chip; bf16/f16 with d_kv a multiple of 8
//! on tensor cores: v3, `mma.sync` tiles of 64 query rows; f32 and other widths: v1, a
//! warp per query row). CPU twin: `src/backend/cpu/t5_attention.rs`.

use cudarc::driver::LaunchConfig;

use super::memory::require_16_byte_aligned;
use super::{Arg, CudaBackend, CudaTensor, DType};
use crate::backend::check::Dims;
use crate::backend::kernels::geometry as g;
use crate::backend::{BucketBias, Input, OpError, OpResult, SeqLayout, T5AttentionShape};

const OP: &str = "t5_attention";
/// Largest head dimension (4 columns per lane).
const MAX_D: usize = g::ATTENTION_MAX_D as usize;

/// The version run for `dtype` and `d_kv`: (query rows per block, kernel, dynamic
/// shared memory in bytes). v3: padded head size 64 or 128 (46 KB at D = 64, 86 KB at
/// D = 128, opted in above 48 KiB); v1: f32 K and V tiles (layouts: geometry.cuh).
pub(super) fn version(dtype: DType, d: usize) -> (usize, &'static str, u32) {
    if dtype != DType::F32 && d.is_multiple_of(8) {
        let (dp, kernel) = if d <= 64 {
            (64, "t5_attention_v3_d64")
        } else {
            (128, "t5_attention_v3_d128")
        };
        (g::V3_ROWS as usize, kernel, g::t5_v3_smem(dp))
    } else {
        (g::T5_ROWS as usize, OP, g::t5_smem(d as u32))
    }
}

/// Context `[q tokens, heads·d]` (operands already checked; `max_len` of the index).
pub(super) fn launch(
    be: &CudaBackend,
    (q, k, v): (&CudaTensor, &CudaTensor, &CudaTensor),
    bias: Option<&BucketBias<'_, CudaTensor>>,
    shape: T5AttentionShape,
    (q_layout, kv_layout): (Input<'_, SeqLayout>, Input<'_, SeqLayout>),
    max_len: usize,
) -> OpResult<CudaTensor> {
    let (heads, d) = (shape.heads, shape.head_dim);
    let out = be.tensor(q_layout.num_tokens(), heads * d)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    if d > MAX_D {
        return Err(OpError::Shape {
            op: OP,
            msg: format!("d_kv {d} exceeds the kernel's {MAX_D}"),
        });
    }
    let (q_cu, q_mask) = be.dev.input_layout(OP, q_layout)?;
    let (kv_cu, kv_mask) = be.dev.input_layout(OP, kv_layout)?;
    let index = bias.map(|b| be.dev.input_u32(OP, b.index)).transpose()?;
    let (rows, kernel, smem) = version(be.dev.dtype, d);
    if kernel != OP {
        require_16_byte_aligned(OP, &[("q", q.ptr()), ("k", k.ptr()), ("v", v.ptr())])?;
    }
    let cfg = LaunchConfig {
        grid_dim: (
            q_layout.num_seqs() as u32,
            q_layout.max_len().div_ceil(rows) as u32,
            heads as u32,
        ),
        // 4 warps: v1's 4 query rows, v3's 16 rows per warp.
        block_dim: (g::ATTENTION_THREADS, 1, 1),
        shared_mem_bytes: smem,
    };
    let args = [
        Arg::Ptr(out.ptr()),
        Arg::Ptr(q.ptr()),
        Arg::Ptr(k.ptr()),
        Arg::Ptr(v.ptr()),
        Arg::Ptr(q_cu.ptr()),
        Arg::Ptr(q_mask.ptr()),
        Arg::Ptr(kv_cu.ptr()),
        Arg::Ptr(kv_mask.ptr()),
        Arg::Ptr(bias.map_or(0, |b| b.table.ptr())),
        Arg::Ptr(index.as_ref().map_or(0, |i| i.ptr())),
        Arg::U32(heads as u32),
        Arg::U32(d as u32),
        Arg::U32(max_len as u32),
        Arg::U32(u32::from(shape.causal)),
    ];
    let f = be.dev.typed_smem(OP, kernel, be.dev.dtype, smem)?;
    be.launch_fn(OP, &f, cfg, &args)?;
    Ok(out)
}
