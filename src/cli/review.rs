//! `hopscore review`: the LLM post-stage (Tree of Reviews or ALLIES) over a question
//! file, optionally starting from the chains of `hopscore beam`, against an
//! OpenAI-compatible endpoint.
//!
//! `--concurrency N` worker threads each drive one question at a time, so at most N
//! calls are in flight; a reader thread feeds them and the main thread writes the rows
//! in input order. A question whose call fails for good (retries exhausted, or a 4xx) is
//! written with `status = failed` and the reason; the run goes on. Ctrl-C ends the
//! waits between retries at once; the questions it interrupts are left out of the
//! output (a rerun answers them, the cache serving the calls already made).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use arrow::array::{
    Array, ArrayRef, AsArray, Int32Builder, ListBuilder, RecordBatch, StringArray, StringBuilder,
    UInt32Array, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use clap::{Args, ValueEnum};

use crate::io::atomic::commit_all;
use crate::io::metadata::tool_metadata;
use crate::io::parquet_io::{sibling, string_column, BatchedWriter, ParquetInput};
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::quarantine::{BadRow, QuarantineWriter};
use crate::io::questions::{Question, QuestionReader};
use crate::pipeline::control::progress_bar;
use crate::post::allies::{self, AlliesConfig};
use crate::post::cache::ResponseCache;
use crate::post::client::{ChatClient, ClientConfig};
use crate::post::tor::{self, Expansion, TorConfig};
use crate::post::{Bm25Retriever, CallStats, Doc, Llm, Retriever, Session};
use crate::retrieve::Corpus;

/// Rows written per output record batch.
const WRITE_ROWS: usize = 64;

/// The LLM strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    /// Tree of Reviews (SPEC §4).
    Tor,
    /// ALLIES (SPEC §5).
    Allies,
}

#[derive(Debug, Clone, Args)]
pub struct ReviewArgs {
    #[arg(long, value_enum)]
    pub strategy: StrategyArg,
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
}

/// Counts of a run.
#[derive(Debug, Clone, Default)]
pub struct ReviewSummary {
    pub questions: u64,
    pub answered: u64,
    pub failed: u64,
    /// The reason of the first failed question.
    pub first_failure: Option<String>,
    pub quarantined: u64,
    /// Questions a Ctrl-C stopped in a retry wait (not written).
    pub interrupted_questions: u64,
    pub calls: CallStats,
    pub parse_failures: u64,
    pub seconds: f64,
    pub quarantine_path: PathBuf,
    pub cache_dir: Option<PathBuf>,
    /// Stopped by Ctrl-C: the rows finished so far are written.
    pub interrupted: bool,
}

/// One output row.
struct ReviewRow {
    id: String,
    answer: Option<String>,
    failure: Option<String>,
    chain: Vec<usize>,
    titles: Vec<String>,
    corpus_ids: Vec<String>,
    trace: String,
    stats: CallStats,
    parse_failures: Vec<String>,
}

/// Everything a worker needs besides the question.
struct Shared<'a> {
    args: &'a ReviewArgs,
    llm: &'a dyn Llm,
    chains: &'a HashMap<String, Vec<usize>>,
    corpus: Option<&'a Corpus>,
    tor: TorConfig,
    allies: AlliesConfig,
}

