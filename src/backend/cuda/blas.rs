//! Dense GEMMs through cuBLASLt (`cublasLtMatmul`, f32 accumulation in every dtype),
//! with the bias and GPT-2's tanh GELU applied in the epilogue, and strided batches
//! for fused projections (Q, K and V from one call).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;

use super::device::Device;
use super::memory::{device_err, CudaTensor, DeviceBuf, Pool};
use crate::backend::dtype::DType;
use crate::backend::OpResult;

/// cuBLASLt workspace: 32 MiB, what NVIDIA recommends on Hopper.
const WORKSPACE: usize = 32 << 20;

fn data_type(dt: DType) -> sys::cudaDataType {
    match dt {
        DType::F32 => sys::cudaDataType::CUDA_R_32F,
        DType::Bf16 => sys::cudaDataType::CUDA_R_16BF,
        DType::F16 => sys::cudaDataType::CUDA_R_16F,
    }
}

/// A cuBLASLt handle, its workspace, and the algorithm chosen for each GEMM shape.
pub struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: DeviceBuf,
    /// The heuristic's first algorithm per [`Shape`], asked once (a heuristic query
    /// costs host time on every call otherwise, which a forward without a CUDA graph pays
    /// 96 times for DeBERTa-v3-large).
    algos: Mutex<HashMap<Shape, sys::cublasLtMatmulAlgo_t>>,
    /// Heuristic queries made (tests: one per shape).
    pub queries: AtomicU64,
}

/// What the algorithm choice depends on: dtype, sizes, parts, epilogue and beta (the
/// descriptors; device addresses are not part of a query).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    dtype: DType,
    n: usize,
    k: usize,
    out: usize,
    parts: usize,
    epilogue: sys::cublasLtEpilogue_t,
    accumulate: bool,
}

// SAFETY: a cuBLASLt handle may be used from any thread (the library keeps no
// per-thread state in it); every call goes to the device's one stream.
unsafe impl Send for Lt {}
// SAFETY: as above; `cublasLtMatmul` does not mutate the handle.
unsafe impl Sync for Lt {}

impl Lt {
    pub fn new(pool: &std::sync::Arc<Pool>) -> anyhow::Result<Self> {
        let handle = lt::create_handle()
            .map_err(|e| anyhow::anyhow!("cannot create a cuBLASLt handle: {e}"))?;
        let workspace = pool
            .alloc(WORKSPACE)
            .map_err(|e| anyhow::anyhow!("cuBLASLt workspace: {e}"))?;
        Ok(Self {
            handle,
            workspace,
            algos: Mutex::new(HashMap::new()),
            queries: AtomicU64::new(0),
        })
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `Lt::new` and is not used after this.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

/// What the GEMM applies to `x · wᵀ` before rounding to the output type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    Plain,
    /// `+ bias` (device address of `[parts·out]` elements).
    Bias(u64),
    /// `gelu_tanh(· + bias)`.
    GeluBias(u64),
    /// `gelu_tanh(·)`.
    Gelu,
}

impl Epilogue {
    /// `+ bias` when there is one, optionally followed by the tanh GELU.
    pub fn of(bias: Option<&CudaTensor>, gelu: bool) -> Self {
        match (bias, gelu) {
            (None, false) => Epilogue::Plain,
            (Some(b), false) => Epilogue::Bias(b.ptr()),
            (Some(b), true) => Epilogue::GeluBias(b.ptr()),
            (None, true) => Epilogue::Gelu,
        }
    }
}

/// The descriptors of one call, destroyed on drop.
struct Descs {
    matmul: sys::cublasLtMatmulDesc_t,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: Option<sys::cublasLtMatmulPreference_t>,
}

impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created for this call and is not used after it.
        unsafe {
            for l in self.layouts.drain(..) {
                let _ = lt::destroy_matrix_layout(l);
            }
            if let Some(p) = self.pref.take() {
                let _ = lt::destroy_matmul_pref(p);
            }
            let _ = lt::destroy_matmul_desc(self.matmul);
        }
    }
}

/// Sets one attribute from a value of its documented type.
///
/// # Safety
/// `T` must be the attribute's type.
unsafe fn desc_attr<T>(
    d: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: &T,
) -> Result<(), lt::CublasError> {
    // SAFETY: `v` is a live value of the attribute's type (caller's contract).
    unsafe {
        lt::set_matmul_desc_attribute(d, attr, (v as *const T).cast(), std::mem::size_of::<T>())
    }
}

/// As [`desc_attr`] for a matrix layout.
///
/// # Safety
/// `T` must be the attribute's type.
unsafe fn layout_attr<T>(
    l: sys::cublasLtMatrixLayout_t,
    attr: sys::cublasLtMatrixLayoutAttribute_t,
    v: &T,
) -> Result<(), lt::CublasError> {
    // SAFETY: as above.
    unsafe {
        lt::set_matrix_layout_attribute(l, attr, (v as *const T).cast(), std::mem::size_of::<T>())
    }
}

