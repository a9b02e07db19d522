//! The one file runner of every job that reads a file (`beam`, `label`, `lepus`,
//! `review`, `classify`, `loglik`, `embed`): the reader thread turns each input row into
//! a task (or quarantines the row), the job's engine ([`super::engine::Engine`]: the
//! continuous-batching scheduler of the question jobs, batches of rows for the row
//! jobs, the worker threads of `review`) finishes the tasks, and the writer commits
//! each part of `part_rows` input rows as soon as all its rows are finished
//! (`resume` computes only the rows no part covers), then merges the parts into the
//! output and its quarantine file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;
use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use crossbeam_channel::{Receiver, Sender};

use super::control::Progress;
use super::engine::{self, Admission, Engine, Finished, PipelineStats};
use crate::io::fingerprint;
use crate::io::parquet_io::{sibling, write_in_batches};
use crate::io::parts::{parts_dir, Opened, Parts};
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::quarantine::{BadRow, QuarantineWriter};
use crate::io::shard::Shard;
use crate::stop::INTERRUPTED;

/// Builds one record batch of output rows (run on the writer thread).
pub type ToBatch<R> = Arc<dyn Fn(&[R]) -> Result<RecordBatch> + Send + Sync>;
/// An input row's admission, made only for the rows a run computes.
pub type Pending<T> = Box<dyn FnOnce() -> Admission<T> + Send>;

/// An input file opened by a job.
pub struct Source<T> {
    /// Rows in the file.
    pub total_rows: u64,
    /// The output columns (without metadata).
    pub schema: SchemaRef,
    /// Every row, in order, with its number.
    pub rows: Box<dyn Iterator<Item = Result<(u64, Pending<T>)>> + Send>,
}

/// A job as the pipeline drives it: its engine, how rows are read (from a file,
/// [`run`], or from a batch in memory, [`run_batch`]) and how they are written. Every
/// job is one of these; `jobs::Job`, the library's batch API, is derived from it.
pub trait FileJob: Engine {
    /// One output row.
    type Row: Send + 'static;
    /// Run metadata of the output files.
    fn metadata(&self) -> &[(String, String)];
    /// Refuses an input schema that lacks a column the job reads or holds one of the
    /// wrong type, naming the column.
    fn check_input(&self, input: &Schema) -> Result<()>;
    /// The output columns for an input of schema `input` (without metadata).
    fn output_columns(&self, input: &Schema) -> Result<SchemaRef>;
    /// Input rows per batch that suit the job.
    fn batch_rows(&self) -> usize;
    /// Input rows per committed part unless the run says ([`FileRun::part_rows`]).
    fn default_part_rows(&self) -> u64 {
        256
    }
    /// The run commits parts of `rows` input rows: an engine that scores rows in
    /// groups keeps its groups within that many rows, so that a part commits as soon
    /// as its rows are scored (what a kill can lose is bounded by `--part-rows`).
    fn set_part_rows(&mut self, _rows: u64) {}
    /// The rows of `batch` in memory, numbered `rows`, admitted as a file's rows are
    /// (each a task or a bad row).
    fn admit_batch(
        &self,
        batch: &RecordBatch,
        rows: &[u64],
    ) -> Result<Vec<(u64, Admission<Self::Task>)>>;
    /// Whether the output files also record the input (`hopscore.input_rows`,
    /// `input_sha256`, `shard`); the resume fingerprint always does.
    fn records_input(&self) -> bool {
        true
    }
    /// Whether an interrupted run also writes its committed rows (in row order) to
    /// the output and quarantine files (the parts stay for `resume`).
    fn writes_partial_output(&self) -> bool {
        false
    }
    /// Opens the input file (refusing one without the columns the job reads).
    fn open(&self, input: &Path) -> Result<Source<Self::Task>>;
    /// A finished row as an output row or a bad row; `None` when it was left
    /// unfinished (Ctrl-C), for a later run to compute.
    fn settle(row: u64, item: Finished<Self::Out>) -> Option<Result<Self::Row, BadRow>>;
    /// Output rows → record batch (run on the writer thread).
    fn to_batch(&self, schema: SchemaRef) -> ToBatch<Self::Row>;
}

/// What [`run_batch`] gives: the output rows (the job's output columns), the bad rows
/// and the tokens run through the model.
pub struct BatchRun {
    pub rows: RecordBatch,
    pub bad: Vec<BadRow>,
    pub tokens: u64,
}

