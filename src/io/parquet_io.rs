//! Reading and writing Parquet through arrow.

use std::fs::File;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, SchemaRef};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

/// A Parquet file streamed in record batches of `batch_rows` rows.
pub struct ParquetInput {
    pub reader: ParquetRecordBatchReader,
    pub total_rows: u64,
    pub schema: SchemaRef,
}

impl ParquetInput {
    pub fn open(path: &Path, batch_rows: usize) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .with_context(|| format!("{} is not a readable Parquet file", path.display()))?;
        let total_rows = builder.metadata().file_metadata().num_rows().max(0) as u64;
        let schema = builder.schema().clone();
        let reader = builder.with_batch_size(batch_rows).build()?;
        Ok(Self {
            reader,
            total_rows,
            schema,
        })
    }

    /// Fails with a message naming the column when it is absent (and `required`) or
    /// not of an accepted type.
    pub fn check_column(&self, name: &str, accepted: &[&str], required: bool) -> Result<bool> {
        match self.schema.field_with_name(name) {
            Ok(f) => {
                let ty = f.data_type();
                let ok = accepted.iter().any(|a| match *a {
                    "string" => matches!(
                        ty,
                        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                    ),
                    "integer" => ty.is_integer(),
                    _ => false,
                });
                if !ok {
                    bail!(
                        "column `{name}` has type {ty}; expected {}",
                        accepted.join(" or ")
                    );
                }
                Ok(true)
            }
            Err(_) if required => bail!(
                "the input has no column `{name}` (columns: {})",
                self.schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(_) => Ok(false),
        }
    }
}

/// Column `name` of a batch as UTF-8 strings (nulls kept).
pub fn string_column(batch: &RecordBatch, name: &str) -> Result<StringArray> {
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| anyhow!("batch has no column `{name}`"))?;
    let cast = arrow::compute::cast(col, &DataType::Utf8)
        .with_context(|| format!("column `{name}` cannot be read as text"))?;
    Ok(cast
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("cast to Utf8 yields a StringArray")
        .clone())
}

/// Display form of every value of a column (ids in messages and quarantine rows).
pub fn display_column(col: &ArrayRef) -> Result<StringArray> {
    let cast = arrow::compute::cast(col, &DataType::Utf8)?;
    Ok(cast
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("cast to Utf8 yields a StringArray")
        .clone())
}

/// Writer with zstd compression and `hopscore.*` key-value metadata.
pub fn create_writer(
    path: &Path,
    schema: SchemaRef,
    metadata: &[(String, String)],
) -> Result<ArrowWriter<File>> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create directory {}", dir.display()))?;
    }
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(
            metadata
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect(),
        ))
        .build();
    Ok(ArrowWriter::try_new(file, schema, Some(props))?)
}

/// Buffers rows of type `R` and writes them as record batches of `batch_rows` rows,
/// built by `to_batch`.
pub struct BatchedWriter<R> {
    writer: ArrowWriter<File>,
    rows: Vec<R>,
    batch_rows: usize,
    to_batch: fn(Vec<R>) -> Result<RecordBatch>,
}

impl<R> BatchedWriter<R> {
    /// Creates `path` (see [`create_writer`]).
    pub fn create(
        path: &Path,
        schema: SchemaRef,
        metadata: &[(String, String)],
        batch_rows: usize,
        to_batch: fn(Vec<R>) -> Result<RecordBatch>,
    ) -> Result<Self> {
        Ok(Self {
            writer: create_writer(path, schema, metadata)?,
            rows: Vec::new(),
            batch_rows,
            to_batch,
        })
    }

    pub fn push(&mut self, row: R) -> Result<()> {
        self.rows.push(row);
        if self.rows.len() >= self.batch_rows {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if !self.rows.is_empty() {
            let batch = (self.to_batch)(std::mem::take(&mut self.rows))?;
            self.writer.write(&batch)?;
        }
        Ok(())
    }

    /// Writes the buffered rows and closes the file.
    pub fn finish(mut self) -> Result<()> {
        self.flush()?;
        self.writer.close()?;
        Ok(())
    }
}

/// Writes `rows` as a complete Parquet file, in record batches of `batch_rows` rows
/// built by `to_batch`.
pub fn write_in_batches<R>(
    path: &Path,
    schema: SchemaRef,
    metadata: &[(String, String)],
    rows: &[R],
    batch_rows: usize,
    to_batch: impl Fn(&[R]) -> Result<RecordBatch>,
) -> Result<()> {
    let mut writer = create_writer(path, schema, metadata)?;
    for chunk in rows.chunks(batch_rows.max(1)) {
        writer.write(&to_batch(chunk)?)?;
    }
    writer.close()?;
    Ok(())
}

/// Longest text accepted in a row, in bytes; longer rows are quarantined (a text this
/// long is almost certainly a data error, and no model here reads that many tokens).
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// `Ok(None)` for null, the text when usable, `Err` with a reason otherwise.
pub fn check_text<'a>(
    col: &'a arrow::array::StringArray,
    r: usize,
    name: &str,
) -> Result<Option<&'a str>, String> {
    if col.is_null(r) {
        return Ok(None);
    }
    let t = col.value(r);
    if t.trim().is_empty() {
        return Err(format!("{name} is empty"));
    }
    if t.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "{name} has {} bytes (limit {MAX_TEXT_BYTES}); split the text into passages",
            t.len()
        ));
    }
    Ok(Some(t))
}

/// Output path with a suffix before the extension: `out.parquet` → `out.quarantine.parquet`.
pub fn sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}.{suffix}.parquet"))
}
