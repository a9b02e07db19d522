//! `hopscore bench-loglik`: LM scoring throughput (causal or T5) on fixed token ids
//! ([`crate::bench::loglik`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

pub use crate::bench::loglik::BenchLoglikResult;
use crate::bench::loglik::LoglikBench;
use crate::jobs::device::with_backend;
use crate::jobs::DeviceConfig;

#[derive(Debug, Clone, Args)]
pub struct BenchLoglikArgs {
    /// A GGUF file, a directory holding one, or an HF directory (causal LM or T5).
    #[arg(long, env = "HOPSCORE_MODEL", value_parser = crate::options::values::model_path)]
    pub model: PathBuf,
    /// JSON `{"pairs": [{"ids": [..], "target_start": n}, ..]}`: token ids of prompt +
    /// target, targets from `target_start` on (tools/bench_decoder_reference.py writes it).
    #[arg(long)]
    pub pairs: PathBuf,
    /// Token budget of one forward pass.
    #[arg(long, default_value_t = 8192, value_parser = crate::options::values::positive_usize)]
    pub max_batch_tokens: usize,
    #[arg(long, default_value_t = 1.0, value_parser = crate::options::values::positive_f32)]
    pub temperature: f32,
    /// Untimed passes over all pairs before timing.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Timed passes over all pairs (the mean is reported).
    #[arg(long, default_value_t = 3, value_parser = crate::options::values::positive_usize)]
    pub iters: usize,
    #[command(flatten)]
    pub device: DeviceConfig,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also write the last pass's per-token log-probabilities here, as JSON
    /// `{"logprobs": [[..], ..]}` in the order of the pairs (for a per-token comparison
    /// with another engine).
    #[arg(long)]
    pub scores: Option<PathBuf>,
}

/// Runs `hopscore bench-loglik`.
pub fn run(args: &BenchLoglikArgs) -> Result<BenchLoglikResult> {
    let mut model = args.model.clone();
    crate::options::resolve_models(crate::options::model_and_tokenizer([&mut model], None))?;
    let bench = LoglikBench {
        model,
        pairs: args.pairs.clone(),
        max_batch_tokens: args.max_batch_tokens,
        temperature: args.temperature,
        warmup: args.warmup,
        iters: args.iters,
        scores: args.scores.clone(),
    };
    with_backend!(&args.device, be => crate::bench::loglik::run(be, &bench))
}

/// Human-readable form of a result.
pub fn table(r: &BenchLoglikResult) -> String {
    format!(
        "{} on {}  threads {}  {} pairs, {} tokens ({} scored)\n\
         {:.3} s/pass  {:.0} tokens/s  mean log-likelihood {:.4}",
        r.model_type,
        r.device,
        r.threads,
        r.pairs,
        r.tokens,
        r.target_tokens,
        r.seconds_per_pass,
        r.tokens_per_s,
        r.mean_loglik
    ) + &super::bench::kernel_table(&r.kernels)
}
