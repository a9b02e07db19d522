//! `hopscore loglik`: log-likelihood of `target` given `prompt` under a causal LM
//! (LEPUS scoring, SPEC §3), for `(id, prompt, target)` rows.
//!
//! Rows stream from the input Parquet in chunks; each chunk is tokenised in parallel
//! (prompt and target separately, trailing prompt whitespace moved to the target, BOS
//! when the tokenizer asks for it), sorted by length, packed into token-budget
//! batches and scored; results are written in input order. Only target tokens count.
//! Rows that cannot be scored go to the quarantine file with the reason.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use arrow::array::{Array, ArrayRef, Float64Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field};
use clap::Args;
use rayon::prelude::*;

use super::rows::{self, RowOutput, RowSummary};
use super::{run_metadata, with_backend, DeviceOpts};
use crate::backend::Backend;
use crate::io::parquet_io::{check_text, string_column, ParquetInput};
use crate::model::batch::token_budget_groups;
use crate::model::decoder::{DecoderForCausalLM, DecoderSource, ScoredSequence};
use crate::text::causal_tokenizer::{self, CausalTokenizer};

/// Rows read from the input per chunk.
const CHUNK_ROWS: usize = 2048;

#[derive(Debug, Clone, Args)]
pub struct LoglikArgs {
    /// A GGUF file (config and tokenizer from its metadata), a directory holding one,
    /// or an HF directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long, env = "HOPSCORE_MODEL")]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it) instead of the model's own.
    #[arg(long, env = "HOPSCORE_TOKENIZER")]
    pub tokenizer: Option<PathBuf>,
    /// Input Parquet with columns `id` (string or integer), `prompt` and `target`
    /// (strings).
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet: `id`, `loglik_sum`, `loglik_mean` (float64), `n_tokens` (uint32).
    #[arg(long)]
    pub output: PathBuf,
    /// Logits are divided by T before the log-softmax (LEPUS: 1.4 is best in the
    /// paper; 1.0 gives plain log-likelihoods).
    #[arg(long, default_value_t = 1.0, value_parser = super::flags::positive_f32)]
    pub temperature: f32,
    /// Sequences of one batch that share at least N leading tokens (LEPUS paths with
    /// the same first passage) run those tokens through the model once; scores are
    /// unchanged. 0 turns the reuse off.
    #[arg(long, default_value_t = crate::model::decoder::MIN_SHARED_PREFIX)]
    pub min_shared_prefix: usize,
    /// Token budget of one forward pass. Larger batches use the cores better and need
    /// more memory (about 4·(6·H + 2·I) bytes per token on CPU, plus attention scores).
    #[arg(long, default_value_t = 8192, value_parser = super::flags::positive_usize)]
    pub max_batch_tokens: usize,
    /// Longest prompt + target accepted, in tokens; longer rows are quarantined.
    /// Default: the model's context length.
    #[arg(long, value_parser = super::flags::positive_usize)]
    pub max_length: Option<usize>,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceOpts,
}

/// Per-row result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Loglik {
    pub sum: f64,
    pub mean: f64,
    pub count: usize,
}

impl Loglik {
    /// Sum (in f64), mean and count of per-token log-probabilities.
    pub fn from_tokens(logp: &[f32]) -> Self {
        let sum: f64 = logp.iter().map(|&v| f64::from(v)).sum();
        Self {
            sum,
            mean: sum / logp.len().max(1) as f64,
            count: logp.len(),
        }
    }
}

/// A loaded model with its tokenizer.
pub struct LoadedDecoder<B: Backend> {
    pub model: DecoderForCausalLM<B>,
    pub tokenizer: CausalTokenizer,
    pub weights_paths: Vec<PathBuf>,
}

/// Opens a decoder and its tokenizer (`tokenizer` overrides the model's own).
pub fn load_decoder<B: Backend>(
    be: &B,
    model: &std::path::Path,
    tokenizer: Option<&std::path::Path>,
) -> Result<LoadedDecoder<B>> {
    let source = DecoderSource::open(model)?;
    let weights_paths = source.weights_paths();
    let tok = match (&source, tokenizer) {
        (_, Some(t)) => CausalTokenizer::from_dir(model, Some(t))?,
        (DecoderSource::Gguf(g), None) => causal_tokenizer::from_gguf(g)?,
        (DecoderSource::Hf { dir, .. }, None) => CausalTokenizer::from_dir(dir, None)?,
    };
    let model = DecoderForCausalLM::load(be, source)
        .with_context(|| format!("loading {}", model.display()))?;
    Ok(LoadedDecoder {
        model,
        tokenizer: tok,
        weights_paths,
    })
}

