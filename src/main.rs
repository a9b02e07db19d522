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
        Command::Loglik(args) => {
            let s = cli::loglik::run(&args)?;
            eprintln!(
                "scored {} rows ({} tokens) in {:.1} s, {:.0} tokens/s; {} quarantined → {}",
                s.scored,
                s.tokens,
                s.seconds,
                s.tokens as f64 / s.seconds.max(1e-9),
                s.quarantined,
                s.quarantine_path.display()
            );
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
        Command::Bench(args) => {
            let r = cli::bench::run(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("{}", cli::bench::table(&r));
            }
        }
    }
    Ok(())
}
