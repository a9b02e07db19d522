//! The guard every command runs before it opens anything for writing: no output (the
//! output file, its quarantine file, a report, a parts, runs or cache directory) may be
//! an input file, hold one, or lie inside an input directory (a model's), and no two
//! outputs may be the same file. Paths are compared after
//! resolving symbolic links, `.` and `..`; existing files are also compared by device
//! and inode (hard links); outputs that do not exist yet are resolved through their
//! nearest existing ancestor.

use std::path::{Component, Path, PathBuf};

/// What an output path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    /// A directory the command fills (an input inside it would be overwritten or
    /// deleted).
    Dir,
}

/// A path with what it is, for messages (`--output`, `the quarantine file`, …).
#[derive(Debug, Clone)]
pub struct Named {
    pub what: String,
    pub path: PathBuf,
}

impl Named {
    pub fn new(what: impl Into<String>, path: &Path) -> Self {
        Self {
            what: what.into(),
            path: path.to_path_buf(),
        }
    }
}

/// Why a command refused its output paths.
#[derive(Debug, thiserror::Error)]
pub enum OverlapError {
    #[error(
        "{output} {} is the {input} {}: writing it would destroy the input; choose another path",
        .output_path.display(), .input_path.display()
    )]
    OutputIsInput {
        output: String,
        output_path: PathBuf,
        input: String,
        input_path: PathBuf,
    },
    #[error(
        "{output} {} holds the {input} {}: the run would overwrite or delete it; choose \
         another output path",
        .output_path.display(), .input_path.display()
    )]
    InputInsideOutput {
        output: String,
        output_path: PathBuf,
        input: String,
        input_path: PathBuf,
    },
    #[error(
        "{output} {} is inside the {input} {}: the run would add to or replace the files \
         of that input; write outside it",
        .output_path.display(), .input_path.display()
    )]
    OutputInsideInput {
        output: String,
        output_path: PathBuf,
        input: String,
        input_path: PathBuf,
    },
    #[error(
        "{output} {} is {found}, not a regular file: hopscore writes its outputs as new \
         files renamed into place, which would replace it. Give the path of a regular \
         file (or of none yet)",
        .path.display()
    )]
    NotAFile {
        output: String,
        path: PathBuf,
        found: &'static str,
    },
    #[error(
        "{output} {} is {found}, not a directory; choose another output path",
        .path.display()
    )]
    NotADir {
        output: String,
        path: PathBuf,
        found: &'static str,
    },
    #[error(
        "{first} {} and {second} {} are the same file; give them different paths",
        .first_path.display(), .second_path.display()
    )]
    SameOutput {
        first: String,
        first_path: PathBuf,
        second: String,
        second_path: PathBuf,
    },
}

/// What an existing path is, in words (links followed); `None` when it does not exist.
fn file_type(path: &Path) -> Option<(bool, bool, &'static str)> {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::metadata(path).ok()?.file_type();
    let what = match () {
        _ if t.is_file() => "a regular file",
        _ if t.is_dir() => "a directory",
        _ if t.is_char_device() => "a character device",
        _ if t.is_block_device() => "a block device",
        _ if t.is_fifo() => "a FIFO (named pipe)",
        _ if t.is_socket() => "a socket",
        _ => "a special file",
    };
    Some((t.is_file(), t.is_dir(), what))
}

