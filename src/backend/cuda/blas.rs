//! Dense GEMMs through cuBLAS (`cublasGemmEx`, f32 accumulation in every dtype).

use std::ffi::c_void;

use cudarc::cublas::{result as blas, sys};

use super::device::Device;
use super::memory::{device_err, CudaTensor};
use crate::backend::dtype::DType;

fn data_type(dt: DType) -> sys::cudaDataType {
    match dt {
        DType::F32 => sys::cudaDataType::CUDA_R_32F,
        DType::Bf16 => sys::cudaDataType::CUDA_R_16BF,
        DType::F16 => sys::cudaDataType::CUDA_R_16F,
    }
}

/// `y[n, out] = x[n, in] · w[out, in]ᵀ + beta · y` on row-major device matrices of the
/// same dtype (shapes checked by the caller). Row-major `y` is column-major `yᵀ = w · xᵀ`, so cuBLAS sees
/// `C(out×n) = op(A)·B` with `A = w` (column-major `[in, out]`, transposed) and
/// `B = x` (column-major `[in, n]`).
pub fn gemm_xwt(
    dev: &Device,
    x: &CudaTensor,
    w: &CudaTensor,
    y: &CudaTensor,
    beta: f32,
) -> crate::backend::OpResult<()> {
    let (n, k, out) = (x.rows, x.cols, w.rows);
    if n == 0 || out == 0 {
        return Ok(());
    }
    dev.counts.gemm();
    let dt = data_type(x.dtype);
    let alpha = 1.0f32;
    let dim = |v: usize| {
        i32::try_from(v).map_err(|_| device_err("linear", format!("dimension {v} exceeds i32")))
    };
    // SAFETY: the pointers address live device buffers of the stated shapes on the
    // handle's stream; alpha/beta are host f32 as the default pointer mode expects.
    unsafe {
        blas::gemm_ex(
            *dev.blas.handle(),
            sys::cublasOperation_t::CUBLAS_OP_T,
            sys::cublasOperation_t::CUBLAS_OP_N,
            dim(out)?,
            dim(n)?,
            dim(k)?,
            (&alpha as *const f32).cast::<c_void>(),
            w.ptr() as *const c_void,
            dt,
            dim(k)?,
            x.ptr() as *const c_void,
            dt,
            dim(k)?,
            (&beta as *const f32).cast::<c_void>(),
            y.ptr() as *mut c_void,
            dt,
            dim(out)?,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| device_err("linear", e))
}
