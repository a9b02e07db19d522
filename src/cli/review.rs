//! `hopscore review`: the arguments of the review job ([`crate::jobs::review`]) and
//! its run over a question file ([`crate::pipeline::files`]: parts, `--resume`).
//! Ctrl-C ends the waits between retries at once; the questions it interrupts are
//! left out of the output, and `--resume` answers them (the cache serving the calls
//! already made).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;

use crate::io::parquet_io::sibling;
use crate::io::paths::{Kind, Named};
use crate::jobs::review::{self, ReviewConfig, ReviewStrategy, ReviewTally};
use crate::pipeline::control::{install_interrupt_handler, INTERRUPTED};
use crate::pipeline::files::{self, FileRun};
use crate::post::allies::AlliesConfig;
use crate::post::client::ClientConfig;
use crate::post::tor::{Expansion, TorConfig};

#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    #[arg(long, value_enum)]
    pub strategy: ReviewStrategy,
    /// Question file written by `hopscore import`.
    #[arg(long)]
    pub input: PathBuf,
    /// Chains from `hopscore beam` (`id`, `chain`): a question's chain passages replace
    /// the first retrieval (ToR's first-level nodes, ALLIES's first evidence).
    #[arg(long)]
    pub chains: Option<PathBuf>,
    /// Retrieve new queries from this corpus (`id`, `title`, `text`) instead of the
    /// question's own passages.
    #[arg(long, conflicts_with = "chains")]
    pub corpus: Option<PathBuf>,
    /// Output Parquet (schema in README).
    #[arg(long)]
    pub output: PathBuf,
    /// Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000.
    #[arg(long, env = "HOPSCORE_LLM_ENDPOINT")]
    pub endpoint: String,
    /// Model name sent with every request.
    #[arg(long, env = "HOPSCORE_LLM_MODEL")]
    pub llm_model: String,
    /// Environment variable holding the API key (sent as a Bearer token when set).
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
    /// Calls in flight at once (one worker thread per call).
    #[arg(long, default_value_t = 4, value_parser = super::flags::positive_usize)]
    pub concurrency: usize,
    /// Response cache directory. Default: `<output stem>.llm-cache` next to the output.
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Send every request, read and write no cache.
    #[arg(long, conflicts_with = "cache")]
    pub no_cache: bool,
    /// Seconds one HTTP attempt may take (connect, wait and read).
    #[arg(long, default_value_t = 120.0, value_parser = super::flags::positive_f64)]
    pub timeout: f64,
    /// Retries per call on 429/408/5xx, timeouts, connection errors and malformed bodies.
    #[arg(long, default_value_t = 8)]
    pub max_retries: u32,
    /// First retry wait in seconds (doubled per retry, jittered; `Retry-After` wins).
    #[arg(long, default_value_t = 1.0, value_parser = super::flags::non_negative_f64)]
    pub backoff: f64,
    /// Longest retry wait in seconds without a `Retry-After`.
    #[arg(long, default_value_t = 60.0, value_parser = super::flags::non_negative_f64)]
    pub backoff_max: f64,
    /// Sampling temperature (the papers use 0).
    #[arg(long, default_value_t = 0.0, value_parser = super::flags::non_negative_f32)]
    pub temperature: f32,
    /// Longest reply, in tokens.
    #[arg(long, default_value_t = 512, value_parser = super::flags::positive_u32)]
    pub max_tokens: u32,
    /// ToR: tree depth (paper: 3).
    #[arg(long, default_value_t = 3, value_parser = super::flags::positive_usize)]
    pub depth: usize,
    /// ToR: children per node at each depth, the last repeated for deeper levels (paper: 5,3,3).
    #[arg(long, value_delimiter = ',', default_value = "5,3,3", value_parser = super::flags::positive_usize)]
    pub widths: Vec<usize>,
    /// ToR: how an unsupported path makes its next query (paper's main setting: mpc).
    #[arg(long, value_enum, default_value_t = Expansion::Mpc)]
    pub expansion: Expansion,
    /// ToR: expand IRRELEVANT nodes too (ablation).
    #[arg(long)]
    pub no_relevance_pruning: bool,
    /// ToR: keep retrieved passages that are already evidence (ablation).
    #[arg(long)]
    pub no_repetitive_pruning: bool,
    /// ALLIES: B, states kept per round.
    #[arg(long, default_value_t = 2, value_parser = super::flags::positive_usize)]
    pub beam_size: usize,
    /// ALLIES: D, rounds.
    #[arg(long, default_value_t = 2)]
    pub beam_depth: usize,
    /// ALLIES: K, sub-questions asked per state.
    #[arg(long, default_value_t = 2, value_parser = super::flags::positive_usize)]
    pub sub_questions: usize,
    /// ALLIES: N, passages retrieved per query.
    #[arg(long, default_value_t = 2, value_parser = super::flags::positive_usize)]
    pub top_n: usize,
    /// ALLIES: stop when a kept state scores at least this.
    #[arg(long, default_value_t = 0.8, value_parser = super::flags::finite_f64)]
    pub threshold: f64,
    /// Review only the first N questions of the input.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    /// Continue an interrupted run (its `<output>.parts` directory) with the same flags.
    #[arg(long)]
    pub resume: bool,
    /// Input rows per committed part (see `hopscore beam --part-rows`).
    #[arg(long, default_value_t = 256, value_parser = super::flags::positive_u64)]
    pub part_rows: u64,
}

