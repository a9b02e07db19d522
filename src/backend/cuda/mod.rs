//! CUDA backend (feature `cuda`): driver detection without panicking. The kernels
//! and the `Backend` implementation arrive with the CUDA backend issue; until then
//! this module only reports whether a usable driver and device are present.

use anyhow::{bail, Result};

/// Name and count of the CUDA devices, or a clear error when none can be used.
pub fn probe() -> Result<(usize, String)> {
    // SAFETY: `is_culib_present` only tries to dlopen libcuda; it does not call into it.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        bail!("no CUDA driver (libcuda.so) found: install the NVIDIA driver or use --device cpu");
    }
    let count = cudarc::driver::CudaContext::device_count()
        .map_err(|e| anyhow::anyhow!("CUDA driver error: {e}"))?;
    if count < 1 {
        bail!("the CUDA driver reports no device: use --device cpu");
    }
    let ctx = cudarc::driver::CudaContext::new(0)
        .map_err(|e| anyhow::anyhow!("cannot create a CUDA context on device 0: {e}"))?;
    let name = ctx.name().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((count as usize, name))
}
