//! The subcommands of the jobs: each is its config's flags ([`JobKind`]: the config
//! type derives them), the flags of the files it reads and writes ([`FileArgs`]) and
//! those of the device, and every one runs through [`run`].

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::entry::{exit_code, EXIT_INTERRUPTED};
use crate::io::shard::{parse_shard, Shard};
use crate::jobs::review::ReviewSummary;
use crate::jobs::{beam, classify, embed, label, lepus, loglik, rerank, review, JobKind};
use crate::pipeline::control::install_interrupt_handler;
use crate::pipeline::files::{FileRun, RunSummary};

/// Where a job's run reads and writes, and how it is split and committed.
#[derive(Debug, Clone, Args)]
pub struct FileArgs {
    /// Input Parquet: the question file of `hopscore import` (beam, label, lepus,
    /// review), or the rows the command's description names (classify, embed, loglik).
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet (its columns: docs/cli.md).
    #[arg(long)]
    pub output: PathBuf,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    /// Continue an interrupted run (its `<output>.parts` directory) with the same flags.
    #[arg(long)]
    pub resume: bool,
    /// Process only shard i of N (contiguous row ranges, for Slurm arrays or indexed
    /// jobs); combine the outputs with `hopscore merge`.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Input rows per committed part (default: 256 for a question file, 4096 for rows).
    /// A part commits as soon as all its rows are finished; a killed run loses the
    /// finished rows of the parts still open (docs/data-safety.md).
    #[arg(long, value_parser = crate::options::values::positive_u64)]
    pub part_rows: Option<u64>,
    /// Process only the first N rows of the input (N ≥ 1).
    #[arg(long, value_parser = crate::options::values::positive_u64)]
    pub limit: Option<u64>,
}

impl FileArgs {
    /// These files as the file runner takes them, for a job of config `config`.
    pub fn file_run<C: JobKind>(&self, config: &C) -> FileRun {
        FileRun {
            input: self.input.clone(),
            output: self.output.clone(),
            quarantine: self.quarantine.clone(),
            resume: self.resume,
            shard: self.shard,
            part_rows: self.part_rows.unwrap_or(C::PART_ROWS),
            limit: self.limit,
            inputs: config.inputs(),
        }
    }
}

/// The flags of a job's subcommand: its config's, its files', its device's.
#[derive(Debug, Clone, Args)]
pub struct JobArgs<C>
where
    C: JobKind + Args,
    C::Device: Args,
{
    #[command(flatten)]
    pub config: C,
    #[command(flatten)]
    pub files: FileArgs,
    #[command(flatten)]
    pub device: C::Device,
}

/// Runs a job over its files: the Ctrl-C handler first (so a Ctrl-C while the model
/// loads ends the run cleanly too), the outputs checked against every input before
/// anything loads, then the job loaded and run.
pub fn run<C>(args: JobArgs<C>) -> Result<C::Summary>
where
    C: JobKind + Args,
    C::Device: Args,
{
    install_interrupt_handler();
    let mut args = args;
    crate::options::resolve_models(args.config.model_paths())?;
    let files = args.files.file_run(&args.config);
    files.check_paths(&[])?;
    args.config.run_files(&args.device.into(), &files)
}

/// What a job's run prints when it ends, and its exit code.
pub trait Report {
    /// Prints the summary; returns 130 when the run was interrupted, else 0 (or the
    /// job's own code).
    fn report(&self, row: &str) -> i32;
}

impl Report for RunSummary {
    fn report(&self, row: &str) -> i32 {
        let st = &self.stats;
        let secs = st.wall.as_secs_f64().max(1e-9);
        let hypotheses = match st.hypotheses {
            0 => String::new(),
            h => format!(", {h} hypotheses ({:.1}/s)", h as f64 / secs),
        };
        eprintln!(
            "{} {row}s ({} quarantined → {}), {} tokens{hypotheses} in {:.1} s: {:.2} {row}s/s, \
             {:.0} tokens/s, forward {:.0}% of wall time",
            st.rows,
            st.bad_rows,
            self.quarantine_path.display(),
            st.tokens,
            secs,
            st.rows as f64 / secs,
            st.tokens as f64 / secs,
            100.0 * st.forward.as_secs_f64() / secs
        );
        exit_code(self.interrupted)
    }
}

/// `review` ran but answered no question.
const EXIT_NOTHING_ANSWERED: i32 = 3;

/// 130 when interrupted, 3 when no question was answered, else 0.
impl Report for ReviewSummary {
    fn report(&self, _row: &str) -> i32 {
        let (t, c) = (&self.tally, &self.tally.calls);
        eprintln!(
            "{} questions: {} answered, {} failed, {} quarantined → {}; {} LLM calls ({} \
             from the cache{}), {} retries, {} prompt + {} completion tokens, {} parse \
             failures, {:.1} s",
            t.answered + t.failed,
            t.answered,
            t.failed,
            self.run.stats.bad_rows,
            self.run.quarantine_path.display(),
            c.llm_calls,
            c.cached_calls,
            self.cache_dir
                .as_ref()
                .map_or(String::new(), |d| format!(" {}", d.display())),
            c.retries,
            c.prompt_tokens,
            c.completion_tokens,
            t.parse_failures,
            self.run.stats.wall.as_secs_f64()
        );
        if self.run.interrupted {
            eprintln!(
                "interrupted: the rows finished so far are written ({} interrupted questions \
                 left out); run the same command with --resume (the cache answers the calls \
                 already made)",
                t.interrupted
            );
            return EXIT_INTERRUPTED;
        }
        let why = t
            .first_failure
            .as_ref()
            .map_or("see the quarantine file", |(_, why)| why.as_str());
        let quarantined = self.run.stats.bad_rows;
        if t.answered == 0 && t.failed + quarantined > 0 {
            eprintln!(
                "error: no question was answered ({} failed, {quarantined} quarantined); first \
                 failure: {why}",
                t.failed
            );
            return EXIT_NOTHING_ANSWERED;
        }
        if t.failed > 0 {
            let again = match self.cache_dir {
                Some(_) => {
                    "the same command again sends only their calls (the response cache \
                            answers every call already made)"
                }
                None => "the same command again redoes them (with --no-cache, every call)",
            };
            eprintln!(
                "warning: {} of {} questions failed (`status` = failed); first failure: {why}; \
                 {again}",
                t.failed,
                t.answered + t.failed
            );
        }
        0
    }
}

/// `JobCommand`, one subcommand per registered job ([`crate::jobs::for_each_job`]), and
/// its `run`: [`run`] and the summary's [`Report`].
macro_rules! job_commands {
    ($($(#[$doc:meta])* $variant:ident($module:ident, $config:ident)),* $(,)?) => {
        /// The subcommands of the jobs.
        #[derive(Debug, Subcommand)]
        pub enum JobCommand {
            $($(#[$doc])* $variant(JobArgs<$module::$config>)),*
        }

        impl JobCommand {
            /// Runs the job, prints its summary and returns the exit code.
            pub fn run(self) -> Result<i32> {
                match self {
                    $(JobCommand::$variant(args) => {
                        Ok(run(args)?.report(<$module::$config as JobKind>::ROW))
                    })*
                }
            }
        }
    };
}
crate::jobs::for_each_job!(job_commands);
