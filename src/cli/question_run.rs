//! The driver of the commands that search a question file through the pipeline:
//! a reader thread prepares each question (or quarantines it), the scheduler batches
//! the searches' requests, and a writer thread commits the finished rows in parts of
//! `--part-rows` input rows (`--resume` continues after the last committed part;
//! `--shard i/N` takes one contiguous range of rows; Ctrl-C commits what is in flight).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use arrow::array::{Float32Builder, Int32Builder, ListArray, ListBuilder, StructArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields, SchemaRef};

use super::{progress_bar, Shard};
use crate::io::parquet_io::sibling;
use crate::io::parts::Parts;
use crate::io::quarantine::{BadRow, QuarantineWriter};
use crate::io::questions::{Question, QuestionReader};
use crate::model::batch::Sequence;
use crate::pipeline::{self, Admission, Finished, SchedulerConfig};
use crate::strategy::Strategy;

/// Where and how a run reads and writes.
pub struct RunFiles<'a> {
    pub input: &'a Path,
    pub output: &'a Path,
    /// Default: `<output stem>.quarantine.parquet`.
    pub quarantine: Option<&'a Path>,
    pub resume: bool,
    pub shard: Option<Shard>,
    pub part_rows: u64,
}

/// Writes finished rows into one output file.
pub trait RowWriter: Send + 'static {
    type Row: Send + 'static;
    /// Output columns.
    fn schema() -> SchemaRef;
    /// Writes `rows` (possibly none) as a complete Parquet file.
    fn write(path: &Path, rows: Vec<Self::Row>, metadata: &[(String, String)]) -> Result<()>;
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

impl std::fmt::Display for RunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = &self.stats;
        let secs = st.wall.as_secs_f64().max(1e-9);
        write!(
            f,
            "{} questions ({} quarantined → {}), {} hypotheses, {} tokens in {:.1} s: \
             {:.2} questions/s, {:.1} hypotheses/s, {:.0} tokens/s, forward {:.0}% of wall time",
            st.rows,
            st.bad_rows,
            self.quarantine_path.display(),
            st.hypotheses,
            st.tokens,
            secs,
            st.rows as f64 / secs,
            st.hypotheses as f64 / secs,
            st.tokens as f64 / secs,
            100.0 * st.forward.as_secs_f64() / secs
        )
    }
}

/// A search that ends with an output row or with the reason the question failed.
pub trait QuestionSearch: Strategy<Output = Result<Self::Row, String>> + 'static {
    type Row: Send + 'static;
}

/// A finished row, or the id and reason of a question that failed during the search.
type Done<R> = Result<R, (String, String)>;

/// Wraps a search so that a failure keeps the question id.
struct Tracked<S> {
    id: String,
    search: S,
}

impl<S: QuestionSearch> Strategy for Tracked<S> {
    type Output = Done<S::Row>;
    fn requests(&self) -> Vec<(Sequence, usize)> {
        self.search.requests()
    }
    fn feed(&mut self, logits: Vec<Vec<f32>>) {
        self.search.feed(logits);
    }
    fn take_output(&mut self) -> Option<Self::Output> {
        let out = self.search.take_output()?;
        Some(out.map_err(|reason| (self.id.clone(), reason)))
    }
}

