//! `hopscore loglik`: the arguments of the loglik job ([`crate::jobs::loglik`]) and
//! its run over a file ([`crate::pipeline::files`]: parts, `--resume`, `--shard`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::row_run::{run_rows, PartArgs, RowSummary};
use super::DeviceOpts;
use crate::jobs::loglik;
use crate::jobs::loglik::LoglikConfig;
use crate::jobs::options::Options;

#[derive(Debug, Clone, Args)]
pub struct LoglikArgs {
    /// A GGUF file (config and tokenizer from its metadata), a directory holding one,
    /// or an HF directory (config.json, model.safetensors, tokenizer.json) of a causal
    /// LM or a T5-family encoder-decoder.
    #[arg(long, env = "HOPSCORE_MODEL", value_parser = super::flags::model_path)]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it) instead of the model's own.
    #[arg(long, env = "HOPSCORE_TOKENIZER", value_parser = super::flags::tokenizer_path)]
    pub tokenizer: Option<PathBuf>,
    /// Input Parquet with columns `id` (string or integer), `prompt` and `target`
    /// (strings).
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet: `id`, `loglik_sum`, `loglik_mean` (float64), `n_tokens` (uint32).
    #[arg(long)]
    pub output: PathBuf,
    /// Logits are divided by T before the log-softmax (LEPUS: 1.4 is best in the
    /// paper; 1.0 gives plain log-likelihoods).
    #[arg(long, default_value_t = LoglikConfig::defaults().temperature, value_parser = super::flags::positive_f32)]
    pub temperature: f32,
    /// Sequences of one batch that share at least N leading tokens (LEPUS paths with
    /// the same first passage) run those tokens through the model once; scores are
    /// unchanged. 0 turns the reuse off.
    #[arg(long, default_value_t = LoglikConfig::defaults().min_shared_prefix)]
    pub min_shared_prefix: usize,
    /// Token budget of one forward pass. Larger batches use the cores better and need
    /// more memory (about 4·(6·H + 2·I) bytes per token on CPU, plus attention scores).
    #[arg(long, default_value_t = LoglikConfig::defaults().max_batch_tokens, value_parser = super::flags::positive_usize)]
    pub max_batch_tokens: usize,
    /// Longest prompt + target accepted, in tokens; longer rows are quarantined.
    /// Default: the model's context length.
    #[arg(long, value_parser = super::flags::positive_usize)]
    pub max_length: Option<usize>,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    #[command(flatten)]
    pub parts: PartArgs,
    #[command(flatten)]
    pub device: DeviceOpts,
}

impl LoglikArgs {
    /// The library's config of the job.
    pub fn config(&self) -> LoglikConfig {
        LoglikConfig {
            model: self.model.clone(),
            tokenizer: self.tokenizer.clone(),
            temperature: self.temperature,
            min_shared_prefix: self.min_shared_prefix,
            max_batch_tokens: self.max_batch_tokens,
            max_length: self.max_length,
        }
    }
}

/// Runs `hopscore loglik`.
pub fn run(args: &LoglikArgs) -> Result<RowSummary> {
    run_rows!(args, loglik::job)
}

impl super::Run for LoglikArgs {
    fn run(&self) -> Result<i32> {
        Ok(super::row_run::report(&run(self)?))
    }
}
