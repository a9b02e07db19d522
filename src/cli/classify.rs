//! `hopscore classify`: the arguments of the classify job ([`crate::jobs::classify`])
//! and its run over a file ([`crate::pipeline::files`]: parts, `--resume`, `--shard`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::row_run::{run_rows, PartArgs, RowSummary};
use super::DeviceOpts;
use crate::jobs::classify;
use crate::jobs::classify::ClassifyConfig;
use crate::jobs::options::Options;

#[derive(Debug, Clone, Args)]
pub struct ClassifyArgs {
    /// Model directory: config.json, model.safetensors (or a sharded index) and,
    /// unless --tokenizer is given, tokenizer.json.
    #[arg(long, env = "HOPSCORE_MODEL", value_parser = super::flags::model_path)]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it), when the model directory has none.
    #[arg(long, env = "HOPSCORE_TOKENIZER", value_parser = super::flags::tokenizer_path)]
    pub tokenizer: Option<PathBuf>,
    /// Input Parquet with columns `id` (string or integer), `text_a` (string) and
    /// optionally `text_b` (string).
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet: `id`, `logits` (list<float32>, one per label).
    #[arg(long)]
    pub output: PathBuf,
    /// Head to score with (`sequence`, `hop1`, `hop_n`, …; see `hopscore inspect`).
    /// Needed only when the checkpoint has several sequence-level heads.
    #[arg(long)]
    pub head: Option<String>,
    /// Token budget of one forward pass. Larger batches use the cores better and
    /// need more memory (about 4·H·(12 + L) bytes per token on CPU).
    #[arg(long, default_value_t = ClassifyConfig::defaults().max_batch_tokens, value_parser = super::flags::positive_usize)]
    pub max_batch_tokens: usize,
    /// Truncation length of a pair, special tokens included (longest-first).
    /// Default: the model's max_position_embeddings.
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

impl ClassifyArgs {
    /// The library's config of the job.
    pub fn config(&self) -> ClassifyConfig {
        ClassifyConfig {
            model: self.model.clone(),
            tokenizer: self.tokenizer.clone(),
            head: self.head.clone(),
            max_batch_tokens: self.max_batch_tokens,
            max_length: self.max_length,
        }
    }
}

/// Runs `hopscore classify`.
pub fn run(args: &ClassifyArgs) -> Result<RowSummary> {
    run_rows!(args, classify::job)
}

impl super::Run for ClassifyArgs {
    fn run(&self) -> Result<i32> {
        Ok(super::row_run::report(&run(self)?))
    }
}
