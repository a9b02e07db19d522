//! The file runner of the row jobs (`classify`, `loglik`): stream the input Parquet in
//! batches, pass each through [`Job::process_rows`], and write its rows (in input
//! order) and its bad rows with their reason (with the rows the reader left out for
//! invalid UTF-8), with a progress bar. Both files commit together at the end.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use super::control::progress_bar;
use crate::io::atomic::commit_all;
use crate::io::parquet_io::{create_writer, sibling, ParquetInput};
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::quarantine::{self, QuarantineWriter};
use crate::jobs::Job;

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
pub struct RowFiles<'a> {
    /// The input file (no output may be it).
    pub input: &'a Path,
    pub output: &'a Path,
    /// Default: `<output stem>.quarantine.parquet`.
    pub quarantine: Option<&'a Path>,
}

/// Runs `job` over the input file of `files`.
pub fn run(job: &mut dyn Job, files: RowFiles<'_>) -> Result<RowSummary> {
    let started = Instant::now();
    let mut input = ParquetInput::open(files.input, job.batch_rows())?;
    job.check_input(&input.schema)?;
    let schema = job.output_schema(&input.schema)?;
    let quarantine_path = files
        .quarantine
        .map_or_else(|| sibling(files.output, "quarantine"), Path::to_path_buf);
    check_outputs(
        &[Named::new("--input", files.input)],
        &[
            (Named::new("--output", files.output), Kind::File),
            (
                Named::new("the quarantine file", &quarantine_path),
                Kind::File,
            ),
        ],
    )?;
    let plain = |s: &arrow::datatypes::Schema| {
        std::sync::Arc::new(s.clone().with_metadata(Default::default()))
    };
    let metadata = job.metadata().to_vec();
    let mut writer = create_writer(files.output, plain(&schema), &metadata)?;
    let mut quarantine = QuarantineWriter::create(&quarantine_path, &metadata)?;

    let bar = progress_bar(input.total_rows, "rows");
    let (mut scored, mut tokens) = (0u64, 0u64);
    for chunk in input.by_ref() {
        let chunk = chunk.context("reading the input Parquet")?;
        let out = job.process_rows(&chunk.batch, &chunk.rows)?;
        let unreadable = quarantine::batch(&chunk.bad, out.quarantine.schema())?;
        quarantine.write_batch(&arrow::compute::concat_batches(
            &out.quarantine.schema(),
            [&unreadable, &out.quarantine],
        )?)?;
        writer.write(&out.rows)?;
        scored += out.rows.num_rows() as u64;
        tokens += out.tokens;
        bar.inc((chunk.rows.len() + chunk.bad.len()) as u64);
    }
    bar.finish_and_clear();
    let (quarantine_file, quarantined) = quarantine.seal()?;
    commit_all([writer.seal()?, quarantine_file])?;
    Ok(RowSummary {
        scored,
        quarantined,
        tokens,
        seconds: started.elapsed().as_secs_f64(),
        quarantine_path,
    })
}