/// Runs every question of `files.input` (this shard's rows after the committed ones)
/// through `prepare` and the pipeline; `score` runs one batch.
pub fn run<S, W>(
    files: RunFiles<'_>,
    scheduler: SchedulerConfig,
    metadata: &[(String, String)],
    prepare: impl Fn(&Question) -> Result<S, String> + Send + 'static,
    score: impl FnMut(&[Sequence], &[usize]) -> Result<Vec<Vec<f32>>>,
) -> Result<RunSummary>
where
    S: QuestionSearch,
    W: RowWriter<Row = S::Row>,
{
    super::install_interrupt_handler(); // commands install it before loading models
    anyhow::ensure!(files.part_rows >= 1, "--part-rows must be at least 1");
    let reader = QuestionReader::open(files.input, 256)?;
    let total = reader.total_rows();
    let (start, end) = files.shard.map_or((0, total), |s| s.range(total));
    let fingerprint = serde_json::to_string(metadata)?;
    let parts = Parts::open(files.output, &fingerprint, files.resume)?;
    let skip = parts.resume_row();
    if skip > 0 {
        eprintln!("resuming after {skip} committed rows");
    }
    let bar = progress_bar(end - start, "questions");
    bar.set_position(skip);
    let complete = Arc::new(AtomicBool::new(false));
    let read_complete = complete.clone();
    let read = move |tx: crossbeam_channel::Sender<Admission<Tracked<S>>>| -> Result<()> {
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
                    Ok(search) => Admission::Task(Tracked {
                        id: q.id.clone(),
                        search,
                    }),
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
    let (write_parts, write_bar, part_rows) = (parts.clone(), bar.clone(), files.part_rows);
    let write_meta = metadata.to_vec();
    let write = move |rx: crossbeam_channel::Receiver<Finished<Done<S::Row>>>| -> Result<()> {
        let mut parts = write_parts.lock().expect("parts lock");
        let (mut rows, mut bad) = (Vec::new(), Vec::new());
        // Rows of this shard finished so far (what the manifest records).
        let mut done = skip;
        for item in rx {
            match item {
                Finished::Done(Ok(r)) => rows.push(r),
                Finished::Done(Err((id, reason))) => bad.push(BadRow {
                    row: start + done,
                    id: Some(id),
                    reason,
                }),
                Finished::Bad(b) => bad.push(b),
            }
            done += 1;
            write_bar.inc(1);
            if done % part_rows == 0 {
                commit::<W>(&mut parts, done, &mut rows, &mut bad, &write_meta)?;
            }
        }
        commit::<W>(&mut parts, done, &mut rows, &mut bad, &write_meta)
    };
    let progress = bar.clone();
    let stats = pipeline::run(scheduler, read, score, write, move |s| {
        let secs = progress.elapsed().as_secs_f64().max(1e-9);
        progress.set_message(format!(
            "{:.0} hyp/s {:.0} tok/s",
            s.hypotheses as f64 / secs,
            s.tokens as f64 / secs
        ));
    })?;
    bar.finish_and_clear();
    let quarantine_path = files
        .quarantine
        .map_or_else(|| sibling(files.output, "quarantine"), Path::to_path_buf);
    let parts = Arc::into_inner(parts)
        .expect("the writer has finished")
        .into_inner()
        .expect("parts lock");
    let interrupted = !complete.load(Ordering::SeqCst);
    if !interrupted {
        parts.finish(
            files.output,
            &quarantine_path,
            (W::schema(), crate::io::quarantine::schema()),
            metadata,
        )?;
    }
    Ok(RunSummary {
        stats,
        quarantine_path,
        resumed_from: skip,
        interrupted,
    })
}

/// Commits the pending rows as the part ending at `end_row` (nothing when empty).
fn commit<W: RowWriter>(
    parts: &mut Parts,
    end_row: u64,
    rows: &mut Vec<W::Row>,
    bad: &mut Vec<BadRow>,
    metadata: &[(String, String)],
) -> Result<()> {
    if rows.is_empty() && bad.is_empty() {
        return Ok(());
    }
    parts.commit(end_row, |results, quarantine| {
        W::write(results, std::mem::take(rows), metadata)?;
        let mut q = QuarantineWriter::create(quarantine, metadata)?;
        q.write(bad)?;
        bad.clear();
        q.finish()?;
        Ok(())
    })
}

/// `list<t>` with nullable items (the list type of the output files).
pub fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", t, true)))
}

/// Builds a `list<struct<chain: list<int32>, score: float32>>` column: per row, a
/// list of scored chains (beams, paths).
#[derive(Default)]
pub struct ScoredChainsBuilder {
    chains: ListBuilder<Int32Builder>,
    scores: Float32Builder,
    counts: Vec<usize>,
    in_row: usize,
}

impl ScoredChainsBuilder {
    fn fields() -> Fields {
        Fields::from(vec![
            Field::new("chain", list_of(DataType::Int32), false),
            Field::new("score", DataType::Float32, false),
        ])
    }

    /// The column's type.
    pub fn data_type() -> DataType {
        list_of(DataType::Struct(Self::fields()))
    }

    /// Adds a chain to the current row.
    pub fn push(&mut self, chain: &[usize], score: f32) {
        self.chains
            .values()
            .extend(chain.iter().map(|&x| Some(x as i32)));
        self.chains.append(true);
        self.scores.append_value(score);
        self.in_row += 1;
    }

    /// Ends the current row.
    pub fn end_row(&mut self) {
        self.counts.push(std::mem::take(&mut self.in_row));
    }

    pub fn finish(mut self) -> ListArray {
        ListArray::new(
            Arc::new(Field::new("item", DataType::Struct(Self::fields()), true)),
            OffsetBuffer::from_lengths(self.counts),
            Arc::new(StructArray::new(
                Self::fields(),
                vec![
                    Arc::new(self.chains.finish()),
                    Arc::new(self.scores.finish()),
                ],
                None,
            )),
            None,
        )
    }
}
