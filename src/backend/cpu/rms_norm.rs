//! Row-wise RMSNorm, `y = w · x / sqrt(mean(x²) + eps)` (HF `LlamaRMSNorm`, f32).
//! CPU twin of `kernels/rms_norm.cu`.

use rayon::prelude::*;

/// Normalises each `cols`-wide row of `x` into `out` (same length as `x`).
pub fn rms_norm(x: &[f32], out: &mut [f32], cols: usize, weight: &[f32], eps: f32) {
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(o, row)| {
            let ss: f32 = row.iter().map(|v| v * v).sum();
            let inv = 1.0 / (ss / cols as f32 + eps).sqrt();
            for ((o, v), w) in o.iter_mut().zip(row).zip(weight) {
                *o = w * (v * inv);
            }
        });
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_formula() {
        let x = [1.0f32, -2.0, 3.0, 0.5, 0.0, 4.0];
        let w = [0.5f32, 1.0, 2.0];
        let mut out = [0f32; 6];
        super::rms_norm(&x, &mut out, 3, &w, 1e-6);
        let r0 = ((1.0 + 4.0 + 9.0) / 3.0f32 + 1e-6).sqrt();
        let r1 = ((0.25 + 16.0) / 3.0f32 + 1e-6).sqrt();
        let want = [0.5 / r0, -2.0 / r0, 6.0 / r0, 0.25 / r1, 0.0, 8.0 / r1];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }
}
