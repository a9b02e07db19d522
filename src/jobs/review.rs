//! The review job: the LLM post-stage (Tree of Reviews or ALLIES) over question rows,
//! optionally starting from the chains of `hopscore beam`, against an
//! OpenAI-compatible endpoint.
//!
//! Its engine is `concurrency` worker threads, each reviewing one question at a time,
//! so at most that many calls are in flight; rows come out in input order (the file
//! runner's parts, or the sorted batch of [`Job::process`]). A question whose call
//! fails for good (retries exhausted, or a 4xx) is an output row with `status =
//! failed` and the reason; a question that cannot be reviewed (a chain naming a
//! missing passage) is quarantined. A question whose calls a stop (Ctrl-C) cut short
//! is left unfinished, for a later run (the cache serving the calls already made).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use crossbeam_channel::{Receiver, Sender};

use super::questions::{admit_questions, question_source, Prepare};
use super::review_io::{read_chains, review_batch, ReviewRow};
use crate::io::metadata::tool_metadata;
use crate::io::parquet_io::sibling;
use crate::io::paths::{Kind, Named};
use crate::io::quarantine::BadRow;
use crate::io::questions::{check_schema, Question};
use crate::io::schemas::review_schema;
use crate::options::{self, Options};
use crate::pipeline::engine::Status;
use crate::pipeline::files::{self, FileJob, FileRun, RunSummary, Source, ToBatch};
use crate::pipeline::{Admission, Engine, Finished, PipelineStats};
use crate::post::allies::{self, AlliesConfig};
use crate::post::cache::ResponseCache;
use crate::post::client::{ChatClient, ClientConfig};
use crate::post::tor::{self, Expansion, TorConfig};
use crate::post::{Bm25Retriever, CallStats, Doc, Retriever, Session};
use crate::retrieve::Corpus;
use crate::stop::INTERRUPTED;

/// The LLM strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ReviewStrategy {
    /// Tree of Reviews (docs/spec.md §4).
    Tor,
    /// ALLIES (docs/spec.md §5).
    Allies,
}

/// What to call and how to search: the flags of `hopscore review` and the options of
/// Python's `hopscore.Review`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ReviewConfig {
    /// `tor` (Tree of Reviews) or `allies`.
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub strategy: ReviewStrategy,
    /// Chains from `hopscore beam` (`id`, `chain`): a question's chain passages replace
    /// the first retrieval (ToR's first-level nodes, ALLIES's first evidence).
    #[cfg_attr(feature = "cli", arg(long))]
    pub chains: Option<PathBuf>,
    /// Retrieve new queries from this corpus (`id`, `title`, `text`) instead of the
    /// question's own passages.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "chains"))]
    pub corpus: Option<PathBuf>,
    /// Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_LLM_ENDPOINT"))]
    pub endpoint: String,
    /// Model name sent with every request.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_LLM_MODEL"))]
    pub llm_model: String,
    /// Environment variable holding the API key (sent as a Bearer token when set).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().api_key_env))]
    pub api_key_env: String,
    /// Calls in flight at once (one worker thread per call).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().concurrency,
        value_parser = crate::options::values::positive_usize))]
    pub concurrency: usize,
    /// Response cache directory. Default on the command line: `<output stem>.llm-cache`
    /// next to the output; in the library: no cache.
    #[cfg_attr(feature = "cli", arg(long))]
    pub cache: Option<PathBuf>,
    /// Send every request, read and write no cache.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "cache"))]
    pub no_cache: bool,
    /// Seconds one HTTP attempt may take (connect, wait and read).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().timeout,
        value_parser = crate::options::values::positive_f64))]
    pub timeout: f64,
    /// Retries per call on 429/408/5xx, timeouts, connection errors and malformed bodies.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().max_retries))]
    pub max_retries: u32,
    /// First retry wait in seconds (doubled per retry, jittered; `Retry-After` wins).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().backoff,
        value_parser = crate::options::values::non_negative_f64))]
    pub backoff: f64,
    /// Longest retry wait in seconds without a `Retry-After`.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().backoff_max,
        value_parser = crate::options::values::non_negative_f64))]
    pub backoff_max: f64,
    /// Sampling temperature (the papers use 0).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().temperature,
        value_parser = crate::options::values::non_negative_f32))]
    pub temperature: f32,
    /// Longest reply, in tokens.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().max_tokens,
        value_parser = crate::options::values::positive_u32))]
    pub max_tokens: u32,
    /// ToR: tree depth (paper: 3).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().depth,
        value_parser = crate::options::values::positive_usize))]
    pub depth: usize,
    /// ToR: children per node at each depth, the last repeated for deeper levels (paper: 5,3,3).
    #[cfg_attr(feature = "cli", arg(long, value_delimiter = ',', default_value = "5,3,3",
        value_parser = crate::options::values::positive_usize))]
    pub widths: Vec<usize>,
    /// ToR: how an unsupported path makes its next query (paper's main setting: mpc).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = ReviewConfig::defaults().expansion))]
    pub expansion: Expansion,
    /// ToR: expand IRRELEVANT nodes too (ablation).
    #[cfg_attr(feature = "cli", arg(long))]
    pub no_relevance_pruning: bool,
    /// ToR: keep retrieved passages that are already evidence (ablation).
    #[cfg_attr(feature = "cli", arg(long))]
    pub no_repetitive_pruning: bool,
    /// ALLIES: B, states kept per round.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().beam_size,
        value_parser = crate::options::values::positive_usize))]
    pub beam_size: usize,
    /// ALLIES: D, rounds.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().beam_depth))]
    pub beam_depth: usize,
    /// ALLIES: K, sub-questions asked per state.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().sub_questions,
        value_parser = crate::options::values::positive_usize))]
    pub sub_questions: usize,
    /// ALLIES: N, passages retrieved per query.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().top_n,
        value_parser = crate::options::values::positive_usize))]
    pub top_n: usize,
    /// ALLIES: stop when a kept state scores at least this.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ReviewConfig::defaults().threshold,
        value_parser = crate::options::values::finite_f64))]
    pub threshold: f64,
}

