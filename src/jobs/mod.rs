//! The library API: one job per scoring strategy, built once from a plain config
//! (weights and tokenizers load in the constructor), fed Arrow record batches and
//! yielding Arrow record batches. The CLI and the Python module both drive jobs; the
//! file runners of [`crate::pipeline`] stream Parquet files through them.

pub mod beam;
pub mod classify;
pub mod device;
pub mod embed;
pub mod label;
pub mod lepus;
pub mod loglik;
pub mod questions;
pub mod registry;
pub mod report;
pub mod rerank;
pub mod retrieve;
pub mod review;
pub mod review_io;
pub mod rows;
pub mod selftest;

use anyhow::Result;
use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};

pub use device::{DeviceConfig, DeviceKind, NoDevice};
pub use registry::{
    build, config_from_options, run, run_on_device, FileJobKind, JobConfig, JobKind, Registered,
};

use crate::options;
use crate::pipeline::files::{self, FileJob};

/// What one batch of input rows gives.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// One row per good input row, in input order, with exactly the columns of the
    /// CLI's output file ([`Job::output_schema`]).
    pub rows: RecordBatch,
    /// One row per bad input row (`row`, `id`, `reason`), as the CLI's quarantine
    /// file holds them ([`Job::quarantine_schema`]).
    pub quarantine: RecordBatch,
    /// Tokens run through the model for this batch.
    pub tokens: u64,
}

/// A loaded scoring job. A bad row never makes a call fail: it goes to the
/// quarantine batch with its reason; errors are job-level (bad input schema, device
/// failures). Every job of the pipeline is one ([`FileJob`], below).
pub trait Job: Send {
    /// Refuses an input schema that lacks a column the job reads or holds one of the
    /// wrong type, naming the column.
    fn check_input(&self, input: &Schema) -> Result<()>;
    /// The output columns for an input of schema `input`, with the run metadata
    /// (`hopscore.*` keys, model fingerprint) as schema metadata.
    fn output_schema(&self, input: &Schema) -> Result<SchemaRef>;
    /// The quarantine columns, with the same metadata.
    fn quarantine_schema(&self) -> SchemaRef {
        with_metadata(&crate::io::quarantine::schema(), self.metadata())
    }
    /// The run metadata, as written into the footer of every output file.
    fn metadata(&self) -> &[(String, String)];
    /// Input rows per batch that suit the job (what the file runner reads at once).
    fn batch_rows(&self) -> usize;
    /// Processes `batch`, whose rows are the input rows numbered `rows` (the numbers
    /// the quarantine batch reports).
    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput>;
}

/// A job of the pipeline called on batches: the rows of each batch run through its
/// engine as a file's do ([`files::run_batch`]).
impl<J: FileJob + Send> Job for J {
    fn check_input(&self, input: &Schema) -> Result<()> {
        FileJob::check_input(self, input)
    }
    fn output_schema(&self, input: &Schema) -> Result<SchemaRef> {
        Ok(with_metadata(
            &*self.output_columns(input)?,
            FileJob::metadata(self),
        ))
    }
    fn metadata(&self) -> &[(String, String)] {
        FileJob::metadata(self)
    }
    fn batch_rows(&self) -> usize {
        FileJob::batch_rows(self)
    }
    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
        let run = files::run_batch(self, batch, rows)?;
        Ok(JobOutput {
            rows: RecordBatch::try_new(
                self.output_schema(&batch.schema())?,
                run.rows.columns().to_vec(),
            )?,
            quarantine: crate::io::quarantine::batch(&run.bad, self.quarantine_schema())?,
            tokens: run.tokens,
        })
    }
}

/// A job fed a stream of batches: [`Stream::process`] numbers their rows from 0 across
/// calls, as in one input file (the quarantine's `row`). Derefs to the job.
pub struct Stream {
    job: Box<dyn Job>,
    next_row: u64,
}

impl Stream {
    pub fn new(job: Box<dyn Job>) -> Self {
        Self { job, next_row: 0 }
    }

    /// Processes the next batch of the stream.
    pub fn process(&mut self, batch: &RecordBatch) -> Result<JobOutput> {
        let first = self.next_row;
        let rows: Vec<u64> = (first..first + batch.num_rows() as u64).collect();
        let out = process_checked(self.job.as_mut(), batch, &rows)?;
        self.next_row += rows.len() as u64;
        Ok(out)
    }
}

