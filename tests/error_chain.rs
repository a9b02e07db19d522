//! The binary's error messages name each cause once: errors that wrap an OS or parse
//! error keep it as their `source`, and `main` prints the chain (`error: a: b`).
//! Each case points a command at a missing or broken file and counts the cause's text
//! in stderr.

use crate::common;

use std::path::Path;

/// Runs `hopscore <args>`, expects failure, and returns stderr.
fn failing(args: &[&std::ffi::OsStr]) -> String {
    let out = common::hopscore().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?} must fail with exit code 1"
    );
    String::from_utf8(out.stderr).unwrap()
}

fn assert_once(stderr: &str, cause: &str, context: &str) {
    assert_eq!(
        stderr.matches(cause).count(),
        1,
        "`{cause}` must appear exactly once: {stderr}"
    );
    assert!(stderr.contains(context), "{stderr}");
    let line = stderr.lines().last().unwrap();
    assert!(line.starts_with("error: "), "{stderr}");
}

/// stderr of `hopscore inspect --model <model>`, which must fail.
fn inspect(model: &Path) -> String {
    failing(&["inspect".as_ref(), "--model".as_ref(), model.as_os_str()])
}

/// The beam fixture's config.json in `dir`, and `extra` files.
fn model_dir(dir: &Path, extra: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(
        common::fixture("beam/model/config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    for (name, text) in extra {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

const ENOENT: &str = "No such file or directory (os error 2)";

#[test]
fn a_missing_config_names_the_os_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    // A model directory that exists (a missing one is refused as an argument).
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = inspect(&empty);
    let config = empty.join("config.json");
    assert_once(
        &err,
        ENOENT,
        &format!("cannot read {}: {ENOENT}", config.display()),
    );
}

#[test]
fn a_missing_shard_names_the_os_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sharded");
    model_dir(
        &dir,
        &[(
            "model.safetensors.index.json",
            r#"{"weight_map": {"encoder.embeddings.word_embeddings.weight": "part-1.safetensors"}}"#,
        )],
    );
    let err = inspect(&dir);
    let shard = dir.join("part-1.safetensors");
    assert_once(
        &err,
        ENOENT,
        &format!("cannot open {}: {ENOENT}", shard.display()),
    );
}

#[test]
fn a_broken_config_names_the_parse_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("broken");
    model_dir(&dir, &[("config.json", "{bad")]);
    let err = inspect(&dir);
    let cause = "key must be a string at line 1 column 2";
    assert_once(
        &err,
        cause,
        &format!(
            "{} is not a valid model config.json: {cause}",
            dir.join("config.json").display()
        ),
    );
}

#[test]
fn an_unreadable_gguf_names_the_os_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    std::fs::create_dir(&model).unwrap();
    let gguf = model.join("m.gguf");
    // A dangling link: the folder lists one .gguf file, which cannot be opened.
    std::os::unix::fs::symlink(model.join("absent.gguf"), &gguf).unwrap();
    let err = failing(&[
        "loglik".as_ref(),
        "--model".as_ref(),
        model.as_os_str(),
        "--input".as_ref(),
        tmp.path().join("pairs.parquet").as_os_str(),
        "--output".as_ref(),
        tmp.path().join("out.parquet").as_os_str(),
    ]);
    assert_once(
        &err,
        ENOENT,
        &format!("cannot open {}: {ENOENT}", gguf.display()),
    );
}
