//! The loglik job: log-likelihood of `target` given `prompt` under a causal LM or a
//! T5-family encoder-decoder (LEPUS scoring, docs/spec.md §3), for `(id, prompt,
//! target)` rows.
//!
//! Each batch is tokenised in parallel, sorted by length, packed into token-budget
//! batches and scored; results come back in input order. Only target tokens count. A
//! causal LM reads prompt and target as one sequence (tokenised separately, trailing
//! prompt whitespace moved to the target, BOS when the tokenizer asks for it); an
//! encoder-decoder reads the prompt as its encoder input and the target as its labels,
//! each with the special tokens its tokenizer adds (T5: `</s>`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use arrow_array::{Array, ArrayRef, Float64Array, RecordBatch, UInt32Array};
use arrow_schema::Field;
use rayon::prelude::*;

use super::rows::{InputColumn, RowJob, RowScorer};
use crate::backend::Backend;
use crate::io::metadata::run_metadata;
use crate::io::parquet_io::{check_text, string_column};
use crate::io::paths::Named;
use crate::model::batch::token_budget_groups;
use crate::model::decoder::ScoredSequence;
use crate::model::hub::Need;
use crate::model::language_model::{LanguageModel, LanguageModelSource};
use crate::options::{self, Options};
use crate::text::causal_tokenizer::{self, CausalTokenizer};

/// What to load and how to score: the flags of `hopscore loglik` and the options of
/// Python's `hopscore.CausalLM`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct LoglikConfig {
    /// A GGUF file (config and tokenizer from its metadata), a directory holding one,
    /// or an HF directory (config.json, model.safetensors, tokenizer.json) of a causal
    /// LM or a T5-family encoder-decoder.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_MODEL",
        value_parser = crate::options::values::model_path))]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it) instead of the model's own.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_TOKENIZER",
        value_parser = crate::options::values::model_path))]
    pub tokenizer: Option<PathBuf>,
    /// Logits are divided by T before the log-softmax (LEPUS: 1.4 is best in the
    /// paper; 1.0 gives plain log-likelihoods).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LoglikConfig::defaults().temperature,
        value_parser = crate::options::values::positive_f32))]
    pub temperature: f32,
    /// Sequences of one batch that share at least N leading tokens (LEPUS paths with
    /// the same first passage) run those tokens through the model once; scores are
    /// unchanged. 0 turns the reuse off.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LoglikConfig::defaults().min_shared_prefix))]
    pub min_shared_prefix: usize,
    /// Token budget of one forward pass. Larger batches use the cores better and need
    /// more memory (about 4·(6·H + 2·I) bytes per token on CPU, plus attention scores).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LoglikConfig::defaults().max_batch_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub max_batch_tokens: usize,
    /// Longest prompt + target accepted, in tokens; longer rows are quarantined.
    /// Default: the model's context length (an encoder-decoder: the longest prompt
    /// and the longest target, 2048).
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::positive_usize))]
    pub max_length: Option<usize>,
}

impl LoglikConfig {
    /// The defaults (the command line's) for `model`.
    pub fn new(model: PathBuf) -> Self {
        Self {
            model,
            ..Self::defaults()
        }
    }
}

impl Options for LoglikConfig {
    /// Every option at the command line's default; the paths empty.
    fn defaults() -> Self {
        Self {
            model: PathBuf::new(),
            tokenizer: None,
            temperature: 1.0,
            min_shared_prefix: crate::model::decoder::MIN_SHARED_PREFIX,
            max_batch_tokens: 8192,
            max_length: None,
        }
    }

    fn check(&self) -> Result<()> {
        options::finite("temperature", self.temperature, true)?;
        options::at_least_one("max_batch_tokens", self.max_batch_tokens)?;
        options::none_or_at_least_one("max_length", self.max_length)
    }

    fn model_paths(&mut self) -> Vec<(&mut PathBuf, Need)> {
        options::model_and_tokenizer([&mut self.model], self.tokenizer.as_mut())
    }

    fn inputs(&self) -> Vec<Named> {
        options::named(&[
            ("--model", Some(&self.model)),
            ("--tokenizer", self.tokenizer.as_deref()),
        ])
    }
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

/// A loaded LM with its tokenizer and scoring options.
pub struct LoglikScorer<B: Backend> {
    be: B,
    model: LanguageModel<B>,
    tokenizer: CausalTokenizer,
    temperature: f32,
    max_len: usize,
    max_batch_tokens: usize,
    metadata: Vec<(String, String)>,
}

/// The loglik job on backend `B`.
pub type LoglikJob<B> = RowJob<LoglikScorer<B>>;

/// Loads the decoder and tokenizer of `config` on `be`.
pub fn job<B: Backend>(config: LoglikConfig, be: B) -> Result<LoglikJob<B>> {
    config.check()?;
    let source = LanguageModelSource::open(&config.model)?;
    let tokenizer =
        causal_tokenizer::for_model(&source, &config.model, config.tokenizer.as_deref())?;
    let weights_paths = source.weights_paths();
    let mut model = source.load(&be)?;
    model.set_min_shared_prefix(config.min_shared_prefix);
    let max_len = config.max_length.unwrap_or(model.context());
    let metadata = run_metadata(
        &be,
        &config.model,
        &weights_paths,
        &options::record(
            &config,
            &[
                ("model_type", model.model_type().to_string()),
                ("max_length", max_len.to_string()),
                ("add_bos", tokenizer.add_bos.to_string()),
                ("tokenizer", tokenizer.source.display().to_string()),
                ("device", be.name()),
            ],
        )?,
    )?;
    Ok(RowJob::new(LoglikScorer {
        be,
        model,
        tokenizer,
        temperature: config.temperature,
        max_len,
        max_batch_tokens: config.max_batch_tokens,
        metadata,
    }))
}

impl<B: Backend> RowScorer for LoglikScorer<B> {
    type Prepared = ScoredSequence;
    const COLUMNS: &'static [InputColumn] = &[
        ("id", &["string", "integer"], true),
        ("prompt", &["string"], true),
        ("target", &["string"], true),
    ];
    const BATCH_ROWS: usize = 2048;