/// Refuses when an output of `outputs` is, holds or lies inside an input of `inputs`
/// (an input directory: a model's files are its inputs too), two outputs
/// are the same path, or an output exists as something else than what it will be (a
/// device, a FIFO or a directory where a file goes). Inputs that do not exist are
/// skipped (opening them fails later with its own message).
pub fn check_outputs(inputs: &[Named], outputs: &[(Named, Kind)]) -> Result<(), OverlapError> {
    let inputs: Vec<Named> = inputs
        .iter()
        .flat_map(|input| std::iter::once(input.clone()).chain(linked_files(input)))
        .collect();
    for (out, kind) in outputs {
        match (kind, file_type(&out.path)) {
            (Kind::File, Some((false, _, found))) => {
                return Err(OverlapError::NotAFile {
                    output: out.what.clone(),
                    path: out.path.clone(),
                    found,
                })
            }
            (Kind::Dir, Some((_, false, found))) => {
                return Err(OverlapError::NotADir {
                    output: out.what.clone(),
                    path: out.path.clone(),
                    found,
                })
            }
            _ => {}
        }
        let out_resolved = resolve(&out.path);
        for input in &inputs {
            let Ok(in_resolved) = input.path.canonicalize() else {
                continue;
            };
            let same = match kind {
                Kind::File => out_resolved == in_resolved || same_inode(&out.path, &input.path),
                Kind::Dir => false,
            };
            if same {
                return Err(OverlapError::OutputIsInput {
                    output: out.what.clone(),
                    output_path: out.path.clone(),
                    input: input.what.clone(),
                    input_path: input.path.clone(),
                });
            }
            if *kind == Kind::Dir && in_resolved.starts_with(&out_resolved) {
                return Err(OverlapError::InputInsideOutput {
                    output: out.what.clone(),
                    output_path: out.path.clone(),
                    input: input.what.clone(),
                    input_path: input.path.clone(),
                });
            }
            if in_resolved.is_dir() && out_resolved.starts_with(&in_resolved) {
                return Err(OverlapError::OutputInsideInput {
                    output: out.what.clone(),
                    output_path: out.path.clone(),
                    input: input.what.clone(),
                    input_path: input.path.clone(),
                });
            }
        }
    }
    for (i, (a, _)) in outputs.iter().enumerate() {
        for (b, _) in &outputs[i + 1..] {
            if same_file(&a.path, &b.path) {
                return Err(OverlapError::SameOutput {
                    first: a.what.clone(),
                    first_path: a.path.clone(),
                    second: b.what.clone(),
                    second_path: b.path.clone(),
                });
            }
        }
    }
    Ok(())
}

/// How deep [`linked_files`] looks into an input directory, and how many entries it
/// reads: a model directory holds its files and module directories (`1_Pooling/`).
const LINK_DEPTH: usize = 3;
const LINK_ENTRIES: usize = 10_000;

/// The files that symbolic links inside the input directory `input` point to, each as
/// an input of its own: a hub snapshot's files are links into the cache's `blobs/`,
/// and an output written over a blob would replace the model's weights.
fn linked_files(input: &Named) -> Vec<Named> {
    let mut found = Vec::new();
    let mut dirs = vec![(input.path.clone(), 0)];
    let mut seen = 0;
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten().take(LINK_ENTRIES.saturating_sub(seen)) {
            seen += 1;
            let path = entry.path();
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            if path.is_dir() {
                if depth + 1 < LINK_DEPTH && !is_link {
                    dirs.push((path, depth + 1));
                }
            } else if is_link {
                if let Ok(target) = path.canonicalize() {
                    let what = format!("{} (through {})", input.what, path.display());
                    found.push(Named::new(what, &target));
                }
            }
        }
    }
    found
}

/// Whether `name` is a plain relative path of a file inside a directory: not empty, no
/// root, no `.` or `..` component, no empty component, no backslash or control
/// character. What a name a server or a checkpoint index gives must be before it is
/// joined to a directory.
pub fn is_plain_relative(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 1024
        && !name.starts_with('/')
        && !name.chars().any(|c| c == '\\' || c.is_control())
        && !name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
}

/// Whether `a` and `b` name the same file: the same path once resolved, or the same
/// inode (a hard link).
pub fn same_file(a: &Path, b: &Path) -> bool {
    resolve(a) == resolve(b) || same_inode(a, b)
}

#[cfg(unix)]
fn same_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_inode(_: &Path, _: &Path) -> bool {
    false
}

