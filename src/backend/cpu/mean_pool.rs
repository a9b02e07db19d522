//! Masked mean of each packed sequence's rows (the mean pooling of `cls_head.rs`; on
//! a device the staging step of `kernels/cls_head.cu`).

use crate::backend::SeqLayout;

/// `out[s] = Σ_t m_t x_t / max(Σ_t m_t, 1)` over the rows `t` of sequence `s`.
pub fn mean_pool(x: &[f32], cols: usize, layout: &SeqLayout) -> Vec<f32> {
    let mut out = vec![0f32; layout.num_seqs() * cols];
    for (s, w) in layout.cu_seqlens.windows(2).enumerate() {
        let row = &mut out[s * cols..(s + 1) * cols];
        let mut weight = 0f32;
        for t in w[0]..w[1] {
            let m = layout.mask[t];
            weight += m;
            for (o, v) in row.iter_mut().zip(&x[t * cols..(t + 1) * cols]) {
                *o += m * v;
            }
        }
        row.iter_mut().for_each(|o| *o /= weight.max(1.0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_only_unmasked_rows_per_sequence() {
        let layout = SeqLayout {
            cu_seqlens: vec![0, 3, 4, 4],
            mask: vec![1.0, 0.0, 1.0, 1.0],
        };
        let x = [1.0, 10.0, 100.0, 1000.0, 3.0, 30.0, 7.0, 70.0];
        assert_eq!(
            mean_pool(&x, 2, &layout),
            vec![2.0, 20.0, 7.0, 70.0, 0.0, 0.0]
        );
    }
}
