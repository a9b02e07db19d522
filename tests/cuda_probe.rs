//! The CUDA driver probe (feature `cuda`): on a machine without a driver or device it
//! must return a clear error, never panic; with a GPU it opens and names device 0.

#![cfg(feature = "cuda")]

#[test]
fn probe_reports_device_or_clear_error() {
    match hopscore::backend::cuda::CudaBackend::new(0, hopscore::backend::cuda::DType::F32) {
        Ok(be) => {
            use hopscore::backend::Backend;
            let name = be.name();
            assert!(name.starts_with("cuda:0 ("), "{name}");
            eprintln!("CUDA device: {name}");
        }
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("no GPU: skipped GPU checks ({msg})");
            assert!(
                std::env::var("HOPSCORE_REQUIRE_GPU").map_or(true, |v| v != "1"),
                "HOPSCORE_REQUIRE_GPU=1 but no device: {msg}"
            );
            assert!(
                msg.contains("--device cpu"),
                "error must say what to do: {msg}"
            );
        }
    }
}

#[test]
fn kernels_are_embedded_when_built_with_nvcc() {
    if std::env::var("HOPSCORE_REQUIRE_NVCC").is_ok_and(|v| v == "1") {
        let ptx = hopscore::backend::kernels::ptx("gelu").expect("gelu PTX embedded");
        assert!(ptx.contains(".entry gelu_f32") && ptx.contains(".entry gelu_bf16"));
    } else {
        eprintln!("built without HOPSCORE_REQUIRE_NVCC=1: kernel embedding not checked");
    }
}
