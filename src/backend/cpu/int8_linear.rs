//! Int8 dense layers with dynamic activation quantisation and exact i32 sums, in two
//! schemes that differ only in the length of the k-blocks that share a scale:
//!
//! - [`Int8Scheme::PerRow`]: one scale per activation row and one per weight output
//!   channel (ONNX Runtime's `quantize_dynamic(per_channel=True)`,
//!   `torch.ao.nn.quantized.dynamic.Linear`; symmetric activations here);
//! - [`Int8Scheme::Blocks32`]: a scale per 32 consecutive inputs, for activations and
//!   weights alike (llama.cpp's `Q8_0` × `Q8_0`, `ggml-common.h` `block_q8_0`): an
//!   outlier channel costs only its own block precision, which decoders need.
//!
//! `y[r, j] = Σ_b (Σ_{k∈b} qx[r, k] · qw[j, k]) · (sw[j, b] · sx[r, b]) + bias[j]`,
//! with `s = max|v| / 127` over the block and `q = round(v / s)`, the per-block sums
//! added in block order by fused multiply-adds. Weights may come quantised already
//! ([`Int8Weight::from_rows`]: a GGUF checkpoint's `Q4_0` … `Q5_K` blocks, used as
//! stored); asymmetric ones (`w = qw · sw + mw`) add `mw[j, b] · (sx[r, b] · Σ_{k∈b}
//! qx[r, k])` per block, llama.cpp's `Q4_1` × `Q8_1`. The products run on AVX512-VNNI
//! (`vpdpbusd`, unsigned × signed bytes): activations are stored as `qx + 128` and
//! `128 · Σ_{k∈b} qw[j, k]` is taken off each block's sum. Integer sums are exact and
//! the float steps are the same, so the kernel gives the bits of [`linear_reference`]
//! whatever the batch or the thread split.

use rayon::prelude::*;

use super::tiles::{packed_index, row_pointers, run_tiles, BLOCK_COLS};
use crate::quant::{block_inverse, quantize_value, QuantRows};

/// Bytes of k multiplied per `vpdpbusd` lane.
const GROUP: usize = 4;
/// The zero point that makes signed activations unsigned for `vpdpbusd`.
const ZERO_POINT: i32 = 128;
/// Rows per micro-tile: 4 rows × 32 columns keep 8 i32 and 8 f32 `zmm` accumulators.
const TILE_ROWS: usize = 4;

/// Which inputs share a quantisation scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Scheme {
    /// The whole row (activations) or output channel (weights).
    PerRow,
    /// Blocks of 32 inputs (llama.cpp's `Q8_0`).
    Blocks32,
}

impl Int8Scheme {
    /// Inputs per scale block for a layer of `k` inputs.
    fn block(self, k: usize) -> usize {
        match self {
            Int8Scheme::PerRow => k.div_ceil(GROUP).max(1) * GROUP,
            Int8Scheme::Blocks32 => 32,
        }
    }
}

/// A weight matrix `[n, k]` quantised per (output, k-block) and packed for the kernel:
/// for each block of [`BLOCK_COLS`] outputs and each group of 4 inputs, 32 × 4 bytes
/// (output-major within the group), so one 64-byte load feeds 16 output lanes; then
/// per output block and k-block, the 32 scales and the 32 zero-point corrections.
#[derive(Debug, Clone, PartialEq)]
pub struct Int8Weight {
    pub n: usize,
    pub k: usize,
    /// Inputs per scale block.
    kblock: usize,
    /// `k` padded to whole k-blocks.
    kp: usize,
    packed: Vec<i8>,
    /// `sw[j, b]`: `[output block][k-block][32]`.
    scale: Vec<f32>,
    /// `128 · Σ_{k∈b} qw[j, k]`, same layout.
    correction: Vec<i32>,
    /// The block minima `mw[j, b]` of asymmetric weights, same layout.
    min: Option<Vec<f32>>,
}

