//! The process exit codes of the command line, and the line a stopped run ends with.
//!
//! 0 success; 1 error (the cause chain is printed); 2 bad arguments (clap); 3 `review`
//! answered no question (every one failed or was quarantined); 130 interrupted by
//! Ctrl-C/SIGTERM (finished rows are kept).

/// Interrupted by Ctrl-C/SIGTERM.
pub const INTERRUPTED: i32 = 130;

/// `review` ran but answered no question.
pub const NOTHING_ANSWERED: i32 = 3;

/// The exit code of a file run: 130 (with how to continue) when it was interrupted,
/// else 0.
pub fn of_run(interrupted: bool) -> i32 {
    if interrupted {
        eprintln!("interrupted: finished rows are committed; run the same command with --resume");
        return INTERRUPTED;
    }
    0
}
