//! Rotary position embedding in HF's half-split form (`rotate_half`): for each head,
//! dims `i` and `i + d/2` rotate by `pos · inv_freq[i]`. CPU twin of `kernels/rope.cu`.

use rayon::prelude::*;

/// Rotates the first `heads` heads (of `head_dim` each) of every row of `x`
/// (`cols` wide) in place; row `t` has position `positions[t]`.
pub fn rope(
    x: &mut [f32],
    cols: usize,
    heads: usize,
    head_dim: usize,
    positions: &[u32],
    inv_freq: &[f32],
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
        super::rope(&mut x, 5, 1, 4, &[2], &[1.0, 0.5]);
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
}
