//! The engine seam: every job finishes the tasks a reader admits and hands them to a
//! writer. The pipeline owns the threads ([`drive`]: the reader and the writer on
//! threads of their own, the engine on the calling thread, bounded channels between
//! them, errors reported writer first); a job only says how it finishes tasks
//! ([`Engine::run`]). The file runner ([`super::files`]) and the in-memory API
//! ([`finish_all`]) drive the same engines.

use std::time::{Duration, Instant};

use anyhow::Result;
use crossbeam_channel::{bounded, Receiver, Sender};

use crate::io::quarantine::BadRow;

/// One input row after the reader: a ready task or a bad row.
pub enum Admission<T> {
    Task(T),
    Bad(BadRow),
}

/// One input row the engine is done with (sent with its row number, in the order rows
/// finish).
pub enum Finished<O> {
    Done(O),
    Bad(BadRow),
    /// Left unfinished by a stop (Ctrl-C, SIGTERM), for a later run (`--resume`).
    Left,
}

impl<R> Finished<R> {
    /// The output row or bad row; `None` for a row left for a later run.
    pub fn settled(self) -> Option<Result<R, BadRow>> {
        match self {
            Finished::Done(row) => Some(Ok(row)),
            Finished::Bad(bad) => Some(Err(bad)),
            Finished::Left => None,
        }
    }
}

/// Counters of a run.
#[derive(Debug, Default, Clone, Copy)]
pub struct PipelineStats {
    pub rows: u64,
    /// Rows quarantined (after a file run: every row its quarantine file got, the
    /// tasks that finished with a reason included).
    pub bad_rows: u64,
    pub hypotheses: u64,
    pub tokens: u64,
    pub batches: u64,
    /// Time in forward passes; the rest of `wall` is I/O and scheduling that compute
    /// did not hide.
    pub forward: Duration,
    pub wall: Duration,
}

/// Finished rows with their row numbers.
pub type FinishedRows<O> = Vec<(u64, Finished<O>)>;

/// A status line for the progress display (rates, call counts); called from any
/// thread of the engine.
pub type Status<'a> = &'a (dyn Fn(String) + Sync);

/// How a job finishes its tasks.
pub trait Engine {
    /// One input row's work, built on the reader thread.
    type Task: Send + 'static;
    /// A finished task.
    type Out: Send + 'static;
    /// Rows held in each channel to and from the engine (bounds memory).
    fn queue_rows(&self) -> usize;
    /// Finishes every task received on `rx` (until the reader ends), sending each row
    /// to `tx` as it finishes, bad rows included; `status` shows a progress line.
    fn run(
        &mut self,
        rx: Receiver<(u64, Admission<Self::Task>)>,
        tx: Sender<(u64, Finished<Self::Out>)>,
        status: Status,
    ) -> Result<PipelineStats>;
}

/// Runs `read` (sends each row's admission, in input order) and `write` (receives
/// the finished rows, in any order) on threads of their own and `engine` between them
/// on this one; returns the engine's counters (with the wall time) and what `write`
/// returned. The writer's and the reader's own errors explain an engine's failed send
/// best, so they are reported first.
pub fn drive<E: Engine + ?Sized, V: Send>(
    engine: &mut E,
    read: impl FnOnce(Sender<(u64, Admission<E::Task>)>) -> Result<()> + Send,
    write: impl FnOnce(Receiver<(u64, Finished<E::Out>)>) -> Result<V> + Send,
    status: Status,
) -> Result<(PipelineStats, V)> {
    let started = Instant::now();
    let depth = engine.queue_rows().max(1);
    let (admit_tx, admit_rx) = bounded(depth);
    let (done_tx, done_rx) = bounded(depth);
    let (stats, read_result, write_result) = std::thread::scope(|scope| {
        let reader = scope.spawn(move || read(admit_tx));
        let writer = scope.spawn(move || write(done_rx));
        let stats = engine.run(admit_rx, done_tx, status);
        (
            stats,
            reader.join().expect("the reader thread panicked"),
            writer.join().expect("the writer thread panicked"),
        )
    });
    let written = write_result?;
    read_result?;
    let stats = PipelineStats {
        wall: started.elapsed(),
        ..stats?
    };
    Ok((stats, written))
}

/// Finishes `rows` with `engine`, all in flight at once: the finished rows in row
/// order (rows a stop left unfinished are the engine's to mark).
pub fn finish_all<E: Engine + ?Sized>(
    engine: &mut E,
    rows: Vec<(u64, Admission<E::Task>)>,
) -> Result<(PipelineStats, FinishedRows<E::Out>)> {
    let (stats, mut finished) = drive(
        engine,
        |tx| {
            for item in rows {
                if tx.send(item).is_err() {
                    break; // the engine stopped; its error is reported
                }
            }
            Ok(())
        },
        |rx| Ok(rx.into_iter().collect::<Vec<_>>()),
        &|_| {},
    )?;
    finished.sort_by_key(|(row, _)| *row);
    Ok((stats, finished))
}