impl Options for ReviewConfig {
    /// Every option at the command line's default; `strategy`, `endpoint` and
    /// `llm_model` must be given.
    fn defaults() -> Self {
        Self {
            strategy: ReviewStrategy::Tor,
            chains: None,
            corpus: None,
            endpoint: String::new(),
            llm_model: String::new(),
            api_key_env: "OPENAI_API_KEY".into(),
            concurrency: 4,
            cache: None,
            no_cache: false,
            timeout: 120.0,
            max_retries: 8,
            backoff: 1.0,
            backoff_max: 60.0,
            temperature: 0.0,
            max_tokens: 512,
            depth: 3,
            widths: vec![5, 3, 3],
            expansion: Expansion::Mpc,
            no_relevance_pruning: false,
            no_repetitive_pruning: false,
            beam_size: 2,
            beam_depth: 2,
            sub_questions: 2,
            top_n: 2,
            threshold: 0.8,
        }
    }

    fn check(&self) -> Result<()> {
        // Worker threads, tree depth and node children each have a bound, so that a
        // mistyped count is refused instead of spawning or allocating without end.
        const MAX_CONCURRENCY: usize = 1024;
        const MAX_DEPTH: usize = 16;
        const MAX_WIDTH: usize = 100;
        for (option, value) in [
            ("concurrency", self.concurrency),
            ("depth", self.depth),
            ("beam_size", self.beam_size),
            ("sub_questions", self.sub_questions),
            ("top_n", self.top_n),
            ("max_tokens", self.max_tokens as usize),
        ] {
            options::at_least_one(option, value)?;
        }
        anyhow::ensure!(
            !self.widths.is_empty() && self.widths.iter().all(|&w| w >= 1),
            "--widths (widths): every entry must be at least 1, got {:?}",
            self.widths
        );
        options::at_most(
            "concurrency",
            self.concurrency,
            MAX_CONCURRENCY,
            "a thread each",
        )?;
        options::at_most(
            "depth",
            self.depth,
            MAX_DEPTH,
            "a tree grows by the widths' product",
        )?;
        options::at_most("beam_depth", self.beam_depth, MAX_DEPTH, "ALLIES' rounds")?;
        for &w in &self.widths {
            options::at_most("widths", w, MAX_WIDTH, "children of one node")?;
        }
        let (tor, allies): (&[&str], &[&str]) = (
            &[
                "depth",
                "widths",
                "expansion",
                "no_relevance_pruning",
                "no_repetitive_pruning",
            ],
            &[
                "beam_size",
                "beam_depth",
                "sub_questions",
                "top_n",
                "threshold",
            ],
        );
        match self.strategy {
            ReviewStrategy::Tor => {
                options::unused_in_mode(self, "--strategy tor", "--strategy allies", allies)?
            }
            ReviewStrategy::Allies => {
                options::unused_in_mode(self, "--strategy allies", "--strategy tor", tor)?
            }
        }
        options::wait_secs("timeout", self.timeout, true)?;
        options::wait_secs("backoff", self.backoff, false)?;
        options::wait_secs("backoff_max", self.backoff_max, false)?;
        options::non_negative("temperature", self.temperature)?;
        options::finite("threshold", self.threshold, false)
    }

