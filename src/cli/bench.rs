//! `hopscore bench`: encoder throughput on random weights.

use anyhow::{ensure, Result};
use clap::Args;

use crate::backend::KernelTime;
use crate::bench::{BenchResult, BenchSpec, ModelShape};
use crate::jobs::device::with_backend;
use crate::jobs::DeviceConfig;
use crate::jobs::DeviceKind;

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "The GPU kernels are the device flags: --gpu-kernels proven|latest (the \
    newest implementations of every op, or only those that have run on hardware), \
    --attention v3|v5 (the bf16/f16 DeBERTa attention), --fused-gelu, --fused-gate, \
    --fused-norm on|off (the CUTLASS GEMMs with the erf GELU, the gate, the residual and \
    LayerNorm in their epilogues, or cuBLASLt's GEMM and a separate pass); see \
    docs/cuda.md."
)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value_t = ModelShape::DebertaV3Base)]
    pub shape: ModelShape,
    /// Tokens per sequence (all sequences full length).
    #[arg(long, default_value_t = 256, value_parser = crate::options::values::positive_usize)]
    pub seq_len: usize,
    /// Sequences per forward pass. Default: 8 on the CPU; on a GPU, 65,536 tokens'
    /// worth (256 sequences at L = 256), enough to fill an H100.
    #[arg(long, value_parser = crate::options::values::positive_usize)]
    pub batch: Option<usize>,
    /// Size n of the n×n×n GEMM that measures the GPU's peak in the same dtype
    /// (0 skips it; ignored on the CPU).
    #[arg(long, default_value_t = 8192)]
    pub peak_gemm: usize,
    /// Untimed passes before timing.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Timed passes (the mean is reported).
    #[arg(long, default_value_t = 3, value_parser = crate::options::values::positive_usize)]
    pub iters: usize,
    #[command(flatten)]
    pub device: DeviceConfig,
    /// Also count the kernel launches, GEMMs and host copies of one forward (GPU),
    /// outside and inside its CUDA graph replay.
    #[arg(long)]
    pub profile: bool,
    /// Encoder shapes: the FFN's GELU in its tanh form (`hidden_act: gelu_new`, on a
    /// GPU fused into the up-projection GEMM) instead of erf.
    #[arg(long)]
    pub tanh_gelu: bool,
    /// Print one JSON line instead of a table (for tools/bench_reference.py).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &BenchArgs) -> Result<BenchResult> {
    ensure!(
        args.seq_len >= 2,
        "--seq-len must be at least 2 ([CLS] and [SEP])"
    );
    let batch = args.batch.unwrap_or(match args.device.kind {
        DeviceKind::Cpu => 8,
        DeviceKind::Cuda => (65_536 / args.seq_len).max(1),
    });
    ensure!(
        batch >= 1 && args.iters >= 1,
        "--batch and --iters must be at least 1"
    );
    let spec = BenchSpec {
        shape: args.shape,
        seq_len: args.seq_len,
        batch,
        warmup: args.warmup,
        iters: args.iters,
        peak_gemm: args.peak_gemm,
        profile: args.profile,
        tanh_gelu: args.tanh_gelu,
    };
    with_backend!(&args.device, be => crate::bench::run(be, spec))
}

/// Human-readable form of a result.
pub fn table(r: &BenchResult) -> String {
    let mut out = summary(r);
    if let (Some(peak), Some(share)) = (r.gemm_peak_tflops, r.peak_share) {
        out += &format!(
            "\n{:.1} TFLOP/s = {:.1}% of the measured GEMM peak ({peak:.1} TFLOP/s)",
            r.gflops / 1e3,
            100.0 * share
        );
    }
    if let Some(c) = &r.per_forward {
        let per_layer = |v: u64| v as f64 / r.layers.max(1) as f64;
        out += &format!(
            "\nper forward: {} launches ({} kernels + {} GEMMs; {:.1} per layer over {} layers), \
             {} host→device copies ({} bytes; {:.1} per layer), {} device→host, {} device copies",
            c.launches + c.gemms,
            c.launches,
            c.gemms,
            per_layer(c.launches + c.gemms),
            r.layers,
            c.uploads,
            c.upload_bytes,
            per_layer(c.uploads),
            c.downloads,
            c.device_copies
        );
        if c.replays > 0 {
            let (launches, replays) = (c.graph_launches + c.graph_gemms, c.replays);
            out += &format!(
                "\nCUDA graphs: {} captured, {replays} replayed; per replay {} launches \
                 ({} kernels and copies + {} GEMMs; {:.1} per layer), 0 host copies \
                 (the launches above are those outside the replay)",
                c.captures,
                launches / replays,
                c.graph_launches / replays,
                c.graph_gemms / replays,
                per_layer(launches / replays),
            );
        }
    }
    out + &kernel_table(&r.kernels)
}

/// One line per kernel of a profiled pass: calls, device time and share.
pub(super) fn kernel_table(kernels: &[KernelTime]) -> String {
    let total: f64 = kernels.iter().map(|k| k.ms).sum();
    kernels
        .iter()
        .map(|k| {
            format!(
                "\n  {:<32} {:>6} calls {:>10.3} ms {:>5.1}%",
                k.kernel,
                k.calls,
                k.ms,
                100.0 * k.ms / total.max(1e-12)
            )
        })
        .collect()
}

fn summary(r: &BenchResult) -> String {
    format!(
        "shape {:?}  device {}  threads {}  batch {} × {} tokens\n\
         {:.3} s/batch  {:.0} tokens/s  {:.2} sequences/s  {:.1} GFLOP/s",
        r.shape,
        r.device,
        r.threads,
        r.batch,
        r.seq_len,
        r.seconds_per_batch,
        r.tokens_per_s,
        r.sequences_per_s,
        r.gflops
    )
}