/// Runs `hopscore loglik`.
pub fn run(args: &LoglikArgs) -> Result<RowSummary> {
    ensure!(
        args.temperature > 0.0 && args.temperature.is_finite(),
        "--temperature must be positive, got {}",
        args.temperature
    );
    with_backend!(&args.device, be => run_on(be, args))
}

fn run_on<B: Backend>(be: &B, args: &LoglikArgs) -> Result<RowSummary> {
    let mut loaded = load_decoder(be, &args.model, args.tokenizer.as_deref())?;
    loaded.model.min_shared_prefix = args.min_shared_prefix;
    let max_len = args
        .max_length
        .unwrap_or(loaded.model.config.max_position_embeddings);

    let input = ParquetInput::open(&args.input, CHUNK_ROWS)?;
    input.check_column("id", &["string", "integer"], true)?;
    input.check_column("prompt", &["string"], true)?;
    input.check_column("target", &["string"], true)?;
    let metadata = run_metadata(
        be,
        &args.model,
        &loaded.weights_paths,
        &[
            ("model_type", loaded.model.config.model_type.clone()),
            ("temperature", args.temperature.to_string()),
            ("max_length", max_len.to_string()),
            ("add_bos", loaded.tokenizer.add_bos.to_string()),
            ("tokenizer", loaded.tokenizer.source.display().to_string()),
            ("device", be.name()),
        ],
    )?;
    rows::run(
        input,
        RowOutput {
            input: &args.input,
            path: &args.output,
            quarantine: args.quarantine.as_deref(),
            metadata: &metadata,
            fields: vec![
                Field::new("loglik_sum", DataType::Float64, false),
                Field::new("loglik_mean", DataType::Float64, false),
                Field::new("n_tokens", DataType::UInt32, false),
            ],
        },
        |chunk| tokenize_chunk(chunk, &loaded.tokenizer, max_len),
        |s: &ScoredSequence| s.ids.len(),
        |seqs| {
            let results = score(
                be,
                &loaded.model,
                seqs,
                args.temperature,
                args.max_batch_tokens,
            )?;
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Float64Array::from_iter_values(
                    results.iter().map(|r| r.sum),
                )),
                Arc::new(Float64Array::from_iter_values(
                    results.iter().map(|r| r.mean),
                )),
                Arc::new(UInt32Array::from_iter_values(
                    results.iter().map(|r| r.count as u32),
                )),
            ];
            Ok(columns)
        },
    )
}

/// Validates and tokenises the rows of one chunk: the tokens, or why a row is bad.
fn tokenize_chunk(
    chunk: &RecordBatch,
    tok: &CausalTokenizer,
    max_len: usize,
) -> Result<Vec<Result<ScoredSequence, String>>> {
    let prompt = string_column(chunk, "prompt")?;
    let target = string_column(chunk, "target")?;
    Ok((0..chunk.num_rows())
        .into_par_iter()
        .map(|r| {
            // An empty prompt is allowed (BOS may give the context); a null one is not.
            if prompt.is_null(r) {
                return Err("prompt is null".to_string());
            }
            let p = prompt.value(r);
            if p.len() > crate::io::parquet_io::MAX_TEXT_BYTES {
                return Err(format!("prompt has {} bytes; split the text", p.len()));
            }
            let t = check_text(&target, r, "target")?.ok_or_else(|| "target is null".to_string())?;
            let enc = tok.encode_pair(p, t).map_err(|e| format!("{e:#}"))?;
            if enc.target_start == 0 {
                return Err(
                    "the prompt is empty and the model adds no BOS: the first target token has no context"
                        .to_string(),
                );
            }
            if enc.ids.len() == enc.target_start {
                return Err("the target has no tokens".to_string());
            }
            if enc.ids.len() > max_len {
                return Err(format!(
                    "prompt + target is {} tokens; the limit is {max_len} (--max-length)",
                    enc.ids.len()
                ));
            }
            Ok(ScoredSequence {
                ids: enc.ids,
                target_start: enc.target_start,
            })
        })
        .collect())
}

/// Scores every sequence (in the order given): sorted by length, packed into batches
/// of at most `budget` tokens.
pub fn score<B: Backend>(
    be: &B,
    model: &DecoderForCausalLM<B>,
    seqs: &[ScoredSequence],
    temperature: f32,
    budget: usize,
) -> Result<Vec<Loglik>> {
    let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
    let mut out = vec![Loglik::from_tokens(&[]); seqs.len()];
    for group in token_budget_groups(&lens, budget) {
        let batch: Vec<ScoredSequence> = group.iter().map(|&i| seqs[i].clone()).collect();
        let logp = model.target_logprobs(be, &batch, temperature)?;
        for (&i, lp) in group.iter().zip(&logp) {
            out[i] = Loglik::from_tokens(lp);
        }
    }
    Ok(out)
}
