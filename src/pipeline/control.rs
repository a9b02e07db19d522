//! What every file run shares: the Ctrl-C handler that sets [`crate::stop::INTERRUPTED`]
//! and the progress display.

/// Installs the Ctrl-C handler that sets [`crate::stop::INTERRUPTED`] (once per process; the
/// command line's, so a library user sets [`crate::stop::INTERRUPTED`] from handlers of its own).
#[cfg(feature = "cli")]
pub fn install_interrupt_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if crate::stop::INTERRUPTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::process::exit(130); // a second Ctrl-C stops at once
            }
            log::info!(
                "\ninterrupted: stopping after the forward pass in flight; finished rows are \
                 committed (Ctrl-C again to abort)"
            );
        });
    });
}

/// The progress of a run over `total` rows, with a status line: on a terminal (with
/// the `cli` feature) a bar with rate and ETA on stderr; otherwise (stderr a file or a
/// pipe, or a library without the CLI) a log line every [`progress_every`] with the
/// same figures, as log-friendly tools do.
pub struct Progress {
    #[cfg(feature = "cli")]
    bar: indicatif::ProgressBar,
    lines: Option<std::sync::Mutex<Lines>>,
}

/// The state of [`Progress`]'s log lines.
struct Lines {
    total: u64,
    unit: String,
    started: std::time::Instant,
    last: std::time::Instant,
    every: std::time::Duration,
    pos: u64,
    /// Rows done before this run (resumed): not part of its rate.
    base: u64,
    status: String,
}

/// How often a progress line is logged when there is no bar:
/// `HOPSCORE_PROGRESS_SECS` seconds (default 30; 0 logs every update).
/// A value that is not a number of seconds from 0 to a day is refused with a warning
/// (once per process) and the default taken.
pub fn progress_every() -> std::time::Duration {
    const DEFAULT: f64 = 30.0;
    let secs = match std::env::var("HOPSCORE_PROGRESS_SECS") {
        Err(_) => DEFAULT,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if (0.0..=crate::options::MAX_WAIT_SECS).contains(&s) => s,
            _ => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    log::warn!(
                        "HOPSCORE_PROGRESS_SECS={v:?} is not a number of seconds from 0 to \
                         {}: progress lines every {DEFAULT} s",
                        crate::options::MAX_WAIT_SECS
                    )
                });
                DEFAULT
            }
        },
    };
    std::time::Duration::from_secs_f64(secs)
}

impl Lines {
    /// Logs a line when the interval has passed since the last one.
    fn update(&mut self, pos: u64) {
        self.pos = pos;
        let now = std::time::Instant::now();
        if now.duration_since(self.last) < self.every {
            return;
        }
        self.last = now;
        let secs = now.duration_since(self.started).as_secs_f64().max(1e-9);
        let rate = self.pos.saturating_sub(self.base) as f64 / secs;
        let left = self.total.saturating_sub(self.pos);
        let eta = match rate > 0.0 {
            true => format_secs(left as f64 / rate),
            false => "?".into(),
        };
        let pct = 100.0 * self.pos as f64 / self.total.max(1) as f64;
        let status = match self.status.is_empty() {
            true => String::new(),
            false => format!("; {}", self.status),
        };
        log::info!(
            "progress: {}/{} {} ({pct:.1}%), {rate:.1} {}/s, elapsed {}, ETA {eta}{status}",
            self.pos,
            self.total,
            self.unit,
            self.unit,
            format_secs(secs)
        );
    }
}

/// `3725.0` → `1h02m05s`.
fn format_secs(secs: f64) -> String {
    let s = secs.round() as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, sec) => format!("{h}h{m:02}m{sec:02}s"),
    }
}

impl Progress {
    pub fn new(total: u64, unit: &str) -> Self {
        #[cfg(feature = "cli")]
        let bar = {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(&format!(
                    "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{per_sec}} ETA {{eta}}"
                ))
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar
        };
        #[cfg(feature = "cli")]
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        #[cfg(not(feature = "cli"))]
        let terminal = false;
        let now = std::time::Instant::now();
        let lines = (!terminal).then(|| {
            std::sync::Mutex::new(Lines {
                total,
                unit: unit.to_string(),
                started: now,
                last: now,
                every: progress_every(),
                pos: 0,
                base: 0,
                status: String::new(),
            })
        });
        Self {
            #[cfg(feature = "cli")]
            bar,
            lines,
        }
    }

    fn line(&self, f: impl FnOnce(&mut Lines)) {
        if let Some(lines) = &self.lines {
            if let Ok(mut l) = lines.lock() {
                f(&mut l);
            }
        }
    }

    pub fn set_position(&self, rows: u64) {
        #[cfg(feature = "cli")]
        self.bar.set_position(rows);
        // A resumed run's committed rows are not this run's rate.
        self.line(|l| (l.pos, l.base) = (rows, rows));
    }

    pub fn inc(&self, rows: u64) {
        #[cfg(feature = "cli")]
        self.bar.inc(rows);
        self.line(|l| l.update(l.pos + rows));
    }

    pub fn set_status(&self, status: String) {
        self.line(|l| l.status.clone_from(&status));
        #[cfg(feature = "cli")]
        self.bar.set_message(status);
    }

    pub fn finish(&self) {
        #[cfg(feature = "cli")]
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_give_rate_and_eta_in_words() {
        assert_eq!(format_secs(3725.0), "1h02m05s");
        assert_eq!(format_secs(65.4), "1m05s");
        assert_eq!(format_secs(7.0), "7s");
    }
}
