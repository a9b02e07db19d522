//! Launchers of `kernels/tensor_core_check.cu`, `kernels/wgmma_check.cu` and
//! `kernels/tma_check.cu`: a small matrix product through the tensor-core wrappers of
//! `kernels/common.cuh` (`cp_async_16`, `ldmatrix_*`, `mma_16816`; on compute capability
//! 9.0 the wgmma ones, and TMA, mbarrier and setmaxnreg),
//! so that the parity table can hold each wrapper to a plain product on the emulator
//! and on a GPU alike.

use cudarc::driver::LaunchConfig;

use super::params::{TensorCoreCheckParams, TmaCheckParams};
use super::tensor_map::{tensor_map_2d, Swizzle};
use super::{CudaBackend, CudaTensor, DType};
use crate::backend::check::Dims;
use crate::backend::kernels::geometry;
use crate::backend::{OpError, OpResult};

const OP: &str = "tensor_core_check";
/// Largest m, n and k of the kernel's shared-memory tiles (`kMax`).
const MAX: usize = 64;

/// Which wrappers the product goes through (the kernel's mode bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorCorePath {
    /// Stage the operands with `cp_async_16` in two commit groups (else plain copies).
    pub cp_async: bool,
    /// Fragments by `ldmatrix` (else each lane reads its own elements).
    pub ldmatrix: bool,
    /// `b` is `[k, n]`, fragments by `.trans` (else `[n, k]`, C = A·Bᵀ).
    pub b_kn: bool,
    /// B fragments of two column blocks per `ldmatrix_x4` / `_x4_trans`.
    pub x4: bool,
}

impl TensorCorePath {
    fn bits(self) -> u32 {
        u32::from(self.cp_async)
            | u32::from(self.ldmatrix) << 1
            | u32::from(self.b_kn) << 2
            | u32::from(self.x4) << 3
    }
}

/// `(n, k)` of operand `b`: `[k, n]` when `kn`, else `[n, k]`.
fn width_and_depth(b: &CudaTensor, kn: bool) -> (usize, usize) {
    let (r, c) = b.dims();
    if kn {
        (c, r)
    } else {
        (r, c)
    }
}

impl CudaBackend {
    /// The wgmma and TMA checks' device: bf16 or f16 on compute capability 9.0.
    fn require_hopper_16_bit(&self, op: &'static str) -> OpResult<()> {
        if !self.is_hopper_16_bit()? {
            let cc = self.dev.ctx.compute_capability().unwrap_or((0, 0));
            return Err(OpError::Shape {
                op,
                msg: format!(
                    "wgmma and TMA take bf16 or f16 on compute capability 9.0 (this: {:?} on {}.{})",
                    self.dev.dtype, cc.0, cc.1
                ),
            });
        }
        Ok(())
    }

    /// `a · bᵀ` (or `a · b` with `path.b_kn`) as f32 `[m, n]`, computed by the
    /// tensor-core check kernel on 16-bit copies of `a` and `b` (bf16 or f16 devices).
    /// m ≤ 64, k a multiple of 8 up to 64, n a multiple of 16 up to 64.
    pub fn tensor_core_check(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        path: TensorCorePath,
    ) -> OpResult<Vec<f32>> {
        let shape_err = |msg: String| OpError::Shape { op: OP, msg };
        if self.dev.dtype == DType::F32 {
            return Err(shape_err("tensor cores take bf16 or f16 operands".into()));
        }
        let (m, k) = a.dims();
        let (n, kb) = width_and_depth(b, path.b_kn);
        if kb != k
            || m == 0
            || m > MAX
            || k == 0
            || k > MAX
            || k % 8 != 0
            || n == 0
            || n > MAX
            || n % 16 != 0
        {
            return Err(shape_err(format!(
                "a [{m}, {k}] and b with k = {kb}, n = {n}: m ≤ {MAX}, k a multiple of 8 and n of 16 up to {MAX}"
            )));
        }
        self.run_check(OP, [a, b], [m, n, k], path.bits(), 0)
    }

    /// One block of kernel `op` on `a` and `b` with `[m, n, k]` and `mode`; C as f32.
    fn run_check(
        &self,
        op: &'static str,
        [a, b]: [&CudaTensor; 2],
        [m, n, k]: [usize; 3],
        mode: u32,
        smem: u32,
    ) -> OpResult<Vec<f32>> {
        let c = self.dev.pool.alloc(m * n * 4)?;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (geometry::TENSOR_CORE_CHECK_THREADS, 1, 1),
            shared_mem_bytes: smem,
        };
        let params = TensorCoreCheckParams {
            c: c.ptr(),
            a: a.ptr(),
            b: b.ptr(),
            m: m as u32,
            n: n as u32,
            k: k as u32,
            mode,
        };
        self.launch_params(op, op, cfg, &params)?;
        let bytes = self.dev.download_bytes(op, c.ptr(), m * n * 4)?;
        Ok(DType::F32.decode(&bytes))
    }
}