/// [`crate::quant::quantize_block`] of an activation block into `q + 128`, compiled
/// for the widest vectors the CPU has (the same bits on every path).
#[multiversion::multiversion(targets = "simd")]
fn quantize_activations(block: &[f32], out: &mut [u8]) -> f32 {
    match block_inverse(block) {
        Ok((inv, scale)) => {
            for (o, &v) in out.iter_mut().zip(block) {
                *o = (quantize_value(v, inv) as u8) ^ 0x80;
            }
            scale
        }
        Err(scale) => {
            out[..block.len()].fill(ZERO_POINT as u8);
            scale
        }
    }
}

impl Int8Weight {
    /// Quantises and packs a row-major `[n, k]` weight.
    pub fn new(w: &[f32], n: usize, k: usize, scheme: Int8Scheme) -> Self {
        Self::from_rows(&QuantRows::quantize(w, n, k, scheme.block(k)))
    }

    /// Packs a weight quantised in blocks (as stored in a GGUF checkpoint, or by
    /// [`QuantRows::quantize`]) without changing a value. The block length must be a
    /// multiple of 4.
    pub fn from_rows(w: &QuantRows) -> Self {
        assert!(
            w.block.is_multiple_of(GROUP),
            "int8 blocks of {} inputs",
            w.block
        );
        let (n, k, kblock) = (w.rows, w.cols, w.block);
        let kblocks = w.blocks_per_row();
        let kp = kblocks * kblock;
        let blocks = n.div_ceil(BLOCK_COLS);
        let mut packed = vec![0i8; blocks * BLOCK_COLS * kp];
        let mut scale = vec![0f32; blocks * kblocks * BLOCK_COLS];
        let mut correction = vec![0i32; scale.len()];
        let mut min = w.min.as_ref().map(|_| vec![0f32; scale.len()]);
        for j in 0..n {
            for b in 0..kblocks {
                let (start, end) = (b * kblock, ((b + 1) * kblock).min(k));
                let mut sum = 0;
                for p in start..end {
                    let q = w.q[j * k + p];
                    packed[packed_index::<GROUP>(kp, j, p)] = q;
                    sum += i32::from(q);
                }
                let at = scale_index(kblocks, j, b);
                scale[at] = w.scale[j * kblocks + b];
                correction[at] = ZERO_POINT * sum;
                if let (Some(dst), Some(src)) = (min.as_mut(), w.min.as_ref()) {
                    dst[at] = src[j * kblocks + b];
                }
            }
        }
        Self {
            n,
            k,
            kblock,
            kp,
            packed,
            scale,
            correction,
            min,
        }
    }

    /// The quantised weight `qw[j, p]` (for the reference twin).
    #[cfg(test)]
    fn q(&self, j: usize, p: usize) -> i8 {
        self.packed[packed_index::<GROUP>(self.kp, j, p)]
    }

    /// `(sw[j, b], 128 · Σ_{k∈b} qw[j, k], mw[j, b])`.
    #[cfg(test)]
    fn block_scale(&self, j: usize, b: usize) -> (f32, i32, f32) {
        let at = scale_index(self.kp / self.kblock, j, b);
        let min = self.min.as_ref().map_or(0.0, |m| m[at]);
        (self.scale[at], self.correction[at], min)
    }
}

/// Where `sw[j, b]` (and its correction) sits: `[output block][k-block][32]`.
fn scale_index(kblocks: usize, j: usize, b: usize) -> usize {
    ((j / BLOCK_COLS) * kblocks + b) * BLOCK_COLS + j % BLOCK_COLS
}

/// Activations quantised per k-block, stored as `q + 128` with the k padding at 128
/// (zero), their scales `[m][k-blocks]` and, for asymmetric weights, the dequantised
/// block sums `sx[r, b] · Σ_{k∈b} qx[r, k]`, same layout.
struct Int8Rows {
    data: Vec<u8>,
    scale: Vec<f32>,
    sums: Vec<f32>,
}

