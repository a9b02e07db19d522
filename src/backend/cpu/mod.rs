//! CPU backend: f32 everywhere, `gemm` for matrix products, rayon across rows and
//! attention heads. It is the executable specification of every op and a fast
//! fallback when no GPU is present.

pub mod disentangled_attention;
pub mod embedding;
pub mod gelu;
pub mod layer_norm;
pub mod matmul;

use super::{AttentionShape, Backend, OpError, OpResult, RelAttention, SeqLayout};
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
}