impl CudaBackend {
    /// `a · bᵀ` with `b` `[n, k]` (A and B K-major in shared memory: `wgmma_ss`) or, with
    /// `a_in_registers`, `a · b` with `b` `[k, n]` (A fragments in registers, B MN-major:
    /// `wgmma_rs`), as f32 `[64, n]`, by the wgmma check kernel (compute capability 9.0).
    /// a is `[64, k]`, k a multiple of 16 up to 64, n 64 or 128.
    pub fn wgmma_check(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        a_in_registers: bool,
    ) -> OpResult<Vec<f32>> {
        const OP: &str = "wgmma_check";
        let shape_err = |msg: String| OpError::Shape { op: OP, msg };
        self.require_hopper_16_bit(OP)?;
        let (m, k) = a.dims();
        let (n, kb) = width_and_depth(b, a_in_registers);
        if m != 64 || kb != k || k == 0 || k > MAX || k % 16 != 0 || !(n == 64 || n == 128) {
            return Err(shape_err(format!(
                "a [{m}, {k}] and b with k = {kb}, n = {n}: m = 64, k a multiple of 16 up to {MAX}, n 64 or 128"
            )));
        }
        let mode = u32::from(a_in_registers);
        self.run_check(OP, [a, b], [m, n, k], mode, geometry::WGMMA_CHECK_SMEM)
    }
}

/// Which wgmma forms `tma_check` multiplies its TMA-loaded tiles with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmaPath {
    /// `b` is `[k, n]` (MN-major tiles, C = A·B), else `[n, k]` (K-major, C = A·Bᵀ).
    pub b_mn_major: bool,
    /// A fragments from registers (`wgmma_rs`; B alone by TMA), else A by TMA (`wgmma_ss`).
    pub a_in_registers: bool,
}

impl CudaBackend {
    /// `a · bᵀ` (or `a · b` with `path.b_mn_major`) as f32 `[128, n]`, computed by the
    /// TMA check kernel (compute capability 9.0): a producer warpgroup loads K tiles of
    /// 64 by TMA with the 128-byte swizzle through a 2-stage mbarrier ring, two consumer
    /// warpgroups multiply them with wgmma. `a` is `[a_rows, k]`, a_rows ≤ 128 (the rows
    /// past it read as zero), k a multiple of 64 up to 256, n 64 or 128.
    pub fn tma_check(&self, a: &CudaTensor, b: &CudaTensor, path: TmaPath) -> OpResult<Vec<f32>> {
        const OP: &str = "tma_check";
        const ROWS: usize = 128;
        let shape_err = |msg: String| OpError::Shape { op: OP, msg };
        self.require_hopper_16_bit(OP)?;
        let dtype = self.dev.dtype;
        let (a_rows, k) = a.dims();
        let (n, kb) = width_and_depth(b, path.b_mn_major);
        if a_rows == 0
            || a_rows > ROWS
            || kb != k
            || k == 0
            || k > 256
            || k % 64 != 0
            || !(n == 64 || n == 128)
        {
            return Err(shape_err(format!(
                "a [{a_rows}, {k}] and b with k = {kb}, n = {n}: a_rows ≤ {ROWS}, k a multiple of 64 up to 256, n 64 or 128"
            )));
        }
        let a_map = tensor_map_2d(
            OP,
            a.ptr(),
            dtype,
            [a_rows, k],
            [ROWS as u32, 64],
            Swizzle::B128,
        )?;
        let b_map = if path.b_mn_major {
            tensor_map_2d(OP, b.ptr(), dtype, [k, n], [64, 64], Swizzle::B128)?
        } else {
            tensor_map_2d(OP, b.ptr(), dtype, [n, k], [n as u32, 64], Swizzle::B128)?
        };
        let c = self.dev.pool.alloc(ROWS * n * 4)?;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (geometry::TMA_CHECK_THREADS, 1, 1),
            shared_mem_bytes: geometry::TMA_CHECK_SMEM,
        };
        let params = TmaCheckParams {
            a_map,
            b_map,
            c: c.ptr(),
            a: a.ptr(),
            a_rows: a_rows as u32,
            n: n as u32,
            k: k as u32,
            mode: u32::from(path.b_mn_major) | u32::from(path.a_in_registers) << 1,
            pad: [0; 8],
        };
        self.launch_params(OP, OP, cfg, &params)?;
        let bytes = self.dev.download_bytes(OP, c.ptr(), ROWS * n * 4)?;
        Ok(DType::F32.decode(&bytes))
    }
}
