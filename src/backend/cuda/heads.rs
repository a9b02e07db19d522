//! Launchers of `kernels/cls_head.cu` and `kernels/token_head.cu`: each head is one
//! kernel over blocks of [`HEAD_ROWS`] sequences or tokens (and of pooler chunks), whose
//! f32 logits (partial logits per chunk, added here; token labels) come back in one
//! download. CPU twins: `src/backend/cpu/cls_head.rs`,
//! `src/backend/cpu/token_head.rs`.

use cudarc::driver::LaunchConfig;

use super::params::HeadParams;
use super::{CudaBackend, CudaTensor, DType};
use crate::backend::kernels::geometry;
use crate::backend::{
    ClsHead, Dense, Input, OpError, OpResult, PoolerAct, SeqLayout, SeqPooling, TokenLogits,
};
use crate::tensor::HostTensor;

/// Rows per block (kernels/geometry.cuh).
pub const HEAD_ROWS: usize = geometry::HEAD_ROWS as usize;
/// Pooler outputs per block of `cls_head` (8 per warp): at DeBERTa-large's 1,024 the
/// pooler of 8 sequences is spread over 16 blocks instead of one.
const POOLER_CHUNK: usize = geometry::HEAD_POOLER_CHUNK as usize;
/// Most dynamic shared memory a head kernel asks for (H100 and A100 give a block up
/// to 227 and 163 KiB): the staged rows and pooled features of a block, in f32.
const MAX_SMEM: usize = 160 * 1024;

/// One block per [`HEAD_ROWS`] rows and chunk, with `floats` f32 of shared memory per
/// row.
fn config(op: &'static str, rows: usize, chunks: usize, floats: usize) -> OpResult<LaunchConfig> {
    let smem = geometry::head_smem(floats as u32) as usize;
    if smem > MAX_SMEM {
        return Err(OpError::Shape {
            op,
            msg: format!(
                "{floats} features per row need {smem} bytes of shared memory, over the \
                 kernel's {MAX_SMEM}; run this model on the CPU (--device cpu)"
            ),
        });
    }
    Ok(LaunchConfig {
        grid_dim: (rows.div_ceil(HEAD_ROWS) as u32, chunks as u32, 1),
        block_dim: (geometry::HEAD_THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    })
}

/// The parameters of a head over `hidden` writing `rows` logit rows to `logits`.
fn params(
    hidden: &CudaTensor,
    classifier: Dense<'_, CudaTensor>,
    rows: usize,
    logits: u64,
) -> HeadParams {
    HeadParams {
        logits,
        label: 0,
        hidden_states: hidden.ptr(),
        cu_seqlens: 0,
        mask: 0,
        pooler_w: 0,
        pooler_b: 0,
        classifier_w: classifier.weight.ptr(),
        classifier_b: classifier.bias.map_or(0, CudaTensor::ptr),
        rows: rows as u32,
        hidden: hidden.cols as u32,
        inner: hidden.cols as u32,
        labels: classifier.weight.rows as u32,
        chunk: 0,
        pad: 0,
    }
}

/// [`crate::backend::Backend::cls_head`] with `(seqs, labels)` already checked.
pub(super) fn cls_head(
    be: &CudaBackend,
    hidden: &CudaTensor,
    layout: Input<'_, SeqLayout>,
    head: &ClsHead<'_, CudaTensor>,
    (seqs, labels): (usize, usize),
) -> OpResult<HostTensor> {
    if seqs == 0 {
        return Ok(HostTensor::new(vec![0, labels], Vec::new()));
    }
    // Mean pooling reads every token of a sequence: one chunk, so that no block reads
    // them again.
    let inner = head.pooler.map_or(0, |p| p.weight.rows);
    let chunk = match head.pooling {
        SeqPooling::First => inner.min(POOLER_CHUNK),
        SeqPooling::Mean => inner,
    };
    let chunks = if inner == 0 { 1 } else { inner.div_ceil(chunk) };
    let cfg = config("cls_head", seqs, chunks, hidden.cols + chunk)?;
    let (cu, mask) = be.dev.input_layout("cls_head", layout)?;
    let n = seqs * labels;
    let out = be.dev.pool.alloc(chunks * n * 4)?;
    let mut p = params(hidden, head.classifier, seqs, out.ptr());
    p.cu_seqlens = cu.ptr();
    if head.pooling == SeqPooling::Mean {
        p.mask = mask.ptr();
    }
    if let Some(pooler) = head.pooler {
        p.pooler_w = pooler.weight.ptr();
        p.pooler_b = pooler.bias.map_or(0, CudaTensor::ptr);
        p.inner = inner as u32;
        p.chunk = chunk as u32;
    }
    // The pooler's activation is the entry's (no pooler: either entry, the GELU one).
    let kernel = match (head.pooler, head.pooler_act) {
        (Some(_), PoolerAct::Tanh) => "cls_head_tanh",
        _ => "cls_head",
    };
    be.launch_params("cls_head", kernel, cfg, &p)?;
    let bytes = be
        .dev
        .download_bytes("cls_head", out.ptr(), chunks * n * 4)?;
    let parts = DType::F32.decode(&bytes);
    // The chunks' partial logits, added in chunk order.
    let mut logits = parts[..n].to_vec();
    for part in parts[n..].chunks_exact(n) {
        logits.iter_mut().zip(part).for_each(|(l, p)| *l += p);
    }
    Ok(HostTensor::new(vec![seqs, labels], logits))
}

/// [`crate::backend::Backend::token_head`] with `labels` already checked; logits and
/// labels share one buffer (and one download).
pub(super) fn token_head(
    be: &CudaBackend,
    hidden: &CudaTensor,
    classifier: Dense<'_, CudaTensor>,
    labels: usize,
) -> OpResult<TokenLogits> {
    let tokens = hidden.rows;
    if tokens == 0 {
        return Ok(TokenLogits {
            logits: HostTensor::new(vec![0, labels], Vec::new()),
            labels: Vec::new(),
        });
    }
    let cfg = config("token_head", tokens, 1, hidden.cols + labels)?;
    let n = tokens * labels;
    let out = be.dev.pool.alloc((n + tokens) * 4)?;
    let mut p = params(hidden, classifier, tokens, out.ptr());
    p.label = out.ptr() + (n * 4) as u64;
    be.launch_params("token_head", "token_head", cfg, &p)?;
    let bytes = be
        .dev
        .download_bytes("token_head", out.ptr(), (n + tokens) * 4)?;
    let (logits, picked) = bytes.split_at(n * 4);
    Ok(TokenLogits {
        logits: HostTensor::new(vec![tokens, labels], DType::F32.decode(logits)),
        labels: picked
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    })
}
