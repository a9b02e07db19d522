//! GEMMs whose epilogue cuBLASLt lacks, built on CUTLASS (`kernels/cutlass/`), on
//! compute capability 9.0:
//! - `gemm_bias_gelu`, `y = gelu_erf(x · wᵀ + bias)` (cuBLASLt's GELU epilogue is the
//!   tanh form; DeBERTa's and BERT's is erf);
//! - `gemm_gated_{silu,gelu_new}`, `y = act(x · gateᵀ) · (x · upᵀ)` for a fused gate/up
//!   weight in [`Gated`] blocks of 64 (LEPUS's SwiGLU, T5 v1.1's gated-gelu): the gate
//!   in the epilogue, and only the half-width output written;
//! - `gemm_add_norm_{1024,768}`, `y = LayerNorm(x · wᵀ + bias + residual)` for rows of
//!   1,024 and 768 (a post-LN transformer's output projections and their LayerNorm):
//!   clusters of 8 CTAs along N, which exchange the row statistics through distributed
//!   shared memory.
//!
//! The host code CUTLASS needs (argument checks, TMA descriptors, the persistent grid)
//! runs in `kernels/cutlass/gemm_host.cu`, linked into this crate; it builds the
//! kernel's Params through this backend's driver, and the kernel is launched here like
//! any other, with the call's operands as its first parameter (what the CPU emulator's
//! stand-in computes from). Built only where build.rs found CUTLASS
//! (`cfg(hopscore_cutlass)`); elsewhere, and for shapes it does not take, the callers
//! run the cuBLASLt GEMM and the activation pass.

use std::sync::atomic::{AtomicBool, Ordering};

use super::CudaBackend;
use crate::backend::check::Dims;
use crate::backend::cuda::CudaTensor;
use crate::backend::{AddNorm, Gate, Gated, OpResult};

/// Whether one of the fused GEMMs may run (its `--fused-*` flag through the plan,
/// [`crate::backend::gpu_kernels`]).
#[derive(Debug)]
pub struct FusedSwitch(AtomicBool);

impl FusedSwitch {
    pub fn new(on: bool) -> Self {
        Self(AtomicBool::new(on))
    }

    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A CUTLASS kernel of `kernels/cutlass/` (`HOPSCORE_GEMM_*` in operands.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    BiasGelu = 0,
    GatedSilu = 1,
    GatedGeluNew = 2,
    AddNorm1024 = 3,
    AddNorm768 = 4,
}

/// CTAs along N in a cluster of the norm kernels (`HOPSCORE_NORM_CLUSTER` in
/// kernels/cutlass/operands.h).
#[cfg(hopscore_cutlass)]
const NORM_CLUSTER: u32 = 8;

#[cfg(hopscore_cutlass)]
impl Kind {
    /// The kernel's cluster of CTAs, as its CUTLASS type declares it (the Params
    /// builder reports that; a launch checks the two agree).
    fn cluster(self) -> (u32, u32, u32) {
        match self {
            Kind::AddNorm1024 | Kind::AddNorm768 => (1, NORM_CLUSTER, 1),
            Kind::BiasGelu | Kind::GatedSilu | Kind::GatedGeluNew => (1, 1, 1),
        }
    }

    /// The kernel's name, less the dtype suffix.
    fn name(self) -> &'static str {
        match self {
            Kind::BiasGelu => "gemm_bias_gelu",
            Kind::GatedSilu => "gemm_gated_silu",
            Kind::GatedGeluNew => "gemm_gated_gelu_new",
            Kind::AddNorm1024 => "gemm_add_norm_1024",
            Kind::AddNorm768 => "gemm_add_norm_768",
        }
    }
}

