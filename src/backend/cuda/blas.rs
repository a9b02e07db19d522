//! Dense GEMMs through cuBLASLt (`cublasLtMatmul`, f32 accumulation in every dtype),
//! with the bias and GPT-2's tanh GELU applied in the epilogue, and strided batches
//! for fused projections (Q, K and V from one call).
//!
//! **Batch invariance.** cuBLASLt's heuristic picks the algorithm from the whole
//! problem, row count included: a batch of a few rows gets split-K (K summed in parts),
//! a graph bucket's padded row count another tile, and the same row of the output then
//! rounds differently with other neighbours. By default ([`Lt::set_batch_invariant`])
//! one algorithm is pinned per GEMM of a model (dtype, depth, width, parts, epilogue,
//! beta), asked of the heuristic once at 16,384 rows (`PINNED_ROWS`) with split-K ruled out
//! (reduction scheme NONE), and used for every row count it runs
//! (`cublasLtMatmulAlgoCheck`, once per row count): each output row is then the same
//! sum in the same order whatever else is in the batch.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;

use super::device::Device;
use super::memory::{device_err, CudaTensor, DeviceBuf, Pool};
use crate::backend::dtype::DType;
use crate::backend::OpResult;

/// cuBLASLt workspace: 32 MiB, what NVIDIA recommends on Hopper.
const WORKSPACE: usize = 32 << 20;

/// The row count a pinned algorithm is chosen for: a full batch (DeBERTa-large at
/// 65,536 tokens runs 4 such tiles' worth), so that large batches, where the time is,
/// run the algorithm the heuristic would pick for them anyway.
const PINNED_ROWS: usize = 16_384;

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
    /// The algorithm per [`Shape`], chosen once (a heuristic query costs host time on
    /// every call otherwise, which a forward without a CUDA graph pays 96 times for
    /// DeBERTa-v3-large): per row count, and, batch-invariant, the pinned one per GEMM
    /// (keyed without the rows).
    algos: Mutex<HashMap<Shape, sys::cublasLtMatmulAlgo_t>>,
    /// One algorithm per GEMM whatever the row count (the default; see the module doc).
    batch_invariant: AtomicBool,
    /// Heuristic queries made (tests: one per shape).
    pub queries: AtomicU64,
}

