//! The `hopscore` command line: argument definitions (clap derive), one `run`
//! function per subcommand, and the entry point ([`main_with_args`]) that `main.rs`
//! and the Python console script call.

pub mod beam;
pub mod bench;
pub mod bench_loglik;
pub mod classify;
pub mod entry;
pub mod eval;
pub mod flags;
pub mod import;
pub mod inspect;
pub mod label;
pub mod lepus;
pub mod loglik;
pub mod merge;
pub mod question_run;
pub mod review;
pub mod rows;
pub mod show;

pub use entry::main_with_args;

use std::path::{Path, PathBuf};

use crate::backend::dtype::DType;
use crate::backend::Backend;
use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

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
    /// Beam Retrieval over a question file: chains, scores and features.
    Beam(beam::BeamArgs),
    /// EfficientRAG over a question file: Labeler tags and kept text, Filter queries.
    Label(label::LabelArgs),
    /// LLM post-stage (Tree of Reviews or ALLIES) against an OpenAI-compatible endpoint.
    Review(review::ReviewArgs),
    /// LEPUS reranking of each question's passages with a causal LM (or BM25).
    Lepus(lepus::LepusArgs),
    /// Concatenate the outputs of `--shard i/N` runs into one file.
    Merge(merge::MergeArgs),
    /// Print the rows and run metadata of a Parquet file.
    Show(show::ShowArgs),
    /// Score (id, text_a, text_b) rows with a DeBERTa cross-encoder head.
    Classify(classify::ClassifyArgs),
    /// Describe a model directory: config, parameters, dtypes, heads, tokenizer.
    Inspect(inspect::InspectArgs),
    /// Encoder throughput on random weights of a standard shape.
    Bench(bench::BenchArgs),
    /// Convert native HotpotQA / MuSiQue / 2Wiki files into a question file.
    Import(import::ImportArgs),
    /// Score predicted passage chains (and answers) against a question file.
    Eval(eval::EvalArgs),
    /// Log-likelihood of (id, prompt, target) rows' targets under a causal LM (LEPUS).
    Loglik(loglik::LoglikArgs),
    /// Causal-LM scoring throughput on fixed token ids (see tools/bench_decoder_reference.py).
    BenchLoglik(bench_loglik::BenchLoglikArgs),
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// The CPU backend (rayon + gemm, f32).
    Cpu,
    /// The CUDA backend (kernels/ + cuBLAS; needs a build with `--features cuda`).
    Cuda,
}

/// `--device`, `--gpu`, `--dtype`: where the model runs and in which element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct DeviceOpts {
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// CUDA device ordinal (with `--device cuda`).
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// Element type of weights and activations on the GPU (accumulation is f32; the
    /// CPU backend always runs f32).
    #[arg(long, value_enum, default_value_t = DType::Bf16)]
    pub dtype: DType,
}

impl DeviceOpts {
    /// The CPU backend.
    pub const CPU: DeviceOpts = DeviceOpts {
        device: DeviceArg::Cpu,
        gpu: 0,
        dtype: DType::Bf16,
    };
}

/// Evaluates `$body` with `$be` bound to the backend that `$opts` (a
/// [`DeviceOpts`]) selects; `$body` is instantiated once per backend type.
macro_rules! with_backend {
    ($opts:expr, $be:ident => $body:expr) => {{
        let opts: &$crate::cli::DeviceOpts = $opts;
        match opts.device {
            $crate::cli::DeviceArg::Cpu => {
                let $be = &$crate::backend::cpu::CpuBackend;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::cli::DeviceArg::Cuda => {
                let $be = &$crate::backend::cuda::CudaBackend::new(opts.gpu, opts.dtype)?;
                $body
            }
            #[cfg(not(feature = "cuda"))]
            $crate::cli::DeviceArg::Cuda => anyhow::bail!(
                "this hopscore was built without CUDA support: rebuild with \
                 `cargo build --release --features cuda`, or use --device cpu"
            ),
        }
    }};
}
pub(crate) use with_backend;

/// Set by Ctrl-C (SIGINT/SIGTERM): long runs stop reading input, finish the rows in
/// flight, commit them, and exit so that `--resume` continues.
pub static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Installs the Ctrl-C handler that sets [`INTERRUPTED`] (once per process).
pub fn install_interrupt_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if INTERRUPTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::process::exit(130); // a second Ctrl-C stops at once
            }
            eprintln!("\ninterrupted: finishing the rows in flight (Ctrl-C again to abort)");
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

/// Sets the size of the global rayon pool (all cores when `None`).
pub fn init_threads(threads: Option<usize>) -> Result<()> {
    if let Some(n) = threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| anyhow::anyhow!("cannot start {n} worker threads: {e}"))?;
    }
    Ok(())
}

/// A progress bar with rate and ETA on stderr (hidden when stderr is not a terminal).
pub fn progress_bar(total: u64, unit: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{per_sec}} ETA {{eta}}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

/// Key-value metadata written into every output file: the model, its content hash
/// ([`crate::io::fingerprint::model_sha256`]), the dtype the backend computes in, then
/// `options`.
pub fn run_metadata<B: Backend>(
    be: &B,
    model_dir: &Path,
    weights: &[PathBuf],
    options: &[(&str, String)],
) -> Result<Vec<(String, String)>> {
    let mut m = tool_metadata(&[
        ("model", model_dir.display().to_string()),
        (
            "model_sha256",
            crate::io::fingerprint::model_sha256(model_dir, weights)?,
        ),
        ("dtype", be.dtype().suffix().to_string()),
    ]);
    m.extend(tool_metadata(options).into_iter().skip(1));
    Ok(m)
}

/// `hopscore.version` followed by `options` as `hopscore.<key>` metadata entries.
pub fn tool_metadata(options: &[(&str, String)]) -> Vec<(String, String)> {
    std::iter::once(("version", env!("CARGO_PKG_VERSION").to_string()))
        .chain(options.iter().cloned())
        .map(|(k, v)| (format!("hopscore.{k}"), v))
        .collect()
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