    fn inputs(&self) -> Vec<Named> {
        options::named(&[
            ("--chains", self.chains.as_deref()),
            ("--corpus", self.corpus.as_deref()),
        ])
    }
}

impl ReviewConfig {
    /// The defaults (the command line's) for `strategy` against `endpoint` serving
    /// `llm_model`.
    pub fn new(strategy: ReviewStrategy, endpoint: &str, llm_model: &str) -> Self {
        Self {
            strategy,
            endpoint: endpoint.into(),
            llm_model: llm_model.into(),
            ..Self::defaults()
        }
    }

    /// The response cache directory of a run writing `output`: `cache`, else
    /// `<output stem>.llm-cache`; `None` with `no_cache`.
    pub fn cache_dir(&self, output: &Path) -> Option<PathBuf> {
        (!self.no_cache).then(|| {
            self.cache
                .clone()
                .unwrap_or_else(|| sibling(output, "llm-cache").with_extension(""))
        })
    }

    /// The API key from the variable `api_key_env` names; a variable named by
    /// `--api-key-env` (not the default) that is unset or empty is said once.
    fn api_key(&self) -> Option<String> {
        let key = std::env::var(&self.api_key_env)
            .ok()
            .filter(|k| !k.trim().is_empty());
        if key.is_none() && self.api_key_env != Self::defaults().api_key_env {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                log::warn!(
                    "--api-key-env {0}: {0} is not set (or empty); requests go without an \
                     API key",
                    self.api_key_env
                )
            });
        }
        key.map(|k| k.trim().to_string())
    }

    /// The client's settings (the API key read from `api_key_env`), stopped by `stop`.
    fn client(&self, stop: Option<&'static AtomicBool>) -> ClientConfig {
        ClientConfig {
            endpoint: self.endpoint.clone(),
            model: self.llm_model.clone(),
            api_key: self.api_key(),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            timeout: Duration::from_secs_f64(self.timeout),
            max_retries: self.max_retries,
            backoff_base: Duration::from_secs_f64(self.backoff),
            backoff_max: Duration::from_secs_f64(self.backoff_max),
            stop,
        }
    }

    /// ToR's settings: `widths` to one entry per depth, the last repeated.
    fn tor(&self) -> TorConfig {
        TorConfig {
            widths: (0..self.depth)
                .map(|d| self.widths[d.min(self.widths.len() - 1)])
                .collect(),
            expansion: self.expansion,
            relevance_pruning: !self.no_relevance_pruning,
            repetitive_pruning: !self.no_repetitive_pruning,
        }
    }

    fn allies(&self) -> AlliesConfig {
        AlliesConfig {
            beam_size: self.beam_size,
            depth: self.beam_depth,
            sub_questions: self.sub_questions,
            top_n: self.top_n,
            threshold: self.threshold,
        }
    }
}

/// What a review run over files reports: the file runner's counts, the reviewed
/// questions' tally and the cache it used.
#[derive(Debug, Clone)]
pub struct ReviewSummary {
    pub run: RunSummary,
    /// The reviewed questions (this run's).
    pub tally: ReviewTally,
    pub cache_dir: Option<PathBuf>,
}

/// The counts of the questions a job has reviewed.
#[derive(Debug, Clone, Default)]
pub struct ReviewTally {
    pub answered: u64,
    pub failed: u64,
    /// The row and reason of the first failed question (by row).
    pub first_failure: Option<(u64, String)>,
    /// Questions a stop cut short (left unfinished).
    pub interrupted: u64,
    pub calls: CallStats,
    pub parse_failures: u64,
}

