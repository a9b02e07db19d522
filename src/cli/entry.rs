//! The command-line entry point shared by the `hopscore` binary and the Python
//! package's console script: parses arguments, runs one subcommand, prints its
//! summary and returns the process exit code.
//!
//! Exit codes: 0 success; 1 error (the cause chain is printed); 2 bad arguments (clap);
//! 3 `review` answered no question (every one failed or was quarantined); 130
//! interrupted by Ctrl-C/SIGTERM (finished rows are kept).

use std::ffi::OsString;

use clap::Parser;

use crate::cli::{self, Cli, Command};

/// `review` ran but answered no question.
const EXIT_NOTHING_ANSWERED: i32 = 3;
/// Interrupted by Ctrl-C/SIGTERM.
const EXIT_INTERRUPTED: i32 = 130;

/// Runs the command line `args` (`args[0]` is the program name) and returns the exit
/// code; errors are printed with their cause chain, never returned.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    super::init_logging();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

/// Prints the summary of a question-file run; 130 when it was interrupted, else 0.
fn report_run(s: &cli::question_run::RunSummary) -> i32 {
    let st = &s.stats;
    let secs = st.wall.as_secs_f64().max(1e-9);
    eprintln!(
        "{} questions ({} quarantined → {}), {} hypotheses, {} tokens in {:.1} s: \
         {:.2} questions/s, {:.1} hypotheses/s, {:.0} tokens/s, forward {:.0}% of wall time",
        st.rows,
        st.bad_rows,
        s.quarantine_path.display(),
        st.hypotheses,
        st.tokens,
        secs,
        st.rows as f64 / secs,
        st.hypotheses as f64 / secs,
        st.tokens as f64 / secs,
        100.0 * st.forward.as_secs_f64() / secs
    );
    if s.interrupted {
        eprintln!("interrupted: finished rows are committed; run the same command with --resume");
        return EXIT_INTERRUPTED;
    }
    0
}

/// Prints the summary of a row run (`classify`, `loglik`); 130 when it was
/// interrupted, else 0.
fn report_rows(s: &cli::row_run::RowSummary) -> i32 {
    eprintln!("{s}");
    if s.interrupted {
        eprintln!("interrupted: finished rows are committed; run the same command with --resume");
        return EXIT_INTERRUPTED;
    }
    0
}

/// Prints the summary of a review run; 130 when it was interrupted, 3 when no question
/// was answered, else 0.
fn report_review(s: &cli::review::ReviewSummary) -> i32 {
    let (t, c) = (&s.tally, &s.tally.calls);
    eprintln!(
        "{} questions: {} answered, {} failed, {} quarantined → {}; {} LLM calls ({} from \
         the cache{}), {} retries, {} prompt + {} completion tokens, {} parse failures, \
         {:.1} s",
        t.answered + t.failed,
        t.answered,
        t.failed,
        s.quarantined,
        s.quarantine_path.display(),
        c.llm_calls,
        c.cached_calls,
        s.cache_dir
            .as_ref()
            .map_or(String::new(), |d| format!(" {}", d.display())),
        c.retries,
        c.prompt_tokens,
        c.completion_tokens,
        t.parse_failures,
        s.seconds
    );
    if s.interrupted {
        eprintln!(
            "interrupted: the rows finished so far are written ({} interrupted questions \
             left out); run the same command with --resume (the cache answers the calls \
             already made)",
            t.interrupted
        );
        return EXIT_INTERRUPTED;
    }
    let why = t
        .first_failure
        .as_ref()
        .map_or("see the quarantine file", |(_, why)| why.as_str());
    if t.answered == 0 && t.failed + s.quarantined > 0 {
        eprintln!(
            "error: no question was answered ({} failed, {} quarantined); first failure: {why}",
            t.failed, s.quarantined
        );
        return EXIT_NOTHING_ANSWERED;
    }
    if t.failed > 0 {
        eprintln!(
            "warning: {} of {} questions failed (`status` = failed); first failure: {why}",
            t.failed,
            t.answered + t.failed
        );
    }
    0
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    cli::init_threads(cli.threads)?;
    match cli.command {
        Command::Beam(args) => return Ok(report_run(&cli::beam::run(&args)?)),
        Command::Label(args) => return Ok(report_run(&cli::label::run(&args)?)),
        Command::Lepus(args) => return Ok(report_run(&cli::lepus::run(&args)?)),
        Command::Review(args) => return Ok(report_review(&cli::review::run(&args)?)),
        Command::Show(args) => print!("{}", cli::show::run(&args)?),
        Command::Merge(args) => {
            let n = cli::merge::run(&args)?;
            eprintln!("merged {n} shards into {}", args.output.display());
        }
        Command::Classify(args) => return Ok(report_rows(&cli::classify::run(&args)?)),
        Command::Embed(args) => return Ok(report_rows(&cli::embed::run(&args)?)),
        Command::Retrieve(args) => eprintln!("{}", cli::retrieve::run(&args)?),
        Command::Loglik(args) => return Ok(report_rows(&cli::loglik::run(&args)?)),
        Command::BenchLoglik(args) => {
            let r = cli::bench_loglik::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("{}", cli::bench_loglik::table(&r));
            }
        }
        Command::Inspect(args) => print!("{}", cli::inspect::run(&args)?),
        Command::Bench(args) => {
            let r = cli::bench::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("{}", cli::bench::table(&r));
            }
        }
        Command::Import(args) => {
            let s = cli::import::run(&args)?;
            eprintln!(
                "imported {} questions ({} passages) from {} records in {:.1} s, {:.0} records/s; \
                 {} with issues (see the `issues` column); {} quarantined → {}",
                s.questions,
                s.passages,
                s.records,
                s.seconds,
                s.records as f64 / s.seconds.max(1e-9),
                s.with_issues,
                s.quarantined,
                s.quarantine_path.display()
            );
            if s.questions == 0 && s.quarantined > 0 {
                eprintln!(
                    "warning: every record was quarantined; read the reasons in {} \
                     (is the dataset argument right?)",
                    s.quarantine_path.display()
                );
            }
        }
        Command::Eval(args) => {
            let r = cli::eval::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", cli::eval::table(&r));
            }
        }
    }
    Ok(0)
}