/// Runs `job` over the rows of `batch`, numbered `rows`, all in flight at once: the
/// finished rows in row order (rows a stop left unfinished are left out).
pub fn run_batch<J: FileJob>(job: &mut J, batch: &RecordBatch, rows: &[u64]) -> Result<BatchRun> {
    job.check_input(&batch.schema())?;
    anyhow::ensure!(
        rows.len() == batch.num_rows(),
        "{} row numbers for a batch of {} rows",
        rows.len(),
        batch.num_rows()
    );
    let columns = job.output_columns(&batch.schema())?;
    let admitted = job.admit_batch(batch, rows)?;
    let (stats, finished) = engine::finish_all(job, admitted)?;
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for (row, item) in finished {
        match J::settle(row, item) {
            Some(Ok(r)) => good.push(r),
            Some(Err(b)) => bad.push(b),
            None => {}
        }
    }
    Ok(BatchRun {
        rows: (job.to_batch(columns))(&good)?,
        bad,
        tokens: stats.tokens,
    })
}

/// Output rows per record batch of a part file.
const WRITE_ROWS: usize = 256;

/// Where a run reads and writes, and how it is split and committed: the file flags of
/// every job's subcommand.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct FileRun {
    /// Input Parquet: the question file of `hopscore import` (beam, label, lepus,
    /// rerank, review), or the rows the command's description names (classify, embed,
    /// loglik).
    #[cfg_attr(feature = "cli", arg(long))]
    pub input: PathBuf,
    /// Output Parquet (its columns: docs/cli.md).
    #[cfg_attr(feature = "cli", arg(long))]
    pub output: PathBuf,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub quarantine: Option<PathBuf>,
    /// Continue an interrupted run (its `<output>.parts` directory) with the same flags.
    #[cfg_attr(feature = "cli", arg(long))]
    pub resume: bool,
    /// Process only shard i of N (contiguous row ranges, for Slurm arrays or indexed
    /// jobs); combine the outputs with `hopscore merge`.
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::io::shard::parse_shard))]
    pub shard: Option<Shard>,
    /// Input rows per committed part (default: 256 for a question file, 4096 for rows:
    /// [`FileJob::default_part_rows`]). A part commits as soon as all its rows are
    /// finished; a killed run loses the finished rows of the parts still open
    /// (docs/data-safety.md).
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::positive_u64))]
    pub part_rows: Option<u64>,
    /// Process only the first N rows of the input (N ≥ 1), before sharding.
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::positive_u64))]
    pub limit: Option<u64>,
    /// The job's other input files (`--model`, `--tokenizer`, `--templates`,
    /// `--corpus`, …; [`crate::options::Options::inputs`], which the job's run sets):
    /// no output may be or hold one, and the resume fingerprint and the outputs'
    /// metadata hold the SHA-256 of their contents ([`fingerprint::contents`]), so a
    /// changed file is never mixed into a run.
    #[cfg_attr(feature = "cli", arg(skip))]
    pub inputs: Vec<Named>,
    /// Settings the run records besides the job's options (`hopscore.<key>` entries:
    /// the device's, [`crate::options::record`]), each whose key the job has not
    /// recorded already: in the outputs' metadata and the resume fingerprint.
    #[cfg_attr(feature = "cli", arg(skip))]
    pub settings: Vec<(String, String)>,
}

impl FileRun {
    /// A run of `input` into `output`, every other setting at its default.
    pub fn new(input: &Path, output: &Path) -> Self {
        Self {
            input: input.to_path_buf(),
            output: output.to_path_buf(),
            quarantine: None,
            resume: false,
            shard: None,
            part_rows: None,
            limit: None,
            inputs: Vec::new(),
            settings: Vec::new(),
        }
    }

    /// The quarantine file: `quarantine` or `<output stem>.quarantine.parquet`.
    pub fn quarantine_path(&self) -> PathBuf {
        self.quarantine
            .clone()
            .unwrap_or_else(|| sibling(&self.output, "quarantine"))
    }

