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

/// Whether module `name` is built for sm_90a alone: its file (in kernels/ or
/// kernels/cutlass/) names it on a `// hopscore-sass: sm_90a` line (wgmma, TMA), as
/// build.rs reads it.
fn hopper_only(name: &str) -> bool {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels");
    let path = [
        format!("{dir}/{name}.cu"),
        format!("{dir}/cutlass/{name}.cu"),
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .unwrap_or_else(|| panic!("no source for module {name} in {dir} or {dir}/cutlass"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().any(|l| l.trim() == "// hopscore-sass: sm_90a")
}

/// Every module is a fatbin with sm_80 and sm_90 SASS (loaded without JIT on Ampere
/// and Hopper), or, for the wgmma kernels (the files with a `// hopscore-sass: sm_90a`
/// line), sm_90a SASS alone, and uncompressed compute_80 PTX (newer GPUs; the emulator
/// reads its entries), and the entry list is that PTX's.
#[test]
fn every_module_is_a_fatbin_with_sass_and_ptx() {
    use hopscore::backend::{fatbin, kernels};
    if std::env::var("HOPSCORE_REQUIRE_NVCC").is_ok_and(|v| v == "1") {
        assert!(
            kernels::MODULES.len() >= 12,
            "{} modules",
            kernels::MODULES.len()
        );
    }
    let mut entries = 0;
    for (name, image) in kernels::MODULES {
        let images = fatbin::images(image).unwrap_or_else(|e| panic!("{name}: {e}"));
        let listed = fatbin::describe(&images);
        let hopper_only = hopper_only(name);
        let want: &[&str] = if hopper_only {
            &["sm_90a SASS"]
        } else {
            &["sm_80 SASS", "sm_90 SASS"]
        };
        for w in want.iter().chain(&["compute_80 PTX"]) {
            assert!(listed.contains(w), "{name}: no {w} in {listed}");
        }
        assert_eq!(
            hopper_only,
            listed.contains("sm_90a"),
            "{name}: {listed} (sm_90a only where the file's `hopscore-sass` line says so)"
        );
        for sass in images.iter().filter(|i| i.kind == fatbin::Kind::Sass) {
            assert_eq!(
                &sass.payload[..4],
                b"\x7fELF",
                "{name}: sm_{} is not a cubin",
                sass.arch
            );
        }
        let ptx = images
            .iter()
            .find_map(|i| i.ptx_text())
            .unwrap_or_else(|| panic!("{name}: no uncompressed PTX"));
        assert!(ptx.contains(".target sm_80"), "{name}");
        let listed: Vec<&str> = kernels::KERNEL_ENTRIES
            .iter()
            .filter(|(_, m)| m == name)
            .map(|(e, _)| *e)
            .collect();
        assert_eq!(fatbin::ptx_entries(ptx), listed, "{name}");
        entries += listed.len();
    }
    assert_eq!(entries, kernels::KERNEL_ENTRIES.len());
    if let Some(gelu) = kernels::fatbin("gelu") {
        let listed = |e| kernels::module_of(e) == Some("gelu");
        assert!(listed("gelu_f32") && listed("gelu_bf16"));
        assert!(!gelu.is_empty());
    }
}

/// The device and driver a child process emulates (`HOPSCORE_CUDA_EMU_CC` and
/// `_DRIVER` are read once per process), the image the emulator must pick (its trace
/// line), or the parts of the load error.
const LOAD_CASES: &[(&str, &str, &[&str])] = &[
    ("8.6", "13000", &["from sm_80 SASS"]),
    ("9.0", "13000", &["from sm_90 SASS"]),
    ("10.0", "13000", &["from compute_80 PTX (JIT)"]),
    (
        "7.5",
        "13000",
        &[
            "cannot load the `gelu` kernels",
            "CUDA_ERROR_NO_BINARY_FOR_GPU",
            "sm_80 SASS, sm_90 SASS, compute_80 PTX (ISA 9.0)",
            "(cuDriverGetVersion 13000)",
            "compute capability 7.5",
            "This GPU is older than the kernels' minimum compute capability 8.0: use --device cpu",
        ],
    ),
    (
        "10.0",
        "12080",
        &[
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            "the driver is CUDA 12.8 (cuDriverGetVersion 12080)",
            "compute capability 10.0",
            "Update the NVIDIA driver to one that supports CUDA 13.0 or newer",
        ],
    ),
];

/// Module loading on the emulator posing as other GPUs and drivers, each in a child
/// process running this test: SASS without JIT where the fatbin has it (sm_80 SASS on
/// 8.6), the PTX on a newer GPU, and otherwise an error that names the driver version,
/// the compute capability, the fatbin's contents and what to do.
#[test]
fn module_load_picks_sass_or_ptx_and_explains_refusals() {
    use hopscore::backend::cuda::{CudaBackend, DType};
    if let Ok(case) = std::env::var("HOPSCORE_LOAD_CASE") {
        let be = CudaBackend::new(0, DType::F32).expect("emulated device opens");
        match be.device().function("probe", "gelu_f32") {
            Ok(_) => println!("case {case}: loaded"),
            Err(e) => println!("case {case}: error: {e}"),
        }
        return;
    }
    let Ok(be) = CudaBackend::new(0, DType::F32) else {
        return; // probe_reports_device_or_clear_error covers the no-device case
    };
    if be.device().name() != "hopscore CPU emulator" {
        eprintln!(
            "a real GPU ({}): emulated devices not checked",
            be.device().name()
        );
        return;
    }
    for (i, (cc, driver, want)) in LOAD_CASES.iter().enumerate() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "module_load_picks_sass_or_ptx_and_explains_refusals",
                "--nocapture",
            ])
            .env("HOPSCORE_LOAD_CASE", i.to_string())
            .env("HOPSCORE_CUDA_EMU_CC", cc)
            .env("HOPSCORE_CUDA_EMU_DRIVER", driver)
            .env("HOPSCORE_CUDA_EMU_TRACE", "1")
            .output()
            .expect("run the child test");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "cc {cc}, driver {driver}: child failed:\n{text}"
        );
        let expect_load = want[0].starts_with("from ");
        assert_eq!(
            text.contains(&format!("case {i}: loaded")),
            expect_load,
            "cc {cc}, driver {driver}:\n{text}"
        );
        for part in *want {
            assert!(
                text.contains(part),
                "cc {cc}, driver {driver}: `{part}` missing:\n{text}"
            );
        }
        eprintln!("ok cc {cc}, driver {driver}: {}", want[0]);
    }
}
