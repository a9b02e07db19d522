//! Running the self-test's cases in children, their cache, and the child's side
//! ([`super`] says what and why).

use std::ffi::OsString;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{runner, SELFTEST_ENV};
use crate::backend::dtype::DType;
use crate::backend::gpu_kernels::{Op, Outcome, Plan, Verdict};

/// The seconds a case may take in its child before it counts as a hang in the automatic
/// test: `HOPSCORE_GPU_SELFTEST_TIMEOUT` (1 to 3,600), else 30 (`hopscore doctor
/// --timeout` sets its own).
pub const TIMEOUT_ENV: &str = "HOPSCORE_GPU_SELFTEST_TIMEOUT";
const DEFAULT_TIMEOUT_SECS: u64 = 30;

/// [`TIMEOUT_ENV`]'s seconds; a value out of range is an error naming it.
fn timeout() -> Result<Duration> {
    let Ok(text) = std::env::var(TIMEOUT_ENV) else {
        return Ok(Duration::from_secs(DEFAULT_TIMEOUT_SECS));
    };
    match text.trim().parse::<u64>() {
        Ok(s @ 1..=3600) => Ok(Duration::from_secs(s)),
        _ => anyhow::bail!("{TIMEOUT_ENV}={text:?}: seconds from 1 to 3600"),
    }
}

/// Whether the automatic self-test is on (`HOPSCORE_GPU_SELFTEST` unset or `on`); any
/// other value than `on`/`off` is an error naming the variable.
pub fn enabled() -> Result<bool> {
    match std::env::var(SELFTEST_ENV).as_deref() {
        Err(_) | Ok("on") => Ok(true),
        Ok("off") => Ok(false),
        Ok(other) => anyhow::bail!("{SELFTEST_ENV}={other:?}: use on or off"),
    }
}

/// Where verdicts are kept: `$HOPSCORE_CACHE`, else `$XDG_CACHE_HOME/hopscore`, else
/// `~/.cache/hopscore`, then `gpu-selftest/`.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |k| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = var("HOPSCORE_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("hopscore")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/hopscore")))?;
    Some(base.join("gpu-selftest"))
}

/// What the verdicts of one card hold: the key's parts in words (for a reader of the
/// file) and the verdicts.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct CacheFile {
    gpu: String,
    compute_capability: String,
    driver: Option<i32>,
    dtype: String,
    nvcc: String,
    verdicts: Vec<Verdict>,
}

/// The cache file of a card (`name`, `cc`, `driver`) in `dtype` for this binary's kernels:
/// a SHA-256 of those and of every shipped entry's machine code.
fn cache_file(name: &str, cc: (i32, i32), driver: Option<i32>, dtype: DType) -> Option<PathBuf> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(format!("{name}\n{cc:?}\n{driver:?}\n{}\n", dtype.suffix()));
    h.update(crate::backend::kernels::NVCC_RELEASE);
    for (entry, arch, sass) in crate::backend::kernels::KERNEL_SASS {
        h.update(format!("{entry} {arch} {sass}\n"));
    }
    let key = crate::io::fingerprint::hex(&h.finalize()[..12]);
    Some(cache_dir()?.join(format!("{key}.json")))
}

/// One case in a child: `runner doctor --case op:implementation --device cuda --gpu N
/// --dtype D`, killed after `timeout`.
fn run_child(
    runner: &[OsString],
    ordinal: usize,
    dtype: DType,
    (op, implementation): (Op, &'static str),
    timeout: Duration,
) -> Result<Verdict> {
    let verdict = |outcome, detail: String| Verdict {
        op: op.name().into(),
        implementation: implementation.into(),
        outcome,
        max_err: None,
        detail,
    };
    let (program, args) = runner.split_first().context("an empty self-test runner")?;
    let mut child = Command::new(program)
        .args(args)
        .args([
            "doctor",
            "--case",
            &format!("{}:{implementation}", op.name()),
        ])
        .args(["--device", "cuda", "--gpu", &ordinal.to_string()])
        .args(["--dtype", dtype.suffix()])
        .env(SELFTEST_ENV, "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!(
                "cannot start the self-test child {}",
                program.to_string_lossy()
            )
        })?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if crate::stop::INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(crate::stop::Interrupted.into());
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(verdict(
                Outcome::Hang,
                format!("no answer in {} s; the child was killed", timeout.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut stderr);
    }
    let answer = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Verdict>(l).ok());
    Ok(match answer {
        Some(v) if status.success() => v,
        _ => {
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output");
            verdict(
                Outcome::Error,
                format!("the child exited with {status}: {last}"),
            )
        }
    })
}

