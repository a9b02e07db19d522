//! Atomic outputs: every file hopscore writes goes to a temporary name in its
//! destination's directory, is synced, and is renamed into place (then the directory
//! is synced) only once it is complete. A run that fails or is killed never leaves a
//! torn file under an output name, and never replaces an earlier good output.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};

/// A file under a temporary name next to `dest`; removed on drop unless committed.
#[derive(Debug)]
pub struct PendingFile {
    tmp: PathBuf,
    dest: PathBuf,
    committed: bool,
}

impl PendingFile {
    /// Creates the temporary file (and `dest`'s directory) and opens it for writing.
    pub fn create(dest: &Path) -> Result<(Self, File)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = parent_dir(dest);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create directory {}", dir.display()))?;
        let name = dest
            .file_name()
            .with_context(|| format!("{} is not a file path", dest.display()))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".{}-{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(tmp_name);
        let file =
            File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        Ok((
            Self {
                tmp,
                dest: dest.to_path_buf(),
                committed: false,
            },
            file,
        ))
    }

    /// The final path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Syncs `file` (the handle [`PendingFile::create`] returned, fully written) and
    /// closes it; the file is then complete on disk under its temporary name.
    pub fn seal(file: File) -> Result<()> {
        file.sync_all()
            .context("cannot sync an output file to disk")
    }

    /// Renames the sealed file into place and syncs the directory.
    pub fn commit(mut self) -> Result<()> {
        std::fs::rename(&self.tmp, &self.dest).with_context(|| {
            format!(
                "cannot rename {} to {}",
                self.tmp.display(),
                self.dest.display()
            )
        })?;
        self.committed = true;
        sync_dir(&parent_dir(&self.dest))
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Removes the temporaries that killed runs left for `dest` (`.<name>.<pid>-<n>.tmp`
/// in its directory, of processes no longer alive), or every such temporary in `dest`
/// when it is a directory. Call it only while holding the output's lock. Returns how
/// many were removed.
pub fn remove_stale_temporaries(dest: &Path) -> Result<usize> {
    let (dir, prefix) = if dest.is_dir() {
        (dest.to_path_buf(), ".".to_string())
    } else {
        let name = dest.file_name().unwrap_or_default().to_string_lossy();
        (parent_dir(dest), format!(".{name}."))
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(0);
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".tmp"))
            .and_then(|rest| rest.rsplit('.').next())
            .and_then(|tag| tag.split_once('-'))
            .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()))
        else {
            continue;
        };
        if !process_is_gone(pid) || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        std::fs::remove_file(entry.path())
            .with_context(|| format!("cannot remove the stale {}", entry.path().display()))?;
        removed += 1;
    }
    Ok(removed)
}

/// Whether `pid` is known not to be running (only where `/proc` says so; elsewhere
/// nothing is known to be gone).
fn process_is_gone(pid: u32) -> bool {
    pid != std::process::id()
        && Path::new("/proc/self").exists()
        && !Path::new(&format!("/proc/{pid}")).exists()
}

/// Commits sealed files one after the other (renames only: every file is complete
/// before the first rename, so a failure can only come from the file system).
pub fn commit_all(files: impl IntoIterator<Item = PendingFile>) -> Result<()> {
    files.into_iter().try_for_each(PendingFile::commit)
}

/// Writes `bytes` to `dest` atomically.
pub fn write_file(dest: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let (pending, mut file) = PendingFile::create(dest)?;
    file.write_all(bytes)
        .with_context(|| format!("cannot write {}", dest.display()))?;
    PendingFile::seal(file)?;
    pending.commit()
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Makes a rename in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync directory {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uncommitted_file_leaves_the_destination_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.bin");
        std::fs::write(&dest, b"good").unwrap();
        {
            let (_pending, mut f) = PendingFile::create(&dest).unwrap();
            std::io::Write::write_all(&mut f, b"half").unwrap();
        } // dropped: a failed run
        assert_eq!(std::fs::read(&dest).unwrap(), b"good");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
        write_file(&dest, b"new").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn temporaries_of_dead_runs_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.parquet");
        let gone = (1u32 << 22) + 12_345; // above Linux's largest pid_max: no such process
        let dead = [
            dir.path().join(format!(".out.parquet.{gone}-3.tmp")),
            dir.path().join(format!(".out.parquet.{}-0.tmp", gone + 1)),
        ];
        let live = dir
            .path()
            .join(format!(".out.parquet.{}-0.tmp", std::process::id()));
        let other_output = dir.path().join(format!(".other.parquet.{gone}-0.tmp"));
        for p in dead.iter().chain([&live, &other_output]) {
            std::fs::write(p, b"x").unwrap();
        }
        assert_eq!(remove_stale_temporaries(&dest).unwrap(), 2);
        assert!(dead.iter().all(|p| !p.exists()));
        assert!(live.exists() && other_output.exists());
        // A directory: every dead temporary in it.
        assert_eq!(remove_stale_temporaries(dir.path()).unwrap(), 1);
        assert!(!other_output.exists() && live.exists());
    }
}