/// `gelu_erf(x · wᵀ + bias)` by the CUTLASS kernel, or `None` where it does not run:
/// built without CUTLASS, switched off, not compute capability 9.0, f32, no bias, no
/// rows, `k` or the width not a multiple of 8 or an operand not 16-byte aligned (TMA's
/// rows and addresses). Whether it runs never depends on the row count, so a row gets
/// the same bits in any batch.
pub(super) fn gemm_bias_gelu(
    be: &CudaBackend,
    x: &CudaTensor,
    w: &CudaTensor,
    bias: Option<&CudaTensor>,
) -> OpResult<Option<CudaTensor>> {
    let Some(bias) = bias else { return Ok(None) };
    crate::backend::check::linear(x, w, Some(bias))?;
    if !be.fused_gelu.get() || !runs(be, x, w, &[bias])? {
        return Ok(None);
    }
    imp::launch(be, Kind::BiasGelu, x, w, Some(bias), None, w.dims().0)
}

/// `act(x · gateᵀ) · (x · upᵀ)` by the CUTLASS kernel, or `None` where it does not
/// run: as [`gemm_bias_gelu`], and also with a bias, with blocks other than
/// [`Gated::BLOCK`], or a width that is not whole 128-column tiles (CUTLASS refuses it;
/// the unfused path's `gated_act` then checks the layout).
pub(super) fn gemm_gated(
    be: &CudaBackend,
    x: &CudaTensor,
    w: &CudaTensor,
    bias: Option<&CudaTensor>,
    gated: Gated,
) -> OpResult<Option<CudaTensor>> {
    crate::backend::check::linear(x, w, bias)?;
    if bias.is_some()
        || gated.block != Gated::BLOCK
        || !be.fused_gate.get()
        || !runs(be, x, w, &[])?
    {
        return Ok(None);
    }
    let kind = match gated.gate {
        Gate::Silu => Kind::GatedSilu,
        Gate::GeluNew => Kind::GatedGeluNew,
        // No epilogue of its own: the GEMM, then `gated_gelu`.
        Gate::Gelu => return Ok(None),
    };
    imp::launch(be, kind, x, w, None, None, w.dims().0 / 2)
}

/// `LayerNorm(x · wᵀ + bias + residual)` by the CUTLASS kernel, or `None` where it
/// does not run: as [`gemm_bias_gelu`], and also for a width other than 1,024 and 768
/// (one cluster of 8 tiles is one row).
pub(super) fn gemm_add_norm(
    be: &CudaBackend,
    x: &CudaTensor,
    w: &CudaTensor,
    bias: Option<&CudaTensor>,
    norm: &AddNorm<'_, CudaTensor>,
) -> OpResult<Option<CudaTensor>> {
    crate::backend::check::linear_add_norm(x, w, bias, norm)?;
    let Some(bias) = bias else { return Ok(None) };
    let width = w.dims().0;
    let kind = match width {
        1024 => Kind::AddNorm1024,
        768 => Kind::AddNorm768,
        _ => return Ok(None),
    };
    if !be.fused_norm.get() || !runs(be, x, w, &[bias, norm.residual, norm.weight, norm.bias])? {
        return Ok(None);
    }
    imp::launch(be, kind, x, w, Some(bias), Some(norm), width)
}

/// Whether a CUTLASS kernel takes `x · wᵀ` (with `more` operands): bf16/f16 on compute
/// capability 9.0, rows, `k` and the width multiples of 8, operands 16-byte aligned.
fn runs(be: &CudaBackend, x: &CudaTensor, w: &CudaTensor, more: &[&CudaTensor]) -> OpResult<bool> {
    let (rows, k) = x.dims();
    Ok(rows > 0
        && k.is_multiple_of(8)
        && w.dims().0.is_multiple_of(8)
        && [x, w]
            .iter()
            .chain(more)
            .all(|t| t.ptr().is_multiple_of(16))
        && be.is_hopper_16_bit()?)
}

#[cfg(hopscore_cutlass)]
mod imp {
    use std::ffi::{c_int, c_void};