impl ReviewTally {
    fn add(&mut self, row: u64, r: &ReviewRow) {
        if r.answer.is_some() {
            self.answered += 1;
        } else {
            self.failed += 1;
            if self
                .first_failure
                .as_ref()
                .is_none_or(|(first, _)| row < *first)
            {
                self.first_failure = r.failure.clone().map(|why| (row, why));
            }
        }
        self.calls += r.stats;
        self.parse_failures += r.parse_failures.len() as u64;
    }
}

/// A loaded review job.
pub struct ReviewJob {
    strategy: ReviewStrategy,
    concurrency: usize,
    tor: TorConfig,
    allies: AlliesConfig,
    stop: Option<&'static AtomicBool>,
    client: ChatClient,
    chains: HashMap<String, Vec<usize>>,
    corpus: Option<Corpus>,
    metadata: Vec<(String, String)>,
    tally: Mutex<ReviewTally>,
    /// The response cache's directory (`None`: no cache).
    cache_dir: Option<PathBuf>,
}

/// Where a review runs: its input file (named in the metadata; `None` for batches),
/// its response cache (`None`: none) and the flag that stops its calls (`None`: never).
pub struct ReviewRun<'a> {
    pub input: Option<&'a Path>,
    pub cache: Option<PathBuf>,
    pub stop: Option<&'static AtomicBool>,
}

/// Loads the chains and the corpus and opens the client (and its cache).
pub fn job(config: ReviewConfig, run: ReviewRun) -> Result<ReviewJob> {
    config.check()?;
    let chains = match &config.chains {
        Some(p) => read_chains(p)?,
        None => HashMap::new(),
    };
    let corpus = config
        .corpus
        .as_deref()
        .map(|p| {
            let c = Corpus::from_parquet(p)?;
            anyhow::ensure!(
                !c.is_empty(),
                "the corpus {} has no usable passage",
                p.display()
            );
            Ok(c)
        })
        .transpose()?;
    let cache = run.cache.as_deref().map(ResponseCache::open).transpose()?;
    let client = ChatClient::new(config.client(run.stop), cache)?;
    let cache_dir = run.cache;
    let tor = config.tor();
    Ok(ReviewJob {
        metadata: metadata(&config, &tor, run.input)?,
        strategy: config.strategy,
        concurrency: config.concurrency,
        allies: config.allies(),
        tor,
        stop: run.stop,
        client,
        chains,
        corpus,
        tally: Mutex::default(),
        cache_dir,
    })
}

/// The output's `hopscore.*` metadata: every option ([`options::record`]), the
/// widths per depth that Tree of Reviews runs, the endpoint, the input and where the
/// retrieval reads.
fn metadata(
    c: &ReviewConfig,
    tor: &TorConfig,
    input: Option<&Path>,
) -> Result<Vec<(String, String)>> {
    let widths: Vec<String> = tor.widths.iter().map(usize::to_string).collect();
    let mut resolved = vec![
        ("widths", widths.join(",")),
        ("relevance_pruning", tor.relevance_pruning.to_string()),
        ("repetitive_pruning", tor.repetitive_pruning.to_string()),
        ("llm_endpoint", c.endpoint.clone()),
    ];
    resolved.extend(input.map(|p| ("input", p.display().to_string())));
    let path_or = |p: &Option<PathBuf>, none: &str, f: fn(String) -> String| {
        p.as_ref()
            .map_or(none.to_string(), |p| f(p.display().to_string()))
    };
    resolved.extend([
        ("chains", path_or(&c.chains, "none", |p| p)),
        (
            "retrieval",
            path_or(&c.corpus, "bm25 over the question's passages", |p| {
                format!("bm25 over {p}")
            }),
        ),
    ]);
    Ok(tool_metadata(&options::record(c, &resolved)?))
}

impl ReviewJob {
    /// The counts of the questions reviewed so far.
    pub fn tally(&self) -> ReviewTally {
        self.tally.lock().expect("tally lock").clone()
    }

    fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::SeqCst))
    }

    /// Reviews one question; [`Finished::Left`] when a stop cut it short.
    fn review(&self, row: u64, q: &Question, status: Status) -> Finished<ReviewRow> {
        let r = match self.review_row(row, q) {
            Ok(r) => r,
            Err(bad) => return Finished::Bad(bad),
        };
        let mut tally = self.tally.lock().expect("tally lock");
        if r.answer.is_none() && self.stopped() {
            tally.interrupted += 1;
            return Finished::Left;
        }
        tally.add(row, &r);
        let c = tally.calls;
        status(format!(
            "{} calls ({} cached), {} retries",
            c.llm_calls, c.cached_calls, c.retries
        ));
        Finished::Done(r)
    }

    /// The output row of one question, or why it cannot be reviewed.
    fn review_row(&self, row: u64, q: &Question) -> Result<ReviewRow, BadRow> {
        let bad = |reason: String| BadRow {
            row,
            id: Some(q.id.clone()),
            reason,
        };
        let retriever = match &self.corpus {
            Some(c) => Bm25Retriever::Corpus(c),
            None => Bm25Retriever::pool(&q.passages),
        };
        let initial = match self.chains.get(&q.id) {
            Some(chain) => Some(
                chain
                    .iter()
                    .map(|&i| {
                        retriever.doc(i).ok_or_else(|| {
                            bad(format!(
                                "the chain names passage {i}; the question has {}",
                                q.passages.len()
                            ))
                        })
                    })
                    .collect::<Result<Vec<Doc>, BadRow>>()?,
            ),
            None => None,
        };
        let from_chain = initial.is_some();
        let mut session = Session::new(&self.client);
        let outcome = match self.strategy {
            ReviewStrategy::Tor => {
                tor::run(&q.question, initial, &retriever, &mut session, &self.tor)
            }
            ReviewStrategy::Allies => {
                allies::run(&q.question, initial, &retriever, &mut session, &self.allies)
            }
        };
        let (answer, failure, evidence, trace) = match outcome {
            Ok(o) => {
                let failure = o
                    .answer
                    .is_none()
                    .then(|| "the final reply held no answer".to_string());
                (o.answer, failure, o.evidence, o.trace)
            }
            Err(e) => (
                None,
                Some(format!("LLM call failed: {}", e.reason)),
                Vec::new(),
                serde_json::Value::Null,
            ),
        };
        let doc = |i: &usize| {
            retriever
                .doc(*i)
                .expect("evidence comes from the retriever")
        };
        let trace = serde_json::json!({ "initial": if from_chain { "chain" } else { "retrieval" }, "search": trace });
        let corpus = self.corpus.as_ref();
        Ok(ReviewRow {
            id: q.id.clone(),
            answer,
            failure,
            chain: if corpus.is_none() {
                evidence.clone()
            } else {
                Vec::new()
            },
            titles: evidence.iter().map(|i| doc(i).title).collect(),
            corpus_ids: corpus
                .map(|c| evidence.iter().map(|&i| c.ids[i].clone()).collect())
                .unwrap_or_default(),
            trace: trace.to_string(),
            stats: session.stats,
            parse_failures: session.parse_failures,
        })
    }
}

/// A question is its own task.
fn as_task() -> Prepare<Question> {
    Arc::new(|q: &Question| Ok(q.clone()))
}

/// `concurrency` workers, each reviewing one question at a time; `None`: a question
/// a stop cut short.
impl Engine for ReviewJob {
    type Task = Question;
    type Out = ReviewRow;

    fn queue_rows(&self) -> usize {
        2 * self.concurrency
    }

    fn run(
        &mut self,
        rx: Receiver<(u64, Admission<Question>)>,
        tx: Sender<(u64, Finished<ReviewRow>)>,
        status: Status,
    ) -> Result<PipelineStats> {
        let this = &*self;
        let (rows, bad_rows) = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..this.concurrency)
                .map(|_| {
                    let (rx, tx) = (rx.clone(), tx.clone());
                    scope.spawn(move || {
                        let (mut rows, mut bad) = (0u64, 0u64);
                        for (row, admission) in rx {
                            rows += 1;
                            let item = match admission {
                                Admission::Bad(b) => Finished::Bad(b),
                                Admission::Task(q) => this.review(row, &q, status),
                            };
                            bad += u64::from(matches!(item, Finished::Bad(_)));
                            if tx.send((row, item)).is_err() {
                                break; // the writer stopped; its error is reported
                            }
                        }
                        (rows, bad)
                    })
                })
                .collect();
            drop((rx, tx));
            workers.into_iter().fold((0, 0), |(r, b), w| {
                let (wr, wb) = w.join().expect("a review worker panicked");
                (r + wr, b + wb)
            })
        });
        Ok(PipelineStats {
            rows,
            bad_rows,
            ..Default::default()
        })
    }
}