    fn fields(&self) -> Vec<Field> {
        crate::io::schemas::loglik_fields()
    }

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn prepare(&self, batch: &RecordBatch) -> Result<Vec<Result<ScoredSequence, String>>> {
        tokenize(
            batch,
            &self.tokenizer,
            self.max_len,
            self.model.is_seq2seq(),
        )
    }

    fn tokens(row: &ScoredSequence) -> usize {
        row.ids.len()
    }

    fn score(&mut self, rows: &[ScoredSequence]) -> Result<Vec<ArrayRef>> {
        let results = score(
            &self.be,
            &self.model,
            rows,
            self.temperature,
            self.max_batch_tokens,
        )?;
        Ok(vec![
            Arc::new(Float64Array::from_iter_values(
                results.iter().map(|r| r.sum),
            )),
            Arc::new(Float64Array::from_iter_values(
                results.iter().map(|r| r.mean),
            )),
            Arc::new(UInt32Array::from_iter_values(
                results.iter().map(|r| r.count as u32),
            )),
        ])
    }
}

/// Validates and tokenises the rows of one batch: the tokens, or why a row is bad.
fn tokenize(
    batch: &RecordBatch,
    tok: &CausalTokenizer,
    max_len: usize,
    seq2seq: bool,
) -> Result<Vec<Result<ScoredSequence, String>>> {
    let prompt = string_column(batch, "prompt")?;
    let target = string_column(batch, "target")?;
    Ok((0..batch.num_rows())
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
            if seq2seq {
                return encode_seq2seq(tok, p, t, max_len);
            }
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

/// An encoder-decoder row: the prompt's ids (the encoder input) then the target's
/// (the labels), each as the tokenizer encodes a text alone, special tokens included.
fn encode_seq2seq(
    tok: &CausalTokenizer,
    prompt: &str,
    target: &str,
    max_len: usize,
) -> Result<ScoredSequence, String> {
    let encode = |text: &str| {
        tok.encode_with_specials(text, None)
            .map_err(|e| format!("{e:#}"))
    };
    let (mut ids, labels) = (encode(prompt)?, encode(target)?);
    if ids.is_empty() {
        return Err("the prompt has no tokens and the tokenizer adds none".to_string());
    }
    if labels.is_empty() {
        return Err("the target has no tokens".to_string());
    }
    for (what, n) in [("prompt", ids.len()), ("target", labels.len())] {
        if n > max_len {
            return Err(format!(
                "the {what} is {n} tokens; the limit is {max_len} (--max-length)"
            ));
        }
    }
    let target_start = ids.len();
    ids.extend(labels);
    Ok(ScoredSequence { ids, target_start })
}

/// Scores every sequence (in the order given): sorted by length, packed into batches
/// of at most `budget` tokens.
pub fn score<B: Backend>(
    be: &B,
    model: &LanguageModel<B>,
    seqs: &[ScoredSequence],
    temperature: f32,
    budget: usize,
) -> Result<Vec<Loglik>> {
    let logp = token_logprobs(be, model, seqs, temperature, budget)?;
    Ok(logp.iter().map(|lp| Loglik::from_tokens(lp)).collect())
}

/// The log-probability of every target token of every sequence (in the order given),
/// batched as [`score`] batches them.
pub fn token_logprobs<B: Backend>(
    be: &B,
    model: &LanguageModel<B>,
    seqs: &[ScoredSequence],
    temperature: f32,
    budget: usize,
) -> Result<Vec<Vec<f32>>> {
    let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
    let mut out = vec![Vec::new(); seqs.len()];
    for group in token_budget_groups(&lens, budget) {
        crate::stop::stop_point()?;
        let batch: Vec<ScoredSequence> = group.iter().map(|&i| seqs[i].clone()).collect();
        let logp = model.target_logprobs(be, &batch, temperature)?;
        for (&i, lp) in group.iter().zip(logp) {
            out[i] = lp;
        }
    }
    Ok(out)
}

impl crate::jobs::JobKind for LoglikConfig {
    const NAME: &'static str = "loglik";
    const ABOUT: &'static str =
        "Log-likelihood of (id, prompt, target) rows' targets under a causal LM or a T5 encoder-decoder (LEPUS)";
    const REQUIRED: &'static [&'static str] = &["model"];
    const ROW: &'static str = "row";
    type Device = crate::jobs::DeviceConfig;
    type Summary = crate::pipeline::files::RunSummary;
    type Files = crate::pipeline::files::FileRun;
}

impl crate::jobs::FileJobKind for LoglikConfig {
    type Job<B: Backend + 'static> = LoglikJob<B>;

    fn job<B: Backend + 'static>(self, be: B) -> Result<LoglikJob<B>> {
        job(self, be)
    }

    fn summary<B: Backend + 'static>(_job: &LoglikJob<B>, run: Self::Summary) -> Self::Summary {
        run
    }
}
