//! Reading and writing Parquet through arrow.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::basic::{ConvertedType, LogicalType, Type as PhysicalType};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::{SchemaDescriptor, Type as ParquetType, TypePtr};

use super::atomic::PendingFile;
use super::quarantine::BadRow;

/// A Parquet file streamed in record batches of `batch_rows` rows. Text is decoded per
/// row: a row holding bytes that are not valid UTF-8 is taken out of its batch and
/// reported as a [`BadRow`] naming the column, and the rest of the batch is read.
pub struct ParquetInput {
    reader: ParquetRecordBatchReader,
    pub total_rows: u64,
    /// The file's own schema (strings as strings).
    pub schema: SchemaRef,
    /// Whether strings are read as bytes and checked here.
    checks_text: bool,
    next_row: u64,
    /// The file, the first row of each row group and the read-as-bytes schema (when
    /// text is checked here), to find a damaged row group.
    path: std::path::PathBuf,
    group_starts: Vec<u64>,
    bytes_schema: Option<Arc<SchemaDescriptor>>,
}

/// One batch of a [`ParquetInput`].
pub struct InputBatch {
    /// The readable rows, in the file's schema.
    pub batch: RecordBatch,
    /// The 0-based file row of each row of `batch`.
    pub rows: Vec<u64>,
    /// Rows left out for invalid UTF-8.
    pub bad: Vec<BadRow>,
}

impl ParquetInput {
    pub fn open(path: &Path, batch_rows: usize) -> Result<Self> {
        let open = || File::open(path).with_context(|| format!("cannot open {}", path.display()));
        let unreadable = || format!("{} is not a readable Parquet file", path.display());
        let builder = ParquetRecordBatchReaderBuilder::try_new(open()?).with_context(unreadable)?;
        let total_rows = builder.metadata().file_metadata().num_rows().max(0) as u64;
        let group_starts = builder
            .metadata()
            .row_groups()
            .iter()
            .scan(0u64, |start, g| {
                let first = *start;
                *start += g.num_rows().max(0) as u64;
                Some(first)
            })
            .collect();
        let schema = builder.schema().clone();
        let parquet_schema = builder.metadata().file_metadata().schema_descr_ptr();
        let (bytes_schema, checks_text) = strings_as_bytes(&parquet_schema.root_schema_ptr())?;
        let bytes_schema = checks_text.then(|| Arc::new(SchemaDescriptor::new(bytes_schema)));
        let reader = match &bytes_schema {
            Some(schema) => ParquetRecordBatchReaderBuilder::try_new_with_options(
                open()?,
                bytes_options(schema),
            )
            .with_context(unreadable)?
            .with_batch_size(batch_rows)
            .build()?,
            None => builder.with_batch_size(batch_rows).build()?,
        };
        Ok(Self {
            reader,
            total_rows,
            schema,
            checks_text,
            next_row: 0,
            path: path.to_path_buf(),
            group_starts,
            bytes_schema,
        })
    }

    /// Whether row group `g` reads to its end.
    fn group_reads(&self, g: usize) -> bool {
        let read = || -> Result<()> {
            let file = File::open(&self.path)?;
            let builder = match &self.bytes_schema {
                Some(schema) => ParquetRecordBatchReaderBuilder::try_new_with_options(
                    file,
                    bytes_options(schema),
                )?,
                None => ParquetRecordBatchReaderBuilder::try_new(file)?,
            };
            for batch in builder.with_row_groups(vec![g]).build()? {
                batch?;
            }
            Ok(())
        };
        read().is_ok()
    }

