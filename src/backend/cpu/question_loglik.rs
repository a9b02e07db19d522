//! Log-probabilities of target tokens under the LM head, without materialising the
//! `[rows, vocab]` logits: the head runs over vocabulary chunks in parallel, each
//! chunk keeps a running max, sum of exponentials and the target's logit per row,
//! and the chunks are merged by log-sum-exp. CPU twin of `kernels/question_loglik.cu`.
//!
//! `logp[r] = z[r, t_r] − logsumexp_v z[r, v]` with `z = (h_r · Wᵀ) / temperature`.

use rayon::prelude::*;

use super::exp::{exp_in_place_sum, max_of};
use super::matmul::{matmul, MatRef};

/// Vocabulary rows per chunk: 1024 rows of a 576–4096 wide head stay in L2 while the
/// chunk's GEMM streams the hidden rows.
pub const VOCAB_CHUNK: usize = 1024;

/// Partial log-sum-exp state of one chunk for every row.
struct Partial {
    max: Vec<f32>,
    sum: Vec<f32>,
    /// Target logit when the target falls in this chunk.
    target: Vec<Option<f32>>,
}

/// `x: [n, cols]` hidden rows (already gathered), `lm_head: [vocab, cols]`,
/// `targets[r] < vocab`. Returns `logp[r]` for each row.
pub fn question_loglik(
    x: &[f32],
    cols: usize,
    lm_head: &[f32],
    vocab: usize,
    targets: &[u32],
    temperature: f32,
) -> Vec<f32> {
    let n = targets.len();
    if n == 0 {
        return Vec::new();
    }
    let inv_t = 1.0 / temperature;
    let chunks: Vec<usize> = (0..vocab).step_by(VOCAB_CHUNK).collect();
    let partials: Vec<Partial> = chunks
        .par_iter()
        .map(|&v0| {
            let width = VOCAB_CHUNK.min(vocab - v0);
            let mut z = vec![0f32; n * width];
            matmul(
                &mut z,
                width,
                MatRef::rows(x, n, cols, cols),
                MatRef::rows(&lm_head[v0 * cols..], width, cols, cols).t(),
                false,
                false,
            );
            let mut p = Partial {
                max: vec![f32::NEG_INFINITY; n],
                sum: vec![0.0; n],
                target: vec![None; n],
            };
            for (r, row) in z.chunks_exact_mut(width).enumerate() {
                row.iter_mut().for_each(|v| *v *= inv_t);
                let t = targets[r] as usize;
                if (v0..v0 + width).contains(&t) {
                    p.target[r] = Some(row[t - v0]);
                }
                // The logits are not needed after this: the exponentials go in place.
                let m = max_of(row);
                p.max[r] = m;
                p.sum[r] = exp_in_place_sum(row, m);
            }
            p
        })
        .collect();
    (0..n)
        .map(|r| {
            let m = partials
                .iter()
                .map(|p| p.max[r])
                .fold(f32::NEG_INFINITY, f32::max);
            let s: f64 = partials
                .iter()
                .map(|p| f64::from(p.sum[r]) * f64::from(p.max[r] - m).exp())
                .sum();
            let t = partials
                .iter()
                .find_map(|p| p.target[r])
                .expect("targets are checked against the vocabulary by the caller");
            t - m - s.ln() as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn equals_full_log_softmax_across_chunks() {
        let (n, cols, vocab) = (3, 5, super::VOCAB_CHUNK * 2 + 37);
        let x: Vec<f32> = (0..n * cols).map(|i| (i as f32 * 0.7).sin()).collect();
        let w: Vec<f32> = (0..vocab * cols)
            .map(|i| (i as f32 * 0.013).cos() * 2.0)
            .collect();
        let targets = [0u32, (vocab - 1) as u32, 1500];
        let t = 1.4f32;
        let got = super::question_loglik(&x, cols, &w, vocab, &targets, t);
        for r in 0..n {
            let z: Vec<f64> = (0..vocab)
                .map(|v| {
                    (0..cols)
                        .map(|c| f64::from(x[r * cols + c]) * f64::from(w[v * cols + c]))
                        .sum::<f64>()
                        / f64::from(t)
                })
                .collect();
            let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            let want = z[targets[r] as usize] - lse;
            assert!(
                (f64::from(got[r]) - want).abs() < 1e-4,
                "row {r}: {} vs {want}",
                got[r]
            );
        }
    }
}
