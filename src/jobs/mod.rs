//! The library API: one job per scoring strategy, built once from a plain config
//! (weights and tokenizers load in the constructor), fed Arrow record batches and
//! yielding Arrow record batches. The CLI and the Python module both drive jobs; the
//! file runners of [`crate::pipeline`] stream Parquet files through them.

pub mod beam;
pub mod classify;
pub mod decoder;
pub mod device;
pub mod embed;
pub mod label;
pub mod lepus;
pub mod loglik;
pub mod questions;
pub mod retrieve;
pub mod review;
pub mod review_io;
pub mod rows;

use anyhow::Result;
use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};

pub use device::{DeviceConfig, DeviceKind};

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
/// failures).
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
        let out = self.job.process_rows(batch, &rows)?;
        self.next_row += rows.len() as u64;
        Ok(out)
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

/// The config of any job, to build it without naming its type.
#[derive(Debug, Clone)]
pub enum JobConfig {
    Beam(beam::BeamConfig),
    Classify(classify::ClassifyConfig),
    Embed(embed::EmbedConfig),
    Label(label::LabelConfig),
    Lepus(lepus::LepusConfig),
    Loglik(loglik::LoglikConfig),
    Review(review::ReviewConfig),
}

/// Loads the job `config` describes on `device` (sizing the CPU worker pool first
/// when `device.threads` is set; `review` runs no model: give it [`DeviceConfig::CPU`]).
pub fn build(config: JobConfig, device: &DeviceConfig) -> Result<Box<dyn Job>> {
    device.init_threads()?;
    device::with_backend!(owned device, be => Ok(match config {
        JobConfig::Beam(c) => Box::new(beam::job(c, be)?) as Box<dyn Job>,
        JobConfig::Classify(c) => Box::new(classify::job(c, be)?),
        JobConfig::Embed(c) => Box::new(embed::job(c, be)?),
        JobConfig::Label(c) => Box::new(label::job(c, be)?),
        JobConfig::Lepus(c) => match c.scorer {
            lepus::LepusScorer::Bm25 => Box::new(lepus::bm25_job(&c)),
            lepus::LepusScorer::Lm => Box::new(lepus::lm_job(&c, lepus::templates(&c)?, be)?),
        },
        JobConfig::Loglik(c) => Box::new(loglik::job(c, be)?),
        JobConfig::Review(c) => Box::new(review::job(c)?), // calls an endpoint, no model
    }))
}

/// The name of a flag's value on the command line, as run metadata records it.
pub fn value_name(value: impl clap::ValueEnum) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

/// `schema` with `metadata` as its key-value metadata.
pub fn with_metadata(schema: &Schema, metadata: &[(String, String)]) -> SchemaRef {
    std::sync::Arc::new(
        schema
            .clone()
            .with_metadata(metadata.iter().cloned().collect()),
    )
}