impl FileJob for ReviewJob {
    type Row = ReviewRow;

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The footer keeps the keys `hopscore review` has always written (`input` names
    /// the file); the resume fingerprint still covers the input's checksum.
    fn records_input(&self) -> bool {
        false
    }

    /// As `hopscore review` always did: a Ctrl-C leaves the rows finished so far in the
    /// output file.
    fn writes_partial_output(&self) -> bool {
        true
    }

    fn check_input(&self, input: &Schema) -> Result<()> {
        check_schema(input, "the input batch")
    }

    fn output_columns(&self, _input: &Schema) -> Result<SchemaRef> {
        Ok(review_schema())
    }

    fn batch_rows(&self) -> usize {
        64
    }

    fn admit_batch(
        &self,
        batch: &RecordBatch,
        rows: &[u64],
    ) -> Result<Vec<(u64, Admission<Question>)>> {
        admit_questions(&as_task(), batch, rows)
    }

    fn open(&self, input: &Path) -> Result<Source<Question>> {
        question_source(input, review_schema(), as_task())
    }

    fn settle(_row: u64, item: Finished<ReviewRow>) -> Option<Result<ReviewRow, BadRow>> {
        item.settled()
    }

    fn to_batch(&self, _schema: SchemaRef) -> ToBatch<ReviewRow> {
        Arc::new(review_batch)
    }
}

impl crate::jobs::JobKind for ReviewConfig {
    const NAME: &'static str = "review";
    const ABOUT: &'static str =
        "LLM post-stage (Tree of Reviews or ALLIES) against an OpenAI-compatible endpoint";
    const REQUIRED: &'static [&'static str] = &["strategy", "endpoint", "llm_model"];
    const ROW: &'static str = "question";
    type Device = crate::jobs::NoDevice;
    type Summary = ReviewSummary;
    const RUNS_MODEL: bool = false;
    type Files = crate::pipeline::files::FileRun;
}

impl crate::jobs::FileJobKind for ReviewConfig {
    /// Runs no model: the backend is not used.
    type Job<B: crate::backend::Backend + 'static> = ReviewJob;

    /// For batches: no cache unless `cache` names one; calls stop at the process's stop
    /// flag (Python's bindings set it on Ctrl-C).
    fn job<B: crate::backend::Backend + 'static>(self, _be: B) -> Result<ReviewJob> {
        let cache = if self.no_cache {
            None
        } else {
            self.cache.clone()
        };
        let run = ReviewRun {
            input: None,
            cache,
            stop: Some(&INTERRUPTED),
        };
        job(self, run)
    }

    fn summary<B: crate::backend::Backend + 'static>(
        job: &ReviewJob,
        run: RunSummary,
    ) -> ReviewSummary {
        ReviewSummary {
            run,
            tally: job.tally(),
            cache_dir: job.cache_dir.clone(),
        }
    }

    /// With the response cache `<output stem>.llm-cache` unless `cache` or `no_cache`
    /// says otherwise; Ctrl-C ends the waits between retries at once, and the
    /// questions it cuts short are left for `--resume`.
    fn run_files(
        self,
        _device: &crate::jobs::DeviceConfig,
        run: &FileRun,
    ) -> Result<ReviewSummary> {
        anyhow::ensure!(
            run.shard.is_none(),
            "review takes no --shard: its output records no shard, so `hopscore merge` \
             could not join the parts; run one review over the whole question file (the \
             response cache makes a rerun cheap), or split the file before review"
        );
        let cache_dir = self.cache_dir(&run.output);
        let cache: Vec<(Named, Kind)> = cache_dir
            .as_deref()
            .map(|d| (Named::new("the response cache directory", d), Kind::Dir))
            .into_iter()
            .collect();
        run.check_paths(&cache)?;
        let review = ReviewRun {
            input: Some(&run.input),
            cache: cache_dir,
            stop: Some(&INTERRUPTED),
        };
        let mut job = job(self, review)?;
        let summary = files::run(&mut job, run)?;
        Ok(Self::summary::<crate::backend::cpu::CpuBackend>(
            &job, summary,
        ))
    }
}
