//! Resumable output: results are committed in parts, each covering a range of input
//! rows, next to a manifest of the committed ranges.
//!
//! While a run is going, `<output>.parts/` holds `part-NNNNNN.parquet` (results),
//! `part-NNNNNN.quarantine.parquet` (bad rows), `manifest.json` (what the run computes,
//! whether it is finished) and `committed.jsonl`, one line per committed part. Part
//! files are written atomically ([`super::atomic`]); only then is the part's line
//! appended (and synced), so committing costs the same however many parts came before,
//! and a run killed at any instant (even SIGKILL) leaves a consistent directory: a line
//! cut short by the kill is not a commit (its part is computed again).
//! Parts commit as soon as their rows are complete, in any order; `--resume` computes
//! only the rows no part covers. The final merge orders the parts by row and re-chunks
//! all rows into fixed-size record batches, so the output is the same byte for byte
//! however the run was interrupted. Finishing is idempotent: the manifest is marked
//! finished once the output is in place, before the parts are deleted, so a run killed
//! during the clean-up is completed by the next `--resume`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use super::atomic::{commit_all, sync_dir, write_file, PendingFile};
use super::fingerprint;
use super::parquet_io::create_writer;

/// Rows per record batch of merged outputs (fixed, so bytes do not depend on parts).
const MERGE_BATCH_ROWS: usize = 1024;

/// The log of committed parts in a parts directory: one JSON [`PartEntry`] a line.
const LOG: &str = "committed.jsonl";

/// The parts `log` records. A last line without its newline was cut short by a kill:
/// it is no commit, and the file is cut back to the lines before it.
fn read_log(log: &Path) -> Result<Vec<PartEntry>> {
    let text = match std::fs::read_to_string(log) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        read => read.with_context(|| format!("cannot read {}", log.display()))?,
    };
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    if complete < text.len() {
        OpenOptions::new()
            .write(true)
            .open(log)
            .and_then(|f| f.set_len(complete as u64).and_then(|()| f.sync_data()))
            .with_context(|| format!("cannot repair {}", log.display()))?;
    }
    text[..complete]
        .lines()
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|e| {
                let what = e.to_string();
                let what = what.split(" at line ").next().unwrap_or_default();
                anyhow::anyhow!(
                    "{} is damaged at line {}, column {}: {what}; delete its directory to \
                     start over",
                    log.display(),
                    n + 1,
                    e.column()
                )
            })
        })
        .collect()
}

/// One committed part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartEntry {
    /// Input rows `[first_row, end_row)` (relative to the run's row range).
    pub first_row: u64,
    pub end_row: u64,
    pub file: String,
    pub quarantine_file: String,
    /// Rows in `file` and in `quarantine_file`, and their SHA-256, recorded at commit
    /// (absent in logs of earlier versions, whose parts are not verified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<PartCheck>,
}

/// What a committed part's files held when they were committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartCheck {
    pub rows: u64,
    pub sha256: String,
    pub quarantine_rows: u64,
    pub quarantine_sha256: String,
}

impl PartEntry {
    /// Refuses a part whose files are missing or no longer what was committed.
    fn verify(&self, dir: &Path) -> Result<()> {
        let Some(check) = &self.check else {
            return Ok(());
        };
        for (name, rows, sha) in [
            (&self.file, check.rows, &check.sha256),
            (
                &self.quarantine_file,
                check.quarantine_rows,
                &check.quarantine_sha256,
            ),
        ] {
            let path = dir.join(name);
            let problem = match (path.is_file(), parquet_rows(&path)) {
                (false, _) => Some("is missing".to_string()),
                (true, Ok(n)) if n != rows => {
                    Some(format!("holds {n} rows, not the {rows} committed"))
                }
                (true, Err(_)) => Some("is damaged (not a readable Parquet file)".to_string()),
                (true, Ok(_)) if fingerprint::read_sha256(&path)? != *sha => {
                    Some("has changed since it was committed (another SHA-256)".to_string())
                }
                _ => None,
            };
            if let Some(problem) = problem {
                bail!(
                    "{} (input rows {}..{} of this run, committed) {problem}; the resumed run \
                     cannot rely on it. Delete {} to start over",
                    path.display(),
                    self.first_row,
                    self.end_row,
                    dir.display()
                );
            }
        }
        Ok(())
    }
}

