//! Classification heads on top of the encoder, found by their tensor names.
//!
//! | family  | head     | tensors                                         | input                          |
//! |---------|----------|-------------------------------------------------|--------------------------------|
//! | DeBERTa | `hop1`   | `hop_classifier_layer` (Beam Retrieval)         | [CLS] hidden state             |
//! | DeBERTa | `hop_n`  | `hop_n_classifier_layer` (Beam Retrieval)       | [CLS] hidden state             |
//! | DeBERTa | `sequence` | `pooler.dense` + `classifier` (HF `ContextPooler`) or `sequence_classifier` (EfficientRAG) | `gelu(pooler(h_CLS))` |
//! | DeBERTa | `token`  | `token_classifier` (EfficientRAG), or `classifier` without a pooler / in a `*ForTokenClassification` | every token |
//! | BERT    | `sequence` | `bert.pooler.dense` + `classifier` (`BertForSequenceClassification`, `BertPooler`) | `tanh(pooler(h_CLS))` |
//! | BERT    | `token`  | `classifier` without a pooler (`BertForTokenClassification`) | every token |
//! | RoBERTa | `sequence` | `classifier.dense` + `classifier.out_proj` (`XLMRobertaClassificationHead`) | `tanh(dense(h_<s>))` |
//! | RoBERTa | `token`  | `classifier` (`XLMRobertaForTokenClassification`) | every token |
//! | ModernBERT | `sequence` | `head.dense` + `head.norm` + `classifier` (`ModernBertPredictionHead`) | `norm(gelu(dense(h_CLS or mean h)))` |
//! | ModernBERT | `token`  | the same, per token (`ModernBertForTokenClassification`) | every token |

use anyhow::{bail, Result};

use super::batch::StagedBatch;
use super::config::{DebertaConfig, EncoderFamily};
use super::layers::{LayerNorm, Linear};
use super::modernbert;
use super::weights::Weights;
use crate::backend::{Backend, ClsHead, Dense, PoolerAct, SeqPooling};
use crate::tensor::HostTensor;

/// What a head reads from the encoder output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The [CLS] hidden state, unchanged (Beam Retrieval).
    Cls,
    /// The pooler over the [CLS] state: `act(dense(h_CLS))` (HF `ContextPooler`,
    /// `BertPooler`, `XLMRobertaClassificationHead`'s first layer).
    Pooler,
    /// `gelu(dense(mean_t h_t))`: the pooler applied to the mean of the hidden states
    /// of the sequence's unmasked tokens (the EfficientRAG paper's mean pooling; the
    /// official code uses [`Pooling::Pooler`]).
    MeanPooler,
    /// Every token (token classification).
    Tokens,
}

/// A head found in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadSpec {
    pub name: &'static str,
    /// Tensor prefix of its final linear layer.
    pub tensor: &'static str,
    pub pooling: Pooling,
    pub num_labels: usize,
    /// Tensor prefix of the pooler ([`Pooling::Pooler`] and [`Pooling::MeanPooler`]).
    pub pooler: &'static str,
    /// What follows the pooler.
    pub pooler_act: PoolerAct,
}

impl HeadSpec {
    /// Whether the head gives one row of logits per sequence (not per token).
    pub fn per_sequence(&self) -> bool {
        self.pooling != Pooling::Tokens
    }
}

