//! Loading one kernel module (a fatbin built by build.rs) into a context, without JIT
//! where the fatbin holds SASS for the device, and the error when the driver refuses
//! it: the driver version, the device's compute capability, what the fatbin holds and
//! what to do.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::Ptx;

use crate::backend::{fatbin, kernels};

/// Loads module `name` from its fatbin `image`; the error says why it may not load.
pub fn load(ctx: &Arc<CudaContext>, name: &str, image: &[u8]) -> Result<Arc<CudaModule>, String> {
    ctx.load_module(Ptx::from_binary(image.to_vec()))
        .map_err(|e| {
            let cc = ctx.compute_capability().ok();
            load_error(name, &e.to_string(), driver_version(), cc, image)
        })
}

/// `cuDriverGetVersion` (1000·major + 10·minor), if the driver answers.
pub fn driver_version() -> Option<i32> {
    let mut v = 0;
    // SAFETY: writes one int; the driver library was loaded when the context was made.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some(v)
}

/// The message for module `name` that failed to load with `cause`.
pub fn load_error(
    name: &str,
    cause: &str,
    driver: Option<i32>,
    cc: Option<(i32, i32)>,
    image: &[u8],
) -> String {
    let (holds, min_arch) = match fatbin::images(image) {
        Ok(images) => (
            fatbin::describe(&images),
            images.iter().map(|i| i.arch).min(),
        ),
        Err(e) => (format!("an unreadable image ({e})"), None),
    };
    let driver_text = driver.map_or("unknown (cuDriverGetVersion failed)".to_string(), |v| {
        format!(
            "CUDA {}.{} (cuDriverGetVersion {v})",
            v / 1000,
            v % 1000 / 10
        )
    });
    let cc_text = cc.map_or("unknown".to_string(), |(ma, mi)| format!("{ma}.{mi}"));
    let release = kernels::NVCC_RELEASE;
    let advice = match (cc, min_arch, driver, release_version(release)) {
        (Some((ma, mi)), Some(min), _, _) if (ma * 10 + mi) < min as i32 => format!(
            "This GPU is older than the kernels' minimum compute capability {}.{}: use --device cpu",
            min / 10,
            min % 10
        ),
        (_, _, Some(v), Some(need)) if v < need => format!(
            "Update the NVIDIA driver to one that supports CUDA {release} or newer, or use \
             --device cpu"
        ),
        _ => "No image in the fatbin suits this device and driver: rebuild hopscore with an \
              nvcc that knows this GPU (add its sm_XY to SASS_ARCHS in build.rs), or use \
              --device cpu"
            .to_string(),
    };
    format!(
        "cannot load the `{name}` kernels ({cause}): the fatbin holds {holds}, built by nvcc \
         {release}; the driver is {driver_text}, the device has compute capability {cc_text}. \
         {advice}"
    )
}

/// "13.0" → 13000, as `cuDriverGetVersion` counts.
fn release_version(release: &str) -> Option<i32> {
    let (ma, mi) = release.split_once('.')?;
    Some(ma.parse::<i32>().ok()? * 1000 + mi.parse::<i32>().ok()? * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fatbin of one module built into this binary (None without nvcc, which
    /// `HOPSCORE_REQUIRE_NVCC=1` at build time forbids).
    fn some_fatbin() -> Option<&'static [u8]> {
        let first = kernels::MODULES.first().map(|(_, f)| *f);
        assert!(
            first.is_some() || option_env!("HOPSCORE_REQUIRE_NVCC") != Some("1"),
            "built without kernels under HOPSCORE_REQUIRE_NVCC=1"
        );
        first
    }

    #[test]
    fn names_driver_arch_contents_and_what_to_do() {
        let Some(image) = some_fatbin() else { return };
        let need = release_version(kernels::NVCC_RELEASE).unwrap();
        let cause = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
        let old_driver = load_error("rope", cause, Some(need - 1000), Some((10, 0)), image);
        for part in [
            "cannot load the `rope` kernels (CUDA_ERROR_UNSUPPORTED_PTX_VERSION)",
            "sm_80 SASS, sm_90 SASS",
            "compute_80 PTX (ISA ",
            &format!("cuDriverGetVersion {}", need - 1000),
            "compute capability 10.0",
            &format!(
                "Update the NVIDIA driver to one that supports CUDA {}",
                kernels::NVCC_RELEASE
            ),
        ] {
            assert!(old_driver.contains(part), "`{part}` missing: {old_driver}");
        }
        let old_gpu = load_error("rope", "NO_BINARY_FOR_GPU", Some(need), Some((7, 5)), image);
        assert!(
            old_gpu.contains("compute capability 7.5")
                && old_gpu.contains(
                    "This GPU is older than the kernels' minimum compute capability 8.0: use --device cpu"
                ),
            "{old_gpu}"
        );
        let other = load_error(
            "rope",
            "NO_BINARY_FOR_GPU",
            Some(need),
            Some((12, 0)),
            image,
        );
        assert!(other.contains("add its sm_XY to SASS_ARCHS"), "{other}");
    }

    #[test]
    fn says_what_it_does_not_know() {
        let msg = load_error("rope", "x", None, None, b"junk");
        assert!(msg.contains("an unreadable image (not a fatbin"), "{msg}");
        assert!(
            msg.contains("the driver is unknown (cuDriverGetVersion failed)"),
            "{msg}"
        );
        assert!(msg.contains("compute capability unknown"), "{msg}");
        assert_eq!(release_version("13.0"), Some(13000));
        assert_eq!(release_version("12.4"), Some(12040));
    }
}
