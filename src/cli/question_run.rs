//! The run loop of the question-file commands (`beam`, `label`): the reader thread
//! prepares each row's search (or quarantines the row), the pipeline scores the
//! searches of many questions together, and the writer commits finished rows every
//! `--part-rows` input rows (`--resume` continues after the last commit), then merges
//! the parts into the output and its quarantine file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use arrow::datatypes::SchemaRef;
use clap::Args;

use super::{progress_bar, Shard};
use crate::io::parquet_io::sibling;
use crate::io::parts::Parts;
use crate::io::quarantine::{BadRow, QuarantineWriter};
use crate::io::questions::{Question, QuestionReader};
use crate::model::batch::Sequence;
use crate::pipeline::{self, Admission, Finished, SchedulerConfig};
use crate::strategy::Strategy;

/// Where a run reads and writes, and how it is batched, split and committed: the
/// flags every question-file command shares (flattened into its arguments).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Question file written by `hopscore import`.
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet (schema in README).
    #[arg(long)]
    pub output: PathBuf,
    /// Token budget of one forward pass.
    #[arg(long, default_value_t = 16384)]
    pub max_batch_tokens: usize,
    /// Questions in flight at once: more mixes the steps of different questions
    /// better, and holds more memory.
    #[arg(long, default_value_t = 64)]
    pub max_active: usize,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    /// Continue an interrupted run (its `<output>.parts` directory) with the same flags.
    #[arg(long)]
    pub resume: bool,
    /// Process only shard i of N (contiguous row ranges, for Slurm arrays or indexed
    /// jobs); combine the outputs with `hopscore merge`.
    #[arg(long, value_parser = super::parse_shard)]
    pub shard: Option<Shard>,
    /// Input rows per committed part: a killed run loses at most this much work.
    #[arg(long, default_value_t = 256)]
    pub part_rows: u64,
}

/// Counts of a run.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub stats: pipeline::PipelineStats,
    pub quarantine_path: PathBuf,
    /// Rows already committed by an earlier run (`--resume`).
    pub resumed_from: u64,
    /// Stopped by Ctrl-C: parts are committed and `--resume` continues.
    pub interrupted: bool,
}

/// What a command plugs into the run loop.
pub struct Command<P, F, W, Sc> {
    /// Run metadata (written into every file; also the resume fingerprint). The loop
    /// adds `hopscore.input_rows` and `hopscore.shard`.
    pub metadata: Vec<(String, String)>,
    /// Builds a row's search, or says why the row cannot be searched.
    pub prepare: P,
    /// Turns a finished search into an output row, or `(id, reason)` to quarantine it.
    pub finish: F,
    /// Writes one part file of output rows (path, rows, metadata).
    pub write_part: W,
    /// The output schema (for the final merge).
    pub schema: SchemaRef,
    /// Scores one batch (see [`pipeline::run`]).
    pub score: Sc,
}

