//! CPU backend: f32 everywhere, `gemm` for matrix products, rayon across rows and
//! attention heads. It is the executable specification of every op and a fast
//! fallback when no GPU is present.

pub mod bf16_linear;
pub mod causal_attention;
pub mod cls_head;
pub mod disentangled_attention;
pub mod embedding;
pub mod exp;
pub mod gated_act;
pub mod gelu;
pub mod gelu_new;
pub mod int8_linear;
pub mod layer_norm;
pub mod matmul;
pub mod mean_pool;
pub mod precision;
pub mod question_loglik;
pub mod rms_norm;
pub mod rope;
pub mod t5_attention;
pub mod tiles;
pub mod token_head;

use rayon::prelude::*;

use super::check::{self, Dims};
use super::{
    AttentionShape, Backend, BucketBias, CausalShape, ClsHead, Dense, Gated, HeadNorm, Input,
    OpResult, RelAttention, SeqLayout, T5AttentionShape, TokenLogits,
};
use crate::tensor::HostTensor;
pub use precision::CpuGemm;

/// A row-major f32 matrix in host memory.
#[derive(Debug, Clone)]
pub struct CpuTensor {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
    /// Low-precision copies, made when the tensor is first a dense layer's weight
    /// (weights are never changed in place).
    packed: precision::Packed,
}

impl PartialEq for CpuTensor {
    fn eq(&self, other: &Self) -> bool {
        (self.rows, self.cols) == (other.rows, other.cols) && self.data == other.data
    }
}

/// The CPU backend. Parallelism comes from the rayon pool the caller runs in.
///
/// Every op gives a sequence the same bits whatever else is in its batch (see
/// [`matmul::linear`] and the packed kernels); resumed runs rely on it to write
/// identical bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend {
    gemm: CpuGemm,
}

impl CpuBackend {
    /// The f32 backend: the reference of every op.
    pub const F32: CpuBackend = CpuBackend { gemm: CpuGemm::F32 };

    /// Dense layers in `gemm` where this CPU has its instructions, else f32 (with a
    /// warning).
    pub fn new(gemm: CpuGemm) -> Self {
        Self {
            gemm: gemm.or_f32(),
        }
    }

    /// The arithmetic the dense layers run in.
    pub fn gemm(&self) -> CpuGemm {
        self.gemm
    }
}

impl Dims for CpuTensor {
    fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
}

