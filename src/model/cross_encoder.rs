//! An encoder checkpoint directory loaded for scoring (DeBERTa, BERT, RoBERTa /
//! XLM-R, ModernBERT): config, encoder and every head the weights contain.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::batch::{PackedBatch, StagedBatch};
use super::config::{DebertaConfig, EncoderFamily};
use super::deberta::DebertaV2Model;
use super::heads::{find_heads, Head, HeadSpec};
use super::modernbert::ModernBertModel;
use super::weights::{WeightStore, Weights};
use crate::backend::Backend;
use crate::tensor::HostTensor;

/// Encoder + heads, ready to run on backend `B`.
pub struct CrossEncoder<B: Backend> {
    pub config: DebertaConfig,
    pub encoder: EncoderBody<B>,
    pub heads: Vec<Head<B>>,
}

/// The layers of an encoder family.
pub enum EncoderBody<B: Backend> {
    /// DeBERTa and the BERT-layout families (BERT, RoBERTa / XLM-R).
    Deberta(Box<DebertaV2Model<B>>),
    ModernBert(Box<ModernBertModel<B>>),
}

impl<B: Backend> EncoderBody<B> {
    /// The encoder of `config`'s family from a checkpoint's root view; a tensor of the
    /// body that the config leaves out is refused by name.
    pub fn load(be: &B, root: &Weights, config: &DebertaConfig) -> Result<Self> {
        Ok(match config.family {
            EncoderFamily::ModernBert => {
                Self::ModernBert(Box::new(ModernBertModel::load(be, root, config)?))
            }
            _ => {
                let w = root.encoder()?;
                let encoder = DebertaV2Model::load(be, &w, config)?;
                // Buffers older transformers saved with BERT-layout checkpoints.
                w.pp("embeddings")
                    .unused_by_design(&["position_ids", "token_type_ids"]);
                w.refuse_unread(&["embeddings.", "encoder."])?;
                Self::Deberta(Box::new(encoder))
            }
        })
    }

    /// The last hidden state `[tokens, H]` and the batch as staged.
    pub fn forward_staged<'a>(
        &self,
        be: &B,
        batch: &'a PackedBatch,
    ) -> Result<(B::Tensor, StagedBatch<'a>)> {
        match self {
            Self::Deberta(m) => m.forward_staged(be, batch),
            Self::ModernBert(m) => m.forward_staged(be, batch),
        }
    }
}

/// What a forward pass returns.
pub struct EncoderOutput {
    /// Last hidden state `[tokens, H]`, when asked for.
    pub hidden: Option<HostTensor>,
    /// Per head, in the order of [`CrossEncoder::heads`] (f32 from every backend).
    pub logits: Vec<HostTensor>,
    /// Per head: a token head's labels (see [`super::heads::HeadLogits::labels`]), `None` otherwise.
    pub labels: Vec<Option<Vec<u32>>>,
}

/// The files of a model directory.
pub struct ModelFiles {
    pub dir: PathBuf,
    pub config: DebertaConfig,
    /// Root view of the checkpoint.
    pub weights: Weights,
}

impl ModelFiles {
    /// Reads `config.json` and maps the safetensors weights of `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let config = DebertaConfig::from_any_file(&dir.join("config.json"))?;
        let weights = Weights::new(WeightStore::open(dir)?);
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            weights,
        })
    }

    /// Heads present in the checkpoint.
    pub fn heads(&self) -> Vec<HeadSpec> {
        find_heads(&self.weights, &self.config)
    }

    /// Every weight file (their checksums identify the model in output metadata).
    pub fn weights_paths(&self) -> Vec<PathBuf> {
        self.weights
            .store()
            .map(|s| s.paths().to_vec())
            .unwrap_or_default()
    }
}

impl<B: Backend> CrossEncoder<B> {
    /// Loads the encoder and the heads named in `only` (all heads when `None`).
    pub fn load(be: &B, files: ModelFiles, only: Option<&[&str]>) -> Result<Self> {
        let specs: Vec<HeadSpec> = files
            .heads()
            .into_iter()
            .filter(|s| only.is_none_or(|names| names.contains(&s.name)))
            .collect();
        let ModelFiles {
            dir,
            config,
            weights,
        } = files;
        Self::from_weights(be, &weights, config, specs)
            .with_context(|| format!("loading the model in {}", dir.display()))
    }

    /// Builds from any weight source (a checkpoint or [`Weights::random`]).
    pub fn from_weights(
        be: &B,
        root: &Weights,
        config: DebertaConfig,
        heads: Vec<HeadSpec>,
    ) -> Result<Self> {
        let encoder = EncoderBody::load(be, root, &config)?;
        let heads = heads
            .into_iter()
            .map(|s| Head::load(be, root, &config, s))
            .collect::<Result<_>>()?;
        Ok(Self {
            config,
            encoder,
            heads,
        })
    }

    pub fn forward(&self, be: &B, batch: &PackedBatch, keep_hidden: bool) -> Result<EncoderOutput> {
        let (hidden, staged) = self.encoder.forward_staged(be, batch)?;
        let (logits, labels) = self
            .heads
            .iter()
            .map(|h| {
                h.forward(be, &hidden, &staged)
                    .map(|o| (o.logits, o.labels))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        Ok(EncoderOutput {
            hidden: if keep_hidden {
                Some(be.download(&hidden)?)
            } else {
                None
            },
            logits,
            labels,
        })
    }
}

/// What turns a one-label head's logit into the score sentence-transformers'
/// `CrossEncoder.predict` gives (`get_default_activation_fn`, cross_encoder/model.py
/// v6.2 lines 358–379).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScoreActivation {
    /// `torch.nn.Sigmoid`: the default for one label.
    Sigmoid,
    /// `torch.nn.Identity`: the logit itself.
    Identity,
}

impl ScoreActivation {
    /// The activation `config.json` names (`sentence_transformers.activation_fn`, or
    /// the older `sbert_ce_default_activation_function`), else sentence-transformers'
    /// default: sigmoid for one label, the identity for more.
    pub fn of_model(config_json: &Path, num_labels: usize) -> Result<Self> {
        let text = std::fs::read_to_string(config_json)
            .with_context(|| format!("cannot read {}", config_json.display()))?;
        let config: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", config_json.display()))?;
        let named = config
            .pointer("/sentence_transformers/activation_fn")
            .or_else(|| config.get("sbert_ce_default_activation_function"))
            .filter(|v| !v.is_null());
        let Some(named) = named else {
            return Ok(if num_labels == 1 {
                Self::Sigmoid
            } else {
                Self::Identity
            });
        };
        match named.as_str().unwrap_or_default() {
            "torch.nn.modules.activation.Sigmoid" | "torch.nn.Sigmoid" => Ok(Self::Sigmoid),
            "torch.nn.modules.linear.Identity" | "torch.nn.Identity" => Ok(Self::Identity),
            other => anyhow::bail!(
                "{}: the cross-encoder activation {named} is not implemented (Sigmoid and \
                 Identity are){}",
                config_json.display(),
                if other.is_empty() {
                    " and is not a string"
                } else {
                    ""
                }
            ),
        }
    }

    /// The score of `logit`.
    pub fn apply(self, logit: f32) -> f32 {
        match self {
            Self::Sigmoid => 1.0 / (1.0 + (-logit).exp()),
            Self::Identity => logit,
        }
    }
}
