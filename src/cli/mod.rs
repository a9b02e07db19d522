//! The `hopscore` command line: argument definitions (clap derive) and one `run`
//! function per subcommand. `main.rs` only parses and dispatches.

pub mod bench;
pub mod bench_loglik;
pub mod classify;
pub mod inspect;
pub mod loglik;

use std::path::Path;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

/// hopscore: batch scoring of multi-hop passage chains for question answering.
#[derive(Debug, Parser)]
#[command(version, about, propagate_version = true)]
pub struct Cli {
    /// Worker threads for the CPU backend (default: all cores).
    #[arg(long, global = true, env = "HOPSCORE_THREADS")]
    pub threads: Option<usize>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Score (id, text_a, text_b) rows with a DeBERTa cross-encoder head.
    Classify(classify::ClassifyArgs),
    /// Describe a model directory: config, parameters, dtypes, heads, tokenizer.
    Inspect(inspect::InspectArgs),
    /// Encoder throughput on random weights of a standard shape.
    Bench(bench::BenchArgs),
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

/// Key-value metadata written into every output file.
pub fn run_metadata(
    model_dir: &Path,
    weights: &Path,
    options: &[(&str, String)],
) -> Result<Vec<(String, String)>> {
    let mut m = vec![
        (
            "hopscore.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        (
            "hopscore.model".to_string(),
            model_dir.display().to_string(),
        ),
        (
            "hopscore.model_sha256".to_string(),
            crate::model::weights::sha256_file(weights)?,
        ),
        ("hopscore.dtype".to_string(), "f32".to_string()),
    ];
    m.extend(
        options
            .iter()
            .map(|(k, v)| (format!("hopscore.{k}"), v.clone())),
    );
    Ok(m)
}
