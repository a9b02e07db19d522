//! Launcher of `kernels/t5_attention.cu` (T5 self- and cross-attention with the
//! relative-position bucket bias looked up on chip). CPU twin:
//! `src/backend/cpu/t5_attention.rs`.

use cudarc::driver::LaunchConfig;

use super::{Arg, CudaBackend, CudaTensor};
use crate::backend::check::Dims;
use crate::backend::kernels::geometry as g;
use crate::backend::{BucketBias, Input, OpError, OpResult, SeqLayout, T5AttentionShape};

const OP: &str = "t5_attention";
/// Largest head dimension (4 columns per lane).
const MAX_D: usize = g::ATTENTION_MAX_D as usize;

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
    let cfg = LaunchConfig {
        grid_dim: (
            q_layout.num_seqs() as u32,
            q_layout.max_len().div_ceil(g::T5_ROWS as usize) as u32,
            heads as u32,
        ),
        block_dim: (g::ATTENTION_THREADS, 1, 1),
        shared_mem_bytes: g::t5_smem(d as u32),
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
    be.launch(OP, cfg, &args)?;
    Ok(out)
}
