//! Jobs that score independent rows (`classify`, `loglik`): a [`RowScorer`] validates
//! and tokenises a batch's rows and scores the good ones; [`RowJob`] turns it into a
//! [`FileJob`] (and so a `Job`) that keeps the input's `id` in front of the result
//! columns, sends bad rows (a null `id` always) to quarantine with their reason, and
//! whose engine scores rows in groups of [`RowScorer::BATCH_ROWS`] (aligned on
//! multiples of it), from a file or from a batch in memory alike.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{Field, Schema, SchemaRef};
use arrow_select::concat::concat_batches;
use crossbeam_channel::{Receiver, Sender};

use crate::io::parquet_io::{
    check_column, check_text, display_column, optional_string_column, string_column, InputBatch,
    ParquetInput,
};
use crate::io::quarantine::BadRow;
use crate::model::batch::{token_budget_groups, PackedBatch, Sequence};
use crate::pipeline::engine::Status;
use crate::pipeline::files::{FileJob, Pending, Source, ToBatch};
use crate::pipeline::{Admission, Engine, Finished, PipelineStats};
use crate::tensor::HostTensor;

/// An input column a job reads: name, accepted kinds (`string`, `integer`), required.
pub type InputColumn = (&'static str, &'static [&'static str], bool);

/// The model-specific part of a row job.
pub trait RowScorer: Send {
    /// A validated, tokenised row.
    type Prepared: Send;
    /// The input columns read (`id` first).
    const COLUMNS: &'static [InputColumn];
    /// Input rows per batch.
    const BATCH_ROWS: usize;
    /// Result columns, written after `id`.
    fn fields(&self) -> Vec<Field>;
    /// Run metadata of the output files.
    fn metadata(&self) -> &[(String, String)];
    /// Per row of `batch`: the prepared row, or why it cannot be scored.
    fn prepare(&self, batch: &RecordBatch) -> Result<Vec<Result<Self::Prepared, String>>>;
    /// Tokens a prepared row runs through the model.
    fn tokens(row: &Self::Prepared) -> usize;
    /// The result columns for `rows`, in order.
    fn score(&mut self, rows: &[Self::Prepared]) -> Result<Vec<ArrayRef>>;
}

/// A [`RowScorer`] as a [`Job`].
pub struct RowJob<S> {
    scorer: S,
    /// Rows scored together: [`RowScorer::BATCH_ROWS`], fewer when the run's parts
    /// are smaller ([`FileJob::set_part_rows`]).
    group_rows: usize,
}

impl<S: RowScorer> RowJob<S> {
    pub fn new(scorer: S) -> Self {
        Self {
            scorer,
            group_rows: S::BATCH_ROWS,
        }
    }

    fn schema(&self, input: &Schema) -> Result<Schema> {
        let id_type = input.field_with_name("id")?.data_type().clone();
        let mut fields = vec![Field::new("id", id_type, false)];
        fields.extend(self.scorer.fields());
        Ok(Schema::new(fields))
    }

    /// Scores the rows of `batch`, numbered `rows_of`.
    fn score_rows(&mut self, batch: &RecordBatch, rows_of: &[u64]) -> Result<Scored> {
        let id_col = batch
            .column_by_name("id")
            .context("the input has no `id`")?;
        let ids = display_column(id_col)?;
        let (mut rows, mut good, mut bad) = (Vec::new(), Vec::new(), Vec::new());
        for (r, prepared) in self.scorer.prepare(batch)?.into_iter().enumerate() {
            let prepared = if ids.is_null(r) {
                Err("id is null".to_string())
            } else {
                prepared
            };
            match prepared {
                Ok(x) => {
                    rows.push(r as u32);
                    good.push(x);
                }
                Err(reason) => bad.push(BadRow {
                    row: rows_of[r],
                    id: (!ids.is_null(r)).then(|| ids.value(r).to_string()),
                    reason,
                }),
            }
        }
        let schema = Arc::new(self.schema(&batch.schema())?);
        let mut forward = std::time::Duration::ZERO;
        let mut columns = vec![arrow_select::take::take(
            id_col,
            &UInt32Array::from(rows),
            None,
        )?];
        if good.is_empty() {
            columns.extend(
                schema.fields()[1..]
                    .iter()
                    .map(|f| arrow_array::new_empty_array(f.data_type())),
            );
        } else {
            let started = std::time::Instant::now();
            columns.extend(self.scorer.score(&good)?);
            forward = started.elapsed();
        }
        Ok(Scored {
            rows: RecordBatch::try_new(schema, columns)?,
            bad,
            tokens: good.iter().map(|x| S::tokens(x) as u64).sum(),
            forward,
        })
    }

    /// One group of admitted rows as finished rows (one-row batches of the output;
    /// `None` for the rows a stop left unfinished).
    fn score_group(
        &mut self,
        group: Vec<(u64, Admission<RecordBatch>)>,
        stats: &mut PipelineStats,
    ) -> Result<Vec<(u64, Finished<RecordBatch>)>> {
        let (mut rows, mut tasks, mut out) = (Vec::new(), Vec::new(), Vec::new());
        for (row, admission) in group {
            match admission {
                Admission::Task(one) => {
                    rows.push(row);
                    tasks.push(one);
                }
                Admission::Bad(bad) => out.push((row, Finished::Bad(bad))),
            }
        }
        let Some(first) = tasks.first() else {
            return Ok(out);
        };
        let scored = match self.score_rows(&concat_batches(&first.schema(), &tasks)?, &rows) {
            Err(e) if e.is::<crate::stop::Interrupted>() => {
                out.extend(rows.into_iter().map(|row| (row, Finished::Left)));
                return Ok(out);
            }
            scored => scored?,
        };
        stats.tokens += scored.tokens;
        stats.forward += scored.forward;
        let mut bad = scored.bad.into_iter().peekable();
        let mut next_good = 0;
        for row in rows {
            match bad.next_if(|b| b.row == row) {
                Some(b) => out.push((row, Finished::Bad(b))),
                None => {
                    out.push((row, Finished::Done(scored.rows.slice(next_good, 1))));
                    next_good += 1;
                }
            }
        }
        Ok(out)
    }
}

/// The scored rows of one batch.
struct Scored {
    /// The good rows (output columns, without metadata), in input order.
    rows: RecordBatch,
    /// The bad rows, in input order.
    bad: Vec<BadRow>,
    tokens: u64,
    /// Time in the model's forward passes.
    forward: std::time::Duration,
}

/// The rows of one input chunk, readable and unreadable, in row order.
fn chunk_rows(chunk: Result<InputBatch>) -> Vec<Result<(u64, Pending<RecordBatch>)>> {
    let chunk = match chunk {
        Ok(c) => c,
        Err(e) => return vec![Err(e.context("reading the input Parquet"))],
    };
    let mut items: Vec<(u64, Pending<RecordBatch>)> = chunk
        .rows
        .iter()
        .enumerate()
        .map(|(i, &row)| {
            let one = chunk.batch.slice(i, 1);
            (row, Box::new(move || Admission::Task(one)) as Pending<_>)
        })
        .collect();
    items.extend(
        chunk
            .bad
            .into_iter()
            .map(|b| (b.row, Box::new(move || Admission::Bad(b)) as Pending<_>)),
    );
    items.sort_by_key(|(row, _)| *row);
    items.into_iter().map(Ok).collect()
}

/// `None`: a row left unfinished by a stop.
impl<S: RowScorer> Engine for RowJob<S> {
    type Task = RecordBatch;
    type Out = RecordBatch;

    fn queue_rows(&self) -> usize {
        S::BATCH_ROWS
    }

    /// Scores the admitted rows in groups of `group_rows` that never cross a multiple
    /// of it.
    fn run(
        &mut self,
        rx: Receiver<(u64, Admission<RecordBatch>)>,
        tx: Sender<(u64, Finished<RecordBatch>)>,
        _status: Status,
    ) -> Result<PipelineStats> {
        let mut stats = PipelineStats::default();
        let group_rows = self.group_rows;
        let group_of = |row: u64| row / group_rows as u64;
        let mut carried = None;
        while let Some(first) = carried.take().or_else(|| rx.recv().ok()) {
            let mut group = vec![first];
            while group.len() < group_rows {
                match rx.recv() {
                    Ok(item) if group_of(item.0) == group_of(group[0].0) => group.push(item),
                    Ok(item) => {
                        carried = Some(item);
                        break;
                    }
                    Err(_) => break,
                }
            }
            for (row, item) in self.score_group(group, &mut stats)? {
                // Rows a stop left unfinished are not counted: `--resume` scores them.
                stats.rows += u64::from(!matches!(item, Finished::Left));
                stats.bad_rows += u64::from(matches!(item, Finished::Bad(_)));
                tx.send((row, item))
                    .map_err(|_| anyhow::anyhow!("the writer stopped early"))?;
            }
        }
        Ok(stats)
    }
}

impl<S: RowScorer> FileJob for RowJob<S> {
    type Row = RecordBatch;

    fn metadata(&self) -> &[(String, String)] {
        self.scorer.metadata()
    }

    fn check_input(&self, input: &Schema) -> Result<()> {
        for &(name, accepted, required) in S::COLUMNS {
            check_column(input, name, accepted, required)?;
        }
        Ok(())
    }

    fn output_columns(&self, input: &Schema) -> Result<SchemaRef> {
        Ok(Arc::new(self.schema(input)?))
    }

    fn batch_rows(&self) -> usize {
        S::BATCH_ROWS
    }

    fn default_part_rows(&self) -> u64 {
        4096
    }

    fn set_part_rows(&mut self, rows: u64) {
        self.group_rows = S::BATCH_ROWS.min(rows.clamp(1, usize::MAX as u64) as usize);
    }

    /// Each row a one-row batch, as a file's rows are.
    fn admit_batch(
        &self,
        batch: &RecordBatch,
        rows: &[u64],
    ) -> Result<Vec<(u64, Admission<RecordBatch>)>> {
        Ok(rows
            .iter()
            .enumerate()
            .map(|(i, &row)| (row, Admission::Task(batch.slice(i, 1))))
            .collect())
    }

    fn open(&self, input: &Path) -> Result<Source<RecordBatch>> {
        let input = ParquetInput::open(input, S::BATCH_ROWS)?;
        FileJob::check_input(self, &input.schema)?;
        Ok(Source {
            total_rows: input.total_rows,
            schema: self.output_columns(&input.schema)?,
            rows: Box::new(input.flat_map(chunk_rows)),
        })
    }

    fn settle(_row: u64, item: Finished<RecordBatch>) -> Option<Result<RecordBatch, BadRow>> {
        item.settled()
    }

    fn to_batch(&self, schema: SchemaRef) -> ToBatch<RecordBatch> {
        Arc::new(move |rows: &[RecordBatch]| Ok(concat_batches(&schema, rows)?))
    }
}

/// `forward`'s rows for `seqs`, in the order given: sequences are packed longest first
/// into batches of at most `budget` tokens (a longer one alone), and `forward` returns
/// `[sequences of the batch, width]`. With `interruptible`, a stop request ends it
/// between batches ([`crate::stop::Interrupted`]).
pub fn rows_by_budget(
    seqs: &[Sequence],
    budget: usize,
    interruptible: bool,
    mut forward: impl FnMut(&PackedBatch) -> Result<HostTensor>,
) -> Result<Vec<Vec<f32>>> {
    let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
    let mut out = vec![Vec::new(); seqs.len()];
    for group in token_budget_groups(&lens, budget) {
        if interruptible {
            crate::stop::stop_point()?;
        }
        let rows = forward(&PackedBatch::pack(group.iter().map(|&i| &seqs[i])))?;
        let width = rows.shape.get(1).copied().unwrap_or(0);
        for (k, &i) in group.iter().enumerate() {
            out[i] = rows.data[k * width..(k + 1) * width].to_vec();
        }
    }
    Ok(out)
}

/// `f(text, other)` for each row of `batch`, in parallel: `text` the row's value of the
/// string column `required` (null, empty or oversized: the row's error), `other` its
/// non-null value of the optional string column `optional`.
pub fn map_text_rows<T: Send>(
    batch: &RecordBatch,
    required: &str,
    optional: &str,
    f: impl Fn(&str, Option<&str>) -> Result<T, String> + Sync,
) -> Result<Vec<Result<T, String>>> {
    use rayon::prelude::*;
    let text = string_column(batch, required)?;
    let other = optional_string_column(batch, optional)?;
    Ok((0..batch.num_rows())
        .into_par_iter()
        .map(|r| {
            let t = check_text(&text, r, required)?.ok_or_else(|| format!("{required} is null"))?;
            f(
                t,
                other.as_ref().filter(|c| !c.is_null(r)).map(|c| c.value(r)),
            )
        })
        .collect())
}
