//! Rotary position embedding in HF's half-split form (`rotate_half`): for each head,
//! dims `i` and `i + d/2` rotate by `pos · inv_freq[i]`, after Qwen3's per-head RMSNorm
//! when one is given. CPU twin of `kernels/rope.cu` (`rope_*`, `rope_qk_norm_*`).

use rayon::prelude::*;

/// Qwen3's `q_norm`/`k_norm` (transformers' `Qwen3RMSNorm` over each head): the first
/// `q_heads` heads scale by `q_weight`, the rest by `k_weight`.
pub struct HeadNorm<'a> {
    pub q_heads: usize,
    pub q_weight: &'a [f32],
    pub k_weight: &'a [f32],
    pub eps: f32,
}

/// Rotates the first `heads` heads (of `head_dim` each) of every row of `x`
/// (`cols` wide) in place, each RMS-normalised first under `norm`; row `t` has
/// position `positions[t]`.
pub fn rope(
    x: &mut [f32],
    cols: usize,
    heads: usize,
    head_dim: usize,
    positions: &[u32],
    inv_freq: &[f32],
    norm: Option<&HeadNorm<'_>>,
) {
    let half = head_dim / 2;
    x.par_chunks_mut(cols)
        .zip(positions.par_iter())
        .for_each(|(row, &pos)| {
            // cos/sin in f32 from an f32 angle, as HF computes `freqs = pos · inv_freq`.
            let (cos, sin): (Vec<f32>, Vec<f32>) = inv_freq
                .iter()
                .map(|&f| {
                    let a = pos as f32 * f;
                    (a.cos(), a.sin())
                })
                .unzip();
            for h in 0..heads {
                let v = &mut row[h * head_dim..(h + 1) * head_dim];
                if let Some(n) = norm {
                    let w = if h < n.q_heads {
                        n.q_weight
                    } else {
                        n.k_weight
                    };
                    let ss: f32 = v.iter().map(|a| a * a).sum();
                    let inv = 1.0 / (ss / head_dim as f32 + n.eps).sqrt();
                    for (a, &w) in v.iter_mut().zip(w) {
                        *a = w * (*a * inv);
                    }
                }
                for i in 0..half {
                    let (a, b) = (v[i], v[i + half]);
                    v[i] = a * cos[i] - b * sin[i];
                    v[i + half] = b * cos[i] + a * sin[i];
                }
            }
        });
}

#[cfg(test)]
mod tests {
    #[test]
    fn rotates_pairs_by_position() {
        // One head of 4 dims, inv_freq [1, 0.5]; position 2 → angles 2 and 1.
        let mut x = vec![1.0f32, 2.0, 3.0, 4.0, 9.0];
        super::rope(&mut x, 5, 1, 4, &[2], &[1.0, 0.5], None);
        let (c0, s0, c1, s1) = (2f32.cos(), 2f32.sin(), 1f32.cos(), 1f32.sin());
        let want = [
            1.0 * c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            3.0 * c0 + 1.0 * s0,
            4.0 * c1 + 2.0 * s1,
            9.0,
        ];
        for (a, b) in x.iter().zip(want) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn normalises_q_and_k_heads_with_their_weights_before_rotating() {
        // Two heads of 2 dims at position 0 (no rotation): q = [3, 4] → [3, 4]/√12.5·wq,
        // k = [1, 1] → [1, 1]·wk (mean square 1), eps 0.
        let mut x = vec![3.0f32, 4.0, 1.0, 1.0];
        let norm = super::HeadNorm {
            q_heads: 1,
            q_weight: &[1.0, 2.0],
            k_weight: &[0.5, -1.0],
            eps: 0.0,
        };
        super::rope(&mut x, 4, 2, 2, &[0], &[1.0], Some(&norm));
        let r = 12.5f32.sqrt();
        let want = [3.0 / r, 8.0 / r, 0.5, -1.0];
        for (a, b) in x.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{x:?}");
        }
    }
}
