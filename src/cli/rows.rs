//! The loop shared by the commands that score independent rows (`classify`,
//! `loglik`): stream the input Parquet in chunks, validate and tokenise each chunk's
//! rows, quarantine the bad ones with their reason, score the good ones, and write the
//! results (after the input's `id`) in input order, with a progress bar.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::{Field, Schema};

use super::progress_bar;
use crate::io::atomic::commit_all;
use crate::io::parquet_io::{create_writer, display_column, sibling, ParquetInput};
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::quarantine::{BadRow, QuarantineWriter};

/// Counts of a row-scoring run.
#[derive(Debug, Clone, PartialEq)]
pub struct RowSummary {
    pub scored: u64,
    pub quarantined: u64,
    /// Tokens run through the model.
    pub tokens: u64,
    pub seconds: f64,
    pub quarantine_path: PathBuf,
}

impl std::fmt::Display for RowSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.seconds.max(1e-9);
        write!(
            f,
            "scored {} rows ({} tokens) in {:.1} s: {:.1} rows/s, {:.0} tokens/s; {} quarantined → {}",
            self.scored,
            self.tokens,
            self.seconds,
            self.scored as f64 / secs,
            self.tokens as f64 / secs,
            self.quarantined,
            self.quarantine_path.display()
        )
    }
}

/// Where a row-scoring run reads and writes.
pub struct RowOutput<'a> {
    /// The input file (no output may be it).
    pub input: &'a Path,
    pub path: &'a Path,
    /// Default: `<output stem>.quarantine.parquet`.
    pub quarantine: Option<&'a Path>,
    pub metadata: &'a [(String, String)],
    /// Result columns, written after `id`.
    pub fields: Vec<Field>,
}

/// Runs the loop. `prepare(chunk)` gives, per row, the prepared input or the reason it
/// cannot be scored (a null `id` is refused here, whatever `prepare` says);
/// `tokens(x)` is the size of a prepared row; `score(rows)` returns the result columns
/// for the good rows of a chunk, in order.
pub fn run<T: Send>(
    mut input: ParquetInput,
    out: RowOutput<'_>,
    prepare: impl Fn(&RecordBatch) -> Result<Vec<Result<T, String>>>,
    tokens: impl Fn(&T) -> usize,
    mut score: impl FnMut(&[T]) -> Result<Vec<ArrayRef>>,
) -> Result<RowSummary> {
    let started = Instant::now();
    let id_type = input.schema.field_with_name("id")?.data_type().clone();
    let mut fields = vec![Field::new("id", id_type, false)];
    fields.extend(out.fields);
    let schema = Arc::new(Schema::new(fields));
    let quarantine_path = out
        .quarantine
        .map_or_else(|| sibling(out.path, "quarantine"), Path::to_path_buf);
    check_outputs(
        &[Named::new("--input", out.input)],
        &[
            (Named::new("--output", out.path), Kind::File),
            (
                Named::new("the quarantine file", &quarantine_path),
                Kind::File,
            ),
        ],
    )?;
    let mut writer = create_writer(out.path, schema.clone(), out.metadata)?;
    let mut quarantine = QuarantineWriter::create(&quarantine_path, out.metadata)?;

    let bar = progress_bar(input.total_rows, "rows");
    let (mut scored, mut token_count) = (0u64, 0u64);
    for chunk in input.by_ref() {
        let chunk = chunk.context("reading the input Parquet")?;
        let (rows_of, mut bad) = (chunk.rows, chunk.bad);
        let chunk = chunk.batch;
        let n = rows_of.len() + bad.len();
        let id_col = chunk
            .column_by_name("id")
            .context("the input has no `id`")?;
        let ids = display_column(id_col)?;
        let mut rows = Vec::new();
        let mut good = Vec::new();
        for (r, prepared) in prepare(&chunk)?.into_iter().enumerate() {
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
        quarantine.write(&bad)?;
        token_count += good.iter().map(|x| tokens(x) as u64).sum::<u64>();
        if !good.is_empty() {
            let mut columns = vec![arrow::compute::take(
                id_col,
                &UInt32Array::from(rows),
                None,
            )?];
            columns.extend(score(&good)?);
            writer.write(&RecordBatch::try_new(schema.clone(), columns)?)?;
        }
        scored += good.len() as u64;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    let (quarantine_file, quarantined) = quarantine.seal()?;
    commit_all([writer.seal()?, quarantine_file])?;
    Ok(RowSummary {
        scored,
        quarantined,
        tokens: token_count,
        seconds: started.elapsed().as_secs_f64(),
        quarantine_path,
    })
}
