//! `hopscore` binary: parses the command line and runs one subcommand.
//!
//! Exit codes: 0 success; 1 error (the cause chain is printed); 2 bad arguments (clap).

use clap::Parser;
use hopscore::cli::{self, Cli, Command};

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    cli::init_threads(cli.threads)?;
    match cli.command {
        Command::Classify(args) => {
            let s = cli::classify::run(&args)?;
            eprintln!(
                "scored {} rows ({} tokens) in {:.1} s, {:.1} rows/s; {} quarantined → {}",
                s.scored,
                s.tokens,
                s.seconds,
                s.scored as f64 / s.seconds.max(1e-9),
                s.quarantined,
                s.quarantine_path.display()
            );
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
    Ok(())
}
