//! Loading a scoring LM with its tokenizer (the `loglik` and `lepus` jobs): a causal
//! LM (GGUF or HF) or a T5-family encoder-decoder (HF), chosen by `config.json`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::backend::Backend;
use crate::model::decoder::{DecoderForCausalLM, DecoderSource, ScoredSequence};
use crate::model::t5::{is_t5_dir, T5Config, T5ForConditionalGeneration};
use crate::model::weights::{WeightStore, Weights};
use crate::text::causal_tokenizer::{self, CausalTokenizer};

/// A model that scores a target given a prompt.
pub enum LanguageModel<B: Backend> {
    /// Prompt and target in one sequence; the target's tokens are scored.
    Causal(DecoderForCausalLM<B>),
    /// The prompt is the encoder input, the target the decoder's labels.
    Seq2Seq(T5ForConditionalGeneration<B>),
}

/// Longest encoder input or label sequence accepted from an encoder-decoder when no
/// limit is given: T5's relative positions set none (it was trained on 512 tokens).
pub const SEQ2SEQ_MAX_TOKENS: usize = 2048;

impl<B: Backend> LanguageModel<B> {
    /// Per-token log-probabilities of each sequence's targets (`ids[target_start..]`);
    /// for an encoder-decoder `ids[..target_start]` is the encoder input.
    pub fn target_logprobs(
        &self,
        be: &B,
        seqs: &[ScoredSequence],
        temperature: f32,
    ) -> Result<Vec<Vec<f32>>> {
        match self {
            Self::Causal(m) => m.target_logprobs(be, seqs, temperature),
            Self::Seq2Seq(m) => m.target_logprobs(be, seqs, temperature),
        }
    }

    pub fn model_type(&self) -> &str {
        match self {
            Self::Causal(m) => &m.config.model_type,
            Self::Seq2Seq(m) => &m.config.model_type,
        }
    }

    pub fn is_seq2seq(&self) -> bool {
        matches!(self, Self::Seq2Seq(_))
    }

    /// The longest sequence the model accepts: a causal LM's context, or
    /// [`SEQ2SEQ_MAX_TOKENS`] per encoder input and label sequence.
    pub fn context(&self) -> usize {
        match self {
            Self::Causal(m) => m.config.max_position_embeddings,
            Self::Seq2Seq(_) => SEQ2SEQ_MAX_TOKENS,
        }
    }

    /// Sets the shared-prefix threshold of a causal LM (an encoder-decoder runs every
    /// encoder input whole: its attention is bidirectional).
    pub fn set_min_shared_prefix(&mut self, n: usize) {
        if let Self::Causal(m) = self {
            m.min_shared_prefix = n;
        }
    }

    /// `(tokens of the scored sequences, tokens run through the layers)` so far, for
    /// the shared-prefix reuse of a causal LM; `(0, 0)` for an encoder-decoder, which
    /// shares no prefix.
    pub fn token_counts(&self) -> (usize, usize) {
        match self {
            Self::Causal(m) => m.token_counts(),
            Self::Seq2Seq(_) => (0, 0),
        }
    }
}

/// Opens a scoring LM without its tokenizer (token ids in: `hopscore bench-loglik`).
pub fn load_language_model<B: Backend>(be: &B, model: &Path) -> Result<LanguageModel<B>> {
    let loading = || format!("loading {}", model.display());
    Ok(if is_t5_dir(model) {
        LanguageModel::Seq2Seq(load_t5(be, WeightStore::open(model)?, model).with_context(loading)?)
    } else {
        let source = DecoderSource::open(model)?;
        LanguageModel::Causal(DecoderForCausalLM::load(be, source).with_context(loading)?)
    })
}

fn load_t5<B: Backend>(
    be: &B,
    store: WeightStore,
    dir: &Path,
) -> Result<T5ForConditionalGeneration<B>> {
    let config = T5Config::from_file(&dir.join("config.json"))?;
    T5ForConditionalGeneration::from_weights(be, &Weights::new(store), config)
}

/// A loaded model with its tokenizer.
pub struct LoadedDecoder<B: Backend> {
    pub model: LanguageModel<B>,
    pub tokenizer: CausalTokenizer,
    pub weights_paths: Vec<PathBuf>,
}

/// Opens a scoring LM (a GGUF file, a directory holding one, an HF directory of a
/// causal LM or of a T5-family model) and its tokenizer (`tokenizer` overrides the
/// model's own).
pub fn load_decoder<B: Backend>(
    be: &B,
    model: &Path,
    tokenizer: Option<&Path>,
) -> Result<LoadedDecoder<B>> {
    let loading = || format!("loading {}", model.display());
    if is_t5_dir(model) {
        let tok = CausalTokenizer::from_dir(model, tokenizer)?;
        let store = WeightStore::open(model)?;
        let weights_paths = store.paths().to_vec();
        let t5 = load_t5(be, store, model).with_context(loading)?;
        return Ok(LoadedDecoder {
            weights_paths,
            model: LanguageModel::Seq2Seq(t5),
            tokenizer: tok,
        });
    }
    let source = DecoderSource::open(model)?;
    let weights_paths = source.weights_paths();
    let tok = match (&source, tokenizer) {
        (_, Some(t)) => CausalTokenizer::from_dir(model, Some(t))?,
        (DecoderSource::Gguf(g), None) => causal_tokenizer::from_gguf(g)?,
        (DecoderSource::Hf { dir, .. }, None) => CausalTokenizer::from_dir(dir, None)?,
    };
    let model = DecoderForCausalLM::load(be, source).with_context(loading)?;
    Ok(LoadedDecoder {
        model: LanguageModel::Causal(model),
        tokenizer: tok,
        weights_paths,
    })
}
