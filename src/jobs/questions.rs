//! Jobs over question files (`beam`, `label`, `lepus`): a [`QuestionScorer`] turns a
//! question into a search ([`Strategy`]), scores batches of its model requests and
//! turns finished searches into output rows; [`QuestionJob`] drives it as a
//! [`FileJob`] (and so a `Job`) through the continuous-batching scheduler, which mixes
//! the requests of the questions of a batch (or, in the file runner
//! [`crate::pipeline::files`], of the whole file) into token-budget forward passes.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};
use crossbeam_channel::{Receiver, Sender};

use crate::io::quarantine::BadRow;
use crate::io::questions::{check_schema, decode_batch, Question, QuestionReader};
use crate::model::batch::Sequence;
use crate::pipeline::engine::Status;
use crate::pipeline::files::{FileJob, Pending, Source, ToBatch};
use crate::pipeline::Strategy;
use crate::pipeline::{scheduler, Admission, Engine, Finished, PipelineStats, SchedulerConfig};

/// Builds a question's search, or says why the question cannot be searched.
pub type Prepare<T> = Arc<dyn Fn(&Question) -> Result<T, String> + Send + Sync>;

/// The output of a finished search of `S`.
pub type Output<S> = <<S as QuestionScorer>::Task as Strategy>::Output;

/// A question's search with what its output row needs besides the result: the
/// question's id and its passages' titles (empty where the row needs none).
pub struct QuestionTask<S> {
    pub id: String,
    pub titles: Vec<String>,
    pub search: S,
}

/// A finished search of a [`QuestionTask`].
pub struct Searched<T> {
    pub id: String,
    pub titles: Vec<String>,
    pub result: T,
}

impl<S: Strategy> Strategy for QuestionTask<S> {
    type Output = Searched<S::Output>;
    fn requests(&self) -> Vec<(Sequence, usize)> {
        self.search.requests()
    }
    fn feed(&mut self, logits: Vec<Vec<f32>>) {
        self.search.feed(logits);
    }
    fn take_output(&mut self) -> Option<Self::Output> {
        let result = self.search.take_output()?;
        Some(Searched {
            id: std::mem::take(&mut self.id),
            titles: std::mem::take(&mut self.titles),
            result,
        })
    }
}

/// The model-specific part of a question job.
pub trait QuestionScorer: Send {
    /// One question's search.
    type Task: Strategy + 'static;
    /// One output row.
    type Row: Send + 'static;
    /// Run metadata of the output files (the file runner adds the input's).
    fn metadata(&self) -> &[(String, String)];
    /// The output columns.
    fn schema(&self) -> SchemaRef;
    /// The question → search step (run on the reader thread).
    fn prepare(&self) -> Prepare<Self::Task>;
    /// A finished search as an output row, or `(id, reason)` to quarantine it.
    fn finish(output: Output<Self>) -> Result<Self::Row, (String, String)>;
    /// Output rows → record batch (run on the writer thread).
    fn to_batch(&self) -> ToBatch<Self::Row>;
    /// Scores one batch: sequences and head indices → logits per sequence.
    fn score(&mut self, seqs: &[Sequence], heads: &[usize]) -> Result<Vec<Vec<f32>>>;
}

/// A [`QuestionScorer`] with its scheduling limits, as a [`Job`].
pub struct QuestionJob<S> {
    pub scorer: S,
    pub scheduler: SchedulerConfig,
}

impl<S: QuestionScorer> QuestionJob<S> {
    pub fn new(scorer: S, scheduler: SchedulerConfig) -> Self {
        Self { scorer, scheduler }
    }
}

/// Each admitted row of a batch, or the bad ones with their reason.
pub fn admit<T>(prepare: &Prepare<T>, row: u64, item: Result<Question, BadRow>) -> Admission<T> {
    match item {
        Ok(q) => match prepare(&q) {
            Ok(task) => Admission::Task(task),
            Err(reason) => Admission::Bad(BadRow {
                row,
                id: Some(q.id.clone()),
                reason,
            }),
        },
        Err(bad) => Admission::Bad(bad),
    }
}

/// A question file as a [`Source`] of the tasks `prepare` builds.
pub fn question_source<T: 'static>(
    input: &Path,
    schema: SchemaRef,
    prepare: Prepare<T>,
) -> Result<Source<T>> {
    let reader = QuestionReader::open(input, 256)?;
    Ok(Source {
        total_rows: reader.total_rows(),
        schema,
        rows: Box::new((0u64..).zip(reader).map(move |(row, item)| {
            let prepare = prepare.clone();
            let item = item?;
            Ok((
                row,
                Box::new(move || admit(&prepare, row, item)) as Pending<T>,
            ))
        })),
    })
}

/// The rows `rows` of a question batch in memory, each admitted by `prepare` (or bad).
pub fn admit_questions<T>(
    prepare: &Prepare<T>,
    batch: &RecordBatch,
    rows: &[u64],
) -> Result<Vec<(u64, Admission<T>)>> {
    Ok(rows
        .iter()
        .zip(decode_batch(batch, rows)?)
        .map(|(&row, item)| (row, admit(prepare, row, item)))
        .collect())
}

impl<S: QuestionScorer> Engine for QuestionJob<S> {
    type Task = S::Task;
    type Out = Output<S>;

    fn queue_rows(&self) -> usize {
        self.scheduler.max_active
    }

    fn run(
        &mut self,
        rx: Receiver<(u64, Admission<S::Task>)>,
        tx: Sender<(u64, Finished<Output<S>>)>,
        status: Status,
    ) -> Result<PipelineStats> {
        let started = Instant::now();
        scheduler::run(
            self.scheduler,
            rx,
            tx,
            |seqs, heads| self.scorer.score(seqs, heads),
            |s| {
                let secs = started.elapsed().as_secs_f64().max(1e-9);
                status(format!(
                    "{:.0} hyp/s {:.0} tok/s",
                    s.hypotheses as f64 / secs,
                    s.tokens as f64 / secs
                ))
            },
        )
    }
}

impl<S: QuestionScorer> FileJob for QuestionJob<S> {
    type Row = S::Row;

    fn metadata(&self) -> &[(String, String)] {
        self.scorer.metadata()
    }

    fn check_input(&self, input: &Schema) -> Result<()> {
        check_schema(input, "the input batch")
    }

    fn output_columns(&self, _input: &Schema) -> Result<SchemaRef> {
        Ok(self.scorer.schema())
    }

    fn batch_rows(&self) -> usize {
        256
    }

    fn admit_batch(
        &self,
        batch: &RecordBatch,
        rows: &[u64],
    ) -> Result<Vec<(u64, Admission<S::Task>)>> {
        admit_questions(&self.scorer.prepare(), batch, rows)
    }

    fn open(&self, input: &Path) -> Result<Source<S::Task>> {
        question_source(input, self.scorer.schema(), self.scorer.prepare())
    }

    fn settle(row: u64, item: Finished<Output<S>>) -> Option<Result<S::Row, BadRow>> {
        Some(match item {
            Finished::Done(out) => S::finish(out).map_err(|(id, reason)| BadRow {
                row,
                id: Some(id),
                reason,
            }),
            Finished::Bad(bad) => Err(bad),
            Finished::Left => return None,
        })
    }

    fn to_batch(&self, _schema: SchemaRef) -> ToBatch<S::Row> {
        self.scorer.to_batch()
    }
}
