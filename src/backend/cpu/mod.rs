//! CPU backend: f32 everywhere, `gemm` for matrix products, rayon across rows and
//! attention heads. It is the executable specification of every op and a fast
//! fallback when no GPU is present.

pub mod causal_attention;
pub mod disentangled_attention;
pub mod embedding;
pub mod gelu;
pub mod gelu_new;
pub mod layer_norm;
pub mod matmul;
pub mod question_loglik;
pub mod rms_norm;
pub mod rope;
pub mod swiglu;

use rayon::prelude::*;

use super::{AttentionShape, Backend, CausalShape, OpError, OpResult, RelAttention, SeqLayout};
use crate::model::weights::HostTensor;

/// A row-major f32 matrix in host memory.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuTensor {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

/// The CPU backend. Parallelism comes from the rayon pool the caller runs in.
///
/// Every op gives a sequence the same bits whatever else is in its batch (see
/// [`matmul::linear`]); resumed runs rely on it to write identical bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend;

fn shape_err(op: &'static str, msg: String) -> OpError {
    OpError::Shape { op, msg }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;

    fn name(&self) -> String {
        "cpu".into()
    }

    fn upload(&self, t: &HostTensor) -> OpResult<CpuTensor> {
        let (rows, cols) = match t.shape.as_slice() {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            other => {
                return Err(shape_err(
                    "upload",
                    format!("expected 1-D or 2-D, got {other:?}"),
                ))
            }
        };
        Ok(CpuTensor {
            rows,
            cols,
            data: t.data.clone(),
        })
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
        if x.cols != w.cols {
            return Err(shape_err(
                "linear",
                format!(
                    "x is [{}, {}] but w is [{}, {}]",
                    x.rows, x.cols, w.rows, w.cols
                ),
            ));
        }
        if let Some(b) = bias.filter(|b| b.data.len() != w.rows) {
            return Err(shape_err(
                "linear",
                format!("bias has {} values for {} outputs", b.data.len(), w.rows),
            ));
        }
        Ok(CpuTensor {
            rows: x.rows,
            cols: w.rows,
            data: matmul::linear(
                &x.data,
                x.rows,
                &w.data,
                w.rows,
                w.cols,
                bias.map(|b| b.data.as_slice()),
            ),
        })
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
        if let Some(r) = residual {
            if (r.rows, r.cols) != (x.rows, x.cols) {
                return Err(shape_err(
                    "layer_norm",
                    "residual shape differs from x".into(),
                ));
            }
        }
        if weight.data.len() != x.cols || bias.data.len() != x.cols {
            return Err(shape_err(
                "layer_norm",
                format!("affine size != {} columns", x.cols),
            ));
        }
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

    fn embedding(&self, lookups: &[(&CpuTensor, &[u32])]) -> OpResult<CpuTensor> {
        let Some((first, ids)) = lookups.first() else {
            return Err(shape_err("embedding", "no tables".into()));
        };
        let (cols, tokens) = (first.cols, ids.len());
        for (table, ids) in lookups {
            if table.cols != cols || ids.len() != tokens {
                return Err(shape_err(
                    "embedding",
                    "tables or id lists disagree in size".into(),
                ));
            }
            if let Some(bad) = ids.iter().find(|&&i| i as usize >= table.rows) {
                return Err(shape_err(
                    "embedding",
                    format!("id {bad} is outside a table of {} rows", table.rows),
                ));
            }
        }
        let ls: Vec<embedding::Lookup<'_>> = lookups
            .iter()
            .map(|(t, ids)| embedding::Lookup {
                table: &t.data,
                ids,
            })
            .collect();
        Ok(CpuTensor {
            rows: tokens,
            cols,
            data: embedding::embedding_sum(&ls, cols, tokens),
        })
    }

    fn scale_rows(&self, x: &mut CpuTensor, scale: &[f32]) -> OpResult<()> {
        if scale.len() != x.rows {
            return Err(shape_err(
                "scale_rows",
                format!("{} scales for {} rows", scale.len(), x.rows),
            ));
        }
        embedding::scale_rows(&mut x.data, x.cols, scale);
        Ok(())
    }

    fn disentangled_attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        rel: Option<&RelAttention<'_, CpuTensor>>,
        shape: AttentionShape,
        layout: &SeqLayout,
    ) -> OpResult<CpuTensor> {
        let width = shape.heads * shape.head_size;
        let tokens = layout.num_tokens();
        for t in [q, k, v] {
            if (t.rows, t.cols) != (tokens, width) {
                return Err(shape_err(
                    "disentangled_attention",
                    format!(
                        "q/k/v must be [{tokens}, {width}], got [{}, {}]",
                        t.rows, t.cols
                    ),
                ));
            }
        }
        if layout.mask.len() != tokens {
            return Err(shape_err(
                "disentangled_attention",
                "mask length != tokens".into(),
            ));
        }
        let data = disentangled_attention::disentangled_attention(
            &disentangled_attention::AttentionArgs {
                q: &q.data,
                k: &k.data,
                v: &v.data,
                pos_key: rel.and_then(|r| r.pos_key).map(|t| t.data.as_slice()),
                pos_query: rel.and_then(|r| r.pos_query).map(|t| t.data.as_slice()),
                index: rel.map(|r| r.index),
                shape,
                layout,
            },
        );
        Ok(CpuTensor {
            rows: tokens,
            cols: width,
            data,
        })
    }

    fn gather_rows(&self, x: &CpuTensor, rows: &[usize]) -> OpResult<CpuTensor> {
        if let Some(bad) = rows.iter().find(|&&r| r >= x.rows) {
            return Err(shape_err("gather_rows", format!("row {bad} of {}", x.rows)));
        }
        let data = rows
            .iter()
            .flat_map(|&r| x.data[r * x.cols..(r + 1) * x.cols].iter().copied())
            .collect();
        Ok(CpuTensor {
            rows: rows.len(),
            cols: x.cols,
            data,
        })
    }

    fn copy(&self, x: &CpuTensor) -> OpResult<CpuTensor> {
        Ok(x.clone())
    }

    fn add(&self, x: &mut CpuTensor, y: &CpuTensor) -> OpResult<()> {
        if (x.rows, x.cols) != (y.rows, y.cols) {
            return Err(shape_err(
                "add",
                format!("[{}, {}] + [{}, {}]", x.rows, x.cols, y.rows, y.cols),
            ));
        }
        x.data
            .par_chunks_mut(4096)
            .zip(y.data.par_chunks(4096))
            .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += b));
        Ok(())
    }

    fn rms_norm(&self, x: &CpuTensor, weight: &CpuTensor, eps: f32) -> OpResult<CpuTensor> {
        if weight.data.len() != x.cols {
            return Err(shape_err(
                "rms_norm",
                format!("{} weights for {} columns", weight.data.len(), x.cols),
            ));
        }
        let mut data = vec![0f32; x.data.len()];
        rms_norm::rms_norm(&x.data, &mut data, x.cols, &weight.data, eps);
        Ok(CpuTensor {
            rows: x.rows,
            cols: x.cols,
            data,
        })
    }

    fn gelu_new(&self, x: &mut CpuTensor) -> OpResult<()> {
        gelu_new::gelu_new_inplace(&mut x.data);
        Ok(())
    }

    fn swiglu(&self, x: &CpuTensor) -> OpResult<CpuTensor> {
        if x.cols % 2 != 0 {
            return Err(shape_err(
                "swiglu",
                format!("{} columns is not [gate | up]", x.cols),
            ));
        }
        let inter = x.cols / 2;
        let mut data = vec![0f32; x.rows * inter];
        swiglu::swiglu(&x.data, &mut data, inter);
        Ok(CpuTensor {
            rows: x.rows,
            cols: inter,
            data,
        })
    }

    fn rope(
        &self,
        x: &mut CpuTensor,
        heads: usize,
        head_dim: usize,
        positions: &[u32],
        inv_freq: &[f32],
    ) -> OpResult<()> {
        if heads * head_dim > x.cols || positions.len() != x.rows || 2 * inv_freq.len() != head_dim
        {
            return Err(shape_err(
                "rope",
                format!(
                    "x [{}, {}], {heads} heads of {head_dim}, {} positions, {} frequencies",
                    x.rows,
                    x.cols,
                    positions.len(),
                    inv_freq.len()
                ),
            ));
        }
        rope::rope(&mut x.data, x.cols, heads, head_dim, positions, inv_freq);
        Ok(())
    }

    fn causal_attention(
        &self,
        qkv: &CpuTensor,
        shape: CausalShape,
        layout: &SeqLayout,
    ) -> OpResult<CpuTensor> {
        let width = (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
        let tokens = layout.num_tokens();
        if (qkv.rows, qkv.cols) != (tokens, width) {
            return Err(shape_err(
                "causal_attention",
                format!(
                    "qkv must be [{tokens}, {width}], got [{}, {}]",
                    qkv.rows, qkv.cols
                ),
            ));
        }
        if shape.kv_heads == 0 || shape.heads % shape.kv_heads != 0 {
            return Err(shape_err(
                "causal_attention",
                format!(
                    "{} heads do not group over {} kv heads",
                    shape.heads, shape.kv_heads
                ),
            ));
        }
        if layout.mask.len() != tokens {
            return Err(shape_err(
                "causal_attention",
                "mask length != tokens".into(),
            ));
        }
        Ok(CpuTensor {
            rows: tokens,
            cols: shape.heads * shape.head_dim,
            data: causal_attention::causal_attention(&qkv.data, shape, layout),
        })
    }

    fn question_loglik(
        &self,
        hidden: &CpuTensor,
        rows: &[usize],
        lm_head: &CpuTensor,
        targets: &[u32],
        temperature: f32,
    ) -> OpResult<Vec<f32>> {
        if lm_head.cols != hidden.cols || rows.len() != targets.len() {
            return Err(shape_err(
                "question_loglik",
                format!(
                    "hidden [{}, {}], head [{}, {}], {} rows, {} targets",
                    hidden.rows,
                    hidden.cols,
                    lm_head.rows,
                    lm_head.cols,
                    rows.len(),
                    targets.len()
                ),
            ));
        }
        if let Some(bad) = targets.iter().find(|&&t| t as usize >= lm_head.rows) {
            return Err(shape_err(
                "question_loglik",
                format!("target {bad} is outside the vocabulary of {}", lm_head.rows),
            ));
        }
        if !(temperature > 0.0 && temperature.is_finite()) {
            return Err(shape_err(
                "question_loglik",
                format!("temperature {temperature} must be positive"),
            ));
        }
        let x = self.gather_rows(hidden, rows)?;
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
