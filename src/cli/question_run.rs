//! The flags every question-file command shares (`beam`, `label`, `lepus`), and their
//! conversion into the file runner's options ([`crate::pipeline::files`]).

use std::path::PathBuf;

use clap::Args;

use super::flags;
use crate::io::paths::Named;
use crate::pipeline::control::Shard;
use crate::pipeline::files::FileRun;
pub use crate::pipeline::files::RunSummary;
use crate::pipeline::SchedulerConfig;

/// Where a run reads and writes, and how it is batched, split and committed (flattened
/// into the arguments of each question-file command).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Question file written by `hopscore import`.
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet (schema in README).
    #[arg(long)]
    pub output: PathBuf,
    /// Token budget of one forward pass.
    #[arg(long, default_value_t = SchedulerConfig::default().max_batch_tokens, value_parser = flags::positive_usize)]
    pub max_batch_tokens: usize,
    /// Questions in flight at once: more mixes the steps of different questions
    /// better, and holds more memory.
    #[arg(long, default_value_t = SchedulerConfig::default().max_active, value_parser = flags::positive_usize)]
    pub max_active: usize,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    /// Continue an interrupted run (its `<output>.parts` directory) with the same flags.
    #[arg(long)]
    pub resume: bool,
    /// Process only shard i of N (contiguous row ranges, for Slurm arrays or indexed
    /// jobs); combine the outputs with `hopscore merge`.
    #[arg(long, value_parser = crate::pipeline::control::parse_shard)]
    pub shard: Option<Shard>,
    /// Input rows per committed part. A part commits as soon as all its rows are
    /// finished; a killed run loses the finished rows of the parts still open (see
    /// README, "Data safety").
    #[arg(long, default_value_t = 256, value_parser = flags::positive_u64)]
    pub part_rows: u64,
}

impl RunArgs {
    /// The file runner's options; `inputs`: the command's other input files (a model,
    /// a corpus, …).
    pub fn file_run(&self, inputs: Vec<Named>) -> FileRun {
        FileRun {
            input: self.input.clone(),
            output: self.output.clone(),
            quarantine: self.quarantine.clone(),
            resume: self.resume,
            shard: self.shard,
            part_rows: self.part_rows,
            limit: None,
            inputs,
        }
    }

    /// The scheduler's limits.
    pub fn scheduler(&self) -> SchedulerConfig {
        SchedulerConfig {
            max_batch_tokens: self.max_batch_tokens,
            max_active: self.max_active,
        }
    }
}

/// Prints the summary of a question-file run; 130 when it was interrupted, else 0.
pub fn report(s: &RunSummary) -> i32 {
    let st = &s.stats;
    let secs = st.wall.as_secs_f64().max(1e-9);
    eprintln!(
        "{} questions ({} quarantined → {}), {} hypotheses, {} tokens in {:.1} s: \
         {:.2} questions/s, {:.1} hypotheses/s, {:.0} tokens/s, forward {:.0}% of wall time",
        st.rows,
        st.bad_rows,
        s.quarantine_path.display(),
        st.hypotheses,
        st.tokens,
        secs,
        st.rows as f64 / secs,
        st.hypotheses as f64 / secs,
        st.tokens as f64 / secs,
        100.0 * st.forward.as_secs_f64() / secs
    );
    super::entry::exit_code(s.interrupted)
}
