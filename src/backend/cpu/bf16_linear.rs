//! bf16 dense layers: weights and activations rounded to bfloat16 (round to nearest
//! even), products summed in f32 by AVX512-BF16 `vdpbf16ps`, two inputs per lane and
//! instruction.
//!
//! Each lane does `acc = (acc + x₂ₚ₊₁·w₂ₚ₊₁) + x₂ₚ·w₂ₚ` (the instruction's order, with
//! bf16 subnormals read as zero and subnormal results flushed); bf16 × bf16 products are
//! exact in f32, so [`linear_reference`] repeats the kernel's bits. Sums run over k in
//! order, so every row is independent of its batch.

use half::bf16;
use rayon::prelude::*;

use super::tiles::{packed_index, row_pointers, run_tiles, BLOCK_COLS};

/// Rows per micro-tile: 8 rows × 32 columns keep 16 `zmm` accumulators.
const TILE_ROWS: usize = 8;

/// Inputs per `vdpbf16ps` lane.
const PAIR: usize = 2;

/// A weight matrix `[n, k]` in bf16, packed for the kernel: for each block of
/// [`BLOCK_COLS`] outputs and each pair of inputs, 32 lanes of two bf16 (the even input
/// in the low half), so one 64-byte load feeds 16 output lanes.
#[derive(Debug, Clone, PartialEq)]
pub struct Bf16Weight {
    pub n: usize,
    pub k: usize,
    /// `k` rounded up to even (the padding holds zeros).
    kp: usize,
    packed: Vec<u16>,
}

impl Bf16Weight {
    /// Rounds and packs a row-major `[n, k]` weight.
    pub fn new(w: &[f32], n: usize, k: usize) -> Self {
        let kp = k.div_ceil(PAIR) * PAIR;
        let mut packed = vec![0u16; n.div_ceil(BLOCK_COLS) * BLOCK_COLS * kp];
        for j in 0..n {
            for (p, &v) in w[j * k..(j + 1) * k].iter().enumerate() {
                packed[packed_index::<PAIR>(kp, j, p)] = bf16::from_f32(v).to_bits();
            }
        }
        Self { n, k, kp, packed }
    }

    /// `w[j, p]` as stored (for the reference twin).
    #[cfg(test)]
    fn at(&self, j: usize, p: usize) -> u16 {
        self.packed[packed_index::<PAIR>(self.kp, j, p)]
    }
}

/// Rows rounded to bf16, `kp` values a row (the padding holds zeros).
fn round_rows(x: &[f32], m: usize, k: usize, kp: usize) -> Vec<u16> {
    let mut out = vec![0u16; m * kp];
    out.par_chunks_mut(kp.max(1))
        .zip(x.par_chunks(k.max(1)))
        .for_each(|(dst, src)| {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = bf16::from_f32(v).to_bits();
            }
        });
    out
}

/// `x[m, k] · wᵀ (+ bias)` in bf16 with f32 sums, row-major `[m, n]`. Uses
/// AVX512-BF16; callers check [`bf16_available`] first.
pub fn linear(x: &[f32], m: usize, w: &Bf16Weight, bias: Option<&[f32]>) -> Vec<f32> {
    assert!(x.len() >= m * w.k, "bf16 linear: input too short");
    assert!(bf16_available(), "bf16 linear: this CPU has no AVX512-BF16");
    let rows = round_rows(x, m, w.k, w.kp);
    let block_len = BLOCK_COLS * w.kp;
    run_tiles::<TILE_ROWS, _>(m, w.n, bias, |r0, valid, block, sums| {
        let starts = row_pointers(&rows, w.kp, r0, valid);
        let panel = &w.packed[block * block_len..(block + 1) * block_len];
        // SAFETY: the CPU features were checked above; every row start has kp
        // values after it and the panel holds kp / 2 pairs of 128 bytes.
        unsafe { dpbf16::tile(&starts, w.kp, panel, sums) }
    })
}

