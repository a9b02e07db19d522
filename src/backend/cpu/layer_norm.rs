//! Row-wise LayerNorm with optional residual add: `x ← LN(x + residual)`.
//! CPU twin of `kernels/layer_norm.cu`.

use rayon::prelude::*;

pub fn layer_norm(
    x: &mut [f32],
    residual: Option<&[f32]>,
    cols: usize,
    weight: &[f32],
    bias: &[f32],
    eps: f32,
) {
    let norm_row = |row: &mut [f32]| {
        // Statistics in f64: one pass, no cancellation worth mentioning at H ≤ 4096.
        let (mut s, mut s2) = (0f64, 0f64);
        for &v in row.iter() {
            s += f64::from(v);
            s2 += f64::from(v) * f64::from(v);
        }
        let mean = s / cols as f64;
        let var = (s2 / cols as f64 - mean * mean).max(0.0);
        let inv = (1.0 / (var + f64::from(eps)).sqrt()) as f32;
        let mean = mean as f32;
        for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *v = (*v - mean) * inv * w + b;
        }
    };
    match residual {
        Some(r) => x
            .par_chunks_mut(cols)
            .zip(r.par_chunks(cols))
            .for_each(|(row, res)| {
                row.iter_mut().zip(res).for_each(|(v, r)| *v += r);
                norm_row(row);
            }),
        None => x.par_chunks_mut(cols).for_each(norm_row),
    }
}
