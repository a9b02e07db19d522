//! BERT-family bi-encoders (Contriever, all-MiniLM-L6-v2, E5, BGE): HF transformers'
//! `models/bert/modeling_bert.py` `BertModel` (v5.2, lines 53–450) followed by
//! sentence-transformers' `Pooling` and `Normalize` modules.
//!
//! BERT's layer is DeBERTa's without relative attention: `BertEmbeddings` (word +
//! absolute position + token type → LayerNorm, lines 68–108), `BertSelfAttention`
//! (scores · d^-1/2, line 152), `BertSelfOutput` / `BertOutput` (post-LN residuals,
//! lines 289–292 and 347–350) and an erf GELU (`BertIntermediate`, line 334). So the
//! encoder is [`crate::model::deberta::DebertaV2Model`] built from a [`DebertaConfig`] with BERT's projection
//! names and no relative positions; this file reads BERT's `config.json` into it and
//! pools its last hidden state into one vector per text. [`BertEmbedder`] pools the
//! other bi-encoder bodies the same way: XLM-R (bge-m3) and ModernBERT
//! (`ModernBertModel`'s last hidden state, after its `final_norm`; gte-modernbert,
//! modernbert-embed).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use super::batch::PackedBatch;
use super::config::{self, unsupported, ConfigError, DebertaConfig, EncoderFamily};
use super::cross_encoder::EncoderBody;
use super::weights::{WeightStore, Weights};
use crate::backend::{Backend, ClsHead, Dense, PoolerAct, SeqPooling};
use crate::tensor::HostTensor;

/// BERT's attention projection names (`BertSelfAttention.query`, …).
pub const BERT_PROJECTIONS: [&str; 3] = ["query", "key", "value"];

/// BERT's `config.json` (the fields `BertModel` reads; defaults of `BertConfig`),
/// which RoBERTa's and XLM-R's share (`crate::model::roberta`).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct RawBertConfig {
    pub model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default = "default_max_pos")]
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "default_position_type")]
    position_embedding_type: String,
    #[serde(default)]
    architectures: Option<Vec<String>>,
    /// RoBERTa's `padding_idx` (BERT reads it only for the embedding's padding row).
    #[serde(default)]
    pub pad_token_id: Option<usize>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_max_pos() -> usize {
    512
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_position_type() -> String {
    "absolute".into()
}

/// Reads a BERT `config.json` as the encoder config it amounts to.
pub fn read_config(path: &Path) -> Result<DebertaConfig, ConfigError> {
    resolve(config::read_config(path, "BERT")?)
}

/// A BERT config (`model_type` "bert" or absent) resolved.
pub(super) fn resolve(raw: RawBertConfig) -> Result<DebertaConfig, ConfigError> {
    if let Some(mt) = raw.model_type.as_deref().filter(|&mt| mt != "bert") {
        return Err(unsupported(
            "model_type",
            mt,
            "this reader implements model_type \"bert\" (Contriever, MiniLM, E5, BGE)",
        ));
    }
    resolve_layers(raw, EncoderFamily::Bert, 0)
}

/// The encoder of a BERT-layout config: post-LN layers with absolute positions, read
/// from position-table row `position_offset` on.
pub(super) fn resolve_layers(
    raw: RawBertConfig,
    family: EncoderFamily,
    position_offset: usize,
) -> Result<DebertaConfig, ConfigError> {
    let tanh_gelu = match raw.hidden_act.as_str() {
        "gelu" => false,
        "gelu_new" | "gelu_pytorch_tanh" => true,
        other => {
            return Err(unsupported(
                "hidden_act",
                other,
                "\"gelu\" (erf), \"gelu_new\" and \"gelu_pytorch_tanh\" are implemented",
            ))
        }
    };
    if raw.position_embedding_type != "absolute" {
        return Err(unsupported(
            "position_embedding_type",
            &raw.position_embedding_type,
            "only \"absolute\" positions are implemented",
        ));
    }
    if raw.num_attention_heads == 0 || !raw.hidden_size.is_multiple_of(raw.num_attention_heads) {
        return Err(unsupported(
            "num_attention_heads",
            raw.num_attention_heads,
            &format!("must divide hidden_size {}", raw.hidden_size),
        ));
    }
    let Some(max_positions) = raw
        .max_position_embeddings
        .checked_sub(position_offset)
        .filter(|&n| n > 0)
    else {
        return Err(unsupported(
            "max_position_embeddings",
            raw.max_position_embeddings,
            &format!("must exceed the first position's row, pad_token_id + 1 = {position_offset}"),
        ));
    };
    Ok(DebertaConfig {
        vocab_size: raw.vocab_size,
        hidden_size: raw.hidden_size,
        embedding_size: raw.hidden_size,
        num_layers: raw.num_hidden_layers,
        num_heads: raw.num_attention_heads,
        head_size: raw.hidden_size / raw.num_attention_heads,
        intermediate_size: raw.intermediate_size,
        max_position_embeddings: max_positions,
        type_vocab_size: raw.type_vocab_size,
        position_biased_input: true,
        layer_norm_eps: raw.layer_norm_eps as f32,
        relative: None,
        scale_factor: 1,
        pooler_hidden_size: raw.hidden_size,
        architectures: raw.architectures.unwrap_or_default(),
        tanh_gelu,
        projections: BERT_PROJECTIONS,
        family,
        position_offset,
        token_types_from_input: family == EncoderFamily::Bert,
        modernbert: None,
    })
}

/// How the token vectors of a text become its embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Pooling {
    /// The mean of the token vectors (sentence-transformers `pooling_mode_mean_tokens`,
    /// Contriever, E5).
    Mean,
    /// The [CLS] vector (`pooling_mode_cls_token`, BGE).
    Cls,
}

