//! The `hopscore` command line: argument definitions (clap derive), one `run`
//! function per subcommand, and the entry point ([`main_with_args`]) that `main.rs`
//! and the Python console script call.

pub mod beam;
pub mod bench;
pub mod bench_loglik;
pub mod classify;
pub mod embed;
pub mod entry;
pub mod eval;
pub mod flags;
pub mod import;
pub mod inspect;
pub mod instruction_search;
pub mod label;
pub mod lepus;
pub mod loglik;
pub mod merge;
pub mod question_run;
pub mod retrieve;
pub mod review;
pub mod row_run;
pub mod show;

pub use entry::main_with_args;

use std::path::Path;

use crate::backend::cpu::CpuGemm;
use crate::backend::dtype::DType;
use crate::io::paths::Named;
use crate::jobs::{DeviceConfig, DeviceKind};
use anyhow::Result;
use clap::{Parser, Subcommand};

/// hopscore: batch scoring of multi-hop passage chains for question answering.
#[derive(Debug, Parser)]
#[command(version, about, propagate_version = true)]
pub struct Cli {
    /// Worker threads for the CPU backend (default: all cores).
    #[arg(long, global = true, env = "HOPSCORE_THREADS", value_parser = flags::positive_usize)]
    pub threads: Option<usize>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The jobs' subcommands (`beam`, `label`, `review`, `lepus`, `classify`, `embed`,
    /// `loglik`).
    #[command(flatten)]
    Job(JobCommand),
    /// Concatenate the outputs of `--shard i/N` runs into one file.
    Merge(merge::MergeArgs),
    /// Print the rows and run metadata of a Parquet file.
    Show(show::ShowArgs),
    /// Candidate pools for a question file from a corpus: dense (an `embed` index), BM25 or hybrid.
    Retrieve(retrieve::RetrieveArgs),
    /// Describe a model directory: config, parameters, dtypes, heads, tokenizer.
    Inspect(inspect::InspectArgs),
    /// Encoder throughput on random weights of a standard shape.
    Bench(bench::BenchArgs),
    /// Convert native HotpotQA / MuSiQue / 2Wiki files into a question file.
    Import(import::ImportArgs),
    /// Score predicted passage chains (and answers) against a question file.
    Eval(eval::EvalArgs),
    /// LM scoring throughput on fixed token ids (see tools/bench_decoder_reference.py).
    BenchLoglik(bench_loglik::BenchLoglikArgs),
    /// Rank candidate LEPUS instructions by the Recall@k of their rankings on a
    /// development question file (the paper's instruction search).
    InstructionSearch(instruction_search::InstructionSearchArgs),
}

/// A job's subcommand: runs, prints its summary and returns the exit code.
pub trait Run {
    fn run(&self) -> Result<i32>;
}

/// The subcommands of the registered jobs ([`crate::jobs::for_each_job`]).
macro_rules! job_commands {
    ($($(#[$doc:meta])* $variant:ident($module:ident, $config:ident, $args:ident)),* $(,)?) => {
        /// The subcommands of the jobs, one per registered job.
        #[derive(Debug, Subcommand)]
        pub enum JobCommand {
            $($(#[$doc])* $variant($module::$args)),*
        }

        impl Run for JobCommand {
            fn run(&self) -> Result<i32> {
                match self {
                    $(JobCommand::$variant(args) => args.run()),*
                }
            }
        }
    };
}
crate::jobs::for_each_job!(job_commands);

/// `--device`, `--gpu`, `--dtype`, `--cpu-gemm`: where the model runs and in which
/// element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct DeviceOpts {
    #[arg(long, value_enum, default_value_t = DeviceConfig::CPU.kind)]
    pub device: DeviceKind,
    /// CUDA device ordinal (with `--device cuda`).
    #[arg(long, default_value_t = DeviceConfig::CPU.gpu)]
    pub gpu: usize,
    /// Element type of weights and activations on the GPU (accumulation is f32).
    #[arg(long, value_enum, default_value_t = DeviceConfig::CPU.dtype)]
    pub dtype: DType,
    /// Arithmetic of the dense layers on the CPU: f32 (the reference), bf16
    /// (AVX512-BF16) or int8 (dynamic per-row × per-channel, AVX512-VNNI). bf16 and int8
    /// are faster and change scores slightly (docs/parity.md); a CPU without the
    /// instructions runs f32 and says so.
    #[arg(long, value_enum, default_value_t = DeviceConfig::CPU.cpu_gemm)]
    pub cpu_gemm: CpuGemm,
    /// Run each forward as a CUDA graph, captured once per batch bucket (batches are
    /// padded to token/sequence/length buckets) and replayed: far fewer launches for
    /// small models; `off` runs every op on its own (debugging, per-kernel profiles).
    #[arg(long, value_name = "on|off", env = "HOPSCORE_CUDA_GRAPHS", default_value = "on",
          value_parser = flags::on_off, action = clap::ArgAction::Set)]
    pub cuda_graphs: bool,
}

impl DeviceOpts {
    /// The CPU backend: the flags' defaults ([`DeviceConfig::CPU`]).
    pub const CPU: DeviceOpts = DeviceOpts {
        device: DeviceConfig::CPU.kind,
        gpu: DeviceConfig::CPU.gpu,
        dtype: DeviceConfig::CPU.dtype,
        cpu_gemm: DeviceConfig::CPU.cpu_gemm,
        cuda_graphs: DeviceConfig::CPU.cuda_graphs,
    };

    /// The library's device config (threads are set once by [`init_threads`]).
    pub fn config(&self) -> DeviceConfig {
        DeviceConfig {
            kind: self.device,
            gpu: self.gpu,
            dtype: self.dtype,
            cpu_gemm: self.cpu_gemm,
            threads: None,
            cuda_graphs: self.cuda_graphs,
        }
    }
}

/// Sets the size of the global rayon pool (all cores when `None`).
pub fn init_threads(threads: Option<usize>) -> Result<()> {
    DeviceConfig {
        threads,
        ..DeviceConfig::CPU
    }
    .init_threads()
}

/// The paths a command reads besides `--input` (`(flag, path)`, `None` when not given),
/// for the guard that no output overwrites an input.
pub fn inputs(paths: &[(&str, Option<&Path>)]) -> Vec<Named> {
    paths
        .iter()
        .filter_map(|&(flag, path)| path.map(|p| Named::new(flag, p)))
        .collect()
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