pub fn run(args: &ReviewArgs) -> Result<ReviewSummary> {
    crate::pipeline::control::install_interrupt_handler();
    anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
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
    let quarantine_path = args
        .quarantine
        .clone()
        .unwrap_or_else(|| sibling(&args.output, "quarantine"));
    let cache_dir = (!args.no_cache).then(|| {
        args.cache
            .clone()
            .unwrap_or_else(|| sibling(&args.output, "llm-cache").with_extension(""))
    });
    let mut inputs = vec![Named::new("--input", &args.input)];
    inputs.extend(args.chains.as_deref().map(|p| Named::new("--chains", p)));
    inputs.extend(args.corpus.as_deref().map(|p| Named::new("--corpus", p)));
    let mut outputs = vec![
        (Named::new("--output", &args.output), Kind::File),
        (
            Named::new("the quarantine file", &quarantine_path),
            Kind::File,
        ),
    ];
    outputs.extend(
        cache_dir
            .as_deref()
            .map(|d| (Named::new("the response cache directory", d), Kind::Dir)),
    );
    check_outputs(&inputs, &outputs)?;
    let chains = match &args.chains {
        Some(p) => read_chains(p)?,
        None => HashMap::new(),
    };
    let corpus = args
        .corpus
        .as_deref()
        .map(|p| {
            let c = Corpus::from_parquet(p)?;
            if c.skipped > 0 {
                eprintln!(
                    "corpus: {} rows skipped (first: {})",
                    c.skipped,
                    c.first_skip_reason.as_deref().unwrap_or("?")
                );
            }
            anyhow::ensure!(
                !c.is_empty(),
                "the corpus {} has no usable passage",
                p.display()
            );
            Ok(c)
        })
        .transpose()?;
    let client = client(args, cache_dir.as_deref())?;
    let widths: Vec<usize> = (0..args.depth)
        .map(|d| args.widths[d.min(args.widths.len() - 1)])
        .collect();
    let ctx = Shared {
        args,
        llm: &client,
        chains: &chains,
        corpus: corpus.as_ref(),
        tor: TorConfig {
            widths: widths.clone(),
            expansion: args.expansion,
            relevance_pruning: !args.no_relevance_pruning,
            repetitive_pruning: !args.no_repetitive_pruning,
        },
        allies: AlliesConfig {
            beam_size: args.beam_size,
            depth: args.beam_depth,
            sub_questions: args.sub_questions,
            top_n: args.top_n,
            threshold: args.threshold,
        },
    };
    let metadata = metadata(args, &widths);

    let reader = QuestionReader::open(&args.input, 64)?;
    let total = args
        .limit
        .map_or(reader.total_rows(), |l| l.min(reader.total_rows()));
    let mut writer = BatchedWriter::create(
        &args.output,
        review_schema(),
        &metadata,
        WRITE_ROWS,
        review_batch,
    )?;
    let mut quarantine = QuarantineWriter::create(&quarantine_path, &metadata)?;
    let bar = progress_bar(total, "questions");
    let mut summary = ReviewSummary {
        quarantine_path: quarantine_path.clone(),
        cache_dir,
        ..Default::default()
    };
    let (job_tx, job_rx) = crossbeam_channel::bounded::<(u64, Question)>(2 * args.concurrency);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<(u64, Reviewed)>();
    std::thread::scope(|scope| -> Result<()> {
        let read_done = done_tx.clone();
        let read = scope.spawn(move || -> Result<()> {
            for (row, item) in (0u64..).zip(reader).take(total as usize) {
                if crate::pipeline::control::INTERRUPTED.load(Ordering::SeqCst) {
                    break;
                }
                match item? {
                    Ok(q) => {
                        if job_tx.send((row, q)).is_err() {
                            break;
                        }
                    }
                    Err(bad) => {
                        let _ = read_done.send((row, Reviewed::Bad(bad)));
                    }
                }
            }
            Ok(())
        });
        for _ in 0..args.concurrency {
            let (rx, tx, ctx) = (job_rx.clone(), done_tx.clone(), &ctx);
            scope.spawn(move || {
                for (row, q) in rx {
                    let _ = tx.send((row, review(ctx, row, &q)));
                }
            });
        }
        drop((job_rx, done_tx));
        let mut pending: BTreeMap<u64, Reviewed> = BTreeMap::new();
        let mut next = 0u64;
        for (row, result) in done_rx {
            pending.insert(row, result);
            // Bad rows take no worker, so rows are written in order up to the first gap.
            while let Some(result) = pending.remove(&next) {
                match result {
                    Reviewed::Row(r) => {
                        summary.questions += 1;
                        if r.answer.is_some() {
                            summary.answered += 1;
                        } else {
                            summary.failed += 1;
                            if summary.first_failure.is_none() {
                                summary.first_failure = r.failure.clone();
                            }
                        }
                        summary.calls += r.stats;
                        summary.parse_failures += r.parse_failures.len() as u64;
                        writer.push(r)?;
                    }
                    Reviewed::Bad(bad) => {
                        summary.quarantined += 1;
                        quarantine.write(&[bad])?;
                    }
                    Reviewed::Interrupted => summary.interrupted_questions += 1,
                }
                next += 1;
                bar.inc(1);
                bar.set_message(format!(
                    "{} calls ({} cached), {} retries",
                    summary.calls.llm_calls, summary.calls.cached_calls, summary.calls.retries
                ));
            }
        }
        read.join().expect("the reader thread does not panic")
    })?;
    bar.finish_and_clear();
    let output = writer.seal()?;
    let (quarantine, _) = quarantine.seal()?;
    commit_all([output, quarantine])?;
    summary.interrupted = crate::pipeline::control::INTERRUPTED.load(Ordering::SeqCst);
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// The output's `hopscore.*` metadata: strategy settings, endpoint, model, inputs.
fn metadata(args: &ReviewArgs, widths: &[usize]) -> Vec<(String, String)> {
    let mut options = match args.strategy {
        StrategyArg::Tor => vec![
            ("strategy", "tor".to_string()),
            ("widths", format!("{widths:?}")),
            ("expansion", format!("{:?}", args.expansion).to_lowercase()),
            (
                "relevance_pruning",
                (!args.no_relevance_pruning).to_string(),
            ),
            (
                "repetitive_pruning",
                (!args.no_repetitive_pruning).to_string(),
            ),
        ],
        StrategyArg::Allies => vec![
            ("strategy", "allies".to_string()),
            ("beam_size", args.beam_size.to_string()),
            ("beam_depth", args.beam_depth.to_string()),
            ("sub_questions", args.sub_questions.to_string()),
            ("top_n", args.top_n.to_string()),
            ("threshold", args.threshold.to_string()),
        ],
    };
    options.extend([
        ("llm_endpoint", args.endpoint.clone()),
        ("llm_model", args.llm_model.clone()),
        ("temperature", args.temperature.to_string()),
        ("max_tokens", args.max_tokens.to_string()),
        ("input", args.input.display().to_string()),
        (
            "chains",
            args.chains
                .as_ref()
                .map_or("none".into(), |p| p.display().to_string()),
        ),
        (
            "retrieval",
            args.corpus
                .as_ref()
                .map_or("bm25 over the question's passages".into(), |p| {
                    format!("bm25 over {}", p.display())
                }),
        ),
    ]);
    tool_metadata(&options)
}

/// The HTTP client the flags describe, with its cache unless `--no-cache`.
fn client(args: &ReviewArgs, cache_dir: Option<&Path>) -> Result<ChatClient> {
    let cache = cache_dir.map(ResponseCache::open).transpose()?;
    ChatClient::new(
        ClientConfig {
            endpoint: args.endpoint.clone(),
            model: args.llm_model.clone(),
            api_key: std::env::var(&args.api_key_env)
                .ok()
                .filter(|k| !k.is_empty()),
            temperature: args.temperature,
            max_tokens: args.max_tokens,
            timeout: Duration::from_secs_f64(args.timeout),
            max_retries: args.max_retries,
            backoff_base: Duration::from_secs_f64(args.backoff),
            backoff_max: Duration::from_secs_f64(args.backoff_max),
            stop: Some(&crate::pipeline::control::INTERRUPTED),
        },
        cache,
    )
}

/// What became of one question.
enum Reviewed {
    Row(ReviewRow),
    Bad(BadRow),
    /// A Ctrl-C stopped its calls; it is not written.
    Interrupted,
}

/// Runs the strategy on one question.
fn review(ctx: &Shared, row: u64, q: &Question) -> Reviewed {
    match review_row(ctx, row, q) {
        Ok(r)
            if r.answer.is_none()
                && crate::pipeline::control::INTERRUPTED.load(Ordering::SeqCst) =>
        {
            Reviewed::Interrupted
        }
        Ok(r) => Reviewed::Row(r),
        Err(bad) => Reviewed::Bad(bad),
    }
}

/// The output row of one question, or why it cannot be reviewed.
fn review_row(ctx: &Shared, row: u64, q: &Question) -> Result<ReviewRow, BadRow> {
    let bad = |reason: String| BadRow {
        row,
        id: Some(q.id.clone()),
        reason,
    };
    let retriever = match ctx.corpus {
        Some(c) => Bm25Retriever::Corpus(c),
        None => Bm25Retriever::pool(&q.passages),
    };
    let initial = match ctx.chains.get(&q.id) {
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
    let mut session = Session::new(ctx.llm);
    let outcome = match ctx.args.strategy {
        StrategyArg::Tor => tor::run(&q.question, initial, &retriever, &mut session, &ctx.tor),
        StrategyArg::Allies => {
            allies::run(&q.question, initial, &retriever, &mut session, &ctx.allies)
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
    Ok(ReviewRow {
        id: q.id.clone(),
        answer,
        failure,
        chain: if ctx.corpus.is_none() {
            evidence.clone()
        } else {
            Vec::new()
        },
        titles: evidence.iter().map(|i| doc(i).title).collect(),
        corpus_ids: ctx
            .corpus
            .map(|c| evidence.iter().map(|&i| c.ids[i].clone()).collect())
            .unwrap_or_default(),
        trace: trace.to_string(),
        stats: session.stats,
        parse_failures: session.parse_failures,
    })
}

/// `id` → chain (passage indices) of a `hopscore beam` output.
fn read_chains(path: &Path) -> Result<HashMap<String, Vec<usize>>> {
    let mut input = ParquetInput::open(path, 1024)
        .with_context(|| format!("reading the chains {}", path.display()))?;
    input.check_column("id", &["string"], true)?;
    let as_list = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
    let mut out = HashMap::new();
    for batch in input.by_ref() {
        let batch = batch?;
        if let Some(bad) = batch.bad.first() {
            bail!("{} row {}: {}", path.display(), bad.row, bad.reason);
        }
        let batch = batch.batch;
        let ids = string_column(&batch, "id")?;
        let col = batch.column_by_name("chain").with_context(|| {
            format!(
                "{} has no column `chain` (write it with `hopscore beam`)",
                path.display()
            )
        })?;
        let chains = arrow::compute::cast(col, &as_list).with_context(|| {
            format!(
                "column `chain` of {} is not a list of integers",
                path.display()
            )
        })?;
        let chains = chains.as_list::<i32>();
        for r in 0..batch.num_rows() {
            if ids.is_null(r) || chains.is_null(r) {
                continue;
            }
            let values = chains.value(r);
            let values = values.as_primitive::<Int64Type>();
            if values.null_count() > 0 || values.values().iter().any(|&v| v < 0) {
                bail!(
                    "{}: the chain of {} holds a null or negative index",
                    path.display(),
                    ids.value(r)
                );
            }
            out.insert(
                ids.value(r).to_string(),
                values.values().iter().map(|&v| v as usize).collect(),
            );
        }
    }
    Ok(out)
}

fn string_list() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

/// Output columns, in order (documented in README, `hopscore review`).
fn review_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("answer", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, false),
        Field::new("failure", DataType::Utf8, true),
        Field::new(
            "chain",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            false,
        ),
        Field::new("evidence_titles", string_list(), false),
        Field::new("evidence_ids", string_list(), false),
        Field::new("trace", DataType::Utf8, false),
        Field::new("llm_calls", DataType::UInt32, false),
        Field::new("cached_calls", DataType::UInt32, false),
        Field::new("prompt_tokens", DataType::UInt64, false),
        Field::new("completion_tokens", DataType::UInt64, false),
        Field::new("retries", DataType::UInt32, false),
        Field::new("parse_failures", DataType::UInt32, false),
        Field::new("parse_failure_notes", string_list(), false),
    ]))
}

