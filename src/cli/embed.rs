//! `hopscore embed`: the arguments of the embed job ([`crate::jobs::embed`]) and its
//! run over a passage file ([`crate::pipeline::files`]: parts, `--resume`, `--shard`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::row_run::{run_rows, PartArgs, RowSummary};
use super::DeviceOpts;
use crate::jobs::embed::{self, EmbedConfig};
use crate::jobs::options::Options;
use crate::model::bert::Pooling;

#[derive(Debug, Clone, Args)]
pub struct EmbedArgs {
    /// BERT-family model directory (sentence-transformers or plain HF): config.json,
    /// model.safetensors, tokenizer.json, and modules.json + 1_Pooling/ where present.
    #[arg(long, env = "HOPSCORE_ENCODER", value_parser = super::flags::model_path)]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it), when the model directory has none.
    #[arg(long, value_parser = super::flags::tokenizer_path)]
    pub tokenizer: Option<PathBuf>,
    /// Passage Parquet: `id` (string or integer), `text` (string), optionally `title`
    /// (string); the corpus format of `--corpus`.
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet: `id`, `embedding` (fixed_size_list<float32>, or float16 with
    /// --float16).
    #[arg(long)]
    pub output: PathBuf,
    /// Pooling of the token vectors. Default: the model's 1_Pooling/config.json, else
    /// mean (Contriever).
    #[arg(long, value_enum)]
    pub pooling: Option<Pooling>,
    /// L2-normalise the vectors. Default: whether modules.json has a Normalize module.
    #[arg(long, value_name = "on|off", value_parser = super::flags::on_off, action = clap::ArgAction::Set)]
    pub normalize: Option<bool>,
    /// Truncation length, special tokens included. Default: the model's
    /// sentence_bert_config.json max_seq_length, else max_position_embeddings.
    #[arg(long, value_parser = super::flags::positive_usize)]
    pub max_length: Option<usize>,
    /// Text put before every passage (E5: "passage: ").
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Write float16 vectors (half the size).
    #[arg(long)]
    pub float16: bool,
    /// Token budget of one forward pass. The default suits CPUs (activations stay in
    /// cache); on a GPU use 16384 or more.
    #[arg(long, default_value_t = EmbedConfig::defaults().max_batch_tokens, value_parser = super::flags::positive_usize)]
    pub max_batch_tokens: usize,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    #[command(flatten)]
    pub parts: PartArgs,
    #[command(flatten)]
    pub device: DeviceOpts,
}

impl EmbedArgs {
    /// The library's config of the job.
    pub fn config(&self) -> EmbedConfig {
        EmbedConfig {
            model: self.model.clone(),
            tokenizer: self.tokenizer.clone(),
            pooling: self.pooling,
            normalize: self.normalize,
            max_length: self.max_length,
            prefix: self.prefix.clone(),
            float16: self.float16,
            max_batch_tokens: self.max_batch_tokens,
        }
    }
}

/// Runs `hopscore embed`.
pub fn run(args: &EmbedArgs) -> Result<RowSummary> {
    run_rows!(args, embed::job)
}

impl super::Run for EmbedArgs {
    fn run(&self) -> Result<i32> {
        Ok(super::row_run::report(&run(self)?))
    }
}
