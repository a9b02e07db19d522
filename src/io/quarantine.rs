//! The quarantine output: one row per input row that could not be processed, with
//! its input row number, id and the reason. A run never stops for a bad row.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::atomic::PendingFile;
use super::parquet_io::{create_writer, ParquetSink};
use anyhow::Result;
use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// A bad row.
#[derive(Debug, Clone, PartialEq)]
pub struct BadRow {
    /// 0-based row number in the input file.
    pub row: u64,
    pub id: Option<String>,
    pub reason: String,
}

/// Streams bad rows to `<output>.quarantine.parquet` (written even when empty, so a
/// finished run always leaves both files), atomically like every output.
pub struct QuarantineWriter {
    writer: ParquetSink,
    schema: Arc<Schema>,
    path: PathBuf,
    count: u64,
}

/// Columns of a quarantine file: `row`, `id`, `reason`.
pub fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("row", DataType::UInt64, false),
        Field::new("id", DataType::Utf8, true),
        Field::new("reason", DataType::Utf8, false),
    ]))
}

/// `rows` as a record batch of `schema` (the columns of [`schema()`], with any
/// metadata).
pub fn batch(rows: &[BadRow], schema: SchemaRef) -> Result<RecordBatch> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.row))),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.id.as_deref()))),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.reason.as_str()),
        )),
    ];
    Ok(RecordBatch::try_new(schema, cols)?)
}

impl QuarantineWriter {
    pub fn create(path: &Path, metadata: &[(String, String)]) -> Result<Self> {
        let schema = schema();
        Ok(Self {
            writer: create_writer(path, schema.clone(), metadata)?,
            schema,
            path: path.to_path_buf(),
            count: 0,
        })
    }

    pub fn write(&mut self, rows: &[BadRow]) -> Result<()> {
        self.write_batch(&batch(rows, self.schema.clone())?)
    }

    /// Writes a batch of quarantine rows (the columns of [`schema`]).
    pub fn write_batch(&mut self, rows: &RecordBatch) -> Result<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        self.writer.write(rows)?;
        self.count += rows.num_rows() as u64;
        Ok(())
    }

    /// Completes the file without renaming it into place yet (see
    /// [`ParquetSink::seal`]); returns it and the number of bad rows.
    pub fn seal(self) -> Result<(PendingFile, u64)> {
        Ok((self.writer.seal()?, self.count))
    }

    /// Completes the file and renames it into place; returns its path and the number
    /// of bad rows.
    pub fn finish(self) -> Result<(PathBuf, u64)> {
        let path = self.path.clone();
        let (file, count) = self.seal()?;
        file.commit()?;
        Ok((path, count))
    }
}
