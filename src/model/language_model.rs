//! The scoring LM of LEPUS and `loglik` (docs/spec.md §3): a causal LM (GGUF or HF,
//! [`super::decoder`]) or a T5-family encoder-decoder (HF, [`super::t5`]), chosen by
//! the directory's `config.json`, behind one type that scores targets given prompts.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::decoder::{DecoderForCausalLM, DecoderSource, ScoredSequence};
use super::t5::{is_t5_dir, T5Config, T5ForConditionalGeneration};
use super::weights::{WeightStore, Weights};
use crate::backend::Backend;

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

/// A scoring LM opened but not yet loaded: a T5-family directory, or a causal LM's
/// GGUF file or HF directory. Its tokenizer comes from here too
/// (`text::causal_tokenizer::for_model`), so the files are opened once.
pub enum LanguageModelSource {
    Causal(DecoderSource),
    Seq2Seq { dir: PathBuf, store: WeightStore },
}

impl LanguageModelSource {
    /// Opens `model`: a GGUF file, a directory holding one, an HF directory of a
    /// causal LM or of a T5-family model (chosen by its `config.json`).
    pub fn open(model: &Path) -> Result<Self> {
        Ok(if is_t5_dir(model) {
            Self::Seq2Seq {
                dir: model.to_path_buf(),
                store: WeightStore::open(model)?,
            }
        } else {
            Self::Causal(DecoderSource::open(model)?)
        })
    }

    /// The files whose checksums identify the weights.
    pub fn weights_paths(&self) -> Vec<PathBuf> {
        match self {
            Self::Causal(source) => source.weights_paths(),
            Self::Seq2Seq { store, .. } => store.paths().to_vec(),
        }
    }

    /// The GGUF file or the directory the model is read from.
    pub fn path(&self) -> &Path {
        match self {
            Self::Causal(DecoderSource::Gguf(g)) => g.path(),
            Self::Causal(DecoderSource::Hf { dir, .. }) | Self::Seq2Seq { dir, .. } => dir,
        }
    }

    /// Loads the model on `be` (errors name its path).
    pub fn load<B: Backend>(self, be: &B) -> Result<LanguageModel<B>> {
        let loading = format!("loading {}", self.path().display());
        self.load_weights(be).context(loading)
    }

    fn load_weights<B: Backend>(self, be: &B) -> Result<LanguageModel<B>> {
        Ok(match self {
            Self::Causal(source) => LanguageModel::Causal(DecoderForCausalLM::load(be, source)?),
            Self::Seq2Seq { dir, store } => {
                let config = T5Config::from_file(&dir.join("config.json"))?;
                let t5 =
                    T5ForConditionalGeneration::from_weights(be, &Weights::new(store), config)?;
                LanguageModel::Seq2Seq(t5)
            }
        })
    }
}

/// Opens and loads the scoring LM at `model` (without its tokenizer: token ids in,
/// as `hopscore bench-loglik` runs it).
pub fn load_language_model<B: Backend>(be: &B, model: &Path) -> Result<LanguageModel<B>> {
    LanguageModelSource::open(model)?.load(be)
}
