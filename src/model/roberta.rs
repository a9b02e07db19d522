//! RoBERTa and XLM-RoBERTa encoders (bge-reranker-v2-m3, the XLM-R and RoBERTa
//! cross-encoders, bge-m3 as a bi-encoder): HF transformers'
//! `models/xlm_roberta/modeling_xlm_roberta.py` (v5.23; `roberta/` is the same code).
//!
//! The layers are BERT's (`XLMRobertaSelfAttention` … `XLMRobertaOutput`, lines
//! 186–465), so the encoder is [`crate::model::deberta::DebertaV2Model`] with BERT's
//! projection names, as for [`crate::model::bert`]. What differs is in the embeddings
//! and the head:
//!
//! - positions start at `padding_idx + 1` (`create_position_ids_from_input_ids`,
//!   lines 142–155: `cumsum(mask) · mask + padding_idx`; packed sequences hold no
//!   padding), so position `i` reads row `pad_token_id + 1 + i` and
//!   `max_position_embeddings` (514 in XLM-R checkpoints) leaves 512 positions;
//! - `token_type_ids` default to the all-zero buffer (lines 102–109): the tokenizer
//!   gives the model none, so every token adds type row 0;
//! - `XLMRobertaForSequenceClassification` (line 910) has no pooler
//!   (`add_pooling_layer=False`) and scores with `XLMRobertaClassificationHead`
//!   (lines 882–907): the first token (`<s>`) → `classifier.dense` → tanh →
//!   `classifier.out_proj` (see [`crate::model::heads`]).

use std::path::Path;

use super::bert::{resolve_layers, RawBertConfig};
use super::config::{self, unsupported, ConfigError, DebertaConfig, EncoderFamily};

/// The `model_type`s this file reads.
pub const MODEL_TYPES: [&str; 2] = ["xlm-roberta", "roberta"];

/// Reads a RoBERTa / XLM-R `config.json` as the encoder config it amounts to.
pub fn read_config(path: &Path) -> Result<DebertaConfig, ConfigError> {
    resolve(config::read_config(path, "RoBERTa")?)
}

/// A RoBERTa-family config resolved: BERT's fields, positions from
/// `pad_token_id + 1` (both configuration classes default `pad_token_id` to 1).
pub(super) fn resolve(raw: RawBertConfig) -> Result<DebertaConfig, ConfigError> {
    let model_type = raw.model_type.as_deref().unwrap_or_default();
    if !MODEL_TYPES.contains(&model_type) {
        return Err(unsupported(
            "model_type",
            model_type,
            "this reader implements model_type \"xlm-roberta\" and \"roberta\"",
        ));
    }
    let offset = raw.pad_token_id.unwrap_or(1) + 1;
    resolve_layers(raw, EncoderFamily::Roberta, offset)
}
