//! `hopscore._native`: the pyo3 module under the `hopscore` Python package. It exposes
//! the command-line entry point (for the console script) and the worker-thread setting;
//! the jobs over Arrow tables are in [`job`].

mod job;

use pyo3::prelude::*;

/// Runs the `hopscore` command line `argv` (`argv[0]` is the program name) and returns
/// its exit code. The GIL is released while the command runs.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    py.detach(|| guard(|| Ok(hopscore::cli::main_with_args(argv))))
}

/// Runs `f`, turning a panic (a hopscore bug) into a Python `RuntimeError` instead of
/// a `PanicException`, which `except Exception` does not catch.
pub(crate) fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
            "hopscore failed internally (a bug; please report it with the input that \
             caused it): {what}"
        )))
    })
}

/// Runs `f` (which holds no Python object) on a thread of its own, the GIL released,
/// while this thread checks Python's signals every 50 ms: a Ctrl-C sets hopscore's
/// stop flag, so that the work ends at its next stop point (a batch, a download's next
/// read, a retry wait), and then raises `KeyboardInterrupt` here. Without it a Ctrl-C
/// was acted on only once the native call returned, minutes or hours later.
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> PyResult<T> + Send,
) -> PyResult<T> {
    use std::sync::atomic::Ordering;
    std::thread::scope(|scope| {
        let work = scope.spawn(|| guard(f));
        let mut interrupt = None;
        while !work.is_finished() {
            py.detach(|| std::thread::sleep(std::time::Duration::from_millis(50)));
            if interrupt.is_none() {
                if let Err(e) = py.check_signals() {
                    hopscore::stop::INTERRUPTED.store(true, Ordering::SeqCst);
                    interrupt = Some(e);
                }
            }
        }
        let result = work.join().unwrap_or_else(|_| {
            Err(pyo3::exceptions::PyRuntimeError::new_err(
                "hopscore's worker thread ended unexpectedly",
            ))
        });
        match interrupt {
            Some(e) => {
                // The next call starts afresh.
                hopscore::stop::INTERRUPTED.store(false, Ordering::SeqCst);
                Err(e)
            }
            None => result,
        }
    })
}

/// The options of the job `command` as JSON: `{"defaults": {name: default, …},
/// "required": [name, …]}` (the command line's flags with `_` for `-`, the device's
/// among them where the job runs a model), so that a test can hold each Python class
/// to them.
#[pyfunction]
fn options(command: &str) -> PyResult<String> {
    let (defaults, required) = hopscore::jobs::JobConfig::option_defaults(command)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("{e:#}")))?;
    let doc = serde_json::json!({"defaults": defaults, "required": required});
    Ok(doc.to_string())
}

/// Sets the number of CPU worker threads of this process (once, before the first job
/// runs; later calls fail).
#[pyfunction]
fn set_threads(threads: usize) -> PyResult<()> {
    hopscore::cli::init_threads(Some(threads))
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("{e:#}")))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    hopscore::cli::init_logging();
    // The GPU self-test's children: this Python running the console script's module.
    let python: String = m.py().import("sys")?.getattr("executable")?.extract()?;
    hopscore::jobs::selftest::set_runner(vec![python.into(), "-m".into(), "hopscore._cli".into()]);
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(set_threads, m)?)?;
    m.add_function(wrap_pyfunction!(options, m)?)?;
    m.add_class::<job::PyJob>()?;
    Ok(())
}
