//! The `hopscore` command line: argument definitions (clap derive), one `run`
//! function per subcommand, and the entry point ([`main_with_args`]) that `main.rs`
//! and the Python console script call.

pub mod bench;
pub mod bench_loglik;
pub mod doctor;
pub mod entry;
pub mod eval;
pub mod import;
pub mod inspect;
pub mod job;
pub mod merge;
pub mod show;

pub use entry::main_with_args;

pub use job::JobCommand;

use crate::jobs::DeviceConfig;
use anyhow::Result;
use clap::{Parser, Subcommand};

/// hopscore: batch scoring of multi-hop passage chains for question answering.
#[derive(Debug, Parser)]
#[command(version, about, propagate_version = true)]
pub struct Cli {
    /// Worker threads for the CPU backend (default: all cores).
    #[arg(long, global = true, env = "HOPSCORE_THREADS", value_parser = crate::options::values::positive_usize)]
    pub threads: Option<usize>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The jobs' subcommands (`beam`, `label`, `review`, `lepus`, `instruction-search`,
    /// `rerank`, `classify`, `embed`, `retrieve`, `loglik`: the registry's).
    #[command(flatten)]
    Job(JobCommand),
    /// Concatenate the outputs of `--shard i/N` runs into one file.
    Merge(merge::MergeArgs),
    /// Print the rows and run metadata of a Parquet file.
    Show(show::ShowArgs),
    /// Describe a model directory: config, parameters, dtypes, heads, tokenizer.
    Inspect(inspect::InspectArgs),
    /// Encoder throughput on random weights of a standard shape.
    Bench(bench::BenchArgs),
    /// The GPU self-test: every kernel implementation a job may run, each in a child
    /// process with a timeout, against the CPU twin; then what a job would run.
    Doctor(doctor::DoctorArgs),
    /// Convert native HotpotQA / MuSiQue / 2Wiki files into a question file.
    Import(import::ImportArgs),
    /// Score predicted passage chains (and answers) against a question file.
    Eval(eval::EvalArgs),
    /// LM scoring throughput on fixed token ids (see tools/bench_decoder_reference.py).
    BenchLoglik(bench_loglik::BenchLoglikArgs),
}

/// Sets the size of the global rayon pool (all cores when `None`).
pub fn init_threads(threads: Option<usize>) -> Result<()> {
    DeviceConfig {
        threads,
        ..DeviceConfig::CPU
    }
    .init_threads()
}

/// Prints the library's `log` records on stderr, as the command line shows them: info
/// as written, warnings and errors after their level. The CLI and the Python module
/// install it (the library itself only logs).
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        match record.level() {
            _ if !self.enabled(record.metadata()) => {}
            log::Level::Error => eprintln!("error: {}", record.args()),
            log::Level::Warn => eprintln!("warning: {}", record.args()),
            _ => eprintln!("{}", record.args()),
        }
    }

    fn flush(&self) {}
}

/// Sends the library's log to stderr (once per process; a logger the host program
/// installed first is kept).
pub fn init_logging() {
    static LOG: StderrLog = StderrLog;
    if log::set_logger(&LOG).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

#[cfg(test)]
mod tests {
    use crate::jobs::{label, retrieve, value_name};

    /// Every value of `E` as run metadata names it is its spelling on the command line.
    fn metadata_names_are_flag_values<E: clap::ValueEnum + serde::Serialize>() {
        for v in E::value_variants() {
            let flag = v.to_possible_value().expect("a visible value");
            assert_eq!(value_name(v), flag.get_name());
        }
    }

    #[test]
    fn metadata_spells_values_as_the_flags_do() {
        metadata_names_are_flag_values::<retrieve::Retriever>();
        metadata_names_are_flag_values::<crate::model::bert::Pooling>();
        metadata_names_are_flag_values::<label::LabelRetriever>();
        metadata_names_are_flag_values::<label::TagPooling>();
    }
}
