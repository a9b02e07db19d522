//! The GPU self-test: before the first CUDA job on a combination of card, compute
//! capability, driver, dtype and kernel build it has not seen, every implementation a
//! [`Plan`] may choose ([`Plan::cases`]) runs its case ([`crate::backend::selftest`])
//! in a child process of its own (`hopscore doctor --case op:implementation`) under a
//! timeout, so that a kernel that hangs, faults or answers wrong is found without
//! taking the job down with it. The verdicts are cached (`$HOPSCORE_CACHE`, else
//! `$XDG_CACHE_HOME/hopscore`, else `~/.cache/hopscore`, in `gpu-selftest/`) and handed
//! to the backend, whose plan then runs, per op, an implementation that passed
//! (a failed one is replaced with one warning naming it, the verdict and the switches).
//! `HOPSCORE_GPU_SELFTEST=off` skips it; a process that set no [`set_runner`] (a
//! program embedding the library) runs without it. `hopscore doctor` runs it on demand
//! and prints every verdict.

use std::ffi::OsString;
use std::sync::OnceLock;

/// `HOPSCORE_GPU_SELFTEST=off` skips the automatic self-test.
pub const SELFTEST_ENV: &str = "HOPSCORE_GPU_SELFTEST";

/// The command that starts a child running `hopscore` (the program and the arguments
/// before the subcommand), set once by the CLI or the Python module.
static RUNNER: OnceLock<Vec<OsString>> = OnceLock::new();

/// Registers how this process starts a `hopscore` child: `[current_exe]` for the
/// binary, `[python, -m, hopscore._cli]` for the Python package.
pub fn set_runner(command: Vec<OsString>) {
    let _ = RUNNER.set(command);
}

/// The command [`set_runner`] registered.
#[cfg(feature = "cuda")]
fn runner() -> Option<&'static [OsString]> {
    RUNNER.get().map(Vec::as_slice)
}

#[cfg(feature = "cuda")]
mod run;
#[cfg(feature = "cuda")]
pub use run::{run_case_here, run_cases, store, verdicts};