/// The row count in a Parquet file's footer.
fn parquet_rows(path: &Path) -> Result<u64> {
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(File::open(path)?)?;
    use parquet::file::reader::FileReader;
    Ok(reader.metadata().file_metadata().num_rows().max(0) as u64)
}

/// `manifest.json` of a parts directory (with the parts of `committed.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// What the run computes (input and model checksums, options); a resume must
    /// match it.
    pub fingerprint: String,
    /// In commit order (not necessarily row order). Written only by earlier versions,
    /// which rewrote the manifest at each commit; read with `committed.jsonl`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartEntry>,
    /// The output and quarantine files are complete; only the clean-up remains.
    #[serde(default)]
    pub finished: bool,
}

/// The parts directory of one output file, locked for the life of the run.
pub struct Parts {
    dir: PathBuf,
    manifest: Manifest,
    /// `<dir>/lock`, holding an advisory lock (released by the OS on any exit).
    _lock: Lock,
}

/// The held lock of a parts directory: its file, and the directory's entry in the
/// set of locks this process holds.
struct Lock {
    _file: File,
    dir: PathBuf,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Ok(mut held) = HELD.lock() {
            held.remove(&self.dir);
        }
    }
}

/// The parts directories whose lock this process holds. A lock file naming this
/// process, of a directory not in the set, is one a child forked by another thread
/// still holds until its `exec` (the lock belongs to the open file, which the child
/// shares until then): [`lock`] waits for that instead of refusing.
static HELD: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// How long [`lock`] waits for a forked child to drop this process's released lock.
const FORK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The lock file of a parts directory; it holds the pid of the run that has it.
const LOCK: &str = "lock";

/// Takes the advisory lock of `dir` (creating both), or refuses naming the holder.
fn lock(dir: &Path, output: &Path) -> Result<Lock> {
    let path = dir.join(LOCK);
    let mut attempts = 0;
    let mut file = loop {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => break f,
            // A run finishing at this moment removed the directory: make it again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts < 3 => attempts += 1,
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
        }
    };
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let ours = holder.trim() == std::process::id().to_string()
                    && HELD.lock().is_ok_and(|held| !held.contains(dir));
                if ours && started.elapsed() < FORK_GRACE {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                }
                let holder = match holder.trim() {
                    "" => "another hopscore run".to_string(),
                    pid => format!("another hopscore run (pid {pid})"),
                };
                bail!(
                    "{holder} is writing {}: two runs must not write one output. Wait for it \
                     to end (or stop it), or choose another --output",
                    output.display()
                );
            }
            // A file system without locks (some network mounts): run unguarded, said once.
            Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                log::warn!(
                    "{} cannot be locked here ({e}); make sure no other run writes {}",
                    path.display(),
                    output.display()
                );
                break;
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
    }
    file.set_len(0)
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .and_then(|()| file.sync_data())
        .with_context(|| format!("cannot write {}", path.display()))?;
    if let Ok(mut held) = HELD.lock() {
        held.insert(dir.to_path_buf());
    }
    Ok(Lock {
        _file: file,
        dir: dir.to_path_buf(),
    })
}

/// `<output>.parts`.
pub fn parts_dir(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".parts");
    output.with_file_name(name)
}

/// The lock of an output written whole at the end (no parts: `retrieve`), held in
/// `<output>.parts/lock` like a parts run's, so the two kinds of run exclude each
/// other; the directory goes when the lock is dropped.
pub struct OutputLock {
    dir: PathBuf,
    _lock: Lock,
}

