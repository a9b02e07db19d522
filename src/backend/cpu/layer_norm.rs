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
    match residual {
        Some(r) => x
            .par_chunks_mut(cols)
            .zip(r.par_chunks(cols))
            .for_each(|(row, res)| norm_row(row, Some(res), weight, bias, eps)),
        None => x
            .par_chunks_mut(cols)
            .for_each(|row| norm_row(row, None, weight, bias, eps)),
    }
}

/// One row, compiled for the widest vectors the CPU has (the sums stay in order, so
/// every path gives the same bits).
#[multiversion::multiversion(targets = "simd")]
fn norm_row(row: &mut [f32], residual: Option<&[f32]>, weight: &[f32], bias: &[f32], eps: f32) {
    if let Some(res) = residual {
        row.iter_mut().zip(res).for_each(|(v, r)| *v += r);
    }
    // Statistics in f64: one pass, no cancellation worth mentioning at H ≤ 4096.
    let (mut s, mut s2) = (0f64, 0f64);
    for &v in row.iter() {
        s += f64::from(v);
        s2 += f64::from(v) * f64::from(v);
    }
    let cols = row.len() as f64;
    let mean = s / cols;
    let var = (s2 / cols - mean * mean).max(0.0);
    let inv = (1.0 / (var + f64::from(eps)).sqrt()) as f32;
    let mean = mean as f32;
    for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
        *v = (*v - mean) * inv * w + b;
    }
}