/// The record batch of `rows` in the [`review_schema`] layout.
fn review_batch(rows: Vec<ReviewRow>) -> Result<RecordBatch> {
    let strings = |f: &dyn Fn(&ReviewRow) -> &[String]| {
        let mut b = ListBuilder::new(StringBuilder::new());
        for r in &rows {
            f(r).iter().for_each(|s| b.values().append_value(s));
            b.append(true);
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let mut chain = ListBuilder::new(Int32Builder::new());
    for r in &rows {
        r.chain
            .iter()
            .for_each(|&i| chain.values().append_value(i as i32));
        chain.append(true);
    }
    let u32s = |f: &dyn Fn(&ReviewRow) -> u32| {
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(f))) as ArrayRef
    };
    let u64s = |f: &dyn Fn(&ReviewRow) -> u64| {
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(f))) as ArrayRef
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.id.as_str()),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.answer.as_deref()),
        )),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| {
            if r.answer.is_some() {
                "answered"
            } else {
                "failed"
            }
        }))),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.failure.as_deref()),
        )),
        Arc::new(chain.finish()),
        strings(&|r| &r.titles),
        strings(&|r| &r.corpus_ids),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.trace.as_str()),
        )),
        u32s(&|r| r.stats.llm_calls),
        u32s(&|r| r.stats.cached_calls),
        u64s(&|r| r.stats.prompt_tokens),
        u64s(&|r| r.stats.completion_tokens),
        u32s(&|r| r.stats.retries),
        u32s(&|r| r.parse_failures.len() as u32),
        strings(&|r| &r.parse_failures),
    ];
    RecordBatch::try_new(review_schema(), columns).context("building the output batch")
}
