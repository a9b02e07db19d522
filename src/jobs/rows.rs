//! Jobs that score independent rows (`classify`, `loglik`): a [`RowScorer`] validates
//! and tokenises a batch's rows and scores the good ones; [`RowJob`] turns it into a
//! [`Job`] that keeps the input's `id` in front of the result columns and sends bad
//! rows (a null `id` always) to quarantine with their reason.

use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::{Field, Schema, SchemaRef};

use super::{with_metadata, Job, JobOutput};
use crate::io::parquet_io::{check_column, display_column};
use crate::io::quarantine::{self, BadRow};

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
    /// Rows given to [`Job::process`] so far.
    next_row: u64,
}

impl<S: RowScorer> RowJob<S> {
    pub fn new(scorer: S) -> Self {
        Self {
            scorer,
            next_row: 0,
        }
    }

    fn schema(&self, input: &Schema) -> Result<Schema> {
        let id_type = input.field_with_name("id")?.data_type().clone();
        let mut fields = vec![Field::new("id", id_type, false)];
        fields.extend(self.scorer.fields());
        Ok(Schema::new(fields))
    }
}

impl<S: RowScorer> Job for RowJob<S> {
    fn check_input(&self, input: &Schema) -> Result<()> {
        for &(name, accepted, required) in S::COLUMNS {
            check_column(input, name, accepted, required)?;
        }
        Ok(())
    }

    fn output_schema(&self, input: &Schema) -> Result<SchemaRef> {
        Ok(with_metadata(&self.schema(input)?, self.scorer.metadata()))
    }

    fn metadata(&self) -> &[(String, String)] {
        self.scorer.metadata()
    }

    fn batch_rows(&self) -> usize {
        S::BATCH_ROWS
    }

    fn process_rows(&mut self, batch: &RecordBatch, rows_of: &[u64]) -> Result<JobOutput> {
        self.check_input(&batch.schema())?;
        anyhow::ensure!(
            rows_of.len() == batch.num_rows(),
            "{} row numbers for a batch of {} rows",
            rows_of.len(),
            batch.num_rows()
        );
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
        let schema = self.output_schema(&batch.schema())?;
        let mut columns = vec![arrow::compute::take(
            id_col,
            &UInt32Array::from(rows),
            None,
        )?];
        if good.is_empty() {
            columns.extend(
                schema.fields()[1..]
                    .iter()
                    .map(|f| arrow::array::new_empty_array(f.data_type())),
            );
        } else {
            columns.extend(self.scorer.score(&good)?);
        }
        Ok(JobOutput {
            rows: RecordBatch::try_new(schema, columns)?,
            quarantine: quarantine::batch(&bad, self.quarantine_schema())?,
            tokens: good.iter().map(|x| S::tokens(x) as u64).sum(),
        })
    }

    fn rows_seen(&mut self) -> &mut u64 {
        &mut self.next_row
    }
}