/// `path` made absolute with links resolved: `.` and `..` are applied, then the
/// nearest existing ancestor is canonicalised and the rest appended.
pub fn resolve(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let absolute = std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_path_buf());
    let mut normal = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    let mut rest = Vec::new();
    let mut base = normal.as_path();
    loop {
        if let Ok(existing) = base.canonicalize() {
            return rest.iter().rev().fold(existing, |p, name| p.join(name));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent;
            }
            _ => return normal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_that_reach_an_input_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("q.parquet");
        std::fs::write(&input, b"x").unwrap();
        let inputs = [Named::new("--input", &input)];
        let file = |p: &Path| (Named::new("--output", p), Kind::File);
        // The same file by another spelling, through a symlink and a hard link.
        let other_spelling = dir.path().join("sub/../q.parquet");
        let link = dir.path().join("link.parquet");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let hard = dir.path().join("hard.parquet");
        std::fs::hard_link(&input, &hard).unwrap();
        for p in [&input, &other_spelling, &link, &hard] {
            let err = check_outputs(&inputs, &[file(p)]).unwrap_err().to_string();
            assert!(err.contains("--output") && err.contains("--input"), "{err}");
        }
        // A directory output that holds the input, and two outputs that are one file.
        let err = check_outputs(
            &inputs,
            &[(Named::new("the parts directory", dir.path()), Kind::Dir)],
        )
        .unwrap_err();
        assert!(matches!(err, OverlapError::InputInsideOutput { .. }));
        let new = dir.path().join("new/out.parquet");
        let err = check_outputs(
            &inputs,
            &[
                file(&new),
                (
                    Named::new("--quarantine", &dir.path().join("new/./x/../out.parquet")),
                    Kind::File,
                ),
            ],
        )
        .unwrap_err();
        assert!(matches!(err, OverlapError::SameOutput { .. }), "{err}");
        assert!(check_outputs(&inputs, &[file(&new)]).is_ok());
        // An output inside an input directory (a model's), new or replacing a file.
        let model = dir.path().join("model");
        std::fs::create_dir(&model).unwrap();
        std::fs::write(model.join("model.safetensors"), b"w").unwrap();
        let inputs = [Named::new("--model", &model)];
        for p in [
            model.join("model.safetensors"),
            model.join("sub/new.parquet"),
        ] {
            let err = check_outputs(&inputs, &[file(&p)]).unwrap_err();
            assert!(
                matches!(err, OverlapError::OutputInsideInput { .. }),
                "{err}"
            );
        }
        assert!(check_outputs(&inputs, &[file(&dir.path().join("model.parquet"))]).is_ok());
        // A model directory whose files are links (a hub snapshot): the file a link
        // points to is an input too, wherever it lies.
        let blobs = dir.path().join("blobs");
        std::fs::create_dir(&blobs).unwrap();
        std::fs::write(blobs.join("abc"), b"w").unwrap();
        let linked = dir.path().join("linked");
        std::fs::create_dir_all(linked.join("1_Pooling")).unwrap();
        std::os::unix::fs::symlink(blobs.join("abc"), linked.join("1_Pooling/config.json"))
            .unwrap();
        let inputs = [Named::new("--model", &linked)];
        let err = check_outputs(&inputs, &[file(&blobs.join("abc"))])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--model (through") && err.contains("config.json"),
            "{err}"
        );
        assert!(check_outputs(&inputs, &[file(&blobs.join("other"))]).is_ok());
    }

    #[test]
    fn only_plain_relative_names_pass() {
        for yes in [
            "config.json",
            "1_Pooling/config.json",
            "model-00001-of-00002.safetensors",
        ] {
            assert!(is_plain_relative(yes), "{yes}");
        }
        for no in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a\\..\\b",
            "a\nb",
        ] {
            assert!(!is_plain_relative(no), "{no:?}");
        }
    }

    #[test]
    fn an_output_that_is_a_device_fifo_or_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let file = |p: &Path| [(Named::new("--output", p), Kind::File)];
        for (path, found) in [
            (Path::new("/dev/null"), "a character device"),
            (fifo.as_path(), "a FIFO (named pipe)"),
            (dir.path(), "a directory"),
        ] {
            let err = check_outputs(&[], &file(path)).unwrap_err().to_string();
            assert!(err.contains(found) && err.contains("--output"), "{err}");
        }
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        let err = check_outputs(
            &[],
            &[(Named::new("the parts directory", &plain), Kind::Dir)],
        )
        .unwrap_err();
        assert!(matches!(err, OverlapError::NotADir { .. }), "{err}");
        assert!(check_outputs(&[], &file(&plain)).is_ok());
        assert!(check_outputs(&[], &file(&dir.path().join("new"))).is_ok());
    }
}
