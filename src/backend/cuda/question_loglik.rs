//! Launcher of `kernels/question_loglik.cu`: the LM head at the requested rows only,
//! streamed over vocabulary splits with an online log-sum-exp, then a merge of the
//! splits. CPU twin: `src/backend/cpu/question_loglik.rs`.

use cudarc::driver::LaunchConfig;

use super::device::grid_1d;
use super::params::QuestionLoglikParams;
use super::{Arg, CudaBackend, CudaTensor, DType};
use crate::backend::kernels::geometry as g;
use crate::backend::{Input, OpResult};

/// Hidden rows per block (`RT` of the f32 FMA kernel, `RT_TC` of the bf16/f16 mma.sync
/// one) and dynamic shared memory (the f32 kernel's is static).
fn tile(dtype: DType) -> (usize, u32) {
    match dtype {
        DType::F32 => (g::LOGLIK_ROWS as usize, 0),
        DType::Bf16 | DType::F16 => (g::LOGLIK_TC_ROWS as usize, g::LOGLIK_TC_SMEM),
    }
}
/// Vocabulary rows per split (a multiple of the kernels' chunks, `VC` = 64 and `VC_TC` =
/// 128): SmolLM2's 49,152 give 24 splits, so that even a few rows fill the GPU.
const SPLIT: usize = 2048;

/// `logp[i]` of `targets[i]` at `hidden[rows[i]]` (arguments already checked).
pub(super) fn launch(
    be: &CudaBackend,
    hidden: &CudaTensor,
    rows: Input<'_, [usize]>,
    lm_head: &CudaTensor,
    targets: Input<'_, [u32]>,
    temperature: f32,
) -> OpResult<Vec<f32>> {
    let n = rows.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let (vocab, cols) = (lm_head.rows, lm_head.cols);
    let splits = vocab.div_ceil(SPLIT);
    let idx = be.dev.input_rows("question_loglik", rows)?;
    let tgt = be.dev.input_u32("question_loglik", targets)?;
    let part = be.dev.pool.alloc(3 * splits * n * 4)?;
    let out = be.dev.pool.alloc(n * 4)?;
    // As the twin: logits scaled by the f32 reciprocal of the temperature.
    let inv_t = 1.0 / temperature;
    let (rows_per_block, smem) = tile(be.dev.dtype);
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(rows_per_block) as u32, splits as u32, 1),
        block_dim: (g::LOGLIK_THREADS, 1, 1),
        shared_mem_bytes: smem,
    };
    let params = QuestionLoglikParams {
        part: part.ptr(),
        hidden: hidden.ptr(),
        rows: idx.ptr(),
        head: lm_head.ptr(),
        targets: tgt.ptr(),
        n: n as u32,
        cols: cols as u32,
        vocab: vocab as u32,
        split_width: SPLIT as u32,
        inv_t,
        pad: 0,
    };
    be.launch_params("question_loglik", "question_loglik", cfg, &params)?;

    let merge = be
        .dev
        .function("question_loglik", "question_loglik_merge")?;
    let cfg = grid_1d(n, g::LOGLIK_MERGE_THREADS, u32::MAX);
    // `question_loglik_merge(float* out, const float* part, unsigned n, unsigned splits)`
    // with `out` of n floats and `part` of 3·splits·n floats.
    let args = [
        Arg::Ptr(out.ptr()),
        Arg::Ptr(part.ptr()),
        Arg::U32(n as u32),
        Arg::U32(splits as u32),
    ];
    be.launch_fn("question_loglik_merge", &merge, cfg, &args)?;
    let bytes = be.dev.download_bytes("question_loglik", out.ptr(), n * 4)?;
    Ok(DType::F32.decode(&bytes))
}
