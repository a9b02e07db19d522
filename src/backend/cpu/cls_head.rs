//! A sequence classification head: each sequence's first row (or masked mean), the
//! pooler with its activation (exact GELU or tanh) when there is one, the classifier.
//! CPU twin of `kernels/cls_head.cu`.

use super::{gelu, matmul, mean_pool};
use crate::backend::{PoolerAct, SeqLayout, SeqPooling};

/// A dense layer's host data: `weight: [out, in]` row-major, `bias: [out]`.
pub struct DenseRef<'a> {
    pub weight: &'a [f32],
    pub out: usize,
    pub bias: Option<&'a [f32]>,
}

impl DenseRef<'_> {
    /// `x: [rows, in] → [rows, out]`.
    fn apply(&self, x: &[f32], rows: usize, input: usize) -> Vec<f32> {
        matmul::linear(x, rows, self.weight, self.out, input, self.bias)
    }
}

/// Logits `[sequences, labels]` of the head over `x: [tokens, cols]`.
pub fn cls_head(
    x: &[f32],
    cols: usize,
    layout: &SeqLayout,
    pooling: SeqPooling,
    pooler: Option<(&DenseRef<'_>, PoolerAct)>,
    classifier: &DenseRef<'_>,
) -> Vec<f32> {
    let seqs = layout.num_seqs();
    let pooled = match pooling {
        SeqPooling::First => layout
            .first_rows()
            .iter()
            .flat_map(|&r| x[r * cols..(r + 1) * cols].iter().copied())
            .collect(),
        SeqPooling::Mean => mean_pool::mean_pool(x, cols, layout),
    };
    let (features, width) = match pooler {
        Some((p, act)) => {
            let mut y = p.apply(&pooled, seqs, cols);
            match act {
                PoolerAct::Gelu => gelu::gelu_inplace(&mut y),
                PoolerAct::Tanh => y.iter_mut().for_each(|v| *v = v.tanh()),
            }
            (y, p.out)
        }
        None => (pooled, cols),
    };
    classifier.apply(&features, seqs, width)
}