/// `parts` GEMMs in one call: `y_p[n, out] = epilogue(x[n, in] · w_pᵀ + beta · y_p)` where `w_p`
/// is rows `p·out..(p+1)·out` of `w` `[parts·out, in]`, the bias of part p starts at
/// entry `p·out`, and the outputs `y_p` lie back to back from device address `y`
/// (shapes checked by the caller; beta = 1 adds into `y` in place, C = D). Row-major `y` is column-major `yᵀ = w · xᵀ`, so
/// cuBLASLt sees `D(out×n) = op(A)·B` with `A = w_p` (column-major `[in, out]`,
/// transposed) and `B = x` (column-major `[in, n]`, shared by the parts).
pub fn gemm(
    dev: &Device,
    x: &CudaTensor,
    w: &CudaTensor,
    y: u64,
    parts: usize,
    epilogue: Epilogue,
    beta: f32,
) -> OpResult<()> {
    let (n, k) = (x.rows, x.cols);
    let out = w.rows / parts.max(1);
    if n == 0 || out == 0 {
        return Ok(());
    }
    dev.counts.gemm();
    let err = |e: lt::CublasError| device_err("linear", e);
    let dt = data_type(x.dtype);
    let alpha = 1.0f32;
    let matmul = lt::create_matmul_desc(
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        sys::cudaDataType::CUDA_R_32F,
    )
    .map_err(err)?;
    let mut descs = Descs {
        matmul,
        layouts: Vec::with_capacity(4),
        pref: None,
    };
    let (epi, bias) = match epilogue {
        Epilogue::Plain => (sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT, None),
        Epilogue::Bias(b) => (sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS, Some(b)),
        Epilogue::GeluBias(b) => (
            sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
            Some(b),
        ),
        Epilogue::Gelu => (sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU, None),
    };
    // A, B, C, D: (rows, cols, ld, batch stride) in elements, column-major.
    let shapes = [
        (k, out, k, out * k),
        (k, n, k, 0),
        (out, n, out, n * out),
        (out, n, out, n * out),
    ];
    use sys::cublasLtMatmulDescAttributes_t as D;
    use sys::cublasLtMatrixLayoutAttribute_t as L;
    // SAFETY: every attribute gets a value of its documented type; the pointers
    // address live device buffers of the stated shapes on the device's stream, which
    // is the stream the matmul is queued on; alpha/beta are host f32 (the default
    // pointer mode) and the workspace holds WORKSPACE bytes.
    unsafe {
        // cublasOperation_t: 1 = T (A = w_p), 0 = N (B = x).
        desc_attr(matmul, D::CUBLASLT_MATMUL_DESC_TRANSA, &1i32).map_err(err)?;
        desc_attr(matmul, D::CUBLASLT_MATMUL_DESC_TRANSB, &0i32).map_err(err)?;
        desc_attr(matmul, D::CUBLASLT_MATMUL_DESC_EPILOGUE, &epi).map_err(err)?;
        if let Some(b) = bias {
            desc_attr(matmul, D::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b).map_err(err)?;
            desc_attr(
                matmul,
                D::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                &(out as i64),
            )
            .map_err(err)?;
        }
        for (rows, cols, ld, stride) in shapes {
            let l =
                lt::create_matrix_layout(dt, rows as u64, cols as u64, ld as i64).map_err(err)?;
            descs.layouts.push(l);
            if parts > 1 {
                layout_attr(l, L::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &(parts as i32))
                    .map_err(err)?;
                layout_attr(
                    l,
                    L::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    &(stride as i64),
                )
                .map_err(err)?;
            }
        }
        let [a_l, b_l, c_l, d_l] = [0, 1, 2, 3].map(|i| descs.layouts[i]);
        let shape = Shape {
            dtype: x.dtype,
            n,
            k,
            out,
            parts,
            epilogue: epi,
            accumulate: beta != 0.0,
        };
        let cached = dev.lt.algos.lock().unwrap().get(&shape).copied();
        let algo = match cached {
            Some(a) => a,
            None => {
                // The preference (workspace limit) matters to the query alone.
                dev.lt.queries.fetch_add(1, Ordering::Relaxed);
                let pref = lt::create_matmul_pref().map_err(err)?;
                descs.pref = Some(pref);
                lt::set_matmul_pref_attribute(
                    pref,
                    sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    (&(WORKSPACE as u64) as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                )
                .map_err(err)?;
                let h =
                    lt::get_matmul_algo_heuristic(dev.lt.handle, matmul, a_l, b_l, c_l, d_l, pref)
                        .map_err(err)?;
                dev.lt.algos.lock().unwrap().insert(shape, h.algo);
                h.algo
            }
        };
        lt::matmul(
            dev.lt.handle,
            matmul,
            (&alpha as *const f32).cast::<c_void>(),
            (&beta as *const f32).cast::<c_void>(),
            w.ptr() as *const c_void,
            a_l,
            x.ptr() as *const c_void,
            b_l,
            y as *const c_void,
            c_l,
            y as *mut c_void,
            d_l,
            &algo,
            dev.lt.workspace.ptr() as *mut c_void,
            WORKSPACE,
            dev.stream.cu_stream() as *mut _,
        )
        .map_err(err)
    }
}