/// A possible head: its name, final layer, pooling and pooler, and whether the
/// checkpoint's other tensors allow it.
type Candidate = (&'static str, &'static str, Pooling, &'static str, bool);

/// Lists the heads of a checkpoint (root-level view, `module.` already stripped).
pub fn find_heads(w: &Weights, c: &DebertaConfig) -> Vec<HeadSpec> {
    let token_arch = c
        .architectures
        .iter()
        .any(|a| a.ends_with("ForTokenClassification"));
    // `classifier` is a sequence head over a pooler, else a token head.
    let sequence_or_token = |pooler: &'static str| {
        if w.contains(&format!("{pooler}.weight")) && !token_arch {
            ("sequence", Pooling::Pooler)
        } else {
            ("token", Pooling::Tokens)
        }
    };
    let (candidates, act): (Vec<Candidate>, PoolerAct) = match c.family {
        EncoderFamily::Deberta => {
            const POOLER: &str = "pooler.dense";
            let has_pooler = w.contains("pooler.dense.weight");
            let (name, pooling) = sequence_or_token(POOLER);
            let candidates = vec![
                ("hop1", "hop_classifier_layer", Pooling::Cls, POOLER, true),
                (
                    "hop_n",
                    "hop_n_classifier_layer",
                    Pooling::Cls,
                    POOLER,
                    true,
                ),
                (
                    "sequence",
                    "sequence_classifier",
                    Pooling::Pooler,
                    POOLER,
                    has_pooler,
                ),
                ("token", "token_classifier", Pooling::Tokens, POOLER, true),
                (name, "classifier", pooling, POOLER, true),
            ];
            (candidates, PoolerAct::Gelu)
        }
        EncoderFamily::Bert => {
            const POOLER: &str = "bert.pooler.dense";
            let (name, pooling) = sequence_or_token(POOLER);
            (
                vec![(name, "classifier", pooling, POOLER, true)],
                PoolerAct::Tanh,
            )
        }
        EncoderFamily::Roberta => {
            const POOLER: &str = "classifier.dense";
            let sequence = !token_arch && w.contains("classifier.dense.weight");
            let candidates = vec![
                (
                    "sequence",
                    "classifier.out_proj",
                    Pooling::Pooler,
                    POOLER,
                    sequence,
                ),
                ("token", "classifier", Pooling::Tokens, POOLER, !sequence),
            ];
            (candidates, PoolerAct::Tanh)
        }
        EncoderFamily::ModernBert => {
            const POOLER: &str = "head.dense";
            let mean = c.modernbert.as_ref().is_some_and(|s| s.mean_pooling);
            let pooling = if mean {
                Pooling::MeanPooler
            } else {
                Pooling::Pooler
            };
            let candidates = vec![
                ("sequence", "classifier", pooling, POOLER, !token_arch),
                ("token", "classifier", Pooling::Tokens, POOLER, token_arch),
            ];
            (candidates, PoolerAct::Gelu)
        }
    };
    candidates
        .into_iter()
        .filter(|&(_, tensor, _, _, ok)| ok && w.contains(&format!("{tensor}.weight")))
        .filter_map(|(name, tensor, pooling, pooler, _)| {
            let labels = w.shape(&format!("{tensor}.weight"))?.first().copied()?;
            Some(HeadSpec {
                name,
                tensor,
                pooling,
                num_labels: labels,
                pooler,
                pooler_act: act,
            })
        })
        .collect()
}

/// A loaded head.
pub struct Head<B: Backend> {
    pub spec: HeadSpec,
    pooler: Option<Linear<B>>,
    /// ModernBERT's `ModernBertPredictionHead` (in place of `pooler`).
    prediction: Option<Prediction<B>>,
    classifier: Linear<B>,
}

/// `norm(gelu(dense(x)))` before the classifier (ModernBERT).
struct Prediction<B: Backend> {
    dense: Linear<B>,
    norm: LayerNorm<B>,
    /// `I [H, H]`: the sequence-head op with this classifier and no pooler pools alone
    /// (as `crate::model::bert`'s embedder); `None` for a token head.
    identity: Option<B::Tensor>,
}

impl<B: Backend> Prediction<B> {
    fn load(be: &B, w: &Weights, c: &DebertaConfig, per_sequence: bool) -> Result<Self> {
        let s = modernbert::settings(c)?;
        let h = c.hidden_size;
        let identity = per_sequence
            .then(|| {
                let mut eye = vec![0f32; h * h];
                eye.iter_mut().step_by(h + 1).for_each(|v| *v = 1.0);
                be.upload(&HostTensor::new(vec![h, h], eye))
            })
            .transpose()?;
        Ok(Self {
            dense: Linear::load(be, &w.pp("head.dense"), h, h, s.classifier_bias)?,
            norm: modernbert::layer_norm(be, &w.pp("head.norm"), h, c, s)?,
            identity,
        })
    }

    /// `norm(gelu(dense(x)))`.
    fn forward(&self, be: &B, x: &B::Tensor) -> Result<B::Tensor> {
        let mut y = self.dense.forward(be, x)?;
        be.gelu(&mut y)?;
        self.norm.forward(be, &mut y, None)?;
        Ok(y)
    }
}

