//! `hopscore doctor`: the GPU self-test on demand. Every implementation a job's plan may
//! choose runs its case in a child process with a timeout; one line per case (`pass`,
//! `fail`, `hang`, `error`, with the error against the CPU twin), then what the job
//! would run per op and why. The verdicts are cached as the automatic self-test's
//! (jobs::selftest), so the next job on this card does not test again.

use anyhow::Result;
use clap::Args;

use crate::jobs::{DeviceConfig, DeviceKind};

#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub device: DeviceConfig,
    /// Seconds a case may run in its child before it counts as a hang.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// Prints every kernel entry this build ships, per SASS architecture, with the
    /// SHA-256 of its machine code and the cards it has passed parity on (the lines
    /// tools/gpu/run.sh turns into kernels/proven.tsv records); no GPU needed.
    #[arg(long)]
    pub kernels: bool,
    /// Runs one case (`op:implementation`) in this process and prints its verdict as a
    /// JSON line: what each child of the self-test does.
    #[arg(long, hide = true)]
    pub case: Option<String>,
}

/// Runs the doctor; the exit code is 1 when some op has no implementation that passed.
pub fn run(args: &DoctorArgs) -> Result<i32> {
    let device = &args.device;
    if args.kernels {
        print!("{}", kernel_list());
        return Ok(0);
    }
    if device.kind == DeviceKind::Cpu {
        println!(
            "the CPU backend is the reference the GPU kernels are tested against: nothing to \
             test (use --device cuda)"
        );
        println!("{}", crate::backend::provenance::summary_line());
        return Ok(0);
    }
    cuda(args)
}

/// `entry<TAB>arch<TAB>sass_sha256<TAB>cards` for every shipped entry (cards: `-` when
/// none).
fn kernel_list() -> String {
    use crate::backend::provenance;
    let mut out = String::from("# entry\tarch\tsass_sha256\tproven on\n");
    if crate::backend::kernels::KERNEL_SASS.is_empty() {
        out.push_str(
            "# this hopscore ships no CUDA kernels: it was built without nvcc (set NVCC to \
             nvcc 13.0, e.g. NVCC=$(bash tools/nvcc.sh), and rebuild; docs/cuda.md)\n",
        );
    }
    for &(entry, arch, sass) in crate::backend::kernels::KERNEL_SASS {
        let mut cards: Vec<&str> = provenance::proofs(entry, arch)
            .iter()
            .map(|r| r.card)
            .collect();
        cards.dedup();
        let cards = if cards.is_empty() {
            "-".to_string()
        } else {
            cards.join(", ")
        };
        out.push_str(&format!("{entry}\t{arch}\t{sass}\t{cards}\n"));
    }
    out
}

#[cfg(not(feature = "cuda"))]
fn cuda(_: &DoctorArgs) -> Result<i32> {
    anyhow::bail!(
        "this hopscore was built without CUDA support: rebuild with `cargo build --release \
         --features cuda`, or use --device cpu"
    )
}

#[cfg(feature = "cuda")]
fn cuda(args: &DoctorArgs) -> Result<i32> {
    use crate::backend::gpu_kernels::Plan;
    use crate::jobs::selftest;
    use std::time::Duration;
    let device = &args.device;
    if let Some(case) = &args.case {
        let (op, implementation) = Plan::parse_case(case).ok_or_else(|| {
            anyhow::anyhow!("--case {case:?}: not an op:implementation of the self-test")
        })?;
        let v = selftest::run_case_here(device.gpu, device.dtype, op, implementation);
        println!("{}", serde_json::to_string(&v)?);
        return Ok(0);
    }
    let (name, cc, driver) = crate::backend::cuda::device::identity(device.gpu)?;
    let driver = driver.map_or("unknown".into(), |v| {
        format!("{}.{}", v / 1000, v % 1000 / 10)
    });
    println!(
        "GPU {}: {name} (compute capability {}.{}, driver CUDA {driver}), {}",
        device.gpu,
        cc.0,
        cc.1,
        device.dtype.suffix()
    );
    let verdicts = selftest::run_cases(
        device.gpu,
        cc,
        device.dtype,
        Duration::from_secs(args.timeout),
        |v| {
            let outcome = v.summary();
            let word = outcome.split(' ').next().unwrap_or("");
            let rest = outcome[word.len()..].trim();
            let rest = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or(rest);
            println!("{word:<5}  {:<15} {:<8} {rest}", v.op, v.implementation);
        },
    )?;
    selftest::store(device.gpu, device.dtype, &verdicts)?;
    match Plan::new(&device.gpu_settings(), cc, device.dtype, &verdicts) {
        Ok(plan) => {
            println!("with these flags a job runs:");
            for c in &plan.choices {
                println!("  {:<15} {:<8} {}", c.op.name(), c.implementation, c.proof);
            }
            Ok(0)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(1)
        }
    }
}
