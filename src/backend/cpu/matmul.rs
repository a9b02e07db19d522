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
