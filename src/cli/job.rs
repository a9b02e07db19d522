//! The subcommands of the jobs: each is its config's flags ([`JobKind`]: the config
//! type derives them), the flags of the files it reads and writes ([`FileRun`]) and
//! those of the device, and every one runs through [`run`].

use anyhow::Result;
use clap::{Args, Subcommand};

use super::exit;
use crate::jobs::review::ReviewSummary;
use crate::jobs::{beam, classify, embed, label, lepus, loglik, rerank, review, JobKind};
use crate::pipeline::control::install_interrupt_handler;
use crate::pipeline::files::{FileRun, RunSummary};

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
    pub files: FileRun,
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
    let JobArgs {
        mut config,
        mut files,
        device,
    } = args;
    crate::options::resolve_models(config.model_paths())?;
    let device = device.into();
    files.inputs = config.inputs();
    files.settings = C::device_settings(&device)?;
    files.check_paths(&[])?;
    config.run_files(&device, &files)
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
        exit::of_run(self.interrupted)
    }
}

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
            return exit::INTERRUPTED;
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
            return exit::NOTHING_ANSWERED;
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