/// Whether this CPU runs the bf16 kernel.
pub fn bf16_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod dpbf16 {
    use super::super::tiles::{Sums, BLOCK_COLS};
    use super::{PAIR, TILE_ROWS};
    use std::arch::x86_64::*;

    /// The f32 sums of a tile's rows (`kp` bf16 from each start) against one packed
    /// block of 32 outputs.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn tile(
        rows: &[*const u16; TILE_ROWS],
        kp: usize,
        panel: &[u16],
        sums: &mut Sums<TILE_ROWS>,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; TILE_ROWS];
        let mut wp = panel.as_ptr();
        for g in 0..kp / PAIR {
            let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(wp.cast()));
            let w1: __m512bh = std::mem::transmute(_mm512_loadu_si512(wp.add(32).cast()));
            for i in 0..TILE_ROWS {
                let pair = rows[i].add(g * PAIR).cast::<i32>().read_unaligned();
                let a: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, w0);
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, w1);
            }
            wp = wp.add(BLOCK_COLS * PAIR);
        }
        for (s, a) in sums.iter_mut().zip(&acc) {
            _mm512_storeu_ps(s.as_mut_ptr(), a[0]);
            _mm512_storeu_ps(s.as_mut_ptr().add(16), a[1]);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod dpbf16 {
    use super::super::tiles::Sums;
    use super::TILE_ROWS;

    pub unsafe fn tile(_: &[*const u16; TILE_ROWS], _: usize, _: &[u16], _: &mut Sums<TILE_ROWS>) {
        unreachable!("bf16_available() is false off x86-64")
    }
}

/// The scalar twin of [`linear`]: the instruction's order and flushing, one output at
/// a time.
#[cfg(test)]
pub fn linear_reference(x: &[f32], m: usize, w: &Bf16Weight, bias: Option<&[f32]>) -> Vec<f32> {
    fn flush(v: f32) -> f32 {
        if v.is_subnormal() {
            0.0f32.copysign(v)
        } else {
            v
        }
    }
    let (n, k, kp) = (w.n, w.k, w.kp);
    let rows = round_rows(x, m, k, kp);
    let value = |bits: u16| flush(bf16::from_bits(bits).to_f32());
    let mut out = vec![0f32; m * n];
    for r in 0..m {
        for j in 0..n {
            let mut acc = 0f32;
            for g in 0..kp / PAIR {
                let (e, o) = (PAIR * g, PAIR * g + 1);
                let odd = value(rows[r * kp + o]) * value(w.at(j, o));
                acc = flush(acc + odd);
                acc = flush(acc + value(rows[r * kp + e]) * value(w.at(j, e)));
            }
            out[r * n + j] = acc + bias.map_or(0.0, |b| b[j]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tiles::test_data::{product, values as data, RAGGED};
    use super::*;

    #[test]
    fn kernel_equals_the_scalar_twin_bit_for_bit() {
        if !bf16_available() {
            return; // the kernel cannot run on this CPU
        }
        for (m, n, k) in RAGGED {
            let x = data(m * k, 1);
            let w = Bf16Weight::new(&data(n * k, 2), n, k);
            let bias = data(n, 3);
            let got = linear(&x, m, &w, Some(&bias));
            let want = linear_reference(&x, m, &w, Some(&bias));
            assert_eq!(got, want, "m={m} n={n} k={k}");
        }
    }

    #[test]
    fn rounded_product_is_close_to_the_f32_product() {
        let (m, n, k) = (5, 40, 256);
        let x = data(m * k, 4);
        let wf = data(n * k, 5);
        let got = linear_reference(&x, m, &Bf16Weight::new(&wf, n, k), None);
        // bf16 keeps 8 significant bits: |Δ| ≲ √k · 2⁻⁸ for values in [-1, 1].
        for (g, w) in got.iter().zip(product(&x, &wf, m, n, k)) {
            assert!((f64::from(*g) - w).abs() < 0.06);
        }
    }
}
