//! The command-line entry point shared by the `hopscore` binary and the Python
//! package's console script: parses arguments, runs one subcommand, prints its
//! summary and returns the process exit code ([`crate::jobs::report`]).

use std::ffi::OsString;

use clap::Parser;

use crate::cli::{self, Cli, Command};
use crate::jobs::report::INTERRUPTED;

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
        // A stop before any row ran (while a model downloads, say): the work done is kept.
        Err(e) if e.is::<crate::stop::Interrupted>() => {
            eprintln!("{e:#}");
            INTERRUPTED
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    cli::init_threads(cli.threads)?;
    match cli.command {
        Command::Job(job) => return job.run(),
        Command::Show(args) => print!("{}", cli::show::run(&args)?),
        Command::Merge(args) => {
            let n = cli::merge::run(&args)?;
            eprintln!("merged {n} shards into {}", args.output.display());
        }
        Command::BenchLoglik(args) => {
            let r = cli::bench_loglik::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("{}", cli::bench_loglik::table(&r));
            }
        }
        Command::Inspect(args) => print!("{}", cli::inspect::run(&args)?),
        Command::Doctor(args) => return cli::doctor::run(&args),
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
            let runs = cli::eval::run(&args)?;
            match (&runs[..], args.json) {
                ([one], true) if args.single() => {
                    println!("{}", serde_json::to_string_pretty(&one.report)?)
                }
                ([one], false) if args.single() => print!("{}", cli::eval::table(&one.report)),
                (_, true) => println!("{}", serde_json::to_string_pretty(&runs)?),
                (_, false) => print!("{}", cli::eval::comparison_table(&runs)),
            }
            if let Some(plot) = &args.plot {
                eprintln!("recall plot: {}", plot.display());
            }
        }
    }
    Ok(0)
}