/// Runs every case of [`Plan::cases`] for device `ordinal` in `dtype`, each in a child
/// under `timeout`, calling `each` with every verdict as it comes.
pub fn run_cases(
    ordinal: usize,
    cc: (i32, i32),
    dtype: DType,
    timeout: Duration,
    mut each: impl FnMut(&Verdict),
) -> Result<Vec<Verdict>> {
    let runner = runner().context(
        "this process cannot start a self-test child (no runner set): run `hopscore doctor`",
    )?;
    let mut out = Vec::new();
    for case in Plan::cases(cc, dtype) {
        let v = run_child(runner, ordinal, dtype, case, timeout)?;
        each(&v);
        out.push(v);
    }
    Ok(out)
}

/// The verdicts for the job's device: the cached ones of this card, driver, dtype and
/// build, else the self-test's (run now, then cached); none when it is off or this
/// process set no runner.
pub fn verdicts(ordinal: usize, dtype: DType) -> Result<Vec<Verdict>> {
    if !enabled()? || runner().is_none() {
        return Ok(Vec::new());
    }
    let timeout = timeout()?;
    let (name, cc, driver) = crate::backend::cuda::device::identity(ordinal)?;
    let file = cache_file(&name, cc, driver, dtype);
    if let Some(cached) = file
        .as_ref()
        .and_then(|f| std::fs::read(f).ok())
        .and_then(|b| serde_json::from_slice::<CacheFile>(&b).ok())
    {
        return Ok(cached.verdicts);
    }
    let cases = Plan::cases(cc, dtype).len();
    log::info!(
        "GPU self-test: {name} (compute capability {}.{}, {}) is new to this build: {cases} \
         kernel cases, each in a child process (at most {} s each; {SELFTEST_ENV}=off \
         skips it)",
        cc.0,
        cc.1,
        dtype.suffix(),
        timeout.as_secs()
    );
    let start = Instant::now();
    let mut done = 0;
    let verdicts = run_cases(ordinal, cc, dtype, timeout, |v| {
        done += 1;
        let eta = start.elapsed().as_secs_f64() / done as f64 * (cases - done) as f64;
        log::info!(
            "GPU self-test {done}/{cases}: {} {}: {} (ETA {eta:.0} s)",
            v.op,
            v.implementation,
            v.summary()
        );
    })?;
    keep(&name, cc, driver, dtype, &verdicts);
    Ok(verdicts)
}

/// Keeps `verdicts` as the cached ones of device `ordinal` in `dtype` (`hopscore
/// doctor`'s run counts as the self-test).
pub fn store(ordinal: usize, dtype: DType, verdicts: &[Verdict]) -> Result<()> {
    let (name, cc, driver) = crate::backend::cuda::device::identity(ordinal)?;
    keep(&name, cc, driver, dtype, verdicts);
    Ok(())
}

/// Writes the cache file of a card; a file that cannot be written costs the next run
/// its self-test, with a warning.
fn keep(name: &str, cc: (i32, i32), driver: Option<i32>, dtype: DType, verdicts: &[Verdict]) {
    let Some(file) = cache_file(name, cc, driver, dtype) else {
        return;
    };
    let record = CacheFile {
        gpu: name.into(),
        compute_capability: format!("{}.{}", cc.0, cc.1),
        driver,
        dtype: dtype.suffix().into(),
        nvcc: crate::backend::kernels::NVCC_RELEASE.into(),
        verdicts: verdicts.to_vec(),
    };
    let written = std::fs::create_dir_all(file.parent().unwrap_or(&file))
        .map_err(anyhow::Error::from)
        .and_then(|()| crate::io::atomic::write_file(&file, &serde_json::to_vec_pretty(&record)?));
    if let Err(e) = written {
        log::warn!(
            "could not keep the GPU self-test's verdicts in {} ({e:#}): the next run tests again",
            file.display()
        );
    }
}

/// The child's side of one case: runs `implementation` of `op` on device `ordinal` in
/// `dtype` in this process against the CPU twin.
pub fn run_case_here(ordinal: usize, dtype: DType, op: Op, implementation: &str) -> Verdict {
    use crate::backend::gpu_kernels::GpuSettings;
    use crate::backend::Backend as _;
    let verdict = |outcome, max_err, detail| Verdict {
        op: op.name().into(),
        implementation: implementation.into(),
        outcome,
        max_err,
        detail,
    };
    let tolerance = crate::backend::selftest::tolerance(dtype);
    let result =
        crate::backend::cuda::CudaBackend::with_settings(ordinal, dtype, &GpuSettings::LATEST, &[])
            .and_then(|be| {
                be.force(op, implementation);
                let (err, ok) = crate::backend::selftest::check(&be, op, dtype)?;
                be.synchronize()?;
                anyhow::ensure!(
                    be.runs(op, implementation),
                    "its setup failed ({}), so the case ran another path",
                    be.setup_failure().unwrap_or_default()
                );
                Ok((err, ok))
            });
    match result {
        Ok((err, true)) => verdict(Outcome::Pass, Some(err), String::new()),
        Ok((err, false)) => verdict(
            Outcome::Fail,
            Some(err),
            format!("rel err {err:.1e} > {tolerance:.0e} against the CPU twin"),
        ),
        Err(e) => verdict(Outcome::Error, None, format!("{e:#}")),
    }
}
