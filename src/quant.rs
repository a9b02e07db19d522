//! Weights quantised in blocks along their inputs: `w[r, c] = q[r, c] · scale[r, b] +
//! min[r, b]` for the block `b = c / block` of row `r`. Quantised checkpoints store
//! weights this way (GGUF's 32-weight blocks and the k-quants' 32-weight sub-blocks,
//! [`crate::model::gguf`]); the CPU's int8 dense layers multiply them as they are
//! ([`crate::backend::cpu::int8_linear`]). A leaf, like [`crate::tensor`].

/// A `[rows, cols]` weight in blocks of `block` consecutive inputs (the last block of a
/// row may be shorter).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantRows {
    pub rows: usize,
    pub cols: usize,
    pub block: usize,
    /// `q[r, c]`, row-major.
    pub q: Vec<i8>,
    /// `scale[r, b]`, row-major.
    pub scale: Vec<f32>,
    /// `min[r, b]` of asymmetric blocks (`Q4_1`, `Q5_1`, the k-quants); `None` when
    /// every block is symmetric.
    pub min: Option<Vec<f32>>,
}

impl QuantRows {
    /// Blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.cols.div_ceil(self.block).max(1)
    }

    /// Symmetric quantisation of a row-major `[rows, cols]` f32 weight: per block,
    /// `scale = max|w| / 127` and `q = round(w / scale)`, ties to even (llama.cpp's
    /// `Q8_0` for `block = 32`).
    pub fn quantize(w: &[f32], rows: usize, cols: usize, block: usize) -> Self {
        let blocks = cols.div_ceil(block).max(1);
        let mut q = vec![0i8; rows * cols];
        let mut scale = vec![0f32; rows * blocks];
        for r in 0..rows {
            for b in 0..blocks {
                let (start, end) = ((b * block).min(cols), ((b + 1) * block).min(cols));
                let dst = &mut q[r * cols + start..r * cols + end];
                scale[r * blocks + b] =
                    quantize_block(&w[r * cols + start..r * cols + end], |i, v| dst[i] = v);
            }
        }
        Self {
            rows,
            cols,
            block,
            q,
            scale,
            min: None,
        }
    }

    /// `q · scale + min` as f32, row-major (the dequantisation of ggml's
    /// `dequantize_row_*`, bit for bit).
    pub fn dequantize(&self) -> Vec<f32> {
        let blocks = self.blocks_per_row();
        let mut out = Vec::with_capacity(self.q.len());
        for (r, row) in self.q.chunks_exact(self.cols.max(1)).enumerate() {
            for (b, q) in row.chunks(self.block).enumerate() {
                let s = self.scale[r * blocks + b];
                let values = q.iter().map(|&q| f32::from(q) * s);
                match &self.min {
                    Some(min) => out.extend(values.map(|v| v + min[r * blocks + b])),
                    None => out.extend(values),
                }
            }
        }
        out
    }

    /// Rows `order[0], order[1], …` (a row permutation or selection).
    pub fn select_rows(&self, order: &[usize]) -> Self {
        let blocks = self.blocks_per_row();
        let rows_of = |v: &[f32]| -> Vec<f32> {
            order
                .iter()
                .flat_map(|&r| v[r * blocks..(r + 1) * blocks].iter().copied())
                .collect()
        };
        Self {
            rows: order.len(),
            cols: self.cols,
            block: self.block,
            q: order
                .iter()
                .flat_map(|&r| self.q[r * self.cols..(r + 1) * self.cols].iter().copied())
                .collect(),
            scale: rows_of(&self.scale),
            min: self.min.as_deref().map(rows_of),
        }
    }

    /// The rows of `parts` one after another; `None` unless they share `cols` and
    /// `block`.
    pub fn cat(parts: &[&QuantRows]) -> Option<Self> {
        let first = parts.first()?;
        if parts
            .iter()
            .any(|p| (p.cols, p.block) != (first.cols, first.block))
        {
            return None;
        }
        let any_min = parts.iter().any(|p| p.min.is_some());
        Some(Self {
            rows: parts.iter().map(|p| p.rows).sum(),
            cols: first.cols,
            block: first.block,
            q: parts.iter().flat_map(|p| p.q.iter().copied()).collect(),
            scale: parts.iter().flat_map(|p| p.scale.iter().copied()).collect(),
            min: any_min.then(|| {
                parts
                    .iter()
                    .flat_map(|p| match &p.min {
                        Some(m) => m.clone(),
                        None => vec![0.0; p.scale.len()],
                    })
                    .collect()
            }),
        })
    }
}