impl<B: Backend> Head<B> {
    pub fn load(be: &B, w: &Weights, c: &DebertaConfig, spec: HeadSpec) -> Result<Self> {
        let h = c.hidden_size;
        if c.family == EncoderFamily::ModernBert {
            return Ok(Self {
                prediction: Some(Prediction::load(be, w, c, spec.per_sequence())?),
                pooler: None,
                classifier: Linear::load(be, &w.pp(spec.tensor), h, spec.num_labels, true)?,
                spec,
            });
        }
        let (pooler, input) = if matches!(spec.pooling, Pooling::Pooler | Pooling::MeanPooler) {
            let p = c.pooler_hidden_size;
            (Some(Linear::load(be, &w.pp(spec.pooler), h, p, true)?), p)
        } else {
            (None, h)
        };
        let classifier = Linear::load(be, &w.pp(spec.tensor), input, spec.num_labels, true)?;
        Ok(Self {
            spec,
            pooler,
            prediction: None,
            classifier,
        })
    }

    /// Logits `[sequences, labels]` (or `[tokens, labels]` and each token's label for
    /// token heads), in f32: one head op on the backend.
    pub fn forward(
        &self,
        be: &B,
        hidden: &B::Tensor,
        batch: &StagedBatch<'_>,
    ) -> Result<HeadLogits> {
        let classifier = self.classifier.dense();
        if let Some(p) = &self.prediction {
            return self.forward_prediction(be, p, hidden, batch);
        }
        let pooling = match self.spec.pooling {
            Pooling::Tokens => {
                let t = be.token_head(hidden, classifier)?;
                return Ok(HeadLogits {
                    logits: t.logits,
                    labels: Some(t.labels),
                });
            }
            Pooling::MeanPooler => SeqPooling::Mean,
            Pooling::Cls | Pooling::Pooler => SeqPooling::First,
        };
        let head = ClsHead {
            pooling,
            pooler: self.pooler.as_ref().map(Linear::dense),
            pooler_act: self.spec.pooler_act,
            classifier,
        };
        Ok(HeadLogits {
            logits: be.cls_head(hidden, batch.layout_input(), &head)?,
            labels: None,
        })
    }
}

impl<B: Backend> Head<B> {
    /// ModernBERT's heads: the pooled rows (one sequence-head op with the identity as
    /// its classifier, f32) or every token through the prediction head, then the
    /// classifier.
    fn forward_prediction(
        &self,
        be: &B,
        p: &Prediction<B>,
        hidden: &B::Tensor,
        batch: &StagedBatch<'_>,
    ) -> Result<HeadLogits> {
        let Some(identity) = &p.identity else {
            let t = be.token_head(&p.forward(be, hidden)?, self.classifier.dense())?;
            return Ok(HeadLogits {
                logits: t.logits,
                labels: Some(t.labels),
            });
        };
        let pool = ClsHead {
            pooling: match self.spec.pooling {
                Pooling::MeanPooler => SeqPooling::Mean,
                _ => SeqPooling::First,
            },
            pooler: None,
            pooler_act: PoolerAct::Gelu,
            classifier: Dense {
                weight: identity,
                bias: None,
            },
        };
        let pooled = be.upload(&be.cls_head(hidden, batch.layout_input(), &pool)?)?;
        let logits = self.classifier.forward(be, &p.forward(be, &pooled)?)?;
        Ok(HeadLogits {
            logits: be.download(&logits)?,
            labels: None,
        })
    }
}

/// What a head gives for a batch.
pub struct HeadLogits {
    /// `[sequences, labels]`, or `[tokens, labels]` for a token head.
    pub logits: HostTensor,
    /// Token heads: each token's label (the argmax of its logits, ties to the lowest).
    pub labels: Option<Vec<u32>>,
}

/// Picks a head by name, or the only per-sequence head when `name` is `None`.
pub fn select<'a>(specs: &'a [HeadSpec], name: Option<&str>) -> Result<&'a HeadSpec> {
    let names = || specs.iter().map(|s| s.name).collect::<Vec<_>>().join(", ");
    match name {
        Some(n) => specs.iter().find(|s| s.name == n).ok_or_else(|| {
            anyhow::anyhow!("no head `{n}` in this checkpoint; it has: {}", names())
        }),
        None => {
            let seq: Vec<&HeadSpec> = specs.iter().filter(|s| s.per_sequence()).collect();
            match seq.as_slice() {
                [one] => Ok(one),
                [] => bail!(
                    "the checkpoint has no sequence-level head (found: {}); hopscore found none of \
                     classifier+pooler, sequence_classifier, hop_classifier_layer",
                    names()
                ),
                _ => bail!(
                    "the checkpoint has several heads ({}): pick one with --head",
                    names()
                ),
            }
        }
    }
}
