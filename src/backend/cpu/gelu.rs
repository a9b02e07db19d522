//! Exact GELU, `0.5·x·(1 + erf(x/√2))`. CPU twin of `kernels/gelu.cu`.
//!
//! erf is a rational function of odd degree 13 over even degree 8 on `[-4, 4]` (the
//! minimax fit that Eigen and XLA use for f32; erf(±4) is ±1 in f32): no branches, so
//! the loop vectorises, unlike `libm::erff`. Within 4.5e-7 of erf and 3e-7·|x| of
//! the f64 GELU over all of f32 (checked below against `libm::erf`).

use rayon::prelude::*;

/// Numerator coefficients (of x, x³, …, x¹³), highest first.
const P: [f32; 7] = [
    -2.726_142_3e-10,
    2.770_681_4e-8,
    -2.101_024e-6,
    -5.692_506_4e-5,
    -7.349_906_3e-4,
    -2.954_6e-3,
    -1.609_603_3e-2,
];
/// Denominator coefficients (of 1, x², …, x⁸), highest first.
const Q: [f32; 5] = [
    -1.456_607_2e-5,
    -2.133_740_6e-4,
    -1.682_827e-3,
    -7.373_329e-3,
    -1.426_474e-2,
];

/// erf in f32 (see the module documentation for its accuracy).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = P.iter().fold(0.0, |acc, &c| acc * x2 + c) * x;
    let q = Q.iter().fold(0.0, |acc, &c| acc * x2 + c);
    p / q
}

#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU in place over a whole buffer.
pub fn gelu_inplace(x: &mut [f32]) {
    x.par_chunks_mut(4096).for_each(gelu_chunk);
}

/// GELU over one chunk, compiled for the widest vectors the CPU has (same bits on
/// every path: no reductions, no contractions).
#[multiversion::multiversion(targets = "simd")]
fn gelu_chunk(c: &mut [f32]) {
    c.iter_mut().for_each(|v| *v = gelu_erf(*v));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_and_gelu_stay_within_their_bounds() {
        let (mut worst_erf, mut worst_gelu) = (0f64, 0f64);
        for i in -1_200_000..=1_200_000 {
            let x = i as f32 * 1e-5; // [-12, 12]
            let want = libm::erf(f64::from(x));
            worst_erf = worst_erf.max((f64::from(erf(x)) - want).abs());
            let g = 0.5 * f64::from(x) * (1.0 + libm::erf(f64::from(x) / 2f64.sqrt()));
            let rel = (f64::from(gelu_erf(x)) - g).abs() / f64::from(x.abs()).max(1e-3);
            worst_gelu = worst_gelu.max(rel);
        }
        assert!(worst_erf < 4.5e-7, "erf: {worst_erf:e}");
        assert!(worst_gelu < 3e-7, "gelu: {worst_gelu:e}");
        assert!(
            (erf(f32::INFINITY) - 1.0).abs() <= 2.0 * f32::EPSILON,
            "{}",
            erf(f32::INFINITY)
        );
        assert!(gelu_erf(f32::NAN).is_nan());
    }
}
