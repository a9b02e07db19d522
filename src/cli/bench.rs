//! `hopscore bench`: encoder throughput on random weights.

use anyhow::{ensure, Result};
use clap::Args;

use super::{with_backend, DeviceOpts};
use crate::bench::{BenchResult, BenchSpec, ModelShape};

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[arg(long, value_enum, default_value_t = ModelShape::DebertaV3Base)]
    pub shape: ModelShape,
    /// Tokens per sequence (all sequences full length).
    #[arg(long, default_value_t = 256)]
    pub seq_len: usize,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Untimed passes before timing.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Timed passes (the mean is reported).
    #[arg(long, default_value_t = 3)]
    pub iters: usize,
    #[command(flatten)]
    pub device: DeviceOpts,
    /// Print one JSON line instead of a table (for tools/bench_reference.py).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &BenchArgs) -> Result<BenchResult> {
    ensure!(
        args.seq_len >= 2,
        "--seq-len must be at least 2 ([CLS] and [SEP])"
    );
    ensure!(
        args.batch >= 1 && args.iters >= 1,
        "--batch and --iters must be at least 1"
    );
    let spec = BenchSpec {
        shape: args.shape,
        seq_len: args.seq_len,
        batch: args.batch,
        warmup: args.warmup,
        iters: args.iters,
    };
    with_backend!(&args.device, be => crate::bench::run(be, spec))
}

/// Human-readable form of a result.
pub fn table(r: &BenchResult) -> String {
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