    /// Where a read failed: the file, and the first row group from the next row on
    /// that does not read (each is tried alone).
    fn failed_at(&self) -> String {
        let first = self
            .group_starts
            .partition_point(|&s| s <= self.next_row)
            .saturating_sub(1);
        let g = (first..self.group_starts.len())
            .find(|&g| !self.group_reads(g))
            .unwrap_or(first);
        let end = self
            .group_starts
            .get(g + 1)
            .copied()
            .unwrap_or(self.total_rows);
        format!(
            "{}: row group {g} (rows {}..{end}) cannot be read; the file is damaged (rewrite \
             it, or drop that row group)",
            self.path.display(),
            self.group_starts.get(g).copied().unwrap_or(0),
        )
    }

    /// Converts a batch read with strings as bytes back to the file's schema, leaving
    /// out the rows with invalid UTF-8.
    fn decode(&mut self, raw: RecordBatch) -> Result<InputBatch> {
        let first = self.next_row;
        self.next_row += raw.num_rows() as u64;
        if !self.checks_text {
            return Ok(InputBatch {
                rows: (first..self.next_row).collect(),
                batch: raw,
                bad: Vec::new(),
            });
        }
        let reasons = utf8_problems(self.schema.fields(), raw.columns(), raw.num_rows());
        let rows: Vec<u64> = (first..self.next_row).collect();
        let bad = bad_text_rows(&raw, &rows, &reasons);
        let keep = BooleanArray::from_iter(reasons.iter().map(|w| Some(w.is_none())));
        let kept = arrow_select::filter::filter_record_batch(&raw, &keep)?;
        let columns = kept
            .columns()
            .iter()
            .zip(self.schema.fields())
            .map(|(c, f)| arrow_cast::cast(c, f.data_type()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let rows = (0..raw.num_rows())
            .filter(|&r| reasons[r].is_none())
            .map(|r| first + r as u64)
            .collect();
        Ok(InputBatch {
            batch: RecordBatch::try_new(self.schema.clone(), columns)?,
            rows,
            bad,
        })
    }

    /// Fails with a message naming the column when it is absent (and `required`) or
    /// not of an accepted type; see [`check_column`].
    pub fn check_column(&self, name: &str, accepted: &[&str], required: bool) -> Result<bool> {
        check_column(&self.schema, name, accepted, required)
    }
}

/// Whether `schema` has column `name`; fails with a message naming the column when it
/// is absent (and `required`) or not of an accepted kind (`string`, `integer`).
pub fn check_column(
    schema: &Schema,
    name: &str,
    accepted: &[&str],
    required: bool,
) -> Result<bool> {
    match schema.field_with_name(name) {
        Ok(f) => {
            let ty = f.data_type();
            // A column of nulls only (what pyarrow infers for an all-None column) is
            // read as nulls of any kind.
            let ok = *ty == DataType::Null
                || accepted.iter().any(|a| match *a {
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
            schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(_) => Ok(false),
    }
}

impl Iterator for ParquetInput {
    type Item = Result<InputBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let raw = match self.reader.next()? {
            Ok(b) => b,
            Err(e) => return Some(Err(anyhow::Error::from(e).context(self.failed_at()))),
        };
        Some(self.decode(raw))
    }
}

/// Reader options that read text as bytes (`schema`: from [`strings_as_bytes`]).
fn bytes_options(schema: &Arc<SchemaDescriptor>) -> ArrowReaderOptions {
    ArrowReaderOptions::new()
        .with_parquet_schema(schema.clone())
        .with_skip_arrow_metadata(true)
}

/// `root` with the UTF-8 annotation taken off every BYTE_ARRAY leaf (so the reader
/// yields bytes), and whether there was any.
fn strings_as_bytes(root: &TypePtr) -> Result<(TypePtr, bool)> {
    let info = root.get_basic_info();
    match root.as_ref() {
        ParquetType::PrimitiveType { physical_type, .. }
            if *physical_type == PhysicalType::BYTE_ARRAY
                && (info.converted_type() == ConvertedType::UTF8
                    || matches!(info.logical_type_ref(), Some(LogicalType::String))) =>
        {
            let leaf = ParquetType::primitive_type_builder(info.name(), PhysicalType::BYTE_ARRAY)
                .with_repetition(info.repetition())
                .with_id(info.has_id().then(|| info.id()))
                .build()?;
            Ok((Arc::new(leaf), true))
        }
        ParquetType::PrimitiveType { .. } => Ok((root.clone(), false)),
        ParquetType::GroupType { fields, .. } => {
            let mut changed = false;
            let fields = fields
                .iter()
                .map(|f| {
                    let (f, c) = strings_as_bytes(f)?;
                    changed |= c;
                    Ok(f)
                })
                .collect::<Result<Vec<_>>>()?;
            if !changed {
                return Ok((root.clone(), false));
            }
            let mut group = ParquetType::group_type_builder(info.name())
                .with_fields(fields)
                .with_converted_type(info.converted_type())
                .with_logical_type(info.logical_type_ref().cloned())
                .with_id(info.has_id().then(|| info.id()));
            if info.has_repetition() {
                group = group.with_repetition(info.repetition());
            }
            Ok((Arc::new(group.build()?), true))
        }
    }
}

/// Per row, the first column (of `fields`, holding `columns`) with text that is not
/// valid UTF-8, as the quarantine reason.
fn utf8_problems(
    fields: &arrow_schema::Fields,
    columns: &[ArrayRef],
    rows: usize,
) -> Vec<Option<String>> {
    let mut reasons: Vec<Option<String>> = vec![None; rows];
    for (field, col) in fields.iter().zip(columns) {
        for (r, bad) in invalid_utf8(col, field.data_type()).into_iter().enumerate() {
            if bad && reasons[r].is_none() {
                reasons[r] = Some(format!(
                    "column `{}` holds bytes that are not valid UTF-8",
                    field.name()
                ));
            }
        }
    }
    reasons
}

/// The bad rows of `batch` (numbered `rows`) that `reasons` names.
fn bad_text_rows(batch: &RecordBatch, rows: &[u64], reasons: &[Option<String>]) -> Vec<BadRow> {
    let ids = batch.column_by_name("id").map(|c| c.as_ref());
    reasons
        .iter()
        .zip(rows)
        .enumerate()
        .filter_map(|(r, (why, &row))| {
            Some(BadRow {
                row,
                id: ids.and_then(|c| readable_id(c, r)),
                reason: why.clone()?,
            })
        })
        .collect()
}

/// What [`screen_text`] keeps and leaves out: the batch of valid rows, their row
/// numbers, and the bad rows.
pub type Screened = (RecordBatch, Vec<u64>, Vec<BadRow>);

/// `batch` (rows numbered `rows`) without its rows whose text is not valid UTF-8, with
/// their numbers, and those rows as bad rows naming the column; `None` when every row
/// is valid. Arrow arrays that crossed the C data interface (from Python) are not
/// checked on the way in: this is the check the file reader makes.
pub fn screen_text(batch: &RecordBatch, rows: &[u64]) -> Result<Option<Screened>> {
    let schema = batch.schema();
    let reasons = utf8_problems(schema.fields(), batch.columns(), batch.num_rows());
    if reasons.iter().all(Option::is_none) {
        return Ok(None);
    }
    let bad = bad_text_rows(batch, rows, &reasons);
    let keep = BooleanArray::from_iter(reasons.iter().map(|w| Some(w.is_none())));
    let kept_rows = rows
        .iter()
        .zip(&reasons)
        .filter(|(_, why)| why.is_none())
        .map(|(&r, _)| r)
        .collect();
    Ok(Some((
        arrow_select::filter::filter_record_batch(batch, &keep)?,
        kept_rows,
        bad,
    )))
}

/// Per string of a `Utf8`/`LargeUtf8` array, whether its bytes are not valid UTF-8
/// (arrow's `value()` would assume they are).
fn invalid_strings<O: arrow_array::OffsetSizeTrait>(col: &dyn Array) -> Vec<bool> {
    let a = col.as_string::<O>();
    let (offsets, bytes) = (a.value_offsets(), a.values().as_slice());
    (0..a.len())
        .map(|r| {
            let (start, end) = (offsets[r].as_usize(), offsets[r + 1].as_usize());
            a.is_valid(r) && std::str::from_utf8(&bytes[start..end]).is_err()
        })
        .collect()
}

/// Per element of `col`, whether it holds bytes that are not valid UTF-8 where
/// `target` (the file's type) has text: `col` read with strings as bytes, or strings
/// whose bytes were never checked.
fn invalid_utf8(col: &ArrayRef, target: &DataType) -> Vec<bool> {
    let is_text = matches!(
        target,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    let per_range = |child: Vec<bool>, offsets: Vec<usize>| -> Vec<bool> {
        offsets
            .windows(2)
            .map(|w| child[w[0]..w[1]].iter().any(|&b| b))
            .collect()
    };
    match (col.data_type(), target) {
        (DataType::Utf8, _) => invalid_strings::<i32>(col),
        (DataType::LargeUtf8, _) => invalid_strings::<i64>(col),
        (DataType::Binary, _) if is_text => col
            .as_binary::<i32>()
            .iter()
            .map(|v| v.is_some_and(|b| std::str::from_utf8(b).is_err()))
            .collect(),
        (DataType::LargeBinary, _) if is_text => col
            .as_binary::<i64>()
            .iter()
            .map(|v| v.is_some_and(|b| std::str::from_utf8(b).is_err()))
            .collect(),
        (DataType::List(_), DataType::List(t) | DataType::LargeList(t)) => {
            let list = col.as_list::<i32>();
            per_range(
                invalid_utf8(list.values(), t.data_type()),
                list.value_offsets().iter().map(|&o| o as usize).collect(),
            )
        }
        (DataType::LargeList(_), DataType::List(t) | DataType::LargeList(t)) => {
            let list = col.as_list::<i64>();
            per_range(
                invalid_utf8(list.values(), t.data_type()),
                list.value_offsets().iter().map(|&o| o as usize).collect(),
            )
        }
        (DataType::Struct(_), DataType::Struct(targets)) => {
            let st = col.as_struct();
            let mut out = vec![false; col.len()];
            for (child, t) in st.columns().iter().zip(targets) {
                for (o, b) in out.iter_mut().zip(invalid_utf8(child, t.data_type())) {
                    *o |= b;
                }
            }
            out
        }
        _ => vec![false; col.len()],
    }
}

/// The id of row `r` for a quarantine row, when it is readable.
fn readable_id(col: &dyn Array, r: usize) -> Option<String> {
    if col.is_null(r) {
        return None;
    }
    match col.data_type() {
        DataType::Utf8 | DataType::LargeUtf8
            if invalid_utf8(&col.slice(r, 1), col.data_type())[0] =>
        {
            None
        }
        DataType::Binary => std::str::from_utf8(col.as_binary::<i32>().value(r))
            .ok()
            .map(str::to_string),
        DataType::LargeBinary => std::str::from_utf8(col.as_binary::<i64>().value(r))
            .ok()
            .map(str::to_string),
        _ => arrow_cast::cast(&col.slice(r, 1), &DataType::Utf8)
            .ok()
            .map(|c| c.as_string::<i32>().value(0).to_string()),
    }
}

/// Column `name` of a batch as UTF-8 strings (nulls kept).
pub fn string_column(batch: &RecordBatch, name: &str) -> Result<StringArray> {
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| anyhow!("batch has no column `{name}`"))?;
    let cast = arrow_cast::cast(col, &DataType::Utf8)
        .with_context(|| format!("column `{name}` cannot be read as text"))?;
    Ok(cast
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("cast to Utf8 yields a StringArray")
        .clone())
}

/// Display form of every value of a column (ids in messages and quarantine rows).
pub fn display_column(col: &ArrayRef) -> Result<StringArray> {
    let cast = arrow_cast::cast(col, &DataType::Utf8)?;
    Ok(cast
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("cast to Utf8 yields a StringArray")
        .clone())
}

/// A Parquet file being written atomically (see [`super::atomic`]): nothing appears
/// under its name until [`ParquetSink::close`] (or a commit of [`ParquetSink::seal`]'s
/// result); dropped unfinished, it leaves no trace.
pub struct ParquetSink {
    writer: ArrowWriter<File>,
    pending: PendingFile,
}

impl ParquetSink {
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer
            .write(batch)
            .with_context(|| format!("writing {}", self.pending.dest().display()))
    }

    /// Ends the current row group.
    pub fn flush(&mut self) -> Result<()> {
        Ok(self.writer.flush()?)
    }

    /// Writes the footer and syncs the file; committing the result renames it into
    /// place (so that several outputs can be completed before any is replaced).
    pub fn seal(self) -> Result<PendingFile> {
        let file = self
            .writer
            .into_inner()
            .with_context(|| format!("finishing {}", self.pending.dest().display()))?;
        PendingFile::seal(file)?;
        Ok(self.pending)
    }

    /// Completes the file and renames it into place.
    pub fn close(self) -> Result<()> {
        self.seal()?.commit()
    }
}

/// An atomic writer with zstd compression and `hopscore.*` key-value metadata.
pub fn create_writer(
    path: &Path,
    schema: SchemaRef,
    metadata: &[(String, String)],
) -> Result<ParquetSink> {
    let (pending, file) = PendingFile::create(path)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(
            metadata
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect(),
        ))
        .build();
    // The keys go in the footer (for Parquet readers) and in the Arrow schema (what
    // `pyarrow.parquet.read_table(...).schema.metadata` shows), as the Python API's
    // tables carry them.
    let schema = Arc::new(
        schema
            .as_ref()
            .clone()
            .with_metadata(metadata.iter().cloned().collect()),
    );
    Ok(ParquetSink {
        writer: ArrowWriter::try_new(file, schema, Some(props))?,
        pending,
    })
}

/// Buffers rows of type `R` and writes them as record batches of `batch_rows` rows,
/// built by `to_batch`.
pub struct BatchedWriter<R> {
    writer: ParquetSink,
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

    /// Writes the buffered rows and completes the file (see [`ParquetSink::seal`]).
    pub fn seal(mut self) -> Result<PendingFile> {
        self.flush()?;
        self.writer.seal()
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
    writer.close()
}

/// Longest text accepted in a row, in bytes; longer rows are quarantined (a text this
/// long is almost certainly a data error, and no model here reads that many tokens).
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// Column `name` as strings when `batch` has it (an optional input column).
pub fn optional_string_column(batch: &RecordBatch, name: &str) -> Result<Option<StringArray>> {
    batch
        .column_by_name(name)
        .map(|_| string_column(batch, name))
        .transpose()
}

/// `Ok(None)` for null, the text when usable, `Err` with a reason otherwise.
pub fn check_text<'a>(
    col: &'a arrow_array::StringArray,
    r: usize,
    name: &str,
) -> Result<Option<&'a str>, String> {
    if col.is_null(r) {
        return Ok(None);
    }
    check_str(col.value(r), name).map(Some)
}

/// The text of column `name` when usable: not blank, at most [`MAX_TEXT_BYTES`].
pub fn check_str<'a>(t: &'a str, name: &str) -> Result<&'a str, String> {
    if t.trim().is_empty() {
        return Err(format!("{name} is empty"));
    }
    if t.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "{name} has {} bytes (limit {MAX_TEXT_BYTES}); split the text into passages",
            t.len()
        ));
    }
    Ok(t)
}

/// Output path with a suffix before the extension: `out.parquet` → `out.quarantine.parquet`.
pub fn sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}.{suffix}.parquet"))
}
