//! Native HotpotQA / MuSiQue / 2Wiki files → one question file (`hopscore import`).
//!
//! Records stream from each input in file order and are written in row groups of
//! `row_group_rows` questions, so memory does not grow with the input. Records that
//! cannot be converted (and repeated ids) go to the quarantine file with the file name,
//! record number and reason; the run goes on.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::io::atomic::commit_all;
use crate::io::import::{convert, record_id};
use crate::io::json_records::{for_each_record, Record};
use crate::io::metadata::tool_metadata;
use crate::io::parquet_io::sibling;
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::quarantine::{BadRow, QuarantineWriter};
use crate::io::questions::{Dataset, Question, QuestionWriter};

/// What to import and where.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Format of the input files.
    pub dataset: Dataset,
    /// Native files: a JSON array or JSON lines, plain or gzip (detected from the content).
    pub files: Vec<PathBuf>,
    /// Output question file.
    pub output: PathBuf,
    /// Where bad records go. Default: `<output stem>.quarantine.parquet`.
    pub quarantine: Option<PathBuf>,
    /// Questions per Parquet row group (memory use is about this many questions).
    pub row_group_rows: usize,
}

/// Counts of an import.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportSummary {
    /// Records read from all inputs (good and bad).
    pub records: u64,
    pub questions: u64,
    pub passages: u64,
    pub quarantined: u64,
    /// Questions written with at least one entry in `issues`.
    pub with_issues: u64,
    pub seconds: f64,
    pub quarantine_path: PathBuf,
}

/// The importer's state while records stream in.
struct Importer {
    dataset: Dataset,
    writer: QuestionWriter,
    quarantine: QuarantineWriter,
    row_group_rows: usize,
    pending: Vec<Question>,
    bad: Vec<BadRow>,
    /// Each id written so far → where it was first seen, to refuse repeats.
    seen: HashMap<String, String>,
    with_issues: u64,
}

impl Importer {
    fn take(&mut self, file: &str, record: Record) -> Result<()> {
        let id = record.value.as_ref().ok().and_then(record_id);
        let converted = record.value.and_then(|v| convert(self.dataset, &v));
        let here = format!("{file} record {}", record.index);
        let outcome = converted.and_then(|q| match self.seen.get(&q.id) {
            Some(first) => Err(format!("repeated id (first seen in {first})")),
            None => Ok(q),
        });
        match outcome {
            Ok(q) => {
                self.seen.insert(q.id.clone(), here);
                self.with_issues += u64::from(!q.issues.is_empty());
                self.pending.push(q);
            }
            Err(reason) => self.bad.push(BadRow {
                row: record.index,
                id,
                reason: format!("{here}: {reason}"),
            }),
        }
        self.flush(self.row_group_rows)
    }

    /// Writes the buffered questions (bad rows) once there are at least `rows` of them.
    fn flush(&mut self, rows: usize) -> Result<()> {
        if !self.pending.is_empty() && self.pending.len() >= rows {
            self.writer.write(&self.pending)?;
            self.pending.clear();
        }
        if !self.bad.is_empty() && self.bad.len() >= rows {
            self.quarantine.write(&self.bad)?;
            self.bad.clear();
        }
        Ok(())
    }
}

/// Imports `args.files` into `args.output`; bad records go to the quarantine file.
pub fn import(args: &ImportOptions) -> Result<ImportSummary> {
    let started = Instant::now();
    anyhow::ensure!(
        args.row_group_rows > 0,
        "--row-group-rows must be at least 1"
    );
    let sources: Vec<String> = args.files.iter().map(|f| f.display().to_string()).collect();
    let metadata = tool_metadata(&[
        ("command", "import".to_string()),
        ("dataset", args.dataset.as_str().to_string()),
        ("sources", sources.join("\n")),
    ]);
    let quarantine_path = args
        .quarantine
        .clone()
        .unwrap_or_else(|| sibling(&args.output, "quarantine"));
    let inputs: Vec<Named> = args
        .files
        .iter()
        .map(|f| Named::new("input file", f))
        .collect();
    check_outputs(
        &inputs,
        &[
            (Named::new("--output", &args.output), Kind::File),
            (
                Named::new("the quarantine file", &quarantine_path),
                Kind::File,
            ),
        ],
    )?;
    let mut importer = Importer {
        dataset: args.dataset,
        writer: QuestionWriter::create(&args.output, &metadata)?,
        quarantine: QuarantineWriter::create(&quarantine_path, &metadata)?,
        row_group_rows: args.row_group_rows,
        pending: Vec::new(),
        bad: Vec::new(),
        seen: HashMap::new(),
        with_issues: 0,
    };
    let mut records = 0;
    for (path, name) in args.files.iter().zip(&sources) {
        records += for_each_record(path, |r| importer.take(name, r))
            .with_context(|| format!("importing {name} as {}", args.dataset.as_str()))?;
    }
    importer.flush(0)?;
    let with_issues = importer.with_issues;
    let (output, questions, passages) = importer.writer.seal()?;
    let (quarantine_file, quarantined) = importer.quarantine.seal()?;
    commit_all([output, quarantine_file])?;
    Ok(ImportSummary {
        records,
        questions,
        passages,
        quarantined,
        with_issues,
        seconds: started.elapsed().as_secs_f64(),
        quarantine_path,
    })
}