impl OutputLock {
    /// Locks `output` (refusing a second writer, naming it), then removes the
    /// temporaries killed runs left for each of `dests` (the output and its siblings).
    pub fn acquire(output: &Path, dests: &[&Path]) -> Result<Self> {
        let dir = parts_dir(output);
        let lock = lock(&dir, output)?;
        for dest in dests {
            super::atomic::remove_stale_temporaries(dest)?;
        }
        Ok(Self { dir, _lock: lock })
    }
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(LOCK));
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// How [`Parts::open`] found the parts directory.
pub enum Opened {
    /// Ready for commits (new, or continued with `--resume`).
    Ready(Parts),
    /// `--resume` of a run that had already written its output: the clean-up it was
    /// killed in is now done, and there is nothing left to compute.
    AlreadyFinished,
}

impl Parts {
    /// Opens the parts directory of `output`: new when `resume` is false (an unfinished
    /// one is an error that names the fix), continued when `resume` is true. A
    /// directory left by a run that finished its output but not its clean-up is
    /// cleaned up first.
    ///
    /// The directory is locked first (a second run writing the same output is
    /// refused), then the temporaries of killed runs are removed; a resumed run
    /// verifies every committed part before any work.
    pub fn open(output: &Path, fingerprint: &str, resume: bool) -> Result<Opened> {
        let dir = parts_dir(output);
        let lock = lock(&dir, output)?;
        super::atomic::remove_stale_temporaries(&dir)?;
        let manifest_path = dir.join("manifest.json");
        if manifest_path.is_file() {
            let mut manifest: Manifest = serde_json::from_str(
                &std::fs::read_to_string(&manifest_path)
                    .with_context(|| format!("cannot read {}", manifest_path.display()))?,
            )
            .with_context(|| {
                format!(
                    "{} is damaged; delete it to start over",
                    manifest_path.display()
                )
            })?;
            manifest.parts.extend(read_log(&dir.join(LOG))?);
            if manifest.finished {
                let same = manifest.fingerprint == fingerprint;
                Self {
                    dir: dir.clone(),
                    manifest,
                    _lock: lock,
                }
                .remove()?;
                if resume && same {
                    return Ok(Opened::AlreadyFinished);
                }
                // The clean-up removed the directory and its lock file: a new one.
                return Self::start(dir.clone(), fingerprint, self::lock(&dir, output)?);
            } else {
                if !resume {
                    bail!(
                        "{} holds an unfinished run: pass --resume to continue it, or delete \
                         the directory to start over",
                        dir.display()
                    );
                }
                if manifest.fingerprint != fingerprint {
                    bail!(
                        "{} was started with other inputs or options: {}. Delete it to start \
                         over, or resume with the same input, model and flags",
                        dir.display(),
                        fingerprint::differences(&manifest.fingerprint, fingerprint)
                    );
                }
                for part in &manifest.parts {
                    part.verify(&dir)?;
                }
                return Ok(Opened::Ready(Self {
                    dir,
                    manifest,
                    _lock: lock,
                }));
            }
        }
        Self::start(dir, fingerprint, lock)
    }

    /// A new run in the locked directory `dir`.
    fn start(dir: PathBuf, fingerprint: &str, lock: Lock) -> Result<Opened> {
        write_file(&dir.join(LOG), b"")?; // replaces a stale log
        let parts = Self {
            dir,
            manifest: Manifest {
                fingerprint: fingerprint.to_string(),
                parts: Vec::new(),
                finished: false,
            },
            _lock: lock,
        };
        parts.write_manifest()?;
        Ok(Opened::Ready(parts))
    }