    use cudarc::driver::sys;
    use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};

    use super::super::memory::device_err;
    use super::super::{CudaBackend, CudaTensor, DType};
    use super::Kind;
    use crate::backend::check::Dims;
    use crate::backend::{AddNorm, OpResult};

    /// Mirror of `HopscoreGemmOperands` (kernels/cutlass/operands.h).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    struct Operands {
        a: u64,
        b: u64,
        bias: u64,
        d: u64,
        residual: u64,
        gamma: u64,
        beta: u64,
        m: i32,
        n: i32,
        k: i32,
        sm_count: i32,
        max_active_clusters: i32,
        eps: f32,
    }
    // SAFETY: plain old data with the C header's layout.
    unsafe impl DeviceRepr for Operands {}

    impl Operands {
        /// Bounds the persistent grid by `clusters` clusters of `cluster` running at
        /// once. CUTLASS bounds it by the multiprocessors too; the clusters the driver
        /// says fit are the bound that counts (a device smaller than one cluster, the
        /// CPU emulator's, would get no grid).
        fn bound_grid(&mut self, clusters: i32, cluster: (u32, u32, u32)) {
            let ctas = i32::try_from(cluster.0 * cluster.1 * cluster.2).unwrap_or(i32::MAX);
            self.max_active_clusters = clusters;
            self.sm_count = self.sm_count.max(clusters.saturating_mul(ctas));
        }
    }

    /// Mirror of `HopscoreGemmLaunch` (kernels/cutlass/operands.h).
    #[repr(C)]
    #[derive(Default)]
    struct Launch {
        grid: [u32; 3],
        block: [u32; 3],
        cluster: [u32; 3],
        smem: u32,
        params_bytes: u32,
    }

    /// Room for a kernel's CUTLASS Params (about 1.9 KiB here; the driver copies the
    /// size the kernel declares), aligned for the tensor maps inside.
    #[repr(C, align(64))]
    struct Params([u8; PARAMS_CAPACITY]);
    const PARAMS_CAPACITY: usize = 4096;
    // SAFETY: bytes CUTLASS's host code wrote, the kernel's parameter as it declares it.
    unsafe impl DeviceRepr for Params {}

    type EncodeTiled = unsafe extern "C" fn(
        *mut sys::CUtensorMap,
        sys::CUtensorMapDataType,
        u32,
        *mut c_void,
        *const u64,
        *const u64,
        *const u32,
        *const u32,
        sys::CUtensorMapInterleave,
        sys::CUtensorMapSwizzle,
        sys::CUtensorMapL2promotion,
        sys::CUtensorMapFloatOOBfill,
    ) -> sys::CUresult;

    unsafe extern "C" {
        /// kernels/cutlass/gemm_host.cu: 0 when `params` and `launch` are written for
        /// kernel `kind`; 1 shape refused, 2 no room, 3 a tensor map refused
        /// (`encode_error`), 4 a workspace needed, 5 no such kind.
        #[allow(clippy::too_many_arguments)]
        fn hopscore_gemm_params(
            kind: c_int,
            f16: c_int,
            operands: *const Operands,
            encode: EncodeTiled,
            params: *mut c_void,
            capacity: usize,
            launch: *mut Launch,
            encode_error: *mut c_int,
        ) -> c_int;
    }

    /// The driver's `cuTensorMapEncodeTiled`, as the loaded driver library has it.
    unsafe extern "C" fn encode_tiled(
        map: *mut sys::CUtensorMap,
        dtype: sys::CUtensorMapDataType,
        rank: u32,
        base: *mut c_void,
        dims: *const u64,
        strides: *const u64,
        boxes: *const u32,
        element_strides: *const u32,
        interleave: sys::CUtensorMapInterleave,
        swizzle: sys::CUtensorMapSwizzle,
        promotion: sys::CUtensorMapL2promotion,
        fill: sys::CUtensorMapFloatOOBfill,
    ) -> sys::CUresult {
        // SAFETY: CUTLASS passes the driver's documented arguments.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                map,
                dtype,
                rank,
                base,
                dims,
                strides,
                boxes,
                element_strides,
                interleave,
                swizzle,
                promotion,
                fill,
            )
        }
    }

    /// What a launch of `kind` needs, made before anything is queued: the output, the
    /// kernel (opted in to its shared memory), the operands and CUTLASS's Params with
    /// the launch shape (the persistent grid bounded by the clusters that fit).
    struct Setup {
        y: CudaTensor,
        f: cudarc::driver::CudaFunction,
        operands: Operands,
        params: Params,
        shape: Launch,
    }

    impl Setup {
        fn config(&self) -> LaunchConfig {
            LaunchConfig {
                grid_dim: (self.shape.grid[0], self.shape.grid[1], self.shape.grid[2]),
                block_dim: (
                    self.shape.block[0],
                    self.shape.block[1],
                    self.shape.block[2],
                ),
                shared_mem_bytes: self.shape.smem,
            }
        }
    }

    /// Runs `kind` on `x · wᵀ` (`bias`: the GEMM's; `norm`: the norm kernels'
    /// residual and LayerNorm) into a new `[rows, width]` tensor, or `None` where
    /// CUTLASS refuses the shape, or where the setup fails (a tensor map or the shared
    /// memory refused, no cluster that fits): then one warning, and the unfused path
    /// for the rest of the run ([`CudaBackend::fused_setup_failed`]).
    pub(super) fn launch(
        be: &CudaBackend,
        kind: Kind,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        norm: Option<&AddNorm<'_, CudaTensor>>,
        width: usize,
    ) -> OpResult<Option<CudaTensor>> {
        let op = kind.name();
        let mut s = match setup(be, kind, x, w, bias, norm, width) {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(None),
            Err(e) => {
                be.fused_setup_failed(op, &e);
                return Ok(None);
            }
        };
        let cfg = s.config();
        let cluster = kind.cluster();
        if cluster == (1, 1, 1) {
            let mut b = be.dev.stream.launch_builder(&s.f);
            b.arg(&s.operands);
            b.arg(&s.params);
            // SAFETY: the kernel's parameters are (operands, CUTLASS Params), as built
            // above for live buffers of the checked shapes.
            unsafe { be.timed_launch(op, b, cfg) }?;
            return Ok(Some(s.y));
        }
        let mut args = [
            (&mut s.operands as *mut Operands).cast(),
            (&mut s.params as *mut Params).cast(),
        ];
        // SAFETY: the kernel's parameters are (operands, CUTLASS Params), as built above
        // for live buffers of the checked shapes; both outlive the call.
        unsafe { be.timed_cluster_launch(op, &s.f, cfg, cluster, &mut args) }?;
        Ok(Some(s.y))
    }

    /// [`Setup`] of `kind` for the call, `None` where CUTLASS refuses the shape.
    fn setup(
        be: &CudaBackend,
        kind: Kind,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        norm: Option<&AddNorm<'_, CudaTensor>>,
        width: usize,
    ) -> OpResult<Option<Setup>> {
        let op = kind.name();
        let (rows, k) = x.dims();
        let dims = |v: usize| {
            i32::try_from(v)
                .map_err(|_| device_err(op, format!("{v} rows or columns overflow CUTLASS's int")))
        };
        let y = be.tensor(rows, width)?;
        let mut operands = Operands {
            a: x.ptr(),
            b: w.ptr(),
            bias: bias.map_or(0, CudaTensor::ptr),
            d: y.ptr(),
            m: dims(rows)?,
            n: dims(w.dims().0)?,
            k: dims(k)?,
            sm_count: be.dev.multiprocessors(op)?,
            ..Operands::default()
        };
        if let Some(norm) = norm {
            operands.residual = norm.residual.ptr();
            operands.gamma = norm.weight.ptr();
            operands.beta = norm.bias.ptr();
            operands.eps = norm.eps;
        }
        // A clustered kernel's persistent grid is as many clusters as run at once: the
        // driver's figure, asked on the first call (which then builds twice).
        let cluster = kind.cluster();
        let clustered = cluster != (1, 1, 1);
        if let Some(n) = be.dev.known_active_clusters(op).filter(|_| clustered) {
            operands.bound_grid(n, cluster);
        }
        let Some((params, shape)) = build(be, kind, &operands)? else {
            return Ok(None);
        };
        if shape.cluster != [cluster.0, cluster.1, cluster.2] {
            return Err(device_err(
                op,
                format!(
                    "the kernel's cluster is {:?}, the launcher's {cluster:?}",
                    shape.cluster
                ),
            ));
        }
        let f = be.dev.typed_smem(op, op, be.dev.dtype, shape.smem)?;
        let mut s = Setup {
            y,
            f,
            operands,
            params,
            shape,
        };
        if clustered && s.operands.max_active_clusters == 0 {
            let n = be.dev.max_active_clusters(op, &s.f, s.config(), cluster)?;
            s.operands.bound_grid(n, cluster);
            (s.params, s.shape) = build(be, kind, &s.operands)?
                .ok_or_else(|| device_err(op, "CUTLASS refused a shape it had taken"))?;
        }
        Ok(Some(s))
    }

    /// CUTLASS's Params and launch shape for `kind` on `operands`, or `None` where
    /// CUTLASS refuses the shape (the unfused path takes it).
    fn build(
        be: &CudaBackend,
        kind: Kind,
        operands: &Operands,
    ) -> OpResult<Option<(Params, Launch)>> {
        let op = kind.name();
        let mut params = Params([0; PARAMS_CAPACITY]);
        let mut shape = Launch::default();
        let mut encode_error: c_int = 0;
        // SAFETY: the operands point at live device buffers of the checked shapes;
        // `params` has `PARAMS_CAPACITY` bytes; the builder writes only within them.
        let code = unsafe {
            hopscore_gemm_params(
                kind as c_int,
                c_int::from(be.dev.dtype == DType::F16),
                operands,
                encode_tiled,
                params.0.as_mut_ptr().cast(),
                PARAMS_CAPACITY,
                &mut shape,
                &mut encode_error,
            )
        };
        match code {
            0 => Ok(Some((params, shape))),
            1 => Ok(None),
            3 => Err(device_err(
                op,
                format!(
                    "cuTensorMapEncodeTiled refused a map of {operands:?}: error {encode_error}"
                ),
            )),
            _ => Err(device_err(
                op,
                format!("CUTLASS's Params builder returned {code} for {operands:?}"),
            )),
        }
    }
}