/// Adding and taking off 1.5 · 2²³ rounds an f32 of magnitude below 2²² to the nearest
/// integer, ties to even (the FPU's rounding), in two vectorisable additions.
const ROUND: f32 = 12_582_912.0;

/// The quantisation of a block: `Ok((127 / max|v|, max|v| / 127))`, the inverse scale
/// and the scale, or `Err(scale)` when every value quantises to 0 — scale 0 for an
/// all-zero block, NaN when a value is not finite (the outputs become NaN, as in f32,
/// and the row is quarantined).
#[inline(always)]
pub fn block_inverse(block: &[f32]) -> Result<(f32, f32), f32> {
    // Lane-wise maxima (the max of a set does not depend on the order).
    const LANES: usize = 16;
    let (mut lanes, mut nan) = ([0f32; LANES], [false; LANES]);
    let chunks = block.chunks_exact(LANES);
    for (i, &v) in chunks.remainder().iter().enumerate() {
        lanes[i] = v.abs();
        nan[i] = v.is_nan();
    }
    for c in chunks {
        for l in 0..LANES {
            lanes[l] = lanes[l].max(c[l].abs());
            nan[l] |= c[l].is_nan();
        }
    }
    let amax = lanes.iter().fold(0f32, |m, &v| m.max(v));
    let finite = amax.is_finite() && !nan.contains(&true);
    match (finite, amax == 0.0) {
        (false, _) => Err(f32::NAN),
        (true, true) => Err(0.0),
        (true, false) => Ok((127.0 / amax, amax / 127.0)),
    }
}

/// `round(v · inv)` (ties to even) for `|v · inv| ≤ 127`: after adding [`ROUND`] the
/// integer is the low bits of the mantissa, so its low byte is the two's-complement i8
/// (integer operations only, which vectorise).
#[inline(always)]
pub fn quantize_value(v: f32, inv: f32) -> i8 {
    (v * inv + ROUND).to_bits() as u8 as i8
}

/// Symmetric int8 quantisation of one block: the scale, and `round(v / scale)` written
/// by `put(index, q)`.
pub fn quantize_block(block: &[f32], mut put: impl FnMut(usize, i8)) -> f32 {
    match block_inverse(block) {
        Ok((inv, scale)) => {
            for (i, &v) in block.iter().enumerate() {
                put(i, quantize_value(v, inv));
            }
            scale
        }
        Err(scale) => {
            (0..block.len()).for_each(|i| put(i, 0));
            scale
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asymmetric() -> QuantRows {
        QuantRows {
            rows: 2,
            cols: 40,
            block: 32,
            q: (0..80).map(|i| (i % 16) as i8).collect(),
            scale: vec![0.5, 0.25, 2.0, 1.0],
            min: Some(vec![-1.0, 0.0, 3.0, -0.5]),
        }
    }

    #[test]
    fn quantize_rounds_each_block_to_its_own_scale() {
        // One block of 32 with max 127 (scale 1; ties go to even), a short block of 8
        // with max 2.54.
        let mut w = vec![0f32; 40];
        w[0] = 127.0;
        w[1] = 2.5;
        w[2] = 3.5;
        w[32] = 2.54;
        w[33] = -1.0;
        let q = QuantRows::quantize(&w, 1, 40, 32);
        assert_eq!(q.scale, vec![1.0, 2.54 / 127.0]);
        assert_eq!(&q.q[..3], &[127, 2, 4]);
        assert_eq!(&q.q[32..34], &[127, -50]);
        assert_eq!(q.dequantize()[32], 127.0 * (2.54 / 127.0));
    }

    #[test]
    fn dequantize_adds_the_block_min() {
        let d = asymmetric().dequantize();
        assert_eq!(d[3], 3.0 * 0.5 - 1.0);
        assert_eq!(d[33], 1.0 * 0.25);
        assert_eq!(d[40 + 5], 13.0 * 2.0 + 3.0);
        assert_eq!(d[40 + 35], 11.0 - 0.5);
    }

    #[test]
    fn rows_select_and_concatenate_with_their_scales() {
        let a = asymmetric();
        let swapped = a.select_rows(&[1, 0]);
        assert_eq!(swapped.dequantize()[..40], a.dequantize()[40..]);
        let sym = QuantRows::quantize(&[1.0; 40], 1, 40, 32);
        let both = QuantRows::cat(&[&a, &sym]).unwrap();
        assert_eq!(both.rows, 3);
        assert_eq!(both.min.as_deref().unwrap()[4..], [0.0, 0.0]);
        let mut want = a.dequantize();
        want.extend(sym.dequantize());
        assert_eq!(both.dequantize(), want);
        assert!(QuantRows::cat(&[&a, &QuantRows::quantize(&[1.0; 8], 1, 8, 32)]).is_none());
    }
}
