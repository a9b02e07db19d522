//! GEMMs whose epilogue cuBLASLt lacks, built on CUTLASS (`kernels/cutlass/`):
//! `gemm_bias_gelu`, `y = gelu_erf(x · wᵀ + bias)` in one kernel on compute capability
//! 9.0 (cuBLASLt's GELU epilogue is the tanh form; DeBERTa's and BERT's is erf).
//!
//! The host code CUTLASS needs (argument checks, TMA descriptors, the persistent grid)
//! runs in `kernels/cutlass/gemm_bias_gelu_host.cu`, linked into this crate; it builds
//! the kernel's Params through this backend's driver, and the kernel is launched here
//! like any other, with the call's operands as its first parameter (what the CPU
//! emulator's stand-in computes from). Built only where build.rs found CUTLASS
//! (`cfg(hopscore_cutlass)`); elsewhere, and for shapes it does not take, the callers
//! run the cuBLASLt GEMM and the GELU pass.

use std::sync::atomic::{AtomicBool, Ordering};

use super::CudaBackend;
use crate::backend::check::Dims;
use crate::backend::cuda::CudaTensor;
use crate::backend::OpResult;

/// `HOPSCORE_FUSED_GELU=off` runs the cuBLASLt GEMM and the GELU pass instead (to
/// compare; on by default).
pub const FUSED_GELU_ENV: &str = "HOPSCORE_FUSED_GELU";

/// Whether the fused erf-GELU GEMM may run: on unless [`FUSED_GELU_ENV`] says `off`.
#[derive(Debug)]
pub struct FusedGelu(AtomicBool);

impl FusedGelu {
    /// From [`FUSED_GELU_ENV`] (`on`, `off`; unset: on).
    pub fn from_env() -> anyhow::Result<Self> {
        let on = match std::env::var(FUSED_GELU_ENV).as_deref() {
            Err(_) | Ok("on") => true,
            Ok("off") => false,
            Ok(other) => anyhow::bail!("{FUSED_GELU_ENV}={other}: expected on or off"),
        };
        Ok(Self(AtomicBool::new(on)))
    }

    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
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
    let (rows, k) = x.dims();
    let width = w.dims().0;
    let Some(bias) = bias else { return Ok(None) };
    if !be.fused_gelu.get()
        || rows == 0
        || !k.is_multiple_of(8)
        || !width.is_multiple_of(8)
        || [x.ptr(), w.ptr(), bias.ptr()]
            .iter()
            .any(|p| !p.is_multiple_of(16))
        || !be.is_hopper_16_bit()?
    {
        return Ok(None);
    }
    imp::launch(be, x, w, bias, width)
}

#[cfg(hopscore_cutlass)]
mod imp {
    use std::ffi::{c_int, c_void};

    use cudarc::driver::sys;
    use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};

    use super::super::memory::device_err;
    use super::super::{CudaBackend, CudaTensor, DType};
    use crate::backend::check::Dims;
    use crate::backend::OpResult;

    const OP: &str = "gemm_bias_gelu";

    /// Mirror of `HopscoreGemmOperands` (kernels/cutlass/operands.h).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    struct Operands {
        a: u64,
        b: u64,
        bias: u64,
        d: u64,
        m: i32,
        n: i32,
        k: i32,
        sm_count: i32,
    }
    // SAFETY: plain old data with the C header's layout.
    unsafe impl DeviceRepr for Operands {}

    /// Mirror of `HopscoreGemmLaunch` (kernels/cutlass/operands.h).
    #[repr(C)]
    #[derive(Default)]
    struct Launch {
        grid: [u32; 3],
        block: [u32; 3],
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
        /// kernels/cutlass/gemm_bias_gelu_host.cu: 0 when `params` and `launch` are
        /// written; 1 shape refused, 2 no room, 3 a tensor map refused
        /// (`encode_error`), 4 a workspace needed.
        fn hopscore_gemm_bias_gelu_params(
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

    pub(super) fn launch(
        be: &CudaBackend,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: &CudaTensor,
        width: usize,
    ) -> OpResult<Option<CudaTensor>> {
        crate::backend::check::linear(x, w, Some(bias))?;
        let (rows, k) = x.dims();
        let dims = |v: usize| {
            i32::try_from(v)
                .map_err(|_| device_err(OP, format!("{v} rows or columns overflow CUTLASS's int")))
        };
        let y = be.tensor(rows, width)?;
        let sm_count = be.dev.multiprocessors(OP)?;
        let operands = Operands {
            a: x.ptr(),
            b: w.ptr(),
            bias: bias.ptr(),
            d: y.ptr(),
            m: dims(rows)?,
            n: dims(width)?,
            k: dims(k)?,
            sm_count,
        };
        let mut params = Params([0; PARAMS_CAPACITY]);
        let mut shape = Launch::default();
        let mut encode_error: c_int = 0;
        // SAFETY: the operands point at live device buffers of the checked shapes;
        // `params` has `PARAMS_CAPACITY` bytes; the builder writes only within them.
        let code = unsafe {
            hopscore_gemm_bias_gelu_params(
                c_int::from(be.dev.dtype == DType::F16),
                &operands,
                encode_tiled,
                params.0.as_mut_ptr().cast(),
                PARAMS_CAPACITY,
                &mut shape,
                &mut encode_error,
            )
        };
        match code {
            0 => {}
            // CUTLASS refused the shape: the unfused path takes it.
            1 => return Ok(None),
            3 => {
                return Err(device_err(
                    OP,
                    format!("cuTensorMapEncodeTiled refused a map of {operands:?}: error {encode_error}"),
                ));
            }
            _ => {
                return Err(device_err(
                    OP,
                    format!("CUTLASS's Params builder returned {code} for {operands:?}"),
                ))
            }
        }
        let cfg = LaunchConfig {
            grid_dim: (shape.grid[0], shape.grid[1], shape.grid[2]),
            block_dim: (shape.block[0], shape.block[1], shape.block[2]),
            shared_mem_bytes: shape.smem,
        };
        let f = be.dev.typed_smem(OP, OP, be.dev.dtype, shape.smem)?;
        let mut b = be.dev.stream.launch_builder(&f);
        b.arg(&operands);
        b.arg(&params);
        // SAFETY: the kernel's parameters are (operands, CUTLASS Params), as built above
        // for live buffers of the checked shapes.
        unsafe { be.timed_launch(OP, b, cfg) }?;
        Ok(Some(y))
    }
}

#[cfg(not(hopscore_cutlass))]
mod imp {
    use super::super::{CudaBackend, CudaTensor};
    use crate::backend::OpResult;

    /// Built without CUTLASS: always the unfused path.
    pub(super) fn launch(
        _: &CudaBackend,
        _: &CudaTensor,
        _: &CudaTensor,
        _: &CudaTensor,
        _: usize,
    ) -> OpResult<Option<CudaTensor>> {
        Ok(None)
    }
}
