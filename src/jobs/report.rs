//! What a run says when it ends, and the process exit codes of the command line.
//!
//! 0 success; 1 error (the cause chain is printed); 2 bad arguments (clap); 3 `review`
//! answered no question (every one failed or was quarantined); 130 interrupted by
//! Ctrl-C/SIGTERM (finished rows are kept).

use crate::jobs::review::ReviewSummary;
use crate::pipeline::files::RunSummary;

/// Interrupted by Ctrl-C/SIGTERM.
pub const INTERRUPTED: i32 = 130;

/// `review` ran but answered no question.
pub const NOTHING_ANSWERED: i32 = 3;

/// What a run says when it ends: lines for stderr, a table for stdout, and the exit
/// code (the command line prints them; the library prints nothing).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ending {
    pub stdout: String,
    pub stderr: Vec<String>,
    pub code: i32,
}

impl Ending {
    /// `self` with `line` for stderr.
    pub fn line(mut self, line: String) -> Self {
        self.stderr.push(line);
        self
    }

    /// `self` with the exit code `code`.
    pub fn code(self, code: i32) -> Self {
        Self { code, ..self }
    }

    /// The end of a file run: 130 with how to continue when it was interrupted, else
    /// as it is.
    pub fn of_run(self, interrupted: bool) -> Self {
        match interrupted {
            true => self
                .line(
                    "interrupted: finished rows are committed; run the same command with --resume"
                        .into(),
                )
                .code(INTERRUPTED),
            false => self,
        }
    }
}

/// What a job's run says when it ends: the command line's summary of the run
/// (`row` names an input row: `question` or `row`), and its exit code.
pub trait Report {
    /// The summary; code 130 when the run was interrupted, else 0 (or the job's own).
    fn report(&self, row: &str) -> Ending;
}

impl Report for RunSummary {
    fn report(&self, row: &str) -> Ending {
        let (st, mut e) = (&self.stats, Ending::default());
        let secs = st.wall.as_secs_f64().max(1e-9);
        let hypotheses = match st.hypotheses {
            0 => String::new(),
            h => format!(", {h} hypotheses ({:.1}/s)", h as f64 / secs),
        };
        e = e.line(format!(
            "{} {row}s ({} quarantined → {}), {} tokens{hypotheses} in {:.1} s: {:.2} {row}s/s, \
             {:.0} tokens/s, forward {:.0}% of wall time",
            st.rows,
            st.bad_rows,
            self.quarantine_path.display(),
            st.tokens,
            secs,
            st.rows as f64 / secs,
            st.tokens as f64 / secs,
            100.0 * st.forward.as_secs_f64() / secs
        ));
        e.of_run(self.interrupted)
    }
}

/// 130 when interrupted, 3 when no question was answered, else 0.
impl Report for ReviewSummary {
    fn report(&self, _row: &str) -> Ending {
        let (t, c, mut e) = (&self.tally, &self.tally.calls, Ending::default());
        e = e.line(format!(
            "{} questions: {} answered, {} failed, {} quarantined → {}; {} LLM calls ({} \
             from the cache{}), {} retries, {} prompt + {} completion tokens, {} parse \
             failures, {:.1} s",
            t.answered + t.failed,
            t.answered,
            t.failed,
            self.run.stats.bad_rows,
            self.run.quarantine_path.display(),
            c.llm_calls,
            c.cached_calls,
            self.cache_dir
                .as_ref()
                .map_or(String::new(), |d| format!(" {}", d.display())),
            c.retries,
            c.prompt_tokens,
            c.completion_tokens,
            t.parse_failures,
            self.run.stats.wall.as_secs_f64()
        ));
        if self.run.interrupted {
            e = e.line(format!(
                "interrupted: the rows finished so far are written ({} interrupted questions \
                 left out); run the same command with --resume (the cache answers the calls \
                 already made)",
                t.interrupted
            ));
            return e.code(INTERRUPTED);
        }
        let why = t
            .first_failure
            .as_ref()
            .map_or("see the quarantine file", |(_, why)| why.as_str());
        let quarantined = self.run.stats.bad_rows;
        if t.answered == 0 && t.failed + quarantined > 0 {
            e = e.line(format!(
                "error: no question was answered ({} failed, {quarantined} quarantined); first \
                 failure: {why}",
                t.failed
            ));
            return e.code(NOTHING_ANSWERED);
        }
        if t.failed > 0 {
            let again = match self.cache_dir {
                Some(_) => {
                    "the same command again sends only their calls (the response cache \
                            answers every call already made)"
                }
                None => "the same command again redoes them (with --no-cache, every call)",
            };
            e = e.line(format!(
                "warning: {} of {} questions failed (`status` = failed); first failure: {why}; \
                 {again}",
                t.failed,
                t.answered + t.failed
            ));
        }
        e
    }
}
