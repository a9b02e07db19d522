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

use anyhow::Result;
use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use crossbeam_channel::{Receiver, Sender};

use super::questions::{process_batch, question_source, Prepare};
use super::review_io::{read_chains, review_batch, ReviewRow};
use super::{with_metadata, Job, JobOutput};
use crate::io::metadata::tool_metadata;
use crate::io::quarantine::BadRow;
use crate::io::questions::{check_schema, Question};
use crate::io::schemas::review_schema;
use crate::pipeline::engine::Status;
use crate::pipeline::files::{FileJob, Source, ToBatch};
use crate::pipeline::{Admission, Engine, Finished, PipelineStats};
use crate::post::allies::{self, AlliesConfig};
use crate::post::cache::ResponseCache;
use crate::post::client::{ChatClient, ClientConfig};
use crate::post::tor::{self, TorConfig};
use crate::post::{Bm25Retriever, CallStats, Doc, Retriever, Session};
use crate::retrieve::Corpus;

/// The LLM strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum ReviewStrategy {
    /// Tree of Reviews (docs/spec.md §4).
    Tor,
    /// ALLIES (docs/spec.md §5).
    Allies,
}

/// What to call and how to search.
#[derive(Debug, Clone)]
pub struct ReviewConfig {
    pub strategy: ReviewStrategy,
    /// The question file, as named in the run metadata (`hopscore.input`).
    pub input: PathBuf,
    /// Chains from `hopscore beam` (`id`, `chain`): a question's chain passages replace
    /// the first retrieval.
    pub chains: Option<PathBuf>,
    /// Retrieve new queries from this corpus (`id`, `title`, `text`) instead of the
    /// question's own passages.
    pub corpus: Option<PathBuf>,
    /// The endpoint, model, sampling and retry settings.
    pub client: ClientConfig,
    /// Response cache directory (`None`: no cache).
    pub cache: Option<PathBuf>,
    /// Calls in flight at once (worker threads).
    pub concurrency: usize,
    /// ToR settings (`widths` holds one entry per depth).
    pub tor: TorConfig,
    pub allies: AlliesConfig,
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
    config: ReviewConfig,
    client: ChatClient,
    chains: HashMap<String, Vec<usize>>,
    corpus: Option<Corpus>,
    metadata: Vec<(String, String)>,
    tally: Mutex<ReviewTally>,
}

/// Loads the chains and the corpus and opens the client (and its cache).
pub fn job(config: ReviewConfig) -> Result<ReviewJob> {
    anyhow::ensure!(config.concurrency >= 1, "--concurrency must be at least 1");
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
    let cache = config
        .cache
        .as_deref()
        .map(ResponseCache::open)
        .transpose()?;
    let client = ChatClient::new(config.client.clone(), cache)?;
    Ok(ReviewJob {
        metadata: metadata(&config),
        config,
        client,
        chains,
        corpus,
        tally: Mutex::default(),
    })
}

/// The output's `hopscore.*` metadata: strategy settings, endpoint, model, inputs.
fn metadata(c: &ReviewConfig) -> Vec<(String, String)> {
    let mut options = match c.strategy {
        ReviewStrategy::Tor => vec![
            ("strategy", "tor".to_string()),
            ("widths", format!("{:?}", c.tor.widths)),
            ("expansion", format!("{:?}", c.tor.expansion).to_lowercase()),
            ("relevance_pruning", c.tor.relevance_pruning.to_string()),
            ("repetitive_pruning", c.tor.repetitive_pruning.to_string()),
        ],
        ReviewStrategy::Allies => vec![
            ("strategy", "allies".to_string()),
            ("beam_size", c.allies.beam_size.to_string()),
            ("beam_depth", c.allies.depth.to_string()),
            ("sub_questions", c.allies.sub_questions.to_string()),
            ("top_n", c.allies.top_n.to_string()),
            ("threshold", c.allies.threshold.to_string()),
        ],
    };
    let path_or = |p: &Option<PathBuf>, none: &str, f: fn(String) -> String| {
        p.as_ref()
            .map_or(none.to_string(), |p| f(p.display().to_string()))
    };
    options.extend([
        ("llm_endpoint", c.client.endpoint.clone()),
        ("llm_model", c.client.model.clone()),
        ("temperature", c.client.temperature.to_string()),
        ("max_tokens", c.client.max_tokens.to_string()),
        ("input", c.input.display().to_string()),
        ("chains", path_or(&c.chains, "none", |p| p)),
        (
            "retrieval",
            path_or(&c.corpus, "bm25 over the question's passages", |p| {
                format!("bm25 over {p}")
            }),
        ),
    ]);
    tool_metadata(&options)
}

impl ReviewJob {
    /// The counts of the questions reviewed so far.
    pub fn tally(&self) -> ReviewTally {
        self.tally.lock().expect("tally lock").clone()
    }

    fn stopped(&self) -> bool {
        self.config
            .client
            .stop
            .is_some_and(|s: &AtomicBool| s.load(Ordering::SeqCst))
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
        let outcome = match self.config.strategy {
            ReviewStrategy::Tor => tor::run(
                &q.question,
                initial,
                &retriever,
                &mut session,
                &self.config.tor,
            ),
            ReviewStrategy::Allies => allies::run(
                &q.question,
                initial,
                &retriever,
                &mut session,
                &self.config.allies,
            ),
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
        2 * self.config.concurrency
    }

    fn run(
        &mut self,
        rx: Receiver<(u64, Admission<Question>)>,
        tx: Sender<(u64, Finished<ReviewRow>)>,
        status: Status,
    ) -> Result<PipelineStats> {
        let this = &*self;
        let (rows, bad_rows) = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..this.config.concurrency)
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

impl Job for ReviewJob {
    fn check_input(&self, input: &Schema) -> Result<()> {
        check_schema(input, "the input batch")
    }

    fn output_schema(&self, _input: &Schema) -> Result<SchemaRef> {
        Ok(with_metadata(&review_schema(), &self.metadata))
    }

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn batch_rows(&self) -> usize {
        64
    }

    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
        self.check_input(&batch.schema())?;
        let schemas = (
            self.output_schema(&batch.schema())?,
            self.quarantine_schema(),
        );
        process_batch(self, as_task(), batch, rows, schemas)
    }
}

impl crate::jobs::JobKind for ReviewConfig {
    const NAME: &'static str = "review";

    /// Refused: a review's endpoint client and stop flag are built in Rust.
    fn from_options(_: &crate::jobs::options::OptionMap) -> Result<Self> {
        anyhow::bail!(
            "`review` is not built from options by name: build a `ReviewConfig` in Rust, or \
             run `hopscore review`"
        )
    }

    /// Runs no model: `be` is not used.
    fn load<B: crate::backend::Backend + 'static>(self, _be: B) -> Result<Box<dyn Job>> {
        Ok(Box::new(job(self)?))
    }
}