fn quantize_rows(x: &[f32], m: usize, w: &Int8Weight) -> Int8Rows {
    let (k, kp, kblock) = (w.k, w.kp, w.kblock);
    let kblocks = kp / kblock;
    let mut data = vec![ZERO_POINT as u8; m * kp];
    let mut scale = vec![0f32; m * kblocks];
    data.par_chunks_mut(kp)
        .zip(scale.par_chunks_mut(kblocks))
        .enumerate()
        .for_each(|(r, (dst, scales))| {
            let row = &x[r * k..(r + 1) * k];
            for (b, s) in scales.iter_mut().enumerate() {
                let (start, end) = ((b * kblock).min(k), ((b + 1) * kblock).min(k));
                *s = quantize_activations(&row[start..end], &mut dst[start..end]);
            }
        });
    // Blocks of `data` and entries of `scale` pair up one to one (padding adds 0).
    let sums = match w.min {
        Some(_) => data
            .par_chunks(kblock)
            .zip(scale.par_iter())
            .map(|(block, s)| {
                let q: i32 = block.iter().map(|&u| i32::from(u) - ZERO_POINT).sum();
                s * q as f32
            })
            .collect(),
        None => Vec::new(),
    };
    Int8Rows { data, scale, sums }
}

/// `x[m, k] · wᵀ (+ bias)` in int8, row-major `[m, n]`. Uses AVX512-VNNI; callers check
/// [`vnni_available`] first.
pub fn linear(x: &[f32], m: usize, w: &Int8Weight, bias: Option<&[f32]>) -> Vec<f32> {
    assert!(x.len() >= m * w.k, "int8 linear: input too short");
    assert!(vnni_available(), "int8 linear: this CPU has no AVX512-VNNI");
    let rows = quantize_rows(x, m, w);
    let kblocks = w.kp / w.kblock;
    let (panel_len, scales_len) = (BLOCK_COLS * w.kp, BLOCK_COLS * kblocks);
    run_tiles::<TILE_ROWS, _>(m, w.n, bias, |r0, valid, block, sums| {
        let tile = vnni::Tile {
            rows: row_pointers(&rows.data, w.kp, r0, valid),
            row_scales: row_pointers(&rows.scale, kblocks, r0, valid),
            row_sums: w.min.as_ref().map(|min| {
                (
                    row_pointers(&rows.sums, kblocks, r0, valid),
                    &min[block * scales_len..(block + 1) * scales_len],
                )
            }),
            kblock: w.kblock,
            kblocks,
            panel: &w.packed[block * panel_len..(block + 1) * panel_len],
            scale: &w.scale[block * scales_len..(block + 1) * scales_len],
            correction: &w.correction[block * scales_len..(block + 1) * scales_len],
        };
        // SAFETY: the CPU features were checked above; every row start has kp
        // bytes and kblocks scales (and sums) after it; the panel holds kp / 4 groups
        // of 128 bytes and the scale (and min) slices kblocks × 32 values.
        unsafe { tile.run(sums) }
    })
}

/// Whether this CPU runs the int8 kernel.
pub fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

mod vnni {
    use super::super::tiles::Sums;
    use super::TILE_ROWS;

    /// One micro-tile's operands: `TILE_ROWS` activation rows against one packed block
    /// of 32 outputs.
    pub struct Tile<'a> {
        pub rows: [*const u8; TILE_ROWS],
        pub row_scales: [*const f32; TILE_ROWS],
        /// Asymmetric weights: the rows' block sums and the weights' block minima.
        pub row_sums: Option<([*const f32; TILE_ROWS], &'a [f32])>,
        pub kblock: usize,
        pub kblocks: usize,
        pub panel: &'a [i8],
        pub scale: &'a [f32],
        pub correction: &'a [i32],
    }

