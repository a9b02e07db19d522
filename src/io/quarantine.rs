//! The quarantine output: one row per input row that could not be processed, with
//! its input row number, id and the reason. A run never stops for a bad row.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use arrow::array::{ArrayRef, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;

use super::parquet_io::{batch, create_writer};

/// A bad row.
#[derive(Debug, Clone, PartialEq)]
pub struct BadRow {
    /// 0-based row number in the input file.
    pub row: u64,
    pub id: Option<String>,
    pub reason: String,
}

/// Streams bad rows to `<output>.quarantine.parquet` (written even when empty, so a
/// finished run always leaves both files).
pub struct QuarantineWriter {
    writer: ArrowWriter<File>,
    schema: Arc<Schema>,
    path: PathBuf,
    count: u64,
}

impl QuarantineWriter {
    pub fn create(path: &Path, metadata: &[(String, String)]) -> Result<Self> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("row", DataType::UInt64, false),
            Field::new("id", DataType::Utf8, true),
            Field::new("reason", DataType::Utf8, false),
        ]));
        Ok(Self {
            writer: create_writer(path, schema.clone(), metadata)?,
            schema,
            path: path.to_path_buf(),
            count: 0,
        })
    }

    pub fn write(&mut self, rows: &[BadRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let cols: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.row))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.id.as_deref()))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.reason.as_str()),
            )),
        ];
        self.writer.write(&batch(self.schema.clone(), cols)?)?;
        self.count += rows.len() as u64;
        Ok(())
    }

    /// Closes the file; returns its path and the number of bad rows.
    pub fn finish(self) -> Result<(PathBuf, u64)> {
        self.writer.close()?;
        Ok((self.path, self.count))
    }
}