/// What the algorithm choice depends on: dtype, sizes, parts, epilogue and beta (the
/// descriptors; device addresses are not part of a query). `n` (the rows) is `None`
/// for a pinned algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    dtype: DType,
    n: Option<usize>,
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
            batch_invariant: AtomicBool::new(true),
            queries: AtomicU64::new(0),
        })
    }

    /// Pins one algorithm per GEMM whatever the row count (`true`, the default: the
    /// same bits at any batch size), or lets cuBLASLt choose per row count (`false`:
    /// what it would pick for each batch, at the price of last-bit differences between
    /// batch sizes). Algorithms chosen before are forgotten.
    pub fn set_batch_invariant(&self, on: bool) {
        if self.batch_invariant.swap(on, Ordering::Relaxed) != on {
            self.algos.lock().unwrap().clear();
        }
    }

    /// Whether algorithms are pinned ([`Lt::set_batch_invariant`]).
    pub fn batch_invariant(&self) -> bool {
        self.batch_invariant.load(Ordering::Relaxed)
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

/// The matrix layouts of one problem (A, B, C, D), destroyed on drop (those made so
/// far, when one fails).
struct Layouts(Vec<sys::cublasLtMatrixLayout_t>);

impl Layouts {
    /// `parts` problems `D(out×n) = op(A)·B` (column-major; A = w_p transposed, B = x
    /// shared by the parts, C = D), as [`gemm`] describes.
    fn new(
        dt: sys::cudaDataType,
        n: usize,
        k: usize,
        out: usize,
        parts: usize,
    ) -> Result<Self, lt::CublasError> {
        use sys::cublasLtMatrixLayoutAttribute_t as L;
        // A, B, C, D: (rows, cols, ld, batch stride) in elements.
        let shapes = [
            (k, out, k, out * k),
            (k, n, k, 0),
            (out, n, out, n * out),
            (out, n, out, n * out),
        ];
        let mut layouts = Self(Vec::with_capacity(4));
        for (rows, cols, ld, stride) in shapes {
            let l = lt::create_matrix_layout(dt, rows as u64, cols as u64, ld as i64)?;
            layouts.0.push(l);
            if parts > 1 {
                // SAFETY: each attribute gets a value of its documented type.
                unsafe {
                    layout_attr(l, L::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &(parts as i32))?;
                    layout_attr(
                        l,
                        L::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        &(stride as i64),
                    )?;
                }
            }
        }
        Ok(layouts)
    }

    /// A, B, C, D.
    fn abcd(&self) -> [sys::cublasLtMatrixLayout_t; 4] {
        [self.0[0], self.0[1], self.0[2], self.0[3]]
    }
}

impl Drop for Layouts {
    fn drop(&mut self) {
        for l in self.0.drain(..) {
            // SAFETY: each layout was created by `Layouts::new` and is not used after this.
            let _ = unsafe { lt::destroy_matrix_layout(l) };
        }
    }
}

/// A matmul descriptor, destroyed on drop.
struct MatmulDesc(sys::cublasLtMatmulDesc_t);

impl Drop for MatmulDesc {
    fn drop(&mut self) {
        // SAFETY: created for one call and not used after it.
        let _ = unsafe { lt::destroy_matmul_desc(self.0) };
    }
}

/// A matmul preference, destroyed on drop.
struct Preference(sys::cublasLtMatmulPreference_t);

impl Drop for Preference {
    fn drop(&mut self) {
        // SAFETY: created for one query and not used after it.
        let _ = unsafe { lt::destroy_matmul_pref(self.0) };
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

/// As [`desc_attr`] for a preference.
///
/// # Safety
/// `T` must be the attribute's type.
unsafe fn pref_attr<T>(
    p: sys::cublasLtMatmulPreference_t,
    attr: sys::cublasLtMatmulPreferenceAttributes_t,
    v: &T,
) -> Result<(), lt::CublasError> {
    // SAFETY: as above.
    unsafe {
        lt::set_matmul_pref_attribute(p, attr, (v as *const T).cast(), std::mem::size_of::<T>())
    }
}

impl Lt {
    /// The heuristic's first algorithm for `matmul` on `layouts`, within the workspace;
    /// without split-K when `no_split_k`.
    fn ask(
        &self,
        matmul: sys::cublasLtMatmulDesc_t,
        layouts: &Layouts,
        no_split_k: bool,
    ) -> Result<sys::cublasLtMatmulAlgo_t, lt::CublasError> {
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        self.queries.fetch_add(1, Ordering::Relaxed);
        let pref = Preference(lt::create_matmul_pref()?);
        let [a, b, c, d] = layouts.abcd();
        // SAFETY: each attribute gets a value of its documented type (u64 bytes, u32
        // mask); the descriptors are live for the query.
        unsafe {
            pref_attr(
                pref.0,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &(WORKSPACE as u64),
            )?;
            if no_split_k {
                // CUBLASLT_REDUCTION_SCHEME_NONE: only algorithms that sum K in one pass.
                pref_attr(pref.0, P::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &0u32)?;
            }
            lt::get_matmul_algo_heuristic(self.handle, matmul, a, b, c, d, pref.0).map(|h| h.algo)
        }
    }

    /// Whether `algo` runs `matmul` on `layouts` within the workspace
    /// (`cublasLtMatmulAlgoCheck`).
    fn supports(
        &self,
        matmul: sys::cublasLtMatmulDesc_t,
        layouts: &Layouts,
        algo: &sys::cublasLtMatmulAlgo_t,
    ) -> bool {
        let [a, b, c, d] = layouts.abcd();
        let mut result = std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::uninit();
        // SAFETY: live descriptors; the call fills `result` when it succeeds, and it is
        // read only then.
        unsafe {
            let status = sys::cublasLtMatmulAlgoCheck(
                self.handle,
                matmul,
                a,
                b,
                c,
                d,
                algo,
                result.as_mut_ptr(),
            );
            status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                && result.assume_init().workspaceSize <= WORKSPACE
        }
    }

    /// The algorithm cached under `key`, or `ask`'s, cached.
    fn cached(
        &self,
        key: Shape,
        ask: impl FnOnce() -> Result<sys::cublasLtMatmulAlgo_t, lt::CublasError>,
    ) -> Result<sys::cublasLtMatmulAlgo_t, lt::CublasError> {
        if let Some(a) = self.algos.lock().unwrap().get(&key) {
            return Ok(*a);
        }
        let a = ask()?;
        self.algos.lock().unwrap().insert(key, a);
        Ok(a)
    }

    /// The algorithm of `shape` (whose `n` is `None`) at `n` rows (`layouts`), chosen
    /// once per row count. Batch-invariant: the algorithm pinned for `shape` (asked at
    /// [`PINNED_ROWS`] without split-K) where it runs this row count, else this row
    /// count's own, with a warning. Otherwise the heuristic's for this row count.
    fn algorithm(
        &self,
        shape: Shape,
        n: usize,
        matmul: sys::cublasLtMatmulDesc_t,
        layouts: &Layouts,
        dt: sys::cudaDataType,
    ) -> Result<sys::cublasLtMatmulAlgo_t, lt::CublasError> {
        let rows = Shape {
            n: Some(n),
            ..shape
        };
        if !self.batch_invariant() {
            return self.cached(rows, || self.ask(matmul, layouts, false));
        }
        self.cached(rows, || {
            let pinned = self.cached(shape, || {
                let at = Layouts::new(dt, PINNED_ROWS, shape.k, shape.out, shape.parts)?;
                self.ask(matmul, &at, true)
            })?;
            if self.supports(matmul, layouts, &pinned) {
                return Ok(pinned);
            }
            log::warn!(
                "cuBLASLt's pinned algorithm for the {}×{} GEMM does not run {n} \
                 rows; that row count gets its own, so its results may differ in the last \
                 bits from other batch sizes",
                shape.out,
                shape.k
            );
            self.ask(matmul, layouts, true)
        })
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
    let matmul = MatmulDesc(
        lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(err)?,
    );
    let (epi, bias) = match epilogue {
        Epilogue::Plain => (sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT, None),
        Epilogue::Bias(b) => (sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS, Some(b)),
        Epilogue::GeluBias(b) => (
            sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
            Some(b),
        ),
        Epilogue::Gelu => (sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU, None),
    };
    use sys::cublasLtMatmulDescAttributes_t as D;
    // SAFETY: every attribute gets a value of its documented type.
    unsafe {
        // cublasOperation_t: 1 = T (A = w_p), 0 = N (B = x).
        desc_attr(matmul.0, D::CUBLASLT_MATMUL_DESC_TRANSA, &1i32).map_err(err)?;
        desc_attr(matmul.0, D::CUBLASLT_MATMUL_DESC_TRANSB, &0i32).map_err(err)?;
        desc_attr(matmul.0, D::CUBLASLT_MATMUL_DESC_EPILOGUE, &epi).map_err(err)?;
        if let Some(b) = bias {
            desc_attr(matmul.0, D::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b).map_err(err)?;
            desc_attr(
                matmul.0,
                D::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                &(out as i64),
            )
            .map_err(err)?;
        }
    }
    let layouts = Layouts::new(dt, n, k, out, parts).map_err(err)?;
    let shape = Shape {
        dtype: x.dtype,
        n: None,
        k,
        out,
        parts,
        epilogue: epi,
        accumulate: beta != 0.0,
    };
    let algo = dev
        .lt
        .algorithm(shape, n, matmul.0, &layouts, dt)
        .map_err(err)?;
    let [a_l, b_l, c_l, d_l] = layouts.abcd();
    // SAFETY: the pointers address live device buffers of the stated shapes on the
    // device's stream, which is the stream the matmul is queued on; alpha/beta are host
    // f32 (the default pointer mode) and the workspace holds WORKSPACE bytes.
    unsafe {
        lt::matmul(
            dev.lt.handle,
            matmul.0,
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
