//! Where a job runs: the device, the element type and the CPU worker threads, and
//! the dispatch from that choice to a concrete backend type.

use crate::backend::cpu::CpuGemm;
use crate::backend::dtype::DType;
use crate::backend::gpu_kernels::{Attention, GpuSettings, KernelSet, Switch};

/// The backend a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// The CPU backend (rayon + gemm; f32, or bf16/int8 dense layers by `cpu_gemm`).
    Cpu,
    /// The CUDA backend (kernels/ + cuBLAS; needs a build with `--features cuda`).
    Cuda,
}

/// Device, element type and threads of a job: the flags `--device`, `--gpu`, `--dtype`,
/// `--cpu-gemm`, `--cuda-graphs`, `--batch-invariant` and the GPU kernel choices
/// (`--gpu-kernels`, `--attention`, `--fused-gelu`, `--fused-gate`, `--fused-norm`,
/// [`crate::backend::gpu_kernels`]) of every job that runs a model
/// (`--threads` is the command line's global flag), and the options of the same names
/// of [`JobConfig::from_options`](super::JobConfig::from_options) (Python's job classes
/// take all of them as keyword arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct DeviceConfig {
    /// Where the model runs.
    #[serde(rename = "device")]
    #[cfg_attr(feature = "cli", arg(long = "device", value_name = "DEVICE", value_enum,
        default_value_t = DeviceConfig::CPU.kind))]
    pub kind: DeviceKind,
    /// CUDA device ordinal (with `--device cuda`).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DeviceConfig::CPU.gpu))]
    pub gpu: usize,
    /// Element type of weights and activations on the GPU (accumulation is f32).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = DeviceConfig::CPU.dtype))]
    pub dtype: DType,
    /// Arithmetic of the dense layers on the CPU: f32 (the reference), bf16
    /// (AVX512-BF16) or int8 (dynamic per-row × per-channel, AVX512-VNNI). bf16 and int8
    /// are faster and change scores slightly (docs/parity.md); a CPU without the
    /// instructions runs f32 and says so.
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = DeviceConfig::CPU.cpu_gemm))]
    pub cpu_gemm: CpuGemm,
    /// CPU worker threads: a pool of its own for a job the library builds
    /// (`jobs::build`), the global pool's size on the command line; `None` uses the
    /// global pool as it is (all cores unless set before).
    #[cfg_attr(feature = "cli", arg(skip))]
    pub threads: Option<usize>,
    /// Run each forward as a CUDA graph, captured once per batch bucket (batches are
    /// padded to token/sequence/length buckets) and replayed: far fewer launches for
    /// small models; `off` runs every op on its own (debugging, per-kernel profiles).
    #[cfg_attr(feature = "cli", arg(long, value_name = "on|off", env = "HOPSCORE_CUDA_GRAPHS",
        default_value = "on", value_parser = crate::options::values::on_off,
        action = clap::ArgAction::Set))]
    pub cuda_graphs: bool,
    /// The same bits for a row whatever batch it runs in (its neighbours, the batch
    /// size, the shard, graphs on or off): one cuBLASLt algorithm per GEMM of the model
    /// instead of cuBLASLt's choice per batch shape, which can round a row differently
    /// in the last bits. `off` lets cuBLASLt choose (docs/data-safety.md).
    #[cfg_attr(feature = "cli", arg(long, value_name = "on|off", env = "HOPSCORE_BATCH_INVARIANT",
        default_value = "on", value_parser = crate::options::values::on_off,
        action = clap::ArgAction::Set))]
    pub batch_invariant: bool,
    /// Which GPU kernels run: `proven`, per op, the newest implementation whose exact
    /// machine code has passed parity on real hardware for this card (kernels/proven.tsv;
    /// where none has, the most conservative one, with a warning); `latest`, the newest
    /// of every op. The choice per op is written into the output's metadata
    /// (`hopscore.gpu_kernels`; docs/cuda.md).
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_enum, env = "HOPSCORE_GPU_KERNELS",
        default_value_t = DeviceConfig::CPU.gpu_kernels))]
    pub gpu_kernels: KernelSet,
    /// The bf16/f16 DeBERTa attention kernel: `auto` (v3), `v3` (mma.sync, any GPU),
    /// `v5` (wgmma with TMA and warp specialisation, H100/H200, head size 64). Not yet
    /// run on hardware: v5.
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_enum, env = "HOPSCORE_ATTENTION",
        default_value_t = DeviceConfig::CPU.attention))]
    pub attention: Attention,
    /// The erf-GELU up-projection as one CUTLASS kernel (bias and GELU in its epilogue;
    /// H100/H200, bf16/f16): `auto` (as `--gpu-kernels` chooses), `on`, or `off`
    /// (cuBLASLt's GEMM and a GELU pass).
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_enum, env = "HOPSCORE_FUSED_GELU",
        default_value_t = DeviceConfig::CPU.fused_gelu))]
    pub fused_gelu: Switch,
    /// A gated MLP's gate/up projection with the gate in the CUTLASS kernel's epilogue:
    /// `auto`, `on`, or `off` (cuBLASLt's GEMM and the `gated_act` pass).
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_enum, env = "HOPSCORE_FUSED_GATE",
        default_value_t = DeviceConfig::CPU.fused_gate))]
    pub fused_gate: Switch,
    /// A post-LN output projection with the residual and LayerNorm in the CUTLASS
    /// kernel's epilogue (rows of 1,024 and 768, clusters of 8 CTAs): `auto`, `on`, or
    /// `off` (cuBLASLt's GEMM and the `layer_norm` pass).
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(long, value_enum, env = "HOPSCORE_FUSED_NORM",
        default_value_t = DeviceConfig::CPU.fused_norm))]
    pub fused_norm: Switch,
}

