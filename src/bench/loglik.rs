//! LM scoring throughput on fixed token ids (`hopscore bench-loglik`): causal LMs and
//! T5-family encoder-decoders (the ids before `target_start` are then the encoder
//! input), for the comparison with PyTorch in tools/bench_decoder_reference.py (both
//! engines read the same ids, so tokenisation is outside the measurement).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::backend::{Backend, KernelTime};
use crate::jobs::loglik::{token_logprobs, Loglik};
use crate::model::decoder::ScoredSequence;
use crate::model::language_model::load_language_model;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LoglikBench {
    /// A GGUF file, a directory holding one, or an HF directory (causal or T5).
    pub model: PathBuf,
    /// JSON `{"pairs": [{"ids": [..], "target_start": n}, ..]}`: token ids of prompt +
    /// target, targets from `target_start` on.
    pub pairs: PathBuf,
    /// Token budget of one forward pass.
    pub max_batch_tokens: usize,
    pub temperature: f32,
    /// Untimed passes over all pairs before timing.
    pub warmup: usize,
    /// Timed passes over all pairs (the mean is reported).
    pub iters: usize,
    /// Also write the last pass's per-token log-probabilities here, as JSON
    /// `{"logprobs": [[..], ..]}` in the order of the pairs.
    pub scores: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct PairsFile {
    pairs: Vec<Pair>,
}

#[derive(Debug, Deserialize)]
struct Pair {
    ids: Vec<u32>,
    target_start: usize,
}

/// Measured throughput.
#[derive(Debug, Clone, Serialize)]
pub struct BenchLoglikResult {
    pub engine: &'static str,
    pub device: String,
    pub model_type: String,
    pub threads: usize,
    pub pairs: usize,
    /// Prompt + target tokens per pass.
    pub tokens: usize,
    pub target_tokens: usize,
    pub iters: usize,
    pub seconds_per_pass: f64,
    pub tokens_per_s: f64,
    /// Mean of the per-pair mean log-likelihoods (a check that both engines agree).
    pub mean_loglik: f64,
    /// Device time per kernel over one extra pass after the timed ones (devices only).
    pub kernels: Vec<KernelTime>,
}

/// Measures `args` on `be`.
pub fn run<B: Backend>(be: &B, args: &LoglikBench) -> Result<BenchLoglikResult> {
    ensure!(args.iters >= 1, "--iters must be at least 1");
    let text = std::fs::read_to_string(&args.pairs)
        .with_context(|| format!("cannot read {}", args.pairs.display()))?;
    let file: PairsFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a pairs file", args.pairs.display()))?;
    let seqs: Vec<ScoredSequence> = file
        .pairs
        .into_iter()
        .map(|p| ScoredSequence {
            ids: p.ids,
            target_start: p.target_start,
        })
        .collect();
    ensure!(!seqs.is_empty(), "{} has no pairs", args.pairs.display());
    // Token ids in, so no tokenizer: the model alone.
    let model = load_language_model(be, &args.model)?;
    let pass = || token_logprobs(be, &model, &seqs, args.temperature, args.max_batch_tokens);
    let mut results = Vec::new();
    for _ in 0..args.warmup {
        results = pass()?;
    }
    let t = Instant::now();
    for _ in 0..args.iters {
        results = pass()?;
    }
    be.synchronize()?;
    let per_pass = t.elapsed().as_secs_f64() / args.iters as f64;
    // One more pass timed kernel by kernel, on devices only (the CPU has no timers:
    // the pass would cost a whole pass and report nothing).
    let kernels = if be.counts().is_some() {
        be.start_profile();
        pass()?;
        be.finish_profile()?
    } else {
        Vec::new()
    };
    if let Some(path) = &args.scores {
        let json = serde_json::json!({ "logprobs": results });
        std::fs::write(path, json.to_string())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let means: Vec<f64> = results
        .iter()
        .map(|lp| Loglik::from_tokens(lp).mean)
        .collect();
    let tokens = seqs.iter().map(|s| s.ids.len()).sum::<usize>();
    Ok(BenchLoglikResult {
        engine: "hopscore",
        device: be.name(),
        model_type: model.model_type().to_string(),
        threads: rayon::current_num_threads(),
        pairs: seqs.len(),
        tokens,
        target_tokens: seqs.iter().map(ScoredSequence::n_targets).sum(),
        iters: args.iters,
        seconds_per_pass: per_pass,
        tokens_per_s: tokens as f64 / per_pass,
        mean_loglik: means.iter().sum::<f64>() / means.len() as f64,
        kernels,
    })
}
