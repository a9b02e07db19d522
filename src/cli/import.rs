//! `hopscore import`: native HotpotQA / MuSiQue / 2Wiki files → one question file
//! ([`crate::io::importer`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::io::importer::{import, ImportOptions, ImportSummary};
use crate::io::questions::Dataset;
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// Format of the input files.
    #[arg(value_enum)]
    pub dataset: Dataset,
    /// Native files: a JSON array or JSON lines, plain or gzip (detected from the content).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output question file (Parquet; schema in src/io/questions.rs).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Where bad records go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    /// Questions per Parquet row group. Memory use is about this many questions; larger
    /// groups compress a little better and read faster.
    #[arg(long, default_value_t = 1024, value_parser = crate::options::values::positive_usize)]
    pub row_group_rows: usize,
}

/// Runs `hopscore import`.
pub fn run(args: &ImportArgs) -> Result<ImportSummary> {
    import(&ImportOptions {
        dataset: args.dataset,
        files: args.files.clone(),
        output: args.output.clone(),
        quarantine: args.quarantine.clone(),
        row_group_rows: args.row_group_rows,
    })
}
