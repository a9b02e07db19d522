//! Loading a causal LM with its tokenizer (the `loglik` and `lepus` jobs).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::backend::Backend;
use crate::model::decoder::{DecoderForCausalLM, DecoderSource};
use crate::text::causal_tokenizer::{self, CausalTokenizer};

/// A loaded model with its tokenizer.
pub struct LoadedDecoder<B: Backend> {
    pub model: DecoderForCausalLM<B>,
    pub tokenizer: CausalTokenizer,
    pub weights_paths: Vec<PathBuf>,
}

/// Opens a decoder (a GGUF file, a directory holding one, or an HF directory) and its
/// tokenizer (`tokenizer` overrides the model's own).
pub fn load_decoder<B: Backend>(
    be: &B,
    model: &Path,
    tokenizer: Option<&Path>,
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
