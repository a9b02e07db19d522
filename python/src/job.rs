//! `hopscore._native.Job`: one library job (`hopscore::jobs`) built from its options by
//! name (the keyword arguments of the Python class, as JSON: `JobConfig::from_options`
//! fills in the config's own defaults), fed Arrow tables across the C data interface
//! (no copy in either direction) and answering (rows, quarantine) tables with the CLI's
//! schemas.

use std::sync::Mutex;

use anyhow::{Context, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::pyarrow::{PyArrowType, Table};
use hopscore::jobs::{self, Job, JobConfig};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

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
        let out = jobs::process_checked(job, batch, &numbers)?;
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
    /// Loads the job `command` with `options` (a JSON object of option names and
    /// values; weights load here, once).
    #[new]
    fn new(py: Python<'_>, command: &str, options: &str) -> PyResult<Self> {
        let (config, device) = serde_json::from_str(options)
            .context("the options are not a JSON object")
            .and_then(|o| JobConfig::from_options(command, &o))
            .map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
        // A stalled download of the model can be stopped with Ctrl-C.
        let job = crate::interruptible(py, || Ok(jobs::build(config, &device)))?
            .map_err(|e| PyRuntimeError::new_err(format!("{e:#}")))?;
        Ok(Self {
            job: Mutex::new(job),
        })
    }

    /// Scores every row of `table`: (rows, quarantine) tables with the CLI's schemas.
    /// Bad rows go to the quarantine table; a bad schema raises `ValueError`, a
    /// device failure `RuntimeError`; Ctrl-C stops it at the job's next stop point and
    /// raises `KeyboardInterrupt`.
    fn process(
        &self,
        py: Python<'_>,
        table: PyArrowType<Table>,
    ) -> PyResult<(PyArrowType<Table>, PyArrowType<Table>)> {
        let (rows, bad) = crate::interruptible(py, || self.run(table.0))?;
        Ok((PyArrowType(rows), PyArrowType(bad)))
    }
}