/// Counts of a run.
#[derive(Debug, Clone)]
pub struct ReviewSummary {
    /// The reviewed questions (this run's).
    pub tally: ReviewTally,
    pub quarantined: u64,
    pub seconds: f64,
    pub quarantine_path: PathBuf,
    pub cache_dir: Option<PathBuf>,
    /// Stopped by Ctrl-C: the rows finished so far are written, `--resume` continues.
    pub interrupted: bool,
}

impl ReviewArgs {
    /// The response cache directory, unless `--no-cache`.
    fn cache_dir(&self) -> Option<PathBuf> {
        (!self.no_cache).then(|| {
            self.cache
                .clone()
                .unwrap_or_else(|| sibling(&self.output, "llm-cache").with_extension(""))
        })
    }

    /// The library's config of the job.
    pub fn config(&self) -> ReviewConfig {
        ReviewConfig {
            strategy: self.strategy,
            input: self.input.clone(),
            chains: self.chains.clone(),
            corpus: self.corpus.clone(),
            client: ClientConfig {
                endpoint: self.endpoint.clone(),
                model: self.llm_model.clone(),
                api_key: std::env::var(&self.api_key_env)
                    .ok()
                    .filter(|k| !k.is_empty()),
                temperature: self.temperature,
                max_tokens: self.max_tokens,
                timeout: Duration::from_secs_f64(self.timeout),
                max_retries: self.max_retries,
                backoff_base: Duration::from_secs_f64(self.backoff),
                backoff_max: Duration::from_secs_f64(self.backoff_max),
                stop: Some(&INTERRUPTED),
            },
            cache: self.cache_dir(),
            concurrency: self.concurrency,
            tor: TorConfig {
                widths: (0..self.depth)
                    .map(|d| self.widths[d.min(self.widths.len() - 1)])
                    .collect(),
                expansion: self.expansion,
                relevance_pruning: !self.no_relevance_pruning,
                repetitive_pruning: !self.no_repetitive_pruning,
            },
            allies: AlliesConfig {
                beam_size: self.beam_size,
                depth: self.beam_depth,
                sub_questions: self.sub_questions,
                top_n: self.top_n,
                threshold: self.threshold,
            },
        }
    }

