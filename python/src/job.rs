//! `hopscore._native.Job`: one library job (`hopscore::jobs`) built from a CLI
//! subcommand and its flags, fed Arrow tables across the C data interface (no copy in
//! either direction) and answering (rows, quarantine) tables with the CLI's schemas.

use std::sync::Mutex;

use anyhow::{bail, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::pyarrow::{PyArrowType, Table};
use clap::Parser;
use hopscore::cli::{Cli, Command};
use hopscore::jobs::{self, DeviceConfig, Job, JobConfig};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// Placeholder for the file flags a subcommand requires and a job never reads.
const NO_FILE: &str = "<python>";

/// The job config and device that `hopscore <command> <flags>` would run with.
fn parse(command: &str, flags: &[String]) -> Result<(JobConfig, DeviceConfig)> {
    let argv = ["hopscore", command]
        .into_iter()
        .map(String::from)
        .chain(flags.iter().cloned())
        .chain(["--input", NO_FILE, "--output", NO_FILE].map(String::from));
    let cli = Cli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{}", e.render()))?;
    let (config, device) = match &cli.command {
        Command::Beam(a) => (JobConfig::Beam(a.config()), a.device.config()),
        Command::Label(a) => (JobConfig::Label(a.config()), a.device.config()),
        Command::Lepus(a) => (JobConfig::Lepus(a.config()), a.device.config()),
        Command::Classify(a) => (JobConfig::Classify(a.config()), a.device.config()),
        Command::Embed(a) => (JobConfig::Embed(a.config()), a.device.config()),
        Command::Loglik(a) => (JobConfig::Loglik(a.config()), a.device.config()),
        _ => bail!(
            "`{command}` is not a scoring job: use beam, label, lepus, classify, embed or loglik"
        ),
    };
    Ok((
        config,
        DeviceConfig {
            threads: cli.threads,
            ..device
        },
    ))
}

/// `batch` under `schema` (same columns, the job's metadata); no data is copied.
fn with_schema(schema: &SchemaRef, batch: &RecordBatch) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        schema.clone(),
        batch.columns().to_vec(),
    )?)
}

/// A loaded job; `process` may be called from any thread (one call at a time).
#[pyclass(module = "hopscore._native", name = "Job")]
pub struct PyJob {
    job: Mutex<Box<dyn Job>>,
}

impl PyJob {
    /// Runs the job over every batch of `input`, rows numbered from 0 across them.
    fn run(&self, input: Table) -> PyResult<(Table, Table)> {
        // A job whose last call panicked still holds consistent state between calls.
        let mut job = self
            .job
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (batches, schema) = input.into_inner();
        job.check_input(&schema)
            .map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        score(job.as_mut(), &batches, &schema)
            .map_err(|e| PyRuntimeError::new_err(format!("{e:#}")))
    }
}

/// (rows, quarantine) of `batches`, rows numbered from 0 across them.
fn score(job: &mut dyn Job, batches: &[RecordBatch], schema: &SchemaRef) -> Result<(Table, Table)> {
    let out_schema = job.output_schema(schema)?;
    let bad_schema = job.quarantine_schema();
    let (mut rows, mut bad, mut first) = (Vec::new(), Vec::new(), 0u64);
    for batch in batches {
        let numbers: Vec<u64> = (first..first + batch.num_rows() as u64).collect();
        first += numbers.len() as u64;
        let out = job.process_rows(batch, &numbers)?;
        rows.push(with_schema(&out_schema, &out.rows)?);
        bad.push(with_schema(&bad_schema, &out.quarantine)?);
    }
    Ok((
        Table::try_new(rows, out_schema)?,
        Table::try_new(bad, bad_schema)?,
    ))
}

#[pymethods]
impl PyJob {
    /// Loads the job of `hopscore <command> <flags>` (weights load here, once).
    #[new]
    fn new(py: Python<'_>, command: &str, flags: Vec<String>) -> PyResult<Self> {
        let (config, device) =
            parse(command, &flags).map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        let job = py
            .detach(|| crate::guard(|| Ok(jobs::build(config, &device))))?
            .map_err(|e| PyRuntimeError::new_err(format!("{e:#}")))?;
        Ok(Self {
            job: Mutex::new(job),
        })
    }

    /// Scores every row of `table`: (rows, quarantine) tables with the CLI's schemas.
    /// Bad rows go to the quarantine table; a bad schema raises `ValueError`, a
    /// device failure `RuntimeError`.
    fn process(
        &self,
        py: Python<'_>,
        table: PyArrowType<Table>,
    ) -> PyResult<(PyArrowType<Table>, PyArrowType<Table>)> {
        let (rows, bad) = py.detach(|| crate::guard(|| self.run(table.0)))?;
        Ok((PyArrowType(rows), PyArrowType(bad)))
    }
}