    /// The committed row ranges `[first, end)`, in row order.
    pub fn committed(&self) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = self
            .manifest
            .parts
            .iter()
            .map(|p| (p.first_row, p.end_row))
            .collect();
        ranges.sort_unstable();
        ranges
    }

    /// Commits rows `[first_row, end_row)`: `write(results, quarantine)` writes the two
    /// files (atomically), then a line of `committed.jsonl` records them.
    pub fn commit(
        &mut self,
        first_row: u64,
        end_row: u64,
        write: impl FnOnce(&Path, &Path) -> Result<()>,
    ) -> Result<()> {
        let index = self.manifest.parts.len();
        let file = format!("part-{index:06}.parquet");
        let quarantine_file = format!("part-{index:06}.quarantine.parquet");
        let (path, quarantine_path) = (self.dir.join(&file), self.dir.join(&quarantine_file));
        write(&path, &quarantine_path)?;
        let check = PartCheck {
            rows: parquet_rows(&path)?,
            sha256: fingerprint::read_sha256(&path)?,
            quarantine_rows: parquet_rows(&quarantine_path)?,
            quarantine_sha256: fingerprint::read_sha256(&quarantine_path)?,
        };
        let entry = PartEntry {
            first_row,
            end_row,
            file,
            quarantine_file,
            check: Some(check),
        };
        let log = self.dir.join(LOG);
        let mut line = serde_json::to_string(&entry)?;
        line.push('\n');
        let mut out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        out.write_all(line.as_bytes())
            .and_then(|()| out.sync_data())
            .with_context(|| format!("cannot write {}", log.display()))?;
        self.manifest.parts.push(entry);
        Ok(())
    }

    /// Writes `manifest.json` (without the parts, which `committed.jsonl` holds).
    fn write_manifest(&self) -> Result<()> {
        let header = Manifest {
            parts: Vec::new(),
            ..self.manifest.clone()
        };
        write_file(
            &self.dir.join("manifest.json"),
            serde_json::to_string_pretty(&header)?.as_bytes(),
        )
    }

    /// Merges every part, in row order, into `output` and its quarantine file (the
    /// parts must cover rows `[0, rows)` exactly), marks the manifest finished, then
    /// removes the parts directory.
    pub fn finish(
        mut self,
        output: &Path,
        quarantine: &Path,
        rows: u64,
        schemas: (SchemaRef, SchemaRef),
        metadata: &[(String, String)],
    ) -> Result<()> {
        self.manifest.parts.sort_by_key(|p| p.first_row);
        let mut next = 0;
        for p in &self.manifest.parts {
            if p.first_row != next {
                bail!(
                    "{}: rows {next}..{} were never committed; run again with --resume",
                    self.dir.display(),
                    p.first_row
                );
            }
            next = p.end_row;
        }
        if next != rows {
            bail!(
                "{}: rows {next}..{rows} were never committed; run again with --resume",
                self.dir.display()
            );
        }
        self.merge_parts(&self.manifest.parts, output, quarantine, schemas, metadata)?;
        self.manifest.finished = true;
        self.write_manifest()?;
        self.remove()
    }

    /// Merges the committed parts, in row order, into `output` and its quarantine file
    /// (what an interrupted run has finished, gaps left out); the parts stay for a
    /// resumed run.
    pub fn write_committed(
        &self,
        output: &Path,
        quarantine: &Path,
        schemas: (SchemaRef, SchemaRef),
        metadata: &[(String, String)],
    ) -> Result<()> {
        let mut parts = self.manifest.parts.clone();
        parts.sort_by_key(|p| p.first_row);
        self.merge_parts(&parts, output, quarantine, schemas, metadata)
    }

    /// Merges `parts`, in the order given, into `output` and `quarantine`.
    fn merge_parts(
        &self,
        parts: &[PartEntry],
        output: &Path,
        quarantine: &Path,
        schemas: (SchemaRef, SchemaRef),
        metadata: &[(String, String)],
    ) -> Result<()> {
        let files = |f: fn(&PartEntry) -> &String| -> Vec<PathBuf> {
            parts.iter().map(|p| self.dir.join(f(p))).collect()
        };
        let merged = concat_parquet(&files(|p| &p.file), output, schemas.0, metadata)?;
        let merged_quarantine = concat_parquet(
            &files(|p| &p.quarantine_file),
            quarantine,
            schemas.1,
            metadata,
        )?;
        commit_all([merged, merged_quarantine])
    }

    /// Deletes the part files, then the manifest, then the directory.
    fn remove(self) -> Result<()> {
        for p in &self.manifest.parts {
            for name in [&p.file, &p.quarantine_file] {
                match std::fs::remove_file(self.dir.join(name)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("cannot remove {name}"));
                    }
                    _ => {}
                }
            }
        }
        std::fs::remove_dir_all(&self.dir)
            .with_context(|| format!("cannot remove {}", self.dir.display()))?;
        if let Some(parent) = self.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
        Ok(())
    }
}

