//! A token classification head: per-row logits and the label of the largest one.
//! CPU twin of `kernels/token_head.cu`.

use super::cls_head::DenseRef;
use crate::tensor::argmax;

/// Logits `[rows, labels]` of `x: [rows, cols]`, and per row the index of its largest
/// logit (ties to the lowest, as `torch.argmax`).
pub fn token_head(
    x: &[f32],
    rows: usize,
    cols: usize,
    classifier: &DenseRef<'_>,
) -> (Vec<f32>, Vec<u32>) {
    let logits = super::matmul::linear(
        x,
        rows,
        classifier.weight,
        classifier.out,
        cols,
        classifier.bias,
    );
    let labels = logits
        .chunks_exact(classifier.out.max(1))
        .map(|l| argmax(l) as u32)
        .collect();
    (logits, labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_the_first_largest_logit() {
        // Two labels over 2 columns: logits [x0 - x1, x1 - x0] + bias [0, 0].
        let w = [1.0, -1.0, -1.0, 1.0];
        let head = DenseRef {
            weight: &w,
            out: 2,
            bias: None,
        };
        let x = [3.0, 1.0, 1.0, 3.0, 2.0, 2.0];
        let (logits, labels) = token_head(&x, 3, 2, &head);
        assert_eq!(logits, vec![2.0, -2.0, -2.0, 2.0, 0.0, 0.0]);
        assert_eq!(labels, vec![0, 1, 0]);
    }
}
