//! The loop shared by the packed low-precision dense layers ([`super::int8_linear`],
//! [`super::bf16_linear`]): output tiles of `R` rows × [`BLOCK_COLS`] columns; one
//! rayon task per [`CHUNK_ROWS`] rows walks the column blocks, each block over all the
//! chunk's tiles while its packed weights are in cache.

use rayon::prelude::*;

/// Columns of one packed weight block: two 16-lane `zmm` accumulators.
pub const BLOCK_COLS: usize = 32;
/// Rows per rayon task.
pub const CHUNK_ROWS: usize = 64;

/// Where weight `(j, p)` of `[n, k]` (`k` padded to `kp`) sits in a panel packed for `G`
/// inputs per lane: per block of [`BLOCK_COLS`] outputs and per group of `G` inputs,
/// 32 lanes of `G` values, so one 64-byte load feeds 16 output lanes.
pub fn packed_index<const G: usize>(kp: usize, j: usize, p: usize) -> usize {
    (j / BLOCK_COLS) * BLOCK_COLS * kp + (p / G) * BLOCK_COLS * G + (j % BLOCK_COLS) * G + p % G
}

/// A tile's sums, row-major.
pub type Sums<const R: usize> = [[f32; BLOCK_COLS]; R];

/// `[m, n]` outputs plus `bias`: `kernel(r0, valid_rows, block, &mut sums)` fills the
/// sums of rows `r0..r0 + valid_rows` against column block `block`.
pub fn run_tiles<const R: usize, K>(m: usize, n: usize, bias: Option<&[f32]>, kernel: K) -> Vec<f32>
where
    K: Fn(usize, usize, usize, &mut Sums<R>) + Sync,
{
    let mut out = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return out;
    }
    out.par_chunks_mut(CHUNK_ROWS * n)
        .enumerate()
        .for_each(|(c, dst)| {
            let first = c * CHUNK_ROWS;
            let chunk_rows = (m - first).min(CHUNK_ROWS);
            let mut sums = [[0f32; BLOCK_COLS]; R];
            for block in 0..n.div_ceil(BLOCK_COLS) {
                let c0 = block * BLOCK_COLS;
                let cols = (n - c0).min(BLOCK_COLS);
                let bias = bias.map(|b| &b[c0..c0 + cols]);
                for t0 in (0..chunk_rows).step_by(R) {
                    let rows = (chunk_rows - t0).min(R);
                    kernel(first + t0, rows, block, &mut sums);
                    for (i, row) in sums.iter().enumerate().take(rows) {
                        let o = (t0 + i) * n + c0;
                        store_row(&mut dst[o..o + cols], &row[..cols], bias);
                    }
                }
            }
        });
    out
}

/// `dst = sums (+ bias)`, compiled for the widest vectors the CPU has.
#[multiversion::multiversion(targets = "simd")]
fn store_row(dst: &mut [f32], sums: &[f32], bias: Option<&[f32]>) {
    match bias {
        Some(b) => {
            for ((d, s), b) in dst.iter_mut().zip(sums).zip(b) {
                *d = s + b;
            }
        }
        None => dst.copy_from_slice(sums),
    }
}

/// Start pointers of a tile's rows in a row-major buffer with row stride `ld`; rows past
/// `valid` repeat the last valid one (their sums are computed and ignored).
pub fn row_pointers<const R: usize, T>(
    data: &[T],
    ld: usize,
    r0: usize,
    valid: usize,
) -> [*const T; R] {
    assert!(
        valid >= 1 && (r0 + valid) * ld <= data.len(),
        "tile rows out of bounds"
    );
    std::array::from_fn(|i| data[(r0 + i.min(valid - 1)) * ld..].as_ptr())
}

/// Deterministic test values in [−1, 1) and their f64 product, shared by the packed
/// kernels' tests.
#[cfg(test)]
pub mod test_data {
    /// `(m, n, k)` that leave every remainder: k not a multiple of 4 or 32, n not of
    /// 32, m not of a tile.
    pub const RAGGED: [(usize, usize, usize); 5] = [
        (1, 1, 1),
        (3, 33, 7),
        (17, 64, 768),
        (9, 70, 129),
        (40, 32, 4),
    ];

    pub fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0)
            .collect()
    }

    /// `x[m, k] · w[n, k]ᵀ` in f64.
    pub fn product(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for r in 0..m {
            for j in 0..n {
                out[r * n + j] = (0..k)
                    .map(|p| f64::from(x[r * k + p]) * f64::from(w[j * k + p]))
                    .sum();
            }
        }
        out
    }
}