    /// Refuses outputs that would overwrite an input (`extra_outputs`: the job's other
    /// outputs, e.g. a cache directory) or that are not files.
    pub fn check_paths(&self, extra_outputs: &[(Named, Kind)]) -> Result<()> {
        let mut inputs = vec![Named::new("--input", &self.input)];
        inputs.extend_from_slice(&self.inputs);
        let quarantine = self.quarantine_path();
        let parts = parts_dir(&self.output);
        let mut outputs = vec![
            (Named::new("--output", &self.output), Kind::File),
            (Named::new("the quarantine file", &quarantine), Kind::File),
            (
                Named::new("the parts directory of --output", &parts),
                Kind::Dir,
            ),
        ];
        outputs.extend_from_slice(extra_outputs);
        check_outputs(&inputs, &outputs)?;
        Ok(())
    }
}

/// Counts of a run.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub stats: PipelineStats,
    pub quarantine_path: PathBuf,
    /// Rows already committed by an earlier run (`--resume`).
    pub resumed_from: u64,
    /// Stopped by Ctrl-C: parts are committed and `--resume` continues.
    pub interrupted: bool,
}

/// Runs `job` over the input file of `opts`. The caller installs the Ctrl-C handler
/// ([`super::control::install_interrupt_handler`]) before loading its models, so that
/// a Ctrl-C during loading also ends the run cleanly (exit 130, `--resume` possible).
pub fn run<J: FileJob>(job: &mut J, opts: &FileRun) -> Result<RunSummary> {
    opts.check_paths(&[])?;
    let part_rows = opts.part_rows.unwrap_or_else(|| job.default_part_rows());
    job.set_part_rows(part_rows);
    let quarantine_path = opts.quarantine_path();
    let source = job.open(&opts.input)?;
    let schema = source.schema.clone();
    let total = opts
        .limit
        .map_or(source.total_rows, |l| l.min(source.total_rows));
    let (start, end) = opts.shard.map_or((0, total), |s| s.range(total));
    let input_keys = crate::io::metadata::prefixed(&[
        ("input_rows", source.total_rows.to_string()),
        ("input_sha256", fingerprint::file_sha256(&opts.input)?),
        ("shard", opts.shard.map_or("all".into(), |s| s.to_string())),
    ]);
    // The footer's metadata; the resume fingerprint also covers the input and limit.
    let mut metadata = job.metadata().to_vec();
    metadata.extend(fingerprint::contents(&opts.inputs)?);
    crate::io::metadata::add_settings(&mut metadata, &opts.settings);
    let mut identity = Vec::new();
    match job.records_input() {
        true => metadata.extend(input_keys),
        false => identity.extend(input_keys),
    }
    identity.splice(0..0, metadata.iter().cloned());
    if let Some(limit) = opts.limit {
        identity.push(("hopscore.limit".into(), limit.to_string()));
    }
    let summary = |stats, resumed_from, interrupted| RunSummary {
        stats,
        quarantine_path: quarantine_path.clone(),
        resumed_from,
        interrupted,
    };
    let run_fingerprint = fingerprint::of(&identity);
    // A finished output with these settings (its parts already removed): done.
    let finished = |p: &Path| fingerprint::finished_with(p, &run_fingerprint);
    if opts.resume
        && !parts_dir(&opts.output).exists()
        && finished(&opts.output)
        && finished(&quarantine_path)
    {
        log::info!(
            "{} is already complete with these inputs and settings: nothing to do (without \
             --resume the run starts over)",
            opts.output.display()
        );
        return Ok(summary(PipelineStats::default(), end - start, false));
    }
    let parts = match Parts::open(&opts.output, &run_fingerprint, opts.resume)? {
        Opened::Ready(p) => p,
        Opened::AlreadyFinished => {
            log::info!(
                "{} is already complete (the interrupted clean-up of its parts is now done)",
                opts.output.display()
            );
            return Ok(summary(PipelineStats::default(), end - start, false));
        }
    };
    // Under the lock: what killed runs left of this output is ours to remove.
    for dest in [&opts.output, &quarantine_path] {
        crate::io::atomic::remove_stale_temporaries(dest)?;
    }
    let committed = parts.committed();
    let done_rows: u64 = committed.iter().map(|(a, b)| b - a).sum();
    if done_rows > 0 {
        log::info!("resuming: {done_rows} rows already committed");
    }
    let plan = plan_parts(&committed, end - start, part_rows);
    let bar = Progress::new(end - start, "rows");
    bar.set_position(done_rows);
    let complete = AtomicBool::new(false);
    let read = |tx: Sender<(u64, Admission<J::Task>)>| -> Result<()> {
        let mut todo = plan.iter().peekable();
        for item in source.rows {
            let (row, pending) = item?;
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
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(());
            }
            if tx.send((row, pending())).is_err() {
                return Ok(()); // the engine stopped; its error is reported
            }
        }
        complete.store(true, Ordering::SeqCst);
        Ok(())
    };
    let writer = PartWriter {
        schema: schema.clone(),
        to_batch: job.to_batch(schema.clone()),
    };
    // Returns the parts, whether a row was left unfinished, and the rows quarantined
    // (bad inputs, and tasks that finished with a reason).
    let write = |rx: Receiver<(u64, Finished<J::Out>)>| -> Result<(Parts, bool, u64)> {
        let mut parts = parts;
        let mut unfinished = false;
        let mut quarantined = 0;
        let mut open: BTreeMap<usize, PendingPart<J::Row>> = BTreeMap::new();
        // What arrived together is counted together: a group of rows scored at once
        // moves the progress by its size, not by one row at a time.
        let arrivals = std::iter::from_fn(|| {
            let first = rx.recv().ok()?;
            Some(
                std::iter::once(first)
                    .chain(rx.try_iter())
                    .collect::<Vec<_>>(),
            )
        });
        for (row, item) in arrivals
            .inspect(|ready| bar.inc(ready.len() as u64))
            .flatten()
        {
            let Some(settled) = J::settle(row, item) else {
                unfinished = true;
                continue;
            };
            let rel = row - start;
            let index = plan.partition_point(|&(_, b)| b <= rel);
            let part = open.entry(index).or_default();
            match settled {
                Ok(r) => part.rows.push((rel, r)),
                Err(bad) => {
                    quarantined += 1;
                    part.bad.push(bad);
                }
            }
            let (a, b) = plan[index];
            if part.len() as u64 == b - a {
                let part = open.remove(&index).expect("open part");
                part.commit(&mut parts, (a, b), start, &metadata, &writer)?;
            }
        }
        // Stopped early (Ctrl-C): every row read has finished or was left unfinished,
        // so each open part holds a run of rows from its start up to its first
        // unfinished row; commit those.
        for (index, part) in open {
            part.commit_prefix(&mut parts, plan[index].0, start, &metadata, &writer)?;
        }
        Ok((parts, unfinished, quarantined))
    };
    let (stats, (parts, unfinished, quarantined)) =
        engine::drive(job, read, write, &|status| bar.set_status(status))?;
    // The engine counts the inputs it refused; a task can also finish with a reason.
    let stats = PipelineStats {
        bad_rows: quarantined,
        ..stats
    };
    bar.finish();
    let interrupted = !complete.load(Ordering::SeqCst) || unfinished;
    let schemas = (schema, crate::io::quarantine::schema());
    if !interrupted {
        let mut finished = metadata.clone();
        finished.push((
            fingerprint::RUN_KEY.into(),
            fingerprint::digest(&run_fingerprint),
        ));
        parts.finish(
            &opts.output,
            &quarantine_path,
            end - start,
            schemas,
            &finished,
        )?;
    } else if job.writes_partial_output() {
        parts.write_committed(&opts.output, &quarantine_path, schemas, &metadata)?;
    }
    Ok(summary(stats, done_rows, interrupted))
}

/// Writes the part files of output rows.
struct PartWriter<R> {
    schema: arrow_schema::SchemaRef,
    to_batch: ToBatch<R>,
}

impl<R> PartWriter<R> {
    fn write(&self, path: &Path, rows: Vec<R>, metadata: &[(String, String)]) -> Result<()> {
        write_in_batches(
            path,
            self.schema.clone(),
            metadata,
            &rows,
            WRITE_ROWS,
            |chunk| (self.to_batch)(chunk),
        )
    }
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
        writer: &PartWriter<R>,
    ) -> Result<()> {
        self.rows.sort_by_key(|(rel, _)| *rel);
        self.bad.sort_by_key(|b| b.row);
        debug_assert!(self.bad.iter().all(|x| (a..b).contains(&(x.row - start))));
        parts.commit(a, b, |results, quarantine| {
            writer.write(
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
        writer: &PartWriter<R>,
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
        self.commit(parts, (a, end), start, metadata, writer)
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