    impl Tile<'_> {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
        pub unsafe fn run(&self, sums: &mut Sums<TILE_ROWS>) {
            use super::super::tiles::BLOCK_COLS;
            use super::GROUP;
            use std::arch::x86_64::*;

            let mut acc = [[_mm512_setzero_ps(); 2]; TILE_ROWS];
            let mut wp = self.panel.as_ptr();
            for b in 0..self.kblocks {
                let mut block = [[_mm512_setzero_si512(); 2]; TILE_ROWS];
                let k0 = b * self.kblock;
                for g in 0..self.kblock / GROUP {
                    let w0 = _mm512_loadu_si512(wp.cast());
                    let w1 = _mm512_loadu_si512(wp.add(64).cast());
                    for (sums, row) in block.iter_mut().zip(self.rows) {
                        let bytes = row.add(k0 + g * GROUP).cast::<i32>();
                        let a = _mm512_set1_epi32(bytes.read_unaligned());
                        sums[0] = _mm512_dpbusd_epi32(sums[0], a, w0);
                        sums[1] = _mm512_dpbusd_epi32(sums[1], a, w1);
                    }
                    wp = wp.add(BLOCK_COLS * GROUP);
                }
                let at = b * BLOCK_COLS;
                let sw = [
                    _mm512_loadu_ps(self.scale.as_ptr().add(at)),
                    _mm512_loadu_ps(self.scale.as_ptr().add(at + 16)),
                ];
                let c = [
                    _mm512_loadu_si512(self.correction.as_ptr().add(at).cast()),
                    _mm512_loadu_si512(self.correction.as_ptr().add(at + 16).cast()),
                ];
                for i in 0..TILE_ROWS {
                    let sx = _mm512_set1_ps(*self.row_scales[i].add(b));
                    for h in 0..2 {
                        let exact = _mm512_cvtepi32_ps(_mm512_sub_epi32(block[i][h], c[h]));
                        acc[i][h] = _mm512_fmadd_ps(exact, _mm512_mul_ps(sw[h], sx), acc[i][h]);
                    }
                }
                if let Some((sums, min)) = self.row_sums {
                    let mw = [
                        _mm512_loadu_ps(min.as_ptr().add(at)),
                        _mm512_loadu_ps(min.as_ptr().add(at + 16)),
                    ];
                    for (acc, sum) in acc.iter_mut().zip(sums) {
                        let sum = _mm512_set1_ps(*sum.add(b));
                        for h in 0..2 {
                            acc[h] = _mm512_fmadd_ps(mw[h], sum, acc[h]);
                        }
                    }
                }
            }
            for (s, a) in sums.iter_mut().zip(&acc) {
                _mm512_storeu_ps(s.as_mut_ptr(), a[0]);
                _mm512_storeu_ps(s.as_mut_ptr().add(16), a[1]);
            }
        }

        #[cfg(not(target_arch = "x86_64"))]
        pub unsafe fn run(&self, _: &mut Sums<TILE_ROWS>) {
            unreachable!("vnni_available() is false off x86-64")
        }
    }
}