impl Drop for Parts {
    /// A run that ends (fails, or is stopped) before its first commit leaves nothing
    /// to resume: its directory goes, so the next run needs no `--resume` or clean-up.
    fn drop(&mut self) {
        if !self.manifest.finished && self.manifest.parts.is_empty() && self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Writes the rows of `inputs`, in order, to `dest` in record batches of exactly
/// [`MERGE_BATCH_ROWS`] rows (the last one shorter). Returns the complete file under
/// its temporary name: commit it to put it in place.
pub fn concat_parquet(
    inputs: &[PathBuf],
    dest: &Path,
    schema: SchemaRef,
    metadata: &[(String, String)],
) -> Result<PendingFile> {
    let mut writer = create_writer(dest, schema.clone(), metadata)?;
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut pending_rows = 0;
    let mut flush = |pending: &mut Vec<RecordBatch>, rows: &mut usize, all: bool| -> Result<()> {
        while *rows >= MERGE_BATCH_ROWS || (all && *rows > 0) {
            let joined = arrow_select::concat::concat_batches(&schema, pending.iter())?;
            let take = joined.num_rows().min(MERGE_BATCH_ROWS);
            writer.write(&joined.slice(0, take))?;
            *pending = vec![joined.slice(take, joined.num_rows() - take)];
            *rows -= take;
        }
        Ok(())
    };
    for path in inputs {
        let unreadable = || {
            format!(
                "{} is damaged or truncated (not a readable Parquet file)",
                path.display()
            )
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(
            File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        )
        .with_context(unreadable)?
        .build()
        .with_context(unreadable)?;
        for batch in reader {
            let batch = batch.with_context(unreadable)?;
            pending_rows += batch.num_rows();
            pending.push(batch);
            flush(&mut pending, &mut pending_rows, false)?;
        }
    }
    flush(&mut pending, &mut pending_rows, true)?;
    writer.seal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int32Array;
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn write_ints(path: &Path, schema: &SchemaRef, chunks: &[std::ops::Range<i32>]) -> Result<()> {
        let mut w = create_writer(path, schema.clone(), &[])?;
        for c in chunks {
            w.write(&RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int32Array::from_iter_values(c.clone()))],
            )?)?;
        }
        w.close()
    }