/// The host view of a dense layer's tensors.
fn dense_ref(d: Dense<'_, CpuTensor>) -> cls_head::DenseRef<'_> {
    cls_head::DenseRef {
        weight: &d.weight.data,
        out: d.weight.rows,
        bias: d.bias.map(|b| b.data.as_slice()),
    }
}

/// `a += b`, compiled for the widest vectors the CPU has.
#[multiversion::multiversion(targets = "simd")]
fn add_chunk(a: &mut [f32], b: &[f32]) {
    a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
}

impl CpuTensor {
    fn like(rows: usize, cols: usize, data: Vec<f32>) -> Self {
        Self {
            rows,
            cols,
            data,
            packed: precision::Packed::default(),
        }
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;

    fn name(&self) -> String {
        match self.gemm {
            CpuGemm::F32 => "cpu".into(),
            CpuGemm::Bf16 => "cpu (bf16 dense layers)".into(),
            CpuGemm::Int8 => "cpu (int8 dense layers)".into(),
            CpuGemm::Q8 => "cpu (q8 dense layers)".into(),
        }
    }

    fn upload(&self, t: &HostTensor) -> OpResult<CpuTensor> {
        let (rows, cols) = check::matrix_shape(&t.shape)?;
        let mut tensor = CpuTensor::like(rows, cols, t.data.clone());
        let stored = t
            .stored
            .as_deref()
            .filter(|s| (s.rows, s.cols) == (rows, cols));
        if let (CpuGemm::Q8, Some(stored)) = (self.gemm, stored) {
            tensor.packed = precision::Packed::from_stored(stored);
        }
        Ok(tensor)
    }

    fn download(&self, t: &CpuTensor) -> OpResult<HostTensor> {
        Ok(HostTensor::new(vec![t.rows, t.cols], t.data.clone()))
    }

    fn linear(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        bias: Option<&CpuTensor>,
    ) -> OpResult<CpuTensor> {
        check::linear(x, w, bias)?;
        let bias = bias.map(|b| b.data.as_slice());
        let (n, k) = (w.rows, w.cols);
        let int8 = |scheme| {
            let packed = w.packed.int8(&w.data, n, k, scheme);
            int8_linear::linear(&x.data, x.rows, packed, bias)
        };
        let data = match self.gemm {
            CpuGemm::F32 => matmul::linear(&x.data, x.rows, &w.data, n, k, bias),
            CpuGemm::Bf16 => {
                bf16_linear::linear(&x.data, x.rows, w.packed.bf16(&w.data, n, k), bias)
            }
            CpuGemm::Int8 => int8(int8_linear::Int8Scheme::PerRow),
            CpuGemm::Q8 => int8(int8_linear::Int8Scheme::Blocks32),
        };
        Ok(CpuTensor::like(x.rows, w.rows, data))
    }

    fn linear_split(
        &self,
        x: &CpuTensor,
        w: &CpuTensor,
        bias: Option<&CpuTensor>,
        parts: usize,
    ) -> OpResult<Vec<CpuTensor>> {
        check::linear_split(x, w, bias, parts)?;
        let y = self.linear(x, w, bias)?;
        let out = w.rows / parts;
        Ok((0..parts)
            .into_par_iter()
            .map(|p| {
                let mut data = vec![0f32; x.rows * out];
                for (dst, row) in data
                    .chunks_exact_mut(out.max(1))
                    .zip(y.data.chunks_exact(w.rows.max(1)))
                {
                    dst.copy_from_slice(&row[p * out..(p + 1) * out]);
                }
                CpuTensor::like(x.rows, out, data)
            })
            .collect())
    }

    fn gelu(&self, x: &mut CpuTensor) -> OpResult<()> {
        gelu::gelu_inplace(&mut x.data);
        Ok(())
    }

    fn layer_norm(
        &self,
        x: &mut CpuTensor,
        residual: Option<&CpuTensor>,
        weight: &CpuTensor,
        bias: &CpuTensor,
        eps: f32,
    ) -> OpResult<()> {
        check::layer_norm(x, residual, weight, bias)?;
        layer_norm::layer_norm(
            &mut x.data,
            residual.map(|r| r.data.as_slice()),
            x.cols,
            &weight.data,
            &bias.data,
            eps,
        );
        Ok(())
    }

    fn embedding(&self, lookups: &[(&CpuTensor, Input<'_, [u32]>)]) -> OpResult<CpuTensor> {
        let (cols, tokens) = check::embedding(lookups)?;
        let ls: Vec<embedding::Lookup<'_>> = lookups
            .iter()
            .map(|(t, ids)| embedding::Lookup {
                table: &t.data,
                ids: ids.host,
            })
            .collect();
        let data = embedding::embedding_sum(&ls, cols, tokens);
        Ok(CpuTensor::like(tokens, cols, data))
    }

    fn scale_rows(&self, x: &mut CpuTensor, scale: Input<'_, [f32]>) -> OpResult<()> {
        check::scale_rows(x, scale.host)?;
        embedding::scale_rows(&mut x.data, x.cols, scale.host);
        Ok(())
    }

    fn disentangled_attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        rel: Option<&RelAttention<'_, CpuTensor>>,
        shape: AttentionShape,
        layout: Input<'_, SeqLayout>,
    ) -> OpResult<CpuTensor> {
        let layout = layout.host;
        check::disentangled_attention([q, k, v], shape, layout)?;
        let data = disentangled_attention::disentangled_attention(
            &disentangled_attention::AttentionArgs {
                q: &q.data,
                k: &k.data,
                v: &v.data,
                pos_key: rel.and_then(|r| r.pos_key).map(|t| t.data.as_slice()),
                pos_query: rel.and_then(|r| r.pos_query).map(|t| t.data.as_slice()),
                index: rel.map(|r| r.index.host),
                shape,
                layout,
            },
        );
        Ok(CpuTensor::like(
            layout.num_tokens(),
            shape.heads * shape.head_size,
            data,
        ))
    }

    fn gather_rows(&self, x: &CpuTensor, rows: Input<'_, [usize]>) -> OpResult<CpuTensor> {
        let rows = rows.host;
        check::gather_rows(x, rows)?;
        let data = rows
            .iter()
            .flat_map(|&r| x.data[r * x.cols..(r + 1) * x.cols].iter().copied())
            .collect();
        Ok(CpuTensor::like(rows.len(), x.cols, data))
    }

    fn cls_head(
        &self,
        hidden: &CpuTensor,
        layout: Input<'_, SeqLayout>,
        head: &ClsHead<'_, CpuTensor>,
    ) -> OpResult<HostTensor> {
        let layout = layout.host;
        let (seqs, labels) = check::cls_head(hidden, layout, head)?;
        let data = cls_head::cls_head(
            &hidden.data,
            hidden.cols,
            layout,
            head.pooling,
            head.pooler
                .map(dense_ref)
                .as_ref()
                .map(|p| (p, head.pooler_act)),
            &dense_ref(head.classifier),
        );
        Ok(HostTensor::new(vec![seqs, labels], data))
    }

    fn token_head(
        &self,
        hidden: &CpuTensor,
        classifier: Dense<'_, CpuTensor>,
    ) -> OpResult<TokenLogits> {
        let labels = check::token_head(hidden, classifier)?;
        let (logits, picked) = token_head::token_head(
            &hidden.data,
            hidden.rows,
            hidden.cols,
            &dense_ref(classifier),
        );
        Ok(TokenLogits {
            logits: HostTensor::new(vec![hidden.rows, labels], logits),
            labels: picked,
        })
    }

    fn copy(&self, x: &CpuTensor) -> OpResult<CpuTensor> {
        Ok(x.clone())
    }

    fn add(&self, x: &mut CpuTensor, y: &CpuTensor) -> OpResult<()> {
        check::add(x, y)?;
        x.data
            .par_chunks_mut(4096)
            .zip(y.data.par_chunks(4096))
            .for_each(|(a, b)| add_chunk(a, b));
        Ok(())
    }

    fn rms_norm(&self, x: &CpuTensor, weight: &CpuTensor, eps: f32) -> OpResult<CpuTensor> {
        check::rms_norm(x, weight)?;
        let mut data = vec![0f32; x.data.len()];
        rms_norm::rms_norm(&x.data, &mut data, x.cols, &weight.data, eps);
        Ok(CpuTensor::like(x.rows, x.cols, data))
    }

    fn gelu_new(&self, x: &mut CpuTensor) -> OpResult<()> {
        gelu_new::gelu_new_inplace(&mut x.data);
        Ok(())
    }

    fn gated_act(&self, x: &CpuTensor, gated: Gated) -> OpResult<CpuTensor> {
        let inter = check::gated_act(x, gated.block)?;
        let mut data = vec![0f32; x.rows * inter];
        gated_act::gated_act(&x.data, &mut data, inter, gated);
        Ok(CpuTensor::like(x.rows, inter, data))
    }

    fn relu(&self, x: &mut CpuTensor) -> OpResult<()> {
        x.data
            .par_chunks_mut(4096)
            .for_each(|c| c.iter_mut().for_each(|v| *v = v.max(0.0)));
        Ok(())
    }

    fn t5_attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        bias: Option<&BucketBias<'_, CpuTensor>>,
        shape: T5AttentionShape,
        q_layout: Input<'_, SeqLayout>,
        kv_layout: Input<'_, SeqLayout>,
    ) -> OpResult<CpuTensor> {
        let (ql, kl) = (q_layout.host, kv_layout.host);
        let checked = bias.map(|b| (b.table, b.index.host));
        let max_len = check::t5_attention((q, k, v), checked, shape, ql, kl)?;
        let bias = bias.map(|b| t5_attention::Bias {
            table: &b.table.data,
            index: b.index.host,
            max_len,
        });
        let data =
            t5_attention::t5_attention((&q.data, &k.data, &v.data), bias.as_ref(), shape, ql, kl);
        Ok(CpuTensor::like(
            ql.num_tokens(),
            shape.heads * shape.head_dim,
            data,
        ))
    }

    fn rope(
        &self,
        x: &mut CpuTensor,
        heads: usize,
        head_dim: usize,
        positions: Input<'_, [u32]>,
        inv_freq: Input<'_, [f32]>,
        norm: Option<HeadNorm<'_, CpuTensor>>,
    ) -> OpResult<()> {
        let (positions, inv_freq) = (positions.host, inv_freq.host);
        check::rope(x, heads, head_dim, positions, inv_freq, norm)?;
        let norm = norm.map(|n| rope::HeadNorm {
            q_heads: n.q_heads,
            q_weight: &n.q_weight.data,
            k_weight: &n.k_weight.data,
            eps: n.eps,
        });
        rope::rope(
            &mut x.data,
            x.cols,
            heads,
            head_dim,
            positions,
            inv_freq,
            norm.as_ref(),
        );
        Ok(())
    }

    fn causal_attention(
        &self,
        qkv: &CpuTensor,
        shape: CausalShape,
        layout: Input<'_, SeqLayout>,
        first_query: Option<Input<'_, [u32]>>,
    ) -> OpResult<CpuTensor> {
        let (layout, first_query) = (layout.host, first_query.map(|f| f.host));
        check::causal_attention(qkv, shape, layout, first_query)?;
        let data = causal_attention::causal_attention(&qkv.data, shape, layout, first_query);
        Ok(CpuTensor::like(
            layout.num_tokens(),
            shape.heads * shape.head_dim,
            data,
        ))
    }

    fn question_loglik(
        &self,
        hidden: &CpuTensor,
        rows: Input<'_, [usize]>,
        lm_head: &CpuTensor,
        targets: Input<'_, [u32]>,
        temperature: f32,
    ) -> OpResult<Vec<f32>> {
        let (rows, targets) = (rows.host, targets.host);
        check::question_loglik(hidden, rows, lm_head, targets, temperature)?;
        let x = self.gather_rows(hidden, rows.into())?;
        Ok(question_loglik::question_loglik(
            &x.data,
            x.cols,
            &lm_head.data,
            lm_head.rows,
            targets,
            temperature,
        ))
    }
}
