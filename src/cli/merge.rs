//! `hopscore merge`: the outputs of `--shard i/N` runs into one file
//! ([`crate::io::merge`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// Shard outputs (any order; each records its `i/N` in its metadata).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Merged output; the quarantine files are merged next to it.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Runs `hopscore merge`; returns the number of shards.
pub fn run(args: &MergeArgs) -> Result<usize> {
    crate::io::merge::merge_shards(&args.inputs, &args.output)
}