    fn ready(output: &Path, fp: &str, resume: bool) -> Result<Parts> {
        match Parts::open(output, fp, resume)? {
            Opened::Ready(p) => Ok(p),
            Opened::AlreadyFinished => bail!("already finished"),
        }
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]))
    }

    /// Commits `cuts` (part boundaries) in the order given by `order`.
    fn commit_parts(parts: &mut Parts, cuts: &[(i32, i32)]) {
        for &(start, end) in cuts {
            parts
                .commit(start as u64, end as u64, |res, q| {
                    write_ints(
                        res,
                        &schema(),
                        &[start..(start + end) / 2, (start + end) / 2..end],
                    )?;
                    write_ints(q, &schema(), &[])
                })
                .unwrap();
        }
    }

    #[test]
    fn commits_append_to_the_log_and_leave_the_manifest_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let mut parts = ready(&output, "fp", false).unwrap();
        let manifest = parts_dir(&output).join("manifest.json");
        let before = std::fs::read(&manifest).unwrap();
        commit_parts(&mut parts, &[(4, 6), (0, 4), (6, 9)]);
        assert_eq!(std::fs::read(&manifest).unwrap(), before);
        let log = std::fs::read_to_string(parts_dir(&output).join(LOG)).unwrap();
        assert_eq!(log.lines().count(), 3);
        drop(parts); // a second open while the first run holds the lock is refused
        let resumed = ready(&output, "fp", true).unwrap();
        assert_eq!(resumed.committed(), vec![(0, 4), (4, 6), (6, 9)]);
    }

    #[test]
    fn a_log_line_cut_short_by_a_kill_is_no_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let mut parts = ready(&output, "fp", false).unwrap();
        commit_parts(&mut parts, &[(0, 2), (2, 5)]);
        let log = parts_dir(&output).join(LOG);
        let mut f = OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(br#"{"first_row":5,"end_ro"#).unwrap();
        drop(parts);
        let mut parts = ready(&output, "fp", true).unwrap();
        assert_eq!(parts.committed(), vec![(0, 2), (2, 5)]);
        // The fragment is cut off, so the next commit starts a line of its own.
        commit_parts(&mut parts, &[(5, 8)]);
        drop(parts);
        let parts = ready(&output, "fp", true).unwrap();
        assert_eq!(parts.committed(), vec![(0, 2), (2, 5), (5, 8)]);
        let damaged = "{\"no\": 1}\n";
        drop(parts);
        std::fs::write(&log, damaged).unwrap();
        let err = format!("{:#}", ready(&output, "fp", true).err().unwrap());
        assert!(err.contains("is damaged"), "{err}");
    }

    #[test]
    fn a_manifest_listing_its_parts_resumes() {
        // The format of earlier versions: the parts in manifest.json, no log.
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let dir = parts_dir(&output);
        std::fs::create_dir_all(&dir).unwrap();
        let old = r#"{"fingerprint": "fp", "parts": [{"first_row": 0, "end_row": 3,
            "file": "part-000000.parquet", "quarantine_file": "part-000000.quarantine.parquet"}]}"#;
        std::fs::write(dir.join("manifest.json"), old).unwrap();
        let mut parts = ready(&output, "fp", true).unwrap();
        commit_parts(&mut parts, &[(3, 4)]);
        assert!(dir.join("part-000001.parquet").is_file());
        drop(parts);
        let parts = ready(&output, "fp", true).unwrap();
        assert_eq!(parts.committed(), vec![(0, 3), (3, 4)]);
    }

    #[test]
    fn merged_bytes_do_not_depend_on_part_boundaries_or_commit_order() {
        let tmp = tempfile::tempdir().unwrap();
        let run = |name: &str, cuts: &[(i32, i32)]| -> Vec<u8> {
            let output = tmp.path().join(format!("{name}.parquet"));
            let mut parts = ready(&output, "fp", false).unwrap();
            commit_parts(&mut parts, cuts);
            let quarantine = tmp.path().join(format!("{name}.q.parquet"));
            parts
                .finish(&output, &quarantine, 2500, (schema(), schema()), &[])
                .unwrap();
            assert!(!parts_dir(&output).exists());
            std::fs::read(&output).unwrap()
        };
        let a = run("a", &[(0, 2500)]);
        let b = run(
            "b",
            &[(1031, 2048), (0, 7), (2048, 2500), (7, 1030), (1030, 1031)],
        );
        assert_eq!(a, b);
    }

    #[test]
    fn resume_requires_the_flag_and_the_same_fingerprint() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let mut p = ready(&output, "fp1", false).unwrap();
        p.commit(10, 20, |a, b| {
            write_ints(a, &schema(), &[10..15, 15..20])?;
            write_ints(b, &schema(), &[])
        })
        .unwrap();
        drop(p);
        let err = ready(&output, "fp1", false).err().unwrap().to_string();
        assert!(err.contains("--resume"), "{err}");
        let err = ready(&output, "fp2", true).err().unwrap().to_string();
        assert!(err.contains("other inputs or options"), "{err}");
        assert_eq!(
            ready(&output, "fp1", true).unwrap().committed(),
            vec![(10, 20)]
        );
    }

    #[test]
    fn finish_refuses_a_gap_in_the_committed_rows() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let mut parts = ready(&output, "fp", false).unwrap();
        commit_parts(&mut parts, &[(0, 5), (8, 10)]);
        let err = parts
            .finish(
                &output,
                &tmp.path().join("q.parquet"),
                10,
                (schema(), schema()),
                &[],
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("rows 5..8 were never committed"), "{err}");
        assert!(!output.exists());
    }

    #[test]
    fn a_finish_killed_during_clean_up_is_completed_by_resume() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let mut parts = ready(&output, "fp", false).unwrap();
        commit_parts(&mut parts, &[(0, 4)]);
        let dir = parts_dir(&output);
        // The state a kill leaves between marking the manifest and removing the parts:
        // the output is in place, some part files are gone.
        parts.manifest.finished = true;
        parts.write_manifest().unwrap();
        write_ints(&output, &schema(), &[0..2, 2..4]).unwrap();
        std::fs::remove_file(dir.join("part-000000.parquet")).unwrap();
        drop(parts);
        let before = std::fs::read(&output).unwrap();
        assert!(matches!(
            Parts::open(&output, "fp", true).unwrap(),
            Opened::AlreadyFinished
        ));
        assert!(!dir.exists(), "the clean-up is completed");
        assert_eq!(
            std::fs::read(&output).unwrap(),
            before,
            "the output is kept"
        );
        // A fresh run after such a kill is not refused either.
        let mut parts = ready(&output, "fp", false).unwrap();
        commit_parts(&mut parts, &[(0, 4)]);
        parts.manifest.finished = true;
        parts.write_manifest().unwrap();
        drop(parts);
        assert!(ready(&output, "fp", false).is_ok());
    }

    #[test]
    fn a_second_writer_of_one_output_is_refused_naming_the_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let first = ready(&output, "fp", false).unwrap();
        for resume in [false, true] {
            let err = ready(&output, "other", resume).err().unwrap().to_string();
            let pid = format!("pid {}", std::process::id());
            assert!(err.contains(&pid) && err.contains("o.parquet"), "{err}");
        }
        // The refused runs changed nothing: the first one's manifest is intact.
        let manifest = std::fs::read_to_string(parts_dir(&output).join("manifest.json")).unwrap();
        assert!(manifest.contains("\"fp\""), "{manifest}");
        drop(first); // what the OS does for a killed run: the lock goes with the process
        assert!(ready(&output, "fp", true).is_ok());
    }

    #[test]
    fn resume_verifies_every_committed_part_before_any_work() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        let dir = parts_dir(&output);
        let fresh = || {
            let _ = std::fs::remove_dir_all(&dir);
            let mut parts = ready(&output, "fp", false).unwrap();
            commit_parts(&mut parts, &[(0, 4), (4, 8)]);
        };
        let resume_err = || format!("{:#}", ready(&output, "fp", true).err().unwrap());
        fresh();
        assert_eq!(ready(&output, "fp", true).unwrap().committed().len(), 2);
        // Missing.
        std::fs::remove_file(dir.join("part-000001.parquet")).unwrap();
        let err = resume_err();
        assert!(
            err.contains("part-000001.parquet") && err.contains("is missing"),
            "{err}"
        );
        assert!(err.contains("rows 4..8"), "{err}");
        // Replaced by another part's file: same schema, other rows.
        fresh();
        std::fs::copy(
            dir.join("part-000000.parquet"),
            dir.join("part-000001.parquet"),
        )
        .unwrap();
        let err = resume_err();
        assert!(err.contains("has changed since it was committed"), "{err}");
        // Another row count, and a quarantine file cut short.
        fresh();
        write_ints(&dir.join("part-000001.parquet"), &schema(), &[4..6, 6..7]).unwrap();
        let err = resume_err();
        assert!(err.contains("holds 3 rows, not the 4 committed"), "{err}");
        fresh();
        std::fs::write(dir.join("part-000000.quarantine.parquet"), b"PAR1").unwrap();
        let err = resume_err();
        assert!(err.contains("is damaged"), "{err}");
    }

    #[test]
    fn a_run_ending_before_its_first_commit_leaves_no_parts_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let output = tmp.path().join("o.parquet");
        drop(ready(&output, "fp", false).unwrap()); // failed or stopped: nothing to resume
        assert!(!parts_dir(&output).exists());
        assert!(ready(&output, "fp", false).is_ok(), "no --resume needed");
        let mut parts = ready(&output, "fp", false).unwrap();
        commit_parts(&mut parts, &[(0, 2)]);
        drop(parts);
        assert!(
            parts_dir(&output).join("committed.jsonl").is_file(),
            "kept for --resume"
        );
    }
}
