//! The process's stop flag, a leaf every layer may read: Ctrl-C or SIGTERM sets it
//! (the command line's handler, `pipeline::control::install_interrupt_handler`, or a
//! library user's own), and long work — a forward pass, an index block, a download —
//! ends at its next check.

/// Set by Ctrl-C (SIGINT/SIGTERM): long runs stop reading input, finish the rows in
/// flight, commit them, and exit so that `--resume` continues.
pub static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a long computation returns when it stops at [`stop_point`]: its rows are left
/// unfinished, for `--resume`.
#[derive(Debug, thiserror::Error)]
#[error("interrupted (Ctrl-C or SIGTERM): the rows in flight are left for --resume")]
pub struct Interrupted;

/// Fails with [`Interrupted`] once [`INTERRUPTED`] is set: called between the forward
/// passes of work that takes long (a group of thousands of rows), so that a stop is
/// not held up by it.
pub fn stop_point() -> Result<(), Interrupted> {
    match INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        true => Err(Interrupted),
        false => Ok(()),
    }
}
