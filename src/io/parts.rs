//! Resumable output: results are committed in parts, each covering a contiguous range
//! of input rows, next to a manifest of the committed ranges.
//!
//! While a run is going, `<output>.parts/` holds `part-NNNNNN.parquet` (results),
//! `part-NNNNNN.quarantine.parquet` (bad rows) and `manifest.json`. Every file is
//! written to a `.tmp` name, synced and renamed, and the manifest is replaced the same
//! way after the part's files, so a run killed at any instant (even SIGKILL) leaves a
//! consistent directory. `--resume` continues after the last committed row; the final
//! merge re-chunks all rows into fixed-size record batches, so the output is the same
//! byte for byte however the run was interrupted.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use super::parquet_io::{create_writer, sibling};

/// Rows per record batch of merged outputs (fixed, so bytes do not depend on parts).
const MERGE_BATCH_ROWS: usize = 1024;

/// One committed part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartEntry {
    /// Input rows `[first_row, end_row)` (relative to the run's row range).
    pub first_row: u64,
    pub end_row: u64,
    pub file: String,
    pub quarantine_file: String,
}

/// `manifest.json` of a parts directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// What the run computes (input, model checksum, options); a resume must match it.
    pub fingerprint: String,
    pub parts: Vec<PartEntry>,
}

/// The parts directory of one output file.
pub struct Parts {
    dir: PathBuf,
    manifest: Manifest,
}

/// `<output>.parts`.
pub fn parts_dir(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".parts");
    output.with_file_name(name)
}

impl Parts {
    /// Opens the parts directory of `output`: new when `resume` is false (an existing
    /// one is an error that names the fix), continued when `resume` is true.
    pub fn open(output: &Path, fingerprint: &str, resume: bool) -> Result<Self> {
        let dir = parts_dir(output);
        let manifest_path = dir.join("manifest.json");
        if manifest_path.is_file() {
            if !resume {
                bail!(
                    "{} holds an unfinished run: pass --resume to continue it, or delete the \
                     directory to start over",
                    dir.display()
                );
            }
            let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(
                &manifest_path,
            )?)
            .with_context(|| {
                format!(
                    "{} is damaged; delete it to start over",
                    manifest_path.display()
                )
            })?;
            if manifest.fingerprint != fingerprint {
                bail!(
                    "{} was started with other inputs or options ({}); now: {}. Delete it to start \
                     over, or resume with the same flags",
                    dir.display(),
                    manifest.fingerprint,
                    fingerprint
                );
            }
            return Ok(Self { dir, manifest });
        }
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let parts = Self {
            dir,
            manifest: Manifest {
                fingerprint: fingerprint.to_string(),
                parts: Vec::new(),
            },
        };
        parts.write_manifest()?;
        Ok(parts)
    }

    /// First row not yet committed.
    pub fn resume_row(&self) -> u64 {
        self.manifest.parts.last().map_or(0, |p| p.end_row)
    }

    /// Commits rows `[resume_row, end_row)`: `write(results_tmp, quarantine_tmp)`
    /// writes the two files, which are then synced, renamed, and recorded.
    pub fn commit(
        &mut self,
        end_row: u64,
        write: impl FnOnce(&Path, &Path) -> Result<()>,
    ) -> Result<()> {
        let first_row = self.resume_row();
        let index = self.manifest.parts.len();
        let file = format!("part-{index:06}.parquet");
        let quarantine_file = format!("part-{index:06}.quarantine.parquet");
        let tmp = |name: &str| self.dir.join(format!("{name}.tmp"));
        write(&tmp(&file), &tmp(&quarantine_file))?;
        for name in [&file, &quarantine_file] {
            File::open(tmp(name))?.sync_all()?;
            std::fs::rename(tmp(name), self.dir.join(name))?;
        }
        self.manifest.parts.push(PartEntry {
            first_row,
            end_row,
            file,
            quarantine_file,
        });
        self.write_manifest()
    }

    fn write_manifest(&self) -> Result<()> {
        let tmp = self.dir.join("manifest.json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&self.manifest)?)?;
        File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, self.dir.join("manifest.json"))?;
        Ok(())
    }

    /// Merges every part into `output` and its quarantine file, then removes the
    /// parts directory.
    pub fn finish(
        self,
        output: &Path,
        quarantine: &Path,
        schemas: (SchemaRef, SchemaRef),
        metadata: &[(String, String)],
    ) -> Result<()> {
        let files = |f: fn(&PartEntry) -> &String| -> Vec<PathBuf> {
            self.manifest
                .parts
                .iter()
                .map(|p| self.dir.join(f(p)))
                .collect()
        };
        concat_parquet(&files(|p| &p.file), output, schemas.0, metadata)?;
        concat_parquet(
            &files(|p| &p.quarantine_file),
            quarantine,
            schemas.1,
            metadata,
        )?;
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("cannot remove {}", self.dir.display()))?;
        Ok(())
    }
}