/// Runs a command over the question file of `opts`. The command installs the Ctrl-C
/// handler ([`super::install_interrupt_handler`]) before loading its models, so that a
/// Ctrl-C during loading also ends the run cleanly (exit 130, `--resume` possible).
pub fn run<S, R, P, F, W, Sc>(opts: &RunArgs, cmd: Command<P, F, W, Sc>) -> Result<RunSummary>
where
    S: Strategy + 'static,
    S::Output: 'static,
    R: Send + 'static,
    P: Fn(&Question) -> Result<S, String> + Send + 'static,
    F: Fn(S::Output) -> Result<R, (String, String)> + Send + 'static,
    W: Fn(&Path, Vec<R>, &[(String, String)]) -> Result<()> + Send + 'static,
    Sc: FnMut(&[Sequence], &[usize]) -> Result<Vec<Vec<f32>>>,
{
    anyhow::ensure!(opts.part_rows >= 1, "--part-rows must be at least 1");
    let reader = QuestionReader::open(&opts.input, 256)?;
    let total = reader.total_rows();
    let (start, end) = opts.shard.map_or((0, total), |s| s.range(total));
    let mut metadata = cmd.metadata;
    metadata.extend(
        super::tool_metadata(&[
            ("input_rows", total.to_string()),
            ("shard", opts.shard.map_or("all".into(), |s| s.to_string())),
        ])
        .into_iter()
        .skip(1),
    );
    let fingerprint = serde_json::to_string(&metadata)?;
    let parts = Parts::open(&opts.output, &fingerprint, opts.resume)?;
    let skip = parts.resume_row();
    if skip > 0 {
        eprintln!("resuming after {skip} committed rows");
    }
    let bar = progress_bar(end - start, "questions");
    bar.set_position(skip);
    let complete = Arc::new(AtomicBool::new(false));
    let read_complete = complete.clone();
    let prepare = cmd.prepare;
    let read = move |tx: crossbeam_channel::Sender<Admission<S>>| -> Result<()> {
        for (row, item) in (0u64..).zip(reader) {
            if row < start + skip {
                continue;
            }
            if row >= end {
                break;
            }
            if super::INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(());
            }
            let admission = match item? {
                Ok(q) => match prepare(&q) {
                    Ok(task) => Admission::Task(task),
                    Err(reason) => Admission::Bad(BadRow {
                        row,
                        id: Some(q.id.clone()),
                        reason,
                    }),
                },
                Err(bad) => Admission::Bad(bad),
            };
            if tx.send(admission).is_err() {
                return Ok(()); // the scheduler stopped; its error is reported
            }
        }
        read_complete.store(true, Ordering::SeqCst);
        Ok(())
    };
    let parts = Arc::new(Mutex::new(parts));
    let (write_parts, write_bar, part_rows) = (parts.clone(), bar.clone(), opts.part_rows);
    let write_meta = metadata.clone();
    let (finish, write_part) = (cmd.finish, cmd.write_part);
    let write = move |rx: crossbeam_channel::Receiver<Finished<S::Output>>| -> Result<()> {
        let mut parts = write_parts.lock().expect("parts lock");
        let mut pending = PendingPart::default();
        let mut row = start + skip;
        for item in rx {
            match item {
                Finished::Done(out) => match finish(out) {
                    Ok(r) => pending.rows.push(r),
                    Err((id, reason)) => pending.bad.push(BadRow {
                        row,
                        id: Some(id),
                        reason,
                    }),
                },
                Finished::Bad(bad) => pending.bad.push(bad),
            }
            row += 1;
            write_bar.inc(1);
            if (row - start) % part_rows == 0 {
                pending.commit(&mut parts, row - start, &write_meta, &write_part)?;
            }
        }
        pending.commit(&mut parts, row - start, &write_meta, &write_part)
    };
    let progress = bar.clone();
    let scheduler = SchedulerConfig {
        max_batch_tokens: opts.max_batch_tokens,
        max_active: opts.max_active,
    };
    let stats = pipeline::run(scheduler, read, cmd.score, write, move |s| {
        let secs = progress.elapsed().as_secs_f64().max(1e-9);
        progress.set_message(format!(
            "{:.0} hyp/s {:.0} tok/s",
            s.hypotheses as f64 / secs,
            s.tokens as f64 / secs
        ));
    })?;
    bar.finish_and_clear();
    let quarantine_path = opts
        .quarantine
        .clone()
        .unwrap_or_else(|| sibling(&opts.output, "quarantine"));
    let parts = Arc::into_inner(parts)
        .expect("the writer has finished")
        .into_inner()
        .expect("parts lock");
    let interrupted = !complete.load(Ordering::SeqCst);
    if !interrupted {
        parts.finish(
            &opts.output,
            &quarantine_path,
            (cmd.schema, crate::io::quarantine::schema()),
            &metadata,
        )?;
    }
    Ok(RunSummary {
        stats,
        quarantine_path,
        resumed_from: skip,
        interrupted,
    })
}

/// Rows finished since the last committed part.
struct PendingPart<R> {
    rows: Vec<R>,
    bad: Vec<BadRow>,
}

impl<R> Default for PendingPart<R> {
    fn default() -> Self {
        Self {
            rows: Vec::new(),
            bad: Vec::new(),
        }
    }
}

impl<R> PendingPart<R> {
    /// Commits the pending rows as the part ending at `end_row` (nothing when empty).
    fn commit(
        &mut self,
        parts: &mut Parts,
        end_row: u64,
        metadata: &[(String, String)],
        write_part: &impl Fn(&Path, Vec<R>, &[(String, String)]) -> Result<()>,
    ) -> Result<()> {
        if self.rows.is_empty() && self.bad.is_empty() {
            return Ok(());
        }
        parts.commit(end_row, |results, quarantine| {
            write_part(results, std::mem::take(&mut self.rows), metadata)?;
            let mut q = QuarantineWriter::create(quarantine, metadata)?;
            q.write(&self.bad)?;
            self.bad.clear();
            q.finish()?;
            Ok(())
        })
    }
}
