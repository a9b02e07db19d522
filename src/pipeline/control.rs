//! What every file run shares: the Ctrl-C flag that ends a run cleanly, the progress
//! display, and `--shard i/N` row ranges.

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

/// Installs the Ctrl-C handler that sets [`INTERRUPTED`] (once per process; the
/// command line's, so a library user sets [`INTERRUPTED`] from handlers of its own).
#[cfg(feature = "cli")]
pub fn install_interrupt_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if INTERRUPTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::process::exit(130); // a second Ctrl-C stops at once
            }
            log::info!("\ninterrupted: finishing the rows in flight (Ctrl-C again to abort)");
        });
    });
}

/// A `--shard i/N` selection: the `i`-th of `N` contiguous, near-equal row ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    /// Rows `[start, end)` of this shard among `total` input rows.
    pub fn range(&self, total: u64) -> (u64, u64) {
        (
            total * self.index / self.count,
            total * (self.index + 1) / self.count,
        )
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Parses `i/N` with `0 ≤ i < N`.
pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let bad = || format!("`{s}`: expected i/N with 0 ≤ i < N, e.g. 0/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (index, count) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

/// The progress of a run over `total` rows, with a status line: a bar with rate and
/// ETA on stderr (hidden when stderr is not a terminal) with the `cli` feature; a
/// library built without it shows nothing.
pub struct Progress {
    #[cfg(feature = "cli")]
    bar: indicatif::ProgressBar,
}

#[cfg(feature = "cli")]
impl Progress {
    pub fn new(total: u64, unit: &str) -> Self {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{per_sec}} ETA {{eta}}"
            ))
            .expect("valid template")
            .progress_chars("=> "),
        );
        Self { bar }
    }

    pub fn set_position(&self, rows: u64) {
        self.bar.set_position(rows);
    }

    pub fn inc(&self, rows: u64) {
        self.bar.inc(rows);
    }

    pub fn set_status(&self, status: String) {
        self.bar.set_message(status);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(not(feature = "cli"))]
impl Progress {
    pub fn new(_total: u64, _unit: &str) -> Self {
        Self {}
    }

    pub fn set_position(&self, _rows: u64) {}

    pub fn inc(&self, _rows: u64) {}

    pub fn set_status(&self, _status: String) {}

    pub fn finish(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_rows() {
        assert_eq!(parse_shard("1/4"), Ok(Shard { index: 1, count: 4 }));
        assert!(
            parse_shard("4/4").is_err() && parse_shard("x").is_err() && parse_shard("0/0").is_err()
        );
        let ranges: Vec<(u64, u64)> = (0..3)
            .map(|i| Shard { index: i, count: 3 }.range(10))
            .collect();
        assert_eq!(ranges, vec![(0, 3), (3, 6), (6, 10)]);
    }
}