/// Writes the rows of `inputs`, in order, to `dest` in record batches of exactly
/// [`MERGE_BATCH_ROWS`] rows (the last one shorter). Written via a `.tmp` + rename.
pub fn concat_parquet(
    inputs: &[PathBuf],
    dest: &Path,
    schema: SchemaRef,
    metadata: &[(String, String)],
) -> Result<()> {
    let tmp = sibling(dest, "tmp");
    let mut writer = create_writer(&tmp, schema.clone(), metadata)?;
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut pending_rows = 0;
    let mut flush = |pending: &mut Vec<RecordBatch>, rows: &mut usize, all: bool| -> Result<()> {
        while *rows >= MERGE_BATCH_ROWS || (all && *rows > 0) {
            let joined = arrow::compute::concat_batches(&schema, pending.iter())?;
            let take = joined.num_rows().min(MERGE_BATCH_ROWS);
            writer.write(&joined.slice(0, take))?;
            *pending = vec![joined.slice(take, joined.num_rows() - take)];
            *rows -= take;
        }
        Ok(())
    };
    for path in inputs {
        let reader = ParquetRecordBatchReaderBuilder::try_new(
            File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        )?
        .build()?;
        for batch in reader {
            let batch = batch?;
            pending_rows += batch.num_rows();
            pending.push(batch);
            flush(&mut pending, &mut pending_rows, false)?;
        }
    }
    flush(&mut pending, &mut pending_rows, true)?;
    writer.close()?;
    std::fs::rename(&tmp, dest)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn write_ints(path: &Path, schema: &SchemaRef, chunks: &[std::ops::Range<i32>]) -> Result<()> {
        let mut w = create_writer(path, schema.clone(), &[])?;
        for c in chunks {
            w.write(&RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int32Array::from_iter_values(c.clone()))],
            )?)?;
        }
        w.close()?;
        Ok(())
    }

    #[test]
    fn merged_bytes_do_not_depend_on_part_boundaries() {
        let schema: SchemaRef =
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]));
        let tmp = tempfile::tempdir().unwrap();
        let run = |name: &str, cuts: &[i32]| -> Vec<u8> {
            let output = tmp.path().join(format!("{name}.parquet"));
            let mut parts = Parts::open(&output, "fp", false).unwrap();
            let mut start = 0;
            for &end in cuts {
                parts
                    .commit(end as u64, |res, q| {
                        write_ints(
                            res,
                            &schema,
                            &[start..(start + end) / 2, (start + end) / 2..end],
                        )?;
                        write_ints(q, &schema, &[])
                    })
                    .unwrap();
                start = end;
            }
            let quarantine = tmp.path().join(format!("{name}.q.parquet"));
            parts
                .finish(&output, &quarantine, (schema.clone(), schema.clone()), &[])
                .unwrap();
            assert!(!parts_dir(&output).exists());
            std::fs::read(&output).unwrap()
        };
        let a = run("a", &[2500]);
        let b = run("b", &[7, 1030, 1031, 2048, 2500]);
        assert_eq!(a, b);
    }

    #[test]
    fn resume_requires_the_flag_and_the_same_fingerprint() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let mut p = Parts::open(&output, "fp1", false).unwrap();
        p.commit(10, |a, b| {
            std::fs::write(a, b"x")?;
            std::fs::write(b, b"y")?;
            Ok(())
        })
        .unwrap();
        let err = Parts::open(&output, "fp1", false)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--resume"), "{err}");
        let err = Parts::open(&output, "fp2", true).err().unwrap().to_string();
        assert!(err.contains("other inputs or options"), "{err}");
        assert_eq!(Parts::open(&output, "fp1", true).unwrap().resume_row(), 10);
    }
}
