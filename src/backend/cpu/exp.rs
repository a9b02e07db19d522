//! `exp` in f32 without libm, for the loops that take one per element (softmax rows,
//! the LM head's log-sum-exp, SiLU), the row reductions around it and the attentions'
//! softmax row: Cody–Waite reduction `x = n·ln 2 + r` and Cephes'
//! degree-7 polynomial for `e^r` on `|r| ≤ ln 2 / 2`, scaled by `2^n` built from its
//! bits. No branches and no calls, so those loops vectorise (libm's `expf` is a call
//! per element). Within 2 ulp of the exact value over `[-86, 88.7]` (checked below
//! against f64); 0 below −86 (libm returns values under 4.5e-38 there), +inf past
//! f32's range, NaN for NaN.

use std::f32::consts::LOG2_E;

/// `ln 2` split so that `n · LN2_HI` is exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Cephes `expf` coefficients of `r⁷ … r²` terms (divided by `r²`), highest first.
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];
/// Adding and taking off 1.5 · 2²³ rounds to the nearest integer; the integer is then
/// the low mantissa bits of the sum.
const ROUND: f32 = 12_582_912.0;
/// Inputs below flush to 0 (the scale `2^(n−1)` stays a normal float above).
const LOWEST: f32 = -86.0;
/// Inputs above overflow (`ln` of f32's largest value).
const HIGHEST: f32 = 88.722_84;

/// `e^x` (see the module documentation for its accuracy).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let xc = x.clamp(LOWEST, HIGHEST);
    let shifted = xc * LOG2_E + ROUND;
    let n = shifted - ROUND;
    // n ∈ [−124, 128]: its integer from the bits of the shifted sum.
    let ni = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = P.iter().fold(0.0, |acc, &c| acc * r + c);
    let er = p * (r * r) + r + 1.0;
    // 2^n as 2 · 2^(n−1): n = 128 (x near the top) keeps a finite scale.
    let half_scale = f32::from_bits(((ni + 126) as u32) << 23);
    let y = er * half_scale * 2.0;
    if x < LOWEST {
        0.0
    } else if x > HIGHEST {
        f32::INFINITY
    } else {
        y
    }
}

/// The largest value of `row` (−inf for an empty row; NaNs are skipped), by 16
/// lane-wise maxima, compiled for the widest vectors the CPU has.
#[multiversion::multiversion(targets = "simd")]
pub fn max_of(row: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max(v);
        }
    }
    for (l, &v) in lanes.iter_mut().zip(rest) {
        *l = l.max(v);
    }
    lanes.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// `row[j] ← e^(row[j] − max)`; returns their sum (16 lane-wise partial sums, added in
/// lane order: the same on every path), compiled for the widest vectors the CPU has.
#[multiversion::multiversion(targets = "simd")]
pub fn exp_in_place_sum(row: &mut [f32], max: f32) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c.iter_mut()) {
            *v = exp(*v - max);
            *l += *v;
        }
    }
    for (l, v) in lanes.iter_mut().zip(chunks.into_remainder()) {
        *v = exp(*v - max);
        *l += *v;
    }
    lanes.iter().sum()
}

/// `row ← softmax(scale · row)` over the keys whose `mask` is not 0 (the others get 0),
/// compiled for the widest vectors the CPU has; the exponentials and their sum are
/// [`exp_in_place_sum`]'s. The CPU attentions' (DeBERTa's, causal LMs').
#[multiversion::multiversion(targets = "simd")]
pub fn softmax_row(row: &mut [f32], mask: &[f32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for (x, &m) in row.iter_mut().zip(mask) {
        *x = if m == 0.0 {
            f32::NEG_INFINITY
        } else {
            *x * scale
        };
        max = max.max(*x);
    }
    let inv = 1.0 / exp_in_place_sum(row, max);
    row.iter_mut().for_each(|x| *x *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units in the last place between `got` and the exact `want`.
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        let ulp = f64::from(f32::from_bits(w.to_bits() + 1) - w);
        (f64::from(got) - want).abs() / ulp
    }

    #[test]
    fn within_two_ulp_of_the_exact_value() {
        let mut worst = (0f64, 0f32);
        let steps = 2_000_000;
        for i in 0..=steps {
            let x = LOWEST + (HIGHEST - 1e-3 - LOWEST) * i as f32 / steps as f32;
            let u = ulps(exp(x), f64::from(x).exp());
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 2.0, "{} ulp at x = {}", worst.0, worst.1);
        for x in [0.0f32, 1e-30, -1e-30, 1.0, -1.0] {
            assert!(ulps(exp(x), f64::from(x).exp()) <= 1.0, "x = {x}");
        }
    }

    #[test]
    fn limits_and_special_values() {
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert!(exp(88.7).is_finite());
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn sums_equal_the_f64_sum_of_the_values_written() {
        let row: Vec<f32> = (0..1037)
            .map(|i| ((i * 37) % 101) as f32 * 0.13 - 9.0)
            .collect();
        let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(max_of(&row), max);
        assert_eq!(
            max_of(&row[..5]),
            row[..5].iter().cloned().fold(f32::NEG_INFINITY, f32::max)
        );
        assert_eq!(max_of(&[]), f32::NEG_INFINITY);
        let mut written = row.clone();
        let s = exp_in_place_sum(&mut written, max);
        let exact: f64 = row
            .iter()
            .map(|&v| (f64::from(v) - f64::from(max)).exp())
            .sum();
        assert!(
            (f64::from(s) - exact).abs() < 1e-5 * exact,
            "{s} vs {exact}"
        );
        for (w, v) in written.iter().zip(&row) {
            assert_eq!(*w, exp(v - max));
        }
    }
}
