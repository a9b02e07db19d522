//! Dense matrix products through the `gemm` crate (runtime-dispatched AVX2/AVX-512
//! kernels). CPU twin of the cuBLAS GEMMs of the CUDA backend.

use gemm::Parallelism;

/// A strided read-only matrix view: element `(r, c)` is `data[r·rs + c·cs]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> MatRef<'a> {
    /// Row-major `[rows, cols]` with row stride `ld`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize, ld: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: ld,
            cs: 1,
        }
    }

    /// The transpose (no copy).
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    fn check(&self) {
        if self.rows > 0 && self.cols > 0 {
            let last = (self.rows - 1) * self.rs + (self.cols - 1) * self.cs;
            assert!(last < self.data.len(), "matrix view out of bounds");
        }
    }
}

/// Above this many multiply-adds a product is split across the rayon pool.
const PARALLEL_MIN_FLOPS: usize = 1 << 21;

/// `dst[m, n] (row stride ld) = (accumulate ? dst : 0) + a[m, k] · b[k, n]`.
/// `parallel` splits large products over the current rayon pool; callers that are
/// already parallel over independent products (attention heads) pass `false`.
pub fn matmul(
    dst: &mut [f32],
    ld: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    accumulate: bool,
    parallel: bool,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(k, b.rows, "matmul inner dimensions differ");
    a.check();
    b.check();
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        (m - 1) * ld + n <= dst.len(),
        "matmul destination too small"
    );
    let threads = rayon::current_num_threads();
    let par = if parallel && m * n * k >= PARALLEL_MIN_FLOPS && threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    // SAFETY: bounds of all three views were checked above; `dst` is exclusively
    // borrowed and does not alias `a` or `b` (distinct borrows).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            ld as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// Row counts below this are zero-padded before gemm: for fewer rows the gemm crate
/// takes other code paths (matrix-vector and small-matrix kernels) whose rounding
/// differs from its blocked kernel's.
const MIN_GEMM_ROWS: usize = 64;

/// Outputs or inner dimensions narrower than this use [`dot_rows`]: gemm picks
/// row-count-dependent paths for skinny products at any row count.
const MIN_GEMM_WIDTH: usize = 32;

/// `x[m, k] · w[n, k]ᵀ (+ bias[n])`, row-major `[m, n]`. Batch-invariant: each output
/// row depends only on its input row, never on `m` or the other rows, because the path
/// is chosen from `(n, k)` alone and gemm always runs its blocked kernel (measured on
/// gemm 0.19; `invariance::linear_rows_do_not_depend_on_the_batch`).
pub fn linear(
    x: &[f32],
    m: usize,
    w: &[f32],
    n: usize,
    k: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    if n < MIN_GEMM_WIDTH || k < MIN_GEMM_WIDTH {
        return dot_rows(x, m, w, n, k, bias);
    }
    let rows = m.max(MIN_GEMM_ROWS);
    let padded;
    let x = if rows > m {
        let mut p = vec![0f32; rows * k];
        p[..m * k].copy_from_slice(&x[..m * k]);
        padded = p;
        &padded[..]
    } else {
        x
    };
    let mut out = vec![0f32; rows * n];
    if let Some(b) = bias {
        use rayon::prelude::*;
        out.par_chunks_mut(n).for_each(|row| row.copy_from_slice(b));
    }
    matmul(
        &mut out,
        n,
        MatRef::rows(x, rows, k, k),
        MatRef::rows(w, n, k, k).t(),
        bias.is_some(),
        true,
    );
    out.truncate(m * n);
    out
}

/// Lanes of the fixed-order accumulation in [`dot_rows`] (vectorised by the compiler).
const LANES: usize = 16;

/// Plain dot products with a fixed summation order: lane-wise partial sums, then the
/// lanes in order, then the tail.
fn dot_rows(x: &[f32], m: usize, w: &[f32], n: usize, k: usize, bias: Option<&[f32]>) -> Vec<f32> {
    use rayon::prelude::*;
    let mut out = vec![0f32; m * n];
    out.par_chunks_mut(n.max(1))
        .enumerate()
        .for_each(|(r, row)| {
            let xr = &x[r * k..(r + 1) * k];
            for (j, o) in row.iter_mut().enumerate() {
                let wj = &w[j * k..(j + 1) * k];
                let mut acc = [0f32; LANES];
                let (xc, wc) = (xr.chunks_exact(LANES), wj.chunks_exact(LANES));
                let (xt, wt) = (xc.remainder(), wc.remainder());
                for (a, b) in xc.zip(wc) {
                    for l in 0..LANES {
                        acc[l] = a[l].mul_add(b[l], acc[l]);
                    }
                }
                let mut sum = acc.iter().sum::<f32>();
                for (a, b) in xt.iter().zip(wt) {
                    sum = a.mul_add(*b, sum);
                }
                *o = sum + bias.map_or(0.0, |b| b[j]);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_naive_product_with_transposes() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.11).cos()).collect(); // [n, k]
        let mut out = vec![1.0; m * n];
        matmul(
            &mut out,
            n,
            MatRef::rows(&a, m, k, k),
            MatRef::rows(&b, n, k, k).t(),
            true,
            false,
        );
        for i in 0..m {
            for j in 0..n {
                let want: f32 = 1.0 + (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum::<f32>();
                assert!((out[i * n + j] - want).abs() < 1e-5);
            }
        }
    }
}

#[cfg(test)]
mod invariance {
    use super::linear;

    #[test]
    fn linear_rows_do_not_depend_on_the_batch() {
        // Skinny heads, tiny test models, and encoder GEMM shapes.
        for (k, n) in [
            (768, 2),
            (8, 8),
            (8, 16),
            (32, 32),
            (64, 16),
            (16, 64),
            (128, 128),
            (256, 1024),
        ] {
            let total = 150;
            let x: Vec<f32> = (0..total * k)
                .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                .collect();
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 104_729) % 997) as f32 / 997.0 - 0.5)
                .collect();
            let b: Vec<f32> = (0..n).map(|j| j as f32 * 0.01).collect();
            let all = linear(&x, total, &w, n, k, Some(&b));
            for (start, m) in [
                (0, 1),
                (3, 2),
                (17, 9),
                (40, 33),
                (1, 70),
                (149, 1),
                (60, 90),
            ] {
                let part = linear(&x[start * k..], m, &w, n, k, Some(&b));
                assert!(
                    part[..] == all[start * n..(start + m) * n],
                    "k={k} n={n}: rows {start}..+{m} differ"
                );
            }
            // And the values are right.
            let r = 17;
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|p| f64::from(x[r * k + p]) * f64::from(w[j * k + p]))
                    .sum::<f64>()
                    + f64::from(b[j]);
                assert!(
                    (f64::from(all[r * n + j]) - want).abs() < 1e-4,
                    "k={k} n={n}"
                );
            }
        }
    }
}
