//! The run loop of the question-file commands (`beam`, `label`, `lepus`): the reader
//! thread prepares each row's search (or quarantines the row), the pipeline scores the
//! searches of many questions together, and the writer commits each part of
//! `--part-rows` input rows as soon as all its rows are finished (`--resume` computes
//! only the rows no part covers), then merges the parts into the output and its
//! quarantine file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use arrow::datatypes::SchemaRef;
use clap::Args;

use super::flags;
use crate::io::fingerprint;
use crate::io::parquet_io::sibling;
use crate::io::parts::{parts_dir, Opened, Parts};
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::quarantine::{BadRow, QuarantineWriter};
use crate::io::questions::{Question, QuestionReader};
use crate::model::batch::Sequence;
use crate::pipeline::control::progress_bar;
use crate::pipeline::control::Shard;
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
    #[arg(long, default_value_t = 16384, value_parser = flags::positive_usize)]
    pub max_batch_tokens: usize,
    /// Questions in flight at once: more mixes the steps of different questions
    /// better, and holds more memory.
    #[arg(long, default_value_t = 64, value_parser = flags::positive_usize)]
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
    /// The quarantine file: `--quarantine` or `<output stem>.quarantine.parquet`.
    pub fn quarantine_path(&self) -> PathBuf {
        self.quarantine
            .clone()
            .unwrap_or_else(|| sibling(&self.output, "quarantine"))
    }

    /// Refuses outputs that would overwrite an input (`extra_inputs`: the command's
    /// other input files, e.g. a corpus).
    pub fn check_paths(&self, extra_inputs: &[Named]) -> Result<()> {
        let mut inputs = vec![Named::new("--input", &self.input)];
        inputs.extend_from_slice(extra_inputs);
        check_outputs(
            &inputs,
            &[
                (Named::new("--output", &self.output), Kind::File),
                (
                    Named::new("the quarantine file", &self.quarantine_path()),
                    Kind::File,
                ),
                (
                    Named::new("the parts directory of --output", &parts_dir(&self.output)),
                    Kind::Dir,
                ),
            ],
        )?;
        Ok(())
    }
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
    /// Run metadata (written into every file; without its locations, also the resume
    /// fingerprint). The loop adds `hopscore.input_rows`, `hopscore.input_sha256` and
    /// `hopscore.shard`.
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
    opts.check_paths(&[])?;
    let quarantine_path = opts.quarantine_path();
    let reader = QuestionReader::open(&opts.input, 256)?;
    let total = reader.total_rows();
    let (start, end) = opts.shard.map_or((0, total), |s| s.range(total));
    let mut metadata = cmd.metadata;
    metadata.extend(
        crate::io::metadata::tool_metadata(&[
            ("input_rows", total.to_string()),
            ("input_sha256", fingerprint::file_sha256(&opts.input)?),
            ("shard", opts.shard.map_or("all".into(), |s| s.to_string())),
        ])
        .into_iter()
        .skip(1),
    );
    let summary = |stats, resumed_from, interrupted| RunSummary {
        stats,
        quarantine_path: quarantine_path.clone(),
        resumed_from,
        interrupted,
    };
    let parts = match Parts::open(&opts.output, &fingerprint::of(&metadata), opts.resume)? {
        Opened::Ready(p) => p,
        Opened::AlreadyFinished => {
            eprintln!(
                "{} is already complete (the interrupted clean-up of its parts is now done)",
                opts.output.display()
            );
            return Ok(summary(
                pipeline::PipelineStats::default(),
                end - start,
                false,
            ));
        }
    };
    let committed = parts.committed();
    let done_rows: u64 = committed.iter().map(|(a, b)| b - a).sum();
    if done_rows > 0 {
        eprintln!("resuming: {done_rows} rows already committed");
    }
    let plan = Arc::new(plan_parts(&committed, end - start, opts.part_rows));
    let bar = progress_bar(end - start, "questions");
    bar.set_position(done_rows);
    let complete = Arc::new(AtomicBool::new(false));
    let read_complete = complete.clone();
    let (prepare, read_plan) = (cmd.prepare, plan.clone());
    let read = move |tx: crossbeam_channel::Sender<(u64, Admission<S>)>| -> Result<()> {
        let mut todo = read_plan.iter().peekable();
        for (row, item) in (0u64..).zip(reader) {
            if row < start {
                continue;
            }
            while todo.next_if(|&&(_, b)| row - start >= b).is_some() {}
            let Some(&&(a, _)) = todo.peek() else {
                break; // every remaining row is committed, or past the shard
            };
            if row - start < a {
                continue;
            }
            if crate::pipeline::control::INTERRUPTED.load(Ordering::SeqCst) {
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
            if tx.send((row, admission)).is_err() {
                return Ok(()); // the scheduler stopped; its error is reported
            }
        }
        read_complete.store(true, Ordering::SeqCst);
        Ok(())
    };
    let parts = Arc::new(Mutex::new(parts));
    let (write_parts, write_bar) = (parts.clone(), bar.clone());
    let write_meta = metadata.clone();
    let (finish, write_part) = (cmd.finish, cmd.write_part);
    let write = move |rx: crossbeam_channel::Receiver<(u64, Finished<S::Output>)>| -> Result<()> {
        let mut parts = write_parts.lock().expect("parts lock");
        let mut open: BTreeMap<usize, PendingPart<R>> = BTreeMap::new();
        for (row, item) in rx {
            let rel = row - start;
            let index = plan.partition_point(|&(_, b)| b <= rel);
            let part = open.entry(index).or_default();
            match item {
                Finished::Done(out) => match finish(out) {
                    Ok(r) => part.rows.push((rel, r)),
                    Err((id, reason)) => part.bad.push(BadRow {
                        row,
                        id: Some(id),
                        reason,
                    }),
                },
                Finished::Bad(bad) => part.bad.push(bad),
            }
            write_bar.inc(1);
            let (a, b) = plan[index];
            if part.len() as u64 == b - a {
                let part = open.remove(&index).expect("open part");
                part.commit(&mut parts, (a, b), start, &write_meta, &write_part)?;
            }
        }
        // Stopped early (Ctrl-C): every row read has finished, so each open part holds
        // a run of rows from its start; commit those.
        for (index, part) in open {
            part.commit_prefix(&mut parts, plan[index].0, start, &write_meta, &write_part)?;
        }
        Ok(())
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
    let parts = Arc::into_inner(parts)
        .expect("the writer has finished")
        .into_inner()
        .expect("parts lock");
    let interrupted = !complete.load(Ordering::SeqCst);
    if !interrupted {
        parts.finish(
            &opts.output,
            &quarantine_path,
            end - start,
            (cmd.schema, crate::io::quarantine::schema()),
            &metadata,
        )?;
    }
    Ok(summary(stats, done_rows, interrupted))
}

/// The parts still to compute among rows `[0, rows)` (relative to the run's range):
/// every gap between the `committed` ranges, cut into pieces of at most `part_rows`.
pub fn plan_parts(committed: &[(u64, u64)], rows: u64, part_rows: u64) -> Vec<(u64, u64)> {
    let mut plan = Vec::new();
    let mut cut = |a: u64, b: u64| {
        let mut s = a;
        while s < b {
            let e = (s + part_rows).min(b);
            plan.push((s, e));
            s = e;
        }
    };
    let mut next = 0;
    for &(a, b) in committed {
        cut(next, a.min(rows));
        next = next.max(b);
    }
    cut(next, rows);
    plan
}

/// The finished rows of one part not yet committed.
struct PendingPart<R> {
    /// (row relative to the run's range, result)
    rows: Vec<(u64, R)>,
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
    fn len(&self) -> usize {
        self.rows.len() + self.bad.len()
    }

    /// Commits the rows `[a, b)` (relative to `start`, the run's first input row), in
    /// row order.
    fn commit(
        mut self,
        parts: &mut Parts,
        (a, b): (u64, u64),
        start: u64,
        metadata: &[(String, String)],
        write_part: &impl Fn(&Path, Vec<R>, &[(String, String)]) -> Result<()>,
    ) -> Result<()> {
        self.rows.sort_by_key(|(rel, _)| *rel);
        self.bad.sort_by_key(|b| b.row);
        debug_assert!(self.bad.iter().all(|x| (a..b).contains(&(x.row - start))));
        parts.commit(a, b, |results, quarantine| {
            write_part(
                results,
                self.rows.into_iter().map(|(_, r)| r).collect(),
                metadata,
            )?;
            let mut q = QuarantineWriter::create(quarantine, metadata)?;
            q.write(&self.bad)?;
            q.finish()?;
            Ok(())
        })
    }

    /// Commits the run of consecutive rows from `a` (what an interrupted run finished
    /// of this part); rows after a gap are dropped.
    fn commit_prefix(
        mut self,
        parts: &mut Parts,
        a: u64,
        start: u64,
        metadata: &[(String, String)],
        write_part: &impl Fn(&Path, Vec<R>, &[(String, String)]) -> Result<()>,
    ) -> Result<()> {
        let mut present: Vec<u64> = self.rows.iter().map(|(r, _)| *r).collect();
        present.extend(self.bad.iter().map(|b| b.row - start));
        present.sort_unstable();
        let end = present
            .iter()
            .zip(a..)
            .take_while(|(r, want)| **r == *want)
            .count() as u64
            + a;
        if end == a {
            return Ok(());
        }
        self.rows.retain(|(r, _)| *r < end);
        self.bad.retain(|b| b.row - start < end);
        self.commit(parts, (a, end), start, metadata, write_part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_to_compute_fill_the_gaps_of_the_committed_rows() {
        assert_eq!(plan_parts(&[], 7, 3), vec![(0, 3), (3, 6), (6, 7)]);
        assert_eq!(
            plan_parts(&[(0, 3), (6, 9)], 12, 2),
            vec![(3, 5), (5, 6), (9, 11), (11, 12)]
        );
        assert_eq!(plan_parts(&[(0, 4)], 4, 2), vec![]);
    }
}