/// The sentence-transformers modules of a model directory (`modules.json`), or what a
/// plain HF directory is given by flag.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingHead {
    pub pooling: Pooling,
    /// L2-normalise the pooled vector (`sentence_transformers.models.Normalize`).
    pub normalize: bool,
    /// Truncation length, special tokens included, when the directory says:
    /// `sentence_bert_config.json`'s `max_seq_length`, else (sentence-transformers ≥ 6
    /// keeps it there) the module's `tokenizer_config.json` `model_max_length`.
    pub max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct Module {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingFile {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    /// sentence-transformers ≥ 6: one mode by name (or a list of modes, concatenated).
    pooling_mode: Option<serde_json::Value>,
    /// sentence-transformers ≥ 6: `false` leaves the prompt's tokens out of the pool.
    include_prompt: Option<bool>,
}

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
    #[serde(default)]
    do_lower_case: bool,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

impl EmbeddingHead {
    /// The head of `dir`: what its sentence-transformers files say, else mean pooling
    /// without normalisation (a plain HF directory: Contriever); `pooling` and
    /// `normalize` replace either.
    pub fn resolve(dir: &Path, pooling: Option<Pooling>, normalize: Option<bool>) -> Result<Self> {
        let found = Self::from_dir(dir)?;
        Ok(Self {
            pooling: pooling
                .or(found.as_ref().map(|h| h.pooling))
                .unwrap_or(Pooling::Mean),
            normalize: normalize
                .or(found.as_ref().map(|h| h.normalize))
                .unwrap_or(false),
            max_seq_length: found.and_then(|h| h.max_seq_length),
        })
    }

    /// The head that `dir`'s sentence-transformers files describe; `None` for a plain
    /// HF directory (no `modules.json`).
    pub fn from_dir(dir: &Path) -> Result<Option<Self>> {
        let modules = dir.join("modules.json");
        if !modules.is_file() {
            return Ok(None);
        }
        let modules: Vec<Module> = read_json(&modules)?;
        let mut head = EmbeddingHead {
            pooling: Pooling::Mean,
            normalize: false,
            max_seq_length: None,
        };
        let mut pooled = false;
        for m in &modules {
            match m.kind.rsplit('.').next().unwrap_or_default() {
                "Transformer" => {
                    let file = dir.join(&m.path).join("sentence_bert_config.json");
                    if file.is_file() {
                        let st: SentenceBertFile = read_json(&file)?;
                        anyhow::ensure!(
                            !st.do_lower_case,
                            "{}: do_lower_case = true (sentence-transformers lower-cases the \
                             text itself) is not implemented; lower-case the input instead",
                            file.display()
                        );
                        head.max_seq_length = st.max_seq_length;
                    }
                    if head.max_seq_length.is_none() {
                        head.max_seq_length =
                            tokenizer_max_length(&dir.join(&m.path).join("tokenizer_config.json"))?;
                    }
                }
                "Pooling" => {
                    head.pooling = read_pooling(&dir.join(&m.path).join("config.json"))?;
                    pooled = true;
                }
                "Normalize" => head.normalize = true,
                other => anyhow::bail!(
                    "{}: module `{}` ({other}) is not implemented; the embedder runs \
                     Transformer → Pooling → Normalize",
                    dir.join("modules.json").display(),
                    m.kind
                ),
            }
        }
        anyhow::ensure!(
            pooled,
            "{}: no Pooling module; pass --pooling",
            dir.join("modules.json").display()
        );
        Ok(Some(head))
    }
}

/// `model_max_length` of a tokenizer_config.json, unless absent or transformers' "no
/// limit" (`int(1e30)`, which is no usize).
fn tokenizer_max_length(path: &Path) -> Result<Option<usize>> {
    if !path.is_file() {
        return Ok(None);
    }
    let config: serde_json::Value = read_json(path)?;
    Ok(config
        .get("model_max_length")
        .and_then(serde_json::Value::as_u64)
        .and_then(|n| usize::try_from(n).ok()))
}

fn read_pooling(path: &Path) -> Result<Pooling> {
    let p: PoolingFile = read_json(path)?;
    if p.include_prompt == Some(false) {
        anyhow::bail!(
            "{}: `include_prompt: false` (the prompt's tokens left out of the pool) is not \
             implemented",
            path.display()
        );
    }
    if let Some(mode) = &p.pooling_mode {
        let one = match mode {
            serde_json::Value::Array(modes) if modes.len() == 1 => &modes[0],
            other => other,
        };
        return match one.as_str() {
            Some("mean") => Ok(Pooling::Mean),
            Some("cls") => Ok(Pooling::Cls),
            _ => anyhow::bail!(
                "{}: `pooling_mode` {mode} is not implemented (\"mean\" and \"cls\" are)",
                path.display()
            ),
        };
    }
    let unsupported = [
        ("pooling_mode_max_tokens", p.pooling_mode_max_tokens),
        (
            "pooling_mode_mean_sqrt_len_tokens",
            p.pooling_mode_mean_sqrt_len_tokens,
        ),
        (
            "pooling_mode_weightedmean_tokens",
            p.pooling_mode_weightedmean_tokens,
        ),
        ("pooling_mode_lasttoken", p.pooling_mode_lasttoken),
    ];
    if let Some((field, _)) = unsupported.iter().find(|(_, on)| *on) {
        anyhow::bail!(
            "{}: `{field}` is not implemented (mean and cls pooling are)",
            path.display()
        );
    }
    match (p.pooling_mode_mean_tokens, p.pooling_mode_cls_token) {
        (true, false) => Ok(Pooling::Mean),
        (false, true) => Ok(Pooling::Cls),
        _ => anyhow::bail!(
            "{}: exactly one of `pooling_mode_mean_tokens` and `pooling_mode_cls_token` \
             must be true",
            path.display()
        ),
    }
}

/// A bi-encoder (BERT, XLM-R or ModernBERT body) with its pooling: texts in, one vector
/// per text out.
pub struct BertEmbedder<B: Backend> {
    pub config: DebertaConfig,
    pub head: EmbeddingHead,
    encoder: EncoderBody<B>,
    /// `I [H, H]`: the fused sequence-head op with this classifier and no pooler is
    /// the pooling alone (`x·Iᵀ = x` exactly in f32), so a device pools in one launch
    /// and sends back `[sequences, H]` instead of every token's state.
    identity: B::Tensor,
    /// Checkpoint files (their checksums identify the model in output metadata).
    pub weights_paths: Vec<PathBuf>,
}

impl<B: Backend> BertEmbedder<B> {
    /// Loads `dir` (config.json, model.safetensors or a sharded index) with `head`,
    /// by default [`EmbeddingHead::resolve`]'s.
    pub fn load(be: &B, dir: &Path, head: Option<EmbeddingHead>) -> Result<Self> {
        let config = DebertaConfig::from_any_file(&dir.join("config.json"))?;
        anyhow::ensure!(
            config.family != EncoderFamily::Deberta,
            "{}: the embedder runs BERT, XLM-RoBERTa and ModernBERT encoders, not {} (its \
             cross-encoders run in classify and rerank)",
            dir.display(),
            config.family.name()
        );
        let head = match head {
            Some(h) => h,
            None => EmbeddingHead::resolve(dir, None, None)?,
        };
        let root = Weights::new(WeightStore::open(dir)?);
        let weights_paths = root.store().map(|s| s.paths().to_vec()).unwrap_or_default();
        let config_family = config.family.name();
        let mut model = Self::from_weights(be, &root, config, head)
            .with_context(|| format!("loading the {} model in {}", config_family, dir.display()))?;
        model.weights_paths = weights_paths;
        Ok(model)
    }

    /// Builds from any weight source and head. BERT's pooler (`BertPooler`, unused by
    /// sentence embeddings) and the `position_ids` buffer are accounted for unread.
    pub fn from_weights(
        be: &B,
        root: &Weights,
        config: DebertaConfig,
        head: EmbeddingHead,
    ) -> Result<Self> {
        let encoder = EncoderBody::load(be, root, &config)?;
        if let EncoderBody::Deberta(_) = encoder {
            let w = root.encoder()?;
            w.pp("pooler.dense").unused_by_design(&["weight", "bias"]);
            w.refuse_unread(&["pooler."])?;
        }
        let h = config.hidden_size;
        let mut eye = vec![0f32; h * h];
        eye.iter_mut().step_by(h + 1).for_each(|v| *v = 1.0);
        Ok(Self {
            identity: be.upload(&HostTensor::new(vec![h, h], eye))?,
            config,
            head,
            encoder,
            weights_paths: Vec::new(),
        })
    }

    /// The last hidden state `[tokens, H]` of a packed batch, in f32.
    pub fn last_hidden_state(&self, be: &B, batch: &PackedBatch) -> Result<HostTensor> {
        Ok(be.download(&self.encoder.forward_staged(be, batch)?.0)?)
    }

    /// The embeddings `[sequences, H]` of a packed batch, in f32.
    pub fn embed(&self, be: &B, batch: &PackedBatch) -> Result<HostTensor> {
        let (hidden, staged) = self.encoder.forward_staged(be, batch)?;
        let head = ClsHead {
            pooling: match self.head.pooling {
                Pooling::Mean => SeqPooling::Mean,
                Pooling::Cls => SeqPooling::First,
            },
            pooler: None,
            pooler_act: PoolerAct::Gelu,
            classifier: Dense {
                weight: &self.identity,
                bias: None,
            },
        };
        let mut pooled = be.cls_head(&hidden, staged.layout_input(), &head)?;
        let h = self.config.hidden_size;
        if self.head.normalize {
            // torch.nn.functional.normalize(p=2, eps=1e-12).
            for row in pooled.data.chunks_mut(h) {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                row.iter_mut().for_each(|v| *v /= norm);
            }
        }
        Ok(pooled)
    }
}