/// [`Job::process_rows`] after the check the file reader makes: a row whose text is
/// not valid UTF-8 goes to the quarantine naming the column, the others are processed.
/// Arrays from another runtime (Python, across the C data interface) arrive unchecked.
pub fn process_checked(job: &mut dyn Job, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
    let Some((kept, kept_rows, bad)) = crate::io::parquet_io::screen_text(batch, rows)? else {
        return job.process_rows(batch, rows);
    };
    let mut out = job.process_rows(&kept, &kept_rows)?;
    let schema = job.quarantine_schema();
    let screened = crate::io::quarantine::batch(&bad, schema.clone())?;
    out.quarantine = arrow_select::concat::concat_batches(&schema, [&screened, &out.quarantine])?;
    Ok(out)
}

/// A job whose work runs in a worker pool of its own (`DeviceConfig::threads`), so
/// that jobs in one process (Python, a service) each keep their thread count.
struct Pooled {
    pool: rayon::ThreadPool,
    job: Box<dyn Job>,
}

impl Job for Pooled {
    fn check_input(&self, input: &Schema) -> Result<()> {
        self.job.check_input(input)
    }
    fn output_schema(&self, input: &Schema) -> Result<SchemaRef> {
        self.job.output_schema(input)
    }
    fn metadata(&self) -> &[(String, String)] {
        self.job.metadata()
    }
    fn batch_rows(&self) -> usize {
        self.job.batch_rows()
    }
    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
        let job = &mut self.job;
        self.pool.install(|| job.process_rows(batch, rows))
    }
}

impl std::ops::Deref for Stream {
    type Target = dyn Job;
    fn deref(&self) -> &(dyn Job + 'static) {
        &*self.job
    }
}

impl std::ops::DerefMut for Stream {
    fn deref_mut(&mut self) -> &mut (dyn Job + 'static) {
        &mut *self.job
    }
}

/// The settings of `device` as run metadata (`hopscore.<option>`, [`options::record`]):
/// every GPU and CPU knob, so that two runs with other kernels do not look the same.
pub fn device_settings(device: &DeviceConfig) -> Result<Vec<(String, String)>> {
    Ok(crate::io::metadata::prefixed(&options::record(
        device,
        &[],
    )?))
}

/// Whether `name` is an option of the device (a serialised field of [`DeviceConfig`])
/// among a job's options (Python's keyword arguments).
fn is_device_option(name: &str) -> bool {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES
        .get_or_init(|| {
            let fields = serde_json::to_value(DeviceConfig::CPU).unwrap_or_default();
            fields
                .as_object()
                .map(|f| f.keys().cloned().collect())
                .unwrap_or_default()
        })
        .iter()
        .any(|n| n == name)
}

/// A built job whose metadata also holds the SHA-256 of its other input files
/// (`hopscore.sha256.<flag>`: model, tokenizer, corpus, …) and the device's settings,
/// as the CLI's file runner records them, so that rows from the API name the bytes and
/// the kernels that made them.
struct WithInputs {
    job: Box<dyn Job>,
    metadata: Vec<(String, String)>,
}

impl WithInputs {
    fn new(
        job: Box<dyn Job>,
        inputs: &[crate::io::paths::Named],
        settings: &[(String, String)],
    ) -> Result<Self> {
        let mut metadata = job.metadata().to_vec();
        metadata.extend(crate::io::fingerprint::contents(inputs)?);
        crate::io::metadata::add_settings(&mut metadata, settings);
        Ok(Self { job, metadata })
    }
}

impl Job for WithInputs {
    fn check_input(&self, input: &Schema) -> Result<()> {
        self.job.check_input(input)
    }
    fn output_schema(&self, input: &Schema) -> Result<SchemaRef> {
        Ok(with_metadata(
            &*self.job.output_schema(input)?,
            &self.metadata,
        ))
    }
    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }
    fn batch_rows(&self) -> usize {
        self.job.batch_rows()
    }
    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
        let out = self.job.process_rows(batch, rows)?;
        let rebind =
            |b: &RecordBatch, schema: SchemaRef| RecordBatch::try_new(schema, b.columns().to_vec());
        Ok(JobOutput {
            rows: rebind(&out.rows, self.output_schema(&batch.schema())?)?,
            quarantine: rebind(&out.quarantine, self.quarantine_schema())?,
            tokens: out.tokens,
        })
    }
}

/// The name of an option's value as run metadata records it: its serde name
/// (kebab-case, the command line's spelling; `cli::tests` holds the two together).
pub fn value_name(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

/// `schema` with `metadata` as its key-value metadata.
pub fn with_metadata(schema: &Schema, metadata: &[(String, String)]) -> SchemaRef {
    std::sync::Arc::new(
        schema
            .clone()
            .with_metadata(metadata.iter().cloned().collect()),
    )
}