/// The scalar twin of [`linear`]: the same quantisation, the same integer sums and the
/// same float steps, one output at a time.
#[cfg(test)]
pub fn linear_reference(x: &[f32], m: usize, w: &Int8Weight, bias: Option<&[f32]>) -> Vec<f32> {
    let rows = quantize_rows(x, m, w);
    let kblocks = w.kp / w.kblock;
    let mut out = vec![0f32; m * w.n];
    for r in 0..m {
        for j in 0..w.n {
            let mut acc = 0f32;
            for b in 0..kblocks {
                let (sw, correction, mw) = w.block_scale(j, b);
                let unsigned: i32 = (b * w.kblock..(b + 1) * w.kblock)
                    .map(|p| i32::from(rows.data[r * w.kp + p]) * i32::from(w.q(j, p)))
                    .sum();
                let exact = (unsigned - correction) as f32;
                acc = exact.mul_add(sw * rows.scale[r * kblocks + b], acc);
                if w.min.is_some() {
                    acc = mw.mul_add(rows.sums[r * kblocks + b], acc);
                }
            }
            out[r * w.n + j] = acc + bias.map_or(0.0, |b| b[j]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tiles::test_data::{product as exact, values as data, RAGGED};
    use super::*;

    const SCHEMES: [Int8Scheme; 2] = [Int8Scheme::PerRow, Int8Scheme::Blocks32];

    #[test]
    fn kernel_equals_the_scalar_twin_bit_for_bit() {
        if !vnni_available() {
            return; // the kernel cannot run on this CPU
        }
        // Every remainder of the shapes; a zero row; a row with one large value.
        for scheme in SCHEMES {
            for (m, n, k) in RAGGED {
                let mut x = data(m * k, 1);
                x[..k].fill(0.0);
                if m > 2 {
                    x[2 * k] = 300.0;
                }
                let w = Int8Weight::new(&data(n * k, 2), n, k, scheme);
                let bias = data(n, 3);
                let got = linear(&x, m, &w, Some(&bias));
                let want = linear_reference(&x, m, &w, Some(&bias));
                assert_eq!(got, want, "{scheme:?} m={m} n={n} k={k}");
            }
        }
    }

    /// A `Q4_1`-style weight: 4-bit `q`, a scale and a min per 32 inputs.
    fn asymmetric(n: usize, k: usize) -> QuantRows {
        let blocks = k.div_ceil(32);
        let (scale, min) = (data(n * blocks, 11), data(n * blocks, 12));
        QuantRows {
            rows: n,
            cols: k,
            block: 32,
            q: (0..n * k).map(|i| ((i * 7 + i / 5) % 16) as i8).collect(),
            scale: scale.iter().map(|s| s.abs() * 0.1).collect(),
            min: Some(min.iter().map(|m| m * 0.5).collect()),
        }
    }

    #[test]
    fn stored_asymmetric_blocks_equal_the_scalar_twin_bit_for_bit() {
        if !vnni_available() {
            return;
        }
        for (m, n, k) in RAGGED {
            let w = Int8Weight::from_rows(&asymmetric(n, k));
            let x = data(m * k, 13);
            let bias = data(n, 14);
            let got = linear(&x, m, &w, Some(&bias));
            assert_eq!(
                got,
                linear_reference(&x, m, &w, Some(&bias)),
                "m={m} n={n} k={k}"
            );
        }
    }

    #[test]
    fn stored_blocks_multiply_their_own_values() {
        // The weights are used as stored: the product is that of the dequantised
        // weights with the 8-bit activations, up to f32 rounding.
        let (m, n, k) = (5, 40, 256);
        let stored = asymmetric(n, k);
        let x = data(m * k, 15);
        let x8 = QuantRows::quantize(&x, m, k, 32).dequantize();
        let want = exact(&x8, &stored.dequantize(), m, n, k);
        let got = linear_reference(&x, m, &Int8Weight::from_rows(&stored), None);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (f64::from(*g) - w).abs() < 1e-5 * w.abs().max(1.0),
                "{g} vs {w}"
            );
        }
    }

    #[test]
    fn quantised_product_is_close_to_the_f32_product() {
        let (m, n, k) = (5, 40, 256);
        let x = data(m * k, 4);
        let wf = data(n * k, 5);
        let want = exact(&x, &wf, m, n, k);
        for scheme in SCHEMES {
            let got = linear_reference(&x, m, &Int8Weight::new(&wf, n, k, scheme), None);
            // Two 8-bit roundings per product: |Δ| ≲ √k · |x|max · |w|max / 127.
            for (g, w) in got.iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() < 0.15, "{scheme:?}");
            }
        }
    }

    #[test]
    fn blocks_keep_the_precision_of_inputs_beside_an_outlier() {
        // One input channel 100× the others: per-row scales round the rest to a few
        // levels; 32-blocks lose precision only in the outlier's block.
        let (m, n, k) = (4, 8, 256);
        let mut x = data(m * k, 8);
        for r in 0..m {
            x[r * k + 5] = 100.0;
        }
        let wf = data(n * k, 9);
        let want = exact(&x, &wf, m, n, k);
        let err = |scheme| {
            let got = linear_reference(&x, m, &Int8Weight::new(&wf, n, k, scheme), None);
            got.iter()
                .zip(&want)
                .fold(0f64, |e, (g, w)| e.max((f64::from(*g) - w).abs()))
        };
        let (per_row, blocks) = (err(Int8Scheme::PerRow), err(Int8Scheme::Blocks32));
        assert!(
            blocks * 3.0 < per_row,
            "blocks {blocks} vs per-row {per_row}"
        );
    }

    #[test]
    fn rows_do_not_depend_on_the_batch() {
        if !vnni_available() {
            return;
        }
        let (m, n, k) = (37, 96, 100);
        let x = data(m * k, 6);
        for scheme in SCHEMES {
            let w = Int8Weight::new(&data(n * k, 7), n, k, scheme);
            let all = linear(&x, m, &w, None);
            for (start, rows) in [(0, 1), (5, 9), (30, 7)] {
                let part = linear(&x[start * k..], rows, &w, None);
                assert_eq!(part[..], all[start * n..(start + rows) * n]);
            }
        }
    }
}
