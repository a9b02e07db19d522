//! The flags `classify` and `loglik` share for their run over a row file (parts,
//! `--resume`, `--shard`: [`crate::pipeline::files`]), and the run's summary.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use clap::Args;

use super::flags;
use crate::io::paths::Named;
use crate::pipeline::control::Shard;
use crate::pipeline::files::{self, FileJob, FileRun};

/// How a row run is split and committed (flattened into `classify` and `loglik`).
#[derive(Debug, Clone, Args)]
pub struct PartArgs {
    /// Continue an interrupted run (its `<output>.parts` directory) with the same flags.
    #[arg(long)]
    pub resume: bool,
    /// Process only shard i of N (contiguous row ranges, for Slurm arrays or indexed
    /// jobs); combine the outputs with `hopscore merge`.
    #[arg(long, value_parser = crate::pipeline::control::parse_shard)]
    pub shard: Option<Shard>,
    /// Input rows per committed part (a killed run loses the finished rows of the
    /// parts still open).
    #[arg(long, default_value_t = 4096, value_parser = flags::positive_u64)]
    pub part_rows: u64,
}

impl Default for PartArgs {
    /// The flags' defaults: a whole run, parts of 4096 rows.
    fn default() -> Self {
        Self {
            resume: false,
            shard: None,
            part_rows: 4096,
        }
    }
}

/// Counts of a row-scoring run.
#[derive(Debug, Clone, PartialEq)]
pub struct RowSummary {
    pub scored: u64,
    pub quarantined: u64,
    /// Tokens run through the model.
    pub tokens: u64,
    pub seconds: f64,
    pub quarantine_path: PathBuf,
    /// Stopped by Ctrl-C: parts are committed and `--resume` continues.
    pub interrupted: bool,
}

impl std::fmt::Display for RowSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.seconds.max(1e-9);
        write!(
            f,
            "scored {} rows ({} tokens) in {:.1} s: {:.1} rows/s, {:.0} tokens/s; {} quarantined → {}",
            self.scored,
            self.tokens,
            self.seconds,
            self.scored as f64 / secs,
            self.tokens as f64 / secs,
            self.quarantined,
            self.quarantine_path.display()
        )
    }
}

/// Where a row run reads and writes.
pub struct RowFiles<'a> {
    pub input: &'a Path,
    pub output: &'a Path,
    /// Default: `<output stem>.quarantine.parquet`.
    pub quarantine: Option<&'a Path>,
    /// The model and tokenizer paths (`--model`, `--tokenizer`: no output may be one
    /// or hold one).
    pub models: Vec<Named>,
    pub parts: &'a PartArgs,
}

impl RowFiles<'_> {
    /// The file runner's options.
    pub fn file_run(&self) -> FileRun {
        FileRun {
            input: self.input.to_path_buf(),
            output: self.output.to_path_buf(),
            quarantine: self.quarantine.map(Path::to_path_buf),
            resume: self.parts.resume,
            shard: self.parts.shard,
            part_rows: self.parts.part_rows,
            limit: None,
            inputs: self.models.clone(),
        }
    }

    /// Refuses outputs that would overwrite an input or the model.
    pub fn check_paths(&self) -> Result<()> {
        self.file_run().check_paths(&[])
    }

    /// Runs `job` (loaded after [`RowFiles::check_paths`]) over the files.
    pub fn run(&self, job: &mut impl FileJob, started: Instant) -> Result<RowSummary> {
        let run = files::run(job, &self.file_run())?;
        Ok(RowSummary {
            scored: run.stats.rows - run.stats.bad_rows,
            quarantined: run.stats.bad_rows,
            tokens: run.stats.tokens,
            seconds: started.elapsed().as_secs_f64(),
            quarantine_path: run.quarantine_path,
            interrupted: run.interrupted,
        })
    }
}

/// The body of `run` of a row command: `$args` has the flags `input`, `output`,
/// `quarantine`, `model`, `tokenizer`, `parts` and `device` and a `config()`, from which
/// `$job(config, backend)` loads the job. Installs the Ctrl-C handler and checks the
/// paths before anything loads.
macro_rules! run_rows {
    ($args:expr, $job:path) => {{
        let args = $args;
        $crate::pipeline::control::install_interrupt_handler();
        let started = std::time::Instant::now();
        let files = $crate::cli::row_run::RowFiles {
            input: &args.input,
            output: &args.output,
            quarantine: args.quarantine.as_deref(),
            models: $crate::cli::inputs(&[
                ("--model", Some(&args.model)),
                ("--tokenizer", args.tokenizer.as_deref()),
            ]),
            parts: &args.parts,
        };
        files.check_paths()?;
        $crate::jobs::device::with_backend!(owned &args.device.config(), be => {
            let mut job = $job(args.config(), be)?;
            files.run(&mut job, started)
        })
    }};
}
pub(crate) use run_rows;

/// Prints the summary of a row run (`classify`, `loglik`); 130 when it was
/// interrupted, else 0.
pub fn report(s: &RowSummary) -> i32 {
    eprintln!("{s}");
    super::entry::exit_code(s.interrupted)
}