/// The device options of a job that runs no model (`review`): none; it runs on the
/// CPU ([`DeviceConfig::CPU`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct NoDevice {}

impl From<NoDevice> for DeviceConfig {
    fn from(_: NoDevice) -> Self {
        DeviceConfig::CPU
    }
}

impl DeviceConfig {
    /// The CPU backend with all cores.
    pub const CPU: DeviceConfig = DeviceConfig {
        kind: DeviceKind::Cpu,
        gpu: 0,
        dtype: DType::Bf16,
        cpu_gemm: CpuGemm::F32,
        threads: None,
        cuda_graphs: true,
        batch_invariant: true,
        gpu_kernels: GpuSettings::DEFAULT.kernels,
        attention: GpuSettings::DEFAULT.attention,
        fused_gelu: GpuSettings::DEFAULT.fused_gelu,
        fused_gate: GpuSettings::DEFAULT.fused_gate,
        fused_norm: GpuSettings::DEFAULT.fused_norm,
    };

    /// The GPU flags, as the CUDA backend takes them.
    pub fn gpu_settings(&self) -> GpuSettings {
        GpuSettings {
            kernels: self.gpu_kernels,
            attention: self.attention,
            fused_gelu: self.fused_gelu,
            fused_gate: self.fused_gate,
            fused_norm: self.fused_norm,
        }
    }

    /// A worker pool of `threads` threads for one job (`None` without `threads`:
    /// the process's global pool); 0 threads is refused.
    pub fn thread_pool(&self) -> anyhow::Result<Option<rayon::ThreadPool>> {
        let Some(n) = self.threads else {
            return Ok(None);
        };
        checked_threads(n)?;
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map(Some)
            .map_err(|e| anyhow::anyhow!("cannot start {n} worker threads: {e}"))
    }

    /// Sizes the global rayon pool to `threads` (once per process; asking again for
    /// the size it already has is not an error).
    pub fn init_threads(&self) -> anyhow::Result<()> {
        let Some(n) = self.threads else {
            return Ok(());
        };
        checked_threads(n)?;
        match rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
        {
            Ok(()) => Ok(()),
            Err(_) if rayon::current_num_threads() == n => Ok(()),
            Err(e) => Err(anyhow::anyhow!("cannot start {n} worker threads: {e}")),
        }
    }
}

/// The most worker threads taken: past it a mistyped count would start threads by the
/// thousand.
const MAX_THREADS: usize = 4096;

/// Refuses 0 or more than [`MAX_THREADS`] worker threads, and warns (once) when `n` is
/// more than the machine's cores: the threads then wait for each other (2 cores with
/// `--threads 1000` ran 130× slower, in 1.8 GB).
fn checked_threads(n: usize) -> anyhow::Result<()> {
    crate::options::at_least_one("threads", n)?;
    crate::options::at_most("threads", n, MAX_THREADS, "worker threads")?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if n > cores {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            log::warn!(
                "--threads {n} is more than the {cores} cores this machine has: the threads \
                 take turns, which is slower and holds more memory; use at most {cores}"
            )
        });
    }
    Ok(())
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self::CPU
    }
}

/// Evaluates `$body` with `$be` bound to the backend that `$device` (a
/// [`DeviceConfig`]) selects, by reference (`with_backend!(d, be => …)`) or by value
/// (`with_backend!(owned d, be => …)`); `$body` is instantiated once per backend type.
macro_rules! with_backend {
    (owned $device:expr, $be:ident => $body:expr) => {{
        let device: &$crate::jobs::DeviceConfig = $device;
        match device.kind {
            $crate::jobs::DeviceKind::Cpu => {
                let $be = $crate::backend::cpu::CpuBackend::new(device.cpu_gemm);
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::jobs::DeviceKind::Cuda => {
                let verdicts = $crate::jobs::selftest::verdicts(device.gpu, device.dtype)?;
                let $be = $crate::backend::cuda::CudaBackend::with_settings(
                    device.gpu,
                    device.dtype,
                    &device.gpu_settings(),
                    &verdicts,
                )?;
                $be.set_cuda_graphs(device.cuda_graphs);
                $be.set_batch_invariant(device.batch_invariant);
                $body
            }
            #[cfg(not(feature = "cuda"))]
            $crate::jobs::DeviceKind::Cuda => anyhow::bail!(
                "this hopscore was built without CUDA support: rebuild with \
                 `cargo build --release --features cuda`, or use --device cpu"
            ),
        }
    }};
    ($device:expr, $be:ident => $body:expr) => {
        $crate::jobs::device::with_backend!(owned $device, backend => {
            let $be = &backend;
            $body
        })
    };
}
pub(crate) use with_backend;

impl crate::options::Options for DeviceConfig {
    /// The CPU, as the command line's `--device` defaults to.
    fn defaults() -> Self {
        Self::CPU
    }
}