    /// The file runner's options (`--chains` and `--corpus` as its other inputs).
    pub fn file_run(&self) -> FileRun {
        let mut inputs = Vec::new();
        inputs.extend(self.chains.as_deref().map(|p| Named::new("--chains", p)));
        inputs.extend(self.corpus.as_deref().map(|p| Named::new("--corpus", p)));
        FileRun {
            input: self.input.clone(),
            output: self.output.clone(),
            quarantine: self.quarantine.clone(),
            resume: self.resume,
            shard: None,
            part_rows: self.part_rows,
            limit: self.limit,
            inputs,
        }
    }
}

/// Runs `hopscore review`.
pub fn run(args: &ReviewArgs) -> Result<ReviewSummary> {
    install_interrupt_handler();
    anyhow::ensure!(
        args.depth >= 1 && !args.widths.is_empty() && args.widths.iter().all(|&w| w >= 1),
        "--depth and every --widths entry must be at least 1"
    );
    anyhow::ensure!(
        args.beam_size >= 1 && args.sub_questions >= 1 && args.top_n >= 1,
        "--beam-size, --sub-questions and --top-n must be at least 1"
    );
    anyhow::ensure!(
        args.timeout > 0.0 && args.backoff >= 0.0 && args.backoff_max >= 0.0,
        "--timeout must be positive, --backoff and --backoff-max non-negative"
    );
    let started = Instant::now();
    let file_run = args.file_run();
    let config = args.config();
    let cache: Vec<(Named, Kind)> = config
        .cache
        .as_deref()
        .map(|d| (Named::new("the response cache directory", d), Kind::Dir))
        .into_iter()
        .collect();
    file_run.check_paths(&cache)?;
    let mut job = review::job(config)?;
    let run = files::run(&mut job, &file_run)?;
    Ok(ReviewSummary {
        tally: job.tally(),
        quarantined: run.stats.bad_rows,
        seconds: started.elapsed().as_secs_f64(),
        quarantine_path: run.quarantine_path,
        cache_dir: args.cache_dir(),
        interrupted: run.interrupted,
    })
}

/// `review` ran but answered no question.
const EXIT_NOTHING_ANSWERED: i32 = 3;

/// Prints the summary of a review run; 130 when it was interrupted, 3 when no question
/// was answered, else 0.
fn report(s: &ReviewSummary) -> i32 {
    let (t, c) = (&s.tally, &s.tally.calls);
    eprintln!(
        "{} questions: {} answered, {} failed, {} quarantined → {}; {} LLM calls ({} from \
         the cache{}), {} retries, {} prompt + {} completion tokens, {} parse failures, \
         {:.1} s",
        t.answered + t.failed,
        t.answered,
        t.failed,
        s.quarantined,
        s.quarantine_path.display(),
        c.llm_calls,
        c.cached_calls,
        s.cache_dir
            .as_ref()
            .map_or(String::new(), |d| format!(" {}", d.display())),
        c.retries,
        c.prompt_tokens,
        c.completion_tokens,
        t.parse_failures,
        s.seconds
    );
    if s.interrupted {
        eprintln!(
            "interrupted: the rows finished so far are written ({} interrupted questions \
             left out); run the same command with --resume (the cache answers the calls \
             already made)",
            t.interrupted
        );
        return super::entry::EXIT_INTERRUPTED;
    }
    let why = t
        .first_failure
        .as_ref()
        .map_or("see the quarantine file", |(_, why)| why.as_str());
    if t.answered == 0 && t.failed + s.quarantined > 0 {
        eprintln!(
            "error: no question was answered ({} failed, {} quarantined); first failure: {why}",
            t.failed, s.quarantined
        );
        return EXIT_NOTHING_ANSWERED;
    }
    if t.failed > 0 {
        eprintln!(
            "warning: {} of {} questions failed (`status` = failed); first failure: {why}",
            t.failed,
            t.answered + t.failed
        );
    }
    0
}

impl super::Run for ReviewArgs {
    fn run(&self) -> Result<i32> {
        Ok(report(&run(self)?))
    }
}