#[cfg(all(test, hopscore_cutlass))]
mod tests {
    unsafe extern "C" {
        /// kernels/cutlass/gemm_host.cu: violations of the gated epilogue's pairing.
        fn hopscore_gemm_gated_layout_errors() -> std::ffi::c_int;
        /// kernels/cutlass/gemm_host.cu: violations of the norm epilogue's row walk.
        fn hopscore_gemm_norm_layout_errors() -> std::ffi::c_int;
    }

    /// The norm kernels' epilogue reads each thread's accumulators as 4 rows of 32
    /// values and sums a row over a quad of lanes; checked against CUTLASS's
    /// partitioning (one row per (thread, row index), one quad per row, the tile
    /// covered once).
    #[test]
    fn norm_epilogue_walks_whole_rows_by_quads() {
        // SAFETY: a host function of no arguments.
        assert_eq!(unsafe { hopscore_gemm_norm_layout_errors() }, 0);
    }

    /// The gated kernels' epilogue pairs accumulators by wgmma's layout; its device
    /// code runs only on a GPU, so the pairing is checked here against CUTLASS's own
    /// partitioning of the tile (every gate 64 columns left of its up, in the same row;
    /// the tile covered once).
    #[test]
    fn gated_epilogue_pairs_each_gate_with_its_up() {
        // SAFETY: a host function of no arguments.
        assert_eq!(unsafe { hopscore_gemm_gated_layout_errors() }, 0);
    }
}

#[cfg(not(hopscore_cutlass))]
mod imp {
    use super::super::{CudaBackend, CudaTensor};
    use super::Kind;
    use crate::backend::{AddNorm, OpResult};

    /// Built without CUTLASS: always the unfused path.
    pub(super) fn launch(
        _: &CudaBackend,
        _: Kind,
        _: &CudaTensor,
        _: &CudaTensor,
        _: Option<&CudaTensor>,
        _: Option<&AddNorm<'_, CudaTensor>>,
        _: usize,
    ) -> OpResult<Option<CudaTensor>> {
        Ok(None)
    }
}
