//! T5 encoder-decoders for LEPUS scoring (docs/spec.md §3): T5 v1.0, T5 v1.1 and its
//! LM-adapted checkpoints, Flan-T5 and T0, one definition driven by `config.json`.
//! A port of transformers 5.23 `models/t5/modeling_t5.py`, inference only:
//! `T5LayerNorm` (l. 50), `T5DenseActDense` (l. 75), `T5DenseGatedActDense` (l. 97),
//! `T5Attention` (l. 176) with `_relative_position_bucket` (l. 217) and `compute_bias`
//! (l. 264), `T5Block` (l. 435), `_shift_right` (l. 618), `T5Stack` (l. 640) and
//! `T5ForConditionalGeneration` (l. 898; the output scaling at l. 1044); the config
//! as `configuration_t5.py` resolves it (`__post_init__`, l. 64).
//!
//! Differences in form, not in numbers: sequences are packed without padding; q/k/v
//! (and the cross-attention's k/v, `wi_0`/`wi_1`) are one fused projection each; the
//! relative-position bias is looked up per score by the `t5_attention` op from a
//! bucket index instead of a `[heads, L, L]` tensor; the LM head runs through
//! `question_loglik` (log-sum-exp over vocabulary chunks) and the `d_model^-0.5` output
//! scale of tied checkpoints is folded into its temperature (`(s·h)·Wᵀ/T = h·Wᵀ/(T/s)`).
//! Not ported: the float16 clamping of `T5Block` (an f16 run that overflows is caught
//! by the non-finite score check instead).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde::Deserialize;

use super::batch::{PackedBatch, Sequence};
use super::config::{read_config, ConfigError};
use super::decoder::ScoredSequence;
use super::layers::{GateUp, Linear};
use super::weights::Weights;
use crate::backend::{
    Backend, BatchInputs, BucketBias, Gate, Input, Prepared, SeqLayout, T5AttentionShape,
};

/// The MLP of a block (`feed_forward_proj`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedForward {
    /// `wo(relu(wi x))`: T5 v1.0 (`relu`).
    Relu,
    /// `wo(gelu(wi x))` with the exact GELU (`gelu`).
    Gelu,
    /// `wo(act(wi_0 x) · wi_1 x)`: `gated-gelu` (v1.1, Flan-T5, T0: HF's `gelu_new`) or
    /// `gated-silu`.
    Gated(Gate),
}

/// A T5 `config.json`, resolved as `T5Config.__post_init__` resolves it.
#[derive(Debug, Clone, PartialEq)]
pub struct T5Config {
    pub model_type: String,
    pub vocab_size: usize,
    pub d_model: usize,
    pub d_kv: usize,
    pub d_ff: usize,
    pub num_layers: usize,
    pub num_decoder_layers: usize,
    pub num_heads: usize,
    pub relative_attention_num_buckets: usize,
    pub relative_attention_max_distance: usize,
    pub layer_norm_epsilon: f32,
    pub feed_forward: FeedForward,
    /// The LM head is `shared` (else `lm_head.weight`, as v1.1 checkpoints store it).
    pub tie_word_embeddings: bool,
    /// Decoder outputs are scaled by `d_model^-0.5` before the LM head (v1.0).
    pub scale_decoder_outputs: bool,
    pub decoder_start_token_id: u32,
}

#[derive(Debug, Deserialize)]
struct RawT5Config {
    model_type: String,
    vocab_size: usize,
    d_model: usize,
    d_kv: usize,
    d_ff: usize,
    num_layers: usize,
    num_decoder_layers: Option<usize>,
    num_heads: usize,
    #[serde(default = "default_buckets")]
    relative_attention_num_buckets: usize,
    #[serde(default = "default_max_distance")]
    relative_attention_max_distance: usize,
    #[serde(default = "default_eps")]
    layer_norm_epsilon: f64,
    #[serde(default = "default_ff")]
    feed_forward_proj: String,
    tie_word_embeddings: Option<bool>,
    scale_decoder_outputs: Option<bool>,
    decoder_start_token_id: Option<u32>,
    #[serde(default = "yes")]
    is_encoder_decoder: bool,
}

fn default_buckets() -> usize {
    32
}
fn default_max_distance() -> usize {
    128
}
fn default_eps() -> f64 {
    1e-6
}
fn default_ff() -> String {
    "relu".into()
}
fn yes() -> bool {
    true
}

fn unsupported(field: &'static str, value: impl ToString, why: &str) -> ConfigError {
    ConfigError::Unsupported {
        field,
        value: value.to_string(),
        why: why.into(),
    }
}

impl T5Config {
    /// Whether `config.json` at `path` describes a T5-family model (its `model_type`).
    pub fn describes(path: &Path) -> bool {
        #[derive(Deserialize)]
        struct Kind {
            model_type: Option<String>,
        }
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<Kind>(&t).ok())
            .and_then(|k| k.model_type)
            .is_some_and(|m| matches!(m.as_str(), "t5" | "mt5" | "umt5"))
    }

    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        Self::resolve(read_config(path, "T5")?)
    }

    fn resolve(r: RawT5Config) -> Result<Self, ConfigError> {
        if !matches!(r.model_type.as_str(), "t5" | "mt5") {
            return Err(unsupported(
                "model_type",
                &r.model_type,
                "encoder-decoders supported: t5, mt5 (umt5's per-layer position bias is not)",
            ));
        }
        if !r.is_encoder_decoder {
            return Err(unsupported(
                "is_encoder_decoder",
                false,
                "LEPUS scores with the whole encoder-decoder",
            ));
        }
        // `__post_init__`: "gated-<act>" or "<act>"; "gated-gelu" means gelu_new.
        let proj = r.feed_forward_proj.as_str();
        let feed_forward = match proj {
            "relu" => FeedForward::Relu,
            "gelu" => FeedForward::Gelu,
            "gated-gelu" | "gated-gelu_new" => FeedForward::Gated(Gate::GeluNew),
            "gated-silu" => FeedForward::Gated(Gate::Silu),
            other => {
                return Err(unsupported(
                    "feed_forward_proj",
                    other,
                    "implemented: relu, gelu, gated-gelu, gated-silu",
                ))
            }
        };
        for (field, v) in [
            ("d_model", r.d_model),
            ("d_kv", r.d_kv),
            ("d_ff", r.d_ff),
            ("num_heads", r.num_heads),
            ("vocab_size", r.vocab_size),
        ] {
            if v == 0 {
                return Err(unsupported(field, v, "must be positive"));
            }
        }
        let buckets = r.relative_attention_num_buckets;
        if buckets < 4 {
            return Err(unsupported(
                "relative_attention_num_buckets",
                buckets,
                "must be at least 4 (half exact, half logarithmic, per direction)",
            ));
        }
        if r.relative_attention_max_distance <= buckets / 4 {
            return Err(unsupported(
                "relative_attention_max_distance",
                r.relative_attention_max_distance,
                "must exceed the exact buckets (num_buckets / 4)",
            ));
        }
        let decoder_start_token_id = r.decoder_start_token_id.ok_or_else(|| {
            unsupported(
                "decoder_start_token_id",
                "null",
                "the decoder's first input (T5 uses the pad id, 0) must be set",
            )
        })?;
        if decoder_start_token_id as usize >= r.vocab_size {
            return Err(unsupported(
                "decoder_start_token_id",
                decoder_start_token_id,
                &format!("must be a token id below vocab_size {}", r.vocab_size),
            ));
        }
        // configuration_t5.py: v1.0 configs (tied) scale the decoder output; v1.1
        // configs say `tie_word_embeddings: false` and keep their own `lm_head`.
        let tie = r.tie_word_embeddings.unwrap_or(true);
        Ok(Self {
            model_type: r.model_type,
            vocab_size: r.vocab_size,
            d_model: r.d_model,
            d_kv: r.d_kv,
            d_ff: r.d_ff,
            num_layers: r.num_layers,
            num_decoder_layers: r.num_decoder_layers.unwrap_or(r.num_layers),
            num_heads: r.num_heads,
            relative_attention_num_buckets: buckets,
            relative_attention_max_distance: r.relative_attention_max_distance,
            layer_norm_epsilon: r.layer_norm_epsilon as f32,
            feed_forward,
            tie_word_embeddings: tie,
            scale_decoder_outputs: r.scale_decoder_outputs.unwrap_or(tie),
            decoder_start_token_id,
        })
    }

    fn inner(&self) -> usize {
        self.num_heads * self.d_kv
    }
}

/// `T5Attention._relative_position_bucket`: the bucket of relative position
/// `rel = key − query`, with the float32 arithmetic of torch (`log` of a float32
/// quotient; the `math.log` divisor rounded to float32) truncated toward zero.
pub fn relative_position_bucket(
    rel: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> u32 {
    let mut buckets = num_buckets as i64;
    let mut bucket = 0;
    let distance = if bidirectional {
        buckets /= 2;
        if rel > 0 {
            bucket += buckets;
        }
        rel.abs()
    } else {
        -rel.min(0)
    };
    let max_exact = buckets / 2;
    bucket += if distance < max_exact {
        distance
    } else {
        let divisor = (max_distance as f64 / max_exact as f64).ln() as f32;
        let log =
            (distance as f32 / max_exact as f32).ln() / divisor * (buckets - max_exact) as f32;
        (max_exact + log as i64).min(buckets - 1)
    };
    bucket as u32
}

/// The bucket of every relative position `r ∈ [−(max_len−1), max_len−1]` at
/// `r + max_len − 1` (the `t5_attention` op's index).
pub fn bucket_index(max_len: usize, bidirectional: bool, c: &T5Config) -> Vec<u32> {
    let m = max_len as i64;
    (1 - m..m)
        .map(|r| {
            relative_position_bucket(
                r,
                bidirectional,
                c.relative_attention_num_buckets,
                c.relative_attention_max_distance,
            )
        })
        .collect()
}

/// `T5LayerNorm` (RMS, no mean, no bias): the `rms_norm` op.
struct Norm<B: Backend> {
    weight: B::Tensor,
}

impl<B: Backend> Norm<B> {
    fn load(be: &B, w: &Weights, c: &T5Config) -> Result<Self> {
        Ok(Self {
            weight: be.upload(&w.get("weight", &[c.d_model])?)?,
        })
    }
}

/// One attention sub-layer (`T5LayerSelfAttention` / `T5LayerCrossAttention`):
/// pre-norm, the query projection (self-attention: `[q | k | v]` fused), attention,
/// `o`, residual.
struct AttentionLayer<B: Backend> {
    norm: Norm<B>,
    q: Linear<B>,
    o: Linear<B>,
}

impl<B: Backend> AttentionLayer<B> {
    /// `names` of the query-side projection: `q`, or `q, k, v` for self-attention.
    fn load(be: &B, w: &Weights, c: &T5Config, name: &str, names: &[&str]) -> Result<Self> {
        let (d, inner) = (c.d_model, c.inner());
        let a = w.pp(name);
        let parts: Vec<(&str, usize)> = names.iter().map(|&n| (n, inner)).collect();
        Ok(Self {
            norm: Norm::load(be, &w.pp("layer_norm"), c)?,
            q: Linear::load_fused(be, &a, &parts, d, false)?,
            o: Linear::load_fused(be, &a, &[("o", d)], inner, false)?,
        })
    }
}

/// The decoder's cross-attention: its layer and the `[k | v]` projection of the
/// encoder states (run once per layer and batch).
struct CrossAttention<B: Backend> {
    layer: AttentionLayer<B>,
    kv: Linear<B>,
}

/// `T5LayerFF`: pre-norm, the MLP, residual.
struct FeedForwardLayer<B: Backend> {
    norm: Norm<B>,
    wi: Wi<B>,
    wo: Linear<B>,
}

/// The feed-forward's first half.
enum Wi<B: Backend> {
    /// `wi`, then ReLU (v1.0) or the erf GELU.
    Plain(Linear<B>, FeedForward),
    /// `act(wi_0) · wi_1`.
    Gated(GateUp<B>),
}

impl<B: Backend> FeedForwardLayer<B> {
    fn load(be: &B, w: &Weights, c: &T5Config) -> Result<Self> {
        let (d, f) = (c.d_model, c.d_ff);
        let m = w.pp("DenseReluDense");
        let wi = match c.feed_forward {
            FeedForward::Gated(gate) => {
                Wi::Gated(GateUp::load(be, &m, ["wi_0", "wi_1"], gate, f, d, false)?)
            }
            kind => Wi::Plain(Linear::load_fused(be, &m, &[("wi", f)], d, false)?, kind),
        };
        Ok(Self {
            norm: Norm::load(be, &w.pp("layer_norm"), c)?,
            wi,
            wo: Linear::load_fused(be, &m, &[("wo", d)], f, false)?,
        })
    }

    fn forward(&self, be: &B, x: &mut B::Tensor, eps: f32) -> Result<()> {
        let h = be.rms_norm(x, &self.norm.weight, eps)?;
        let act = match &self.wi {
            Wi::Plain(wi, kind) => {
                let mut up = wi.forward(be, &h)?;
                match kind {
                    FeedForward::Relu => be.relu(&mut up)?,
                    _ => be.gelu(&mut up)?,
                }
                up
            }
            Wi::Gated(wi) => wi.forward(be, &h)?,
        };
        drop(h);
        self.wo.forward_add(be, x, &act)
    }
}

/// `T5Block`: self-attention, cross-attention in the decoder, feed-forward.
struct Block<B: Backend> {
    attention: AttentionLayer<B>,
    cross: Option<CrossAttention<B>>,
    ff: FeedForwardLayer<B>,
}

/// `T5Stack`: the embedding is `shared`; block 0's `relative_attention_bias` serves
/// every block of the stack.
struct Stack<B: Backend> {
    blocks: Vec<Block<B>>,
    /// `block.0.layer.0.SelfAttention.relative_attention_bias.weight`: `[buckets, heads]`.
    bias_table: B::Tensor,
    final_norm: Norm<B>,
    causal: bool,
}

impl<B: Backend> Stack<B> {
    fn load(be: &B, w: &Weights, c: &T5Config, decoder: bool) -> Result<Self> {
        let layers = if decoder {
            c.num_decoder_layers
        } else {
            c.num_layers
        };
        let blocks = (0..layers)
            .map(|i| {
                let b = w.pp("block").pp(i).pp("layer");
                let ff_at = if decoder { 2 } else { 1 };
                anyhow::Ok(Block {
                    attention: AttentionLayer::load(
                        be,
                        &b.pp(0),
                        c,
                        "SelfAttention",
                        &["q", "k", "v"],
                    )?,
                    cross: decoder
                        .then(|| -> Result<_> {
                            let w = b.pp(1);
                            let inner = c.inner();
                            Ok(CrossAttention {
                                layer: AttentionLayer::load(be, &w, c, "EncDecAttention", &["q"])?,
                                kv: Linear::load_fused(
                                    be,
                                    &w.pp("EncDecAttention"),
                                    &[("k", inner), ("v", inner)],
                                    c.d_model,
                                    false,
                                )?,
                            })
                        })
                        .transpose()?,
                    ff: FeedForwardLayer::load(be, &b.pp(ff_at), c)?,
                })
                .with_context(|| format!("loading block {i}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let bias = w.pp("block.0.layer.0.SelfAttention.relative_attention_bias");
        let bias_table =
            be.upload(&bias.get("weight", &[c.relative_attention_num_buckets, c.num_heads])?)?;
        if decoder {
            // Old checkpoints carry a cross-attention bias that HF ignores
            // (`_keys_to_ignore_on_load_unexpected`).
            w.unused_by_design(&["block.0.layer.1.EncDecAttention.relative_attention_bias.weight"]);
        }
        // The stack's own copy of the tied embedding, when saved, is `shared`.
        w.unused_by_design(&["embed_tokens.weight"]);
        Ok(Self {
            blocks,
            bias_table,
            final_norm: Norm::load(be, &w.pp("final_layer_norm"), c)?,
            causal: decoder,
        })
    }
}

/// A T5 model with its LM head (`T5ForConditionalGeneration`).
pub struct T5ForConditionalGeneration<B: Backend> {
    pub config: T5Config,
    shared: B::Tensor,
    encoder: Stack<B>,
    decoder: Stack<B>,
    /// `None` when tied to `shared`.
    lm_head: Option<B::Tensor>,
}

/// The id lists a scoring forward stages, in [`BatchInputs::ids`] order.
const ENCODER_IDS: usize = 0;
const DECODER_IDS: usize = 1;
const ENCODER_INDEX: usize = 2;
const DECODER_INDEX: usize = 3;
const LABEL_ROWS: usize = 4;
const LABELS: usize = 5;

impl<B: Backend> T5ForConditionalGeneration<B> {
    /// Builds the model from HF-named weights (`shared`, `encoder.…`, `decoder.…`,
    /// `lm_head` when untied).
    pub fn from_weights(be: &B, w: &Weights, c: T5Config) -> Result<Self> {
        let (v, d) = (c.vocab_size, c.d_model);
        let shared = be.upload(&w.get("shared.weight", &[v, d])?)?;
        let encoder =
            Stack::load(be, &w.pp("encoder"), &c, false).context("loading the encoder")?;
        let decoder = Stack::load(be, &w.pp("decoder"), &c, true).context("loading the decoder")?;
        let lm_head = if c.tie_word_embeddings {
            // HF ties a stored copy to `shared` as well.
            w.unused_by_design(&["lm_head.weight"]);
            None
        } else {
            Some(be.upload(&w.get("lm_head.weight", &[v, d]).context(
                "`tie_word_embeddings` is false: the checkpoint must hold lm_head.weight",
            )?)?)
        };
        w.refuse_unread(&["shared.", "encoder.", "decoder.", "lm_head."])?;
        Ok(Self {
            shared,
            encoder,
            decoder,
            lm_head,
            config: c,
        })
    }

    /// Per-token log-probabilities of the labels of each sequence:
    /// `seqs[k].ids[..target_start]` is the encoder input and `ids[target_start..]`
    /// the labels, scored with the decoder fed `decoder_start_token_id` and the labels
    /// shifted right (`_shift_right`), logits divided by `temperature`.
    ///
    /// The encoder attends both ways, so a shared leading part of the inputs (a
    /// demonstration prefix) has states that depend on what follows it: every
    /// encoder input runs whole.
    pub fn target_logprobs(
        &self,
        be: &B,
        seqs: &[ScoredSequence],
        temperature: f32,
    ) -> Result<Vec<Vec<f32>>> {
        let c = &self.config;
        for s in seqs {
            ensure!(
                s.target_start >= 1 && s.target_start < s.ids.len(),
                "an encoder-decoder needs an encoder input and at least one label (target_start \
                 {} of {} tokens)",
                s.target_start,
                s.ids.len()
            );
        }
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let seq = |ids: Vec<u32>| Sequence {
            ids,
            ..Default::default()
        };
        let enc: Vec<Sequence> = seqs
            .iter()
            .map(|s| seq(s.ids[..s.target_start].to_vec()))
            .collect();
        let dec: Vec<Sequence> = seqs
            .iter()
            .map(|s| {
                let mut ids = vec![c.decoder_start_token_id];
                ids.extend_from_slice(&s.ids[s.target_start..s.ids.len() - 1]);
                seq(ids)
            })
            .collect();
        let (enc, dec) = (PackedBatch::pack(&enc), PackedBatch::pack(&dec));
        let labels: Vec<u32> = seqs
            .iter()
            .flat_map(|s| s.ids[s.target_start..].iter().copied())
            .collect();
        let rows: Vec<usize> = (0..labels.len()).collect();
        let rows32: Vec<u32> = (0..labels.len() as u32).collect();
        let enc_index = bucket_index(enc.layout.max_len(), true, c);
        let dec_index = bucket_index(dec.layout.max_len(), false, c);
        let inputs = BatchInputs {
            layouts: vec![&enc.layout, &dec.layout],
            ids: vec![&enc.ids, &dec.ids, &enc_index, &dec_index, &rows32, &labels],
            rel_index: None,
        };
        let p = be.prepare_batch(&inputs)?;
        let hidden = self.forward(be, &p, (&enc, &enc_index), (&dec, &dec_index))?;
        let head = self.lm_head.as_ref().unwrap_or(&self.shared);
        let temperature = if c.scale_decoder_outputs {
            temperature * (c.d_model as f32).sqrt()
        } else {
            temperature
        };
        let logp = be.question_loglik(
            &hidden,
            p.ids(LABEL_ROWS, &rows[..]),
            head,
            p.ids(LABELS, &labels[..]),
            temperature,
        )?;
        let mut out = Vec::with_capacity(seqs.len());
        let mut k = 0;
        for s in seqs {
            let n = s.n_targets();
            out.push(logp[k..k + n].to_vec());
            k += n;
        }
        Ok(out)
    }

    /// The decoder's final states (after `final_layer_norm`) of a staged batch.
    fn forward(
        &self,
        be: &B,
        p: &Prepared,
        (enc, enc_index): (&PackedBatch, &[u32]),
        (dec, dec_index): (&PackedBatch, &[u32]),
    ) -> Result<B::Tensor> {
        let c = &self.config;
        let embed = |i: usize, ids: &[u32]| {
            be.embedding(&[(&self.shared, p.ids(i, ids))]).context(
                "token ids must be below the model's vocab_size (tokenizer and model differ?)",
            )
        };
        let enc_layout = p.layout(0, &enc.layout);
        let mut x = embed(ENCODER_IDS, &enc.ids)?;
        self.run_stack(
            be,
            &self.encoder,
            &mut x,
            (enc_layout, p.ids(ENCODER_INDEX, enc_index)),
            None,
        )?;
        let enc_out = be.rms_norm(&x, &self.encoder.final_norm.weight, c.layer_norm_epsilon)?;
        drop(x);
        let mut y = embed(DECODER_IDS, &dec.ids)?;
        let dec_layout = p.layout(1, &dec.layout);
        self.run_stack(
            be,
            &self.decoder,
            &mut y,
            (dec_layout, p.ids(DECODER_INDEX, dec_index)),
            Some((&enc_out, enc_layout)),
        )?;
        Ok(be.rms_norm(&y, &self.decoder.final_norm.weight, c.layer_norm_epsilon)?)
    }

    /// The blocks of `stack` over `x` (before the final norm); the decoder's blocks
    /// cross-attend to `encoder`'s states.
    fn run_stack(
        &self,
        be: &B,
        stack: &Stack<B>,
        x: &mut B::Tensor,
        (layout, index): (Input<'_, SeqLayout>, Input<'_, [u32]>),
        encoder: Option<(&B::Tensor, Input<'_, SeqLayout>)>,
    ) -> Result<()> {
        let c = &self.config;
        let eps = c.layer_norm_epsilon;
        let shape = |causal| T5AttentionShape {
            heads: c.num_heads,
            head_dim: c.d_kv,
            causal,
        };
        let bias = BucketBias {
            table: &stack.bias_table,
            index,
        };
        for block in &stack.blocks {
            let a = &block.attention;
            let h = be.rms_norm(x, &a.norm.weight, eps)?;
            let qkv = a.q.forward_split(be, &h, 3)?;
            drop(h);
            let ctx = be.t5_attention(
                &qkv[0],
                &qkv[1],
                &qkv[2],
                Some(&bias),
                shape(stack.causal),
                layout,
                layout,
            )?;
            drop(qkv);
            a.o.forward_add(be, x, &ctx)?;
            if let (Some(cross), Some((states, enc_layout))) = (&block.cross, encoder) {
                let layer = &cross.layer;
                let h = be.rms_norm(x, &layer.norm.weight, eps)?;
                let q = layer.q.forward(be, &h)?;
                drop(h);
                let kv = cross.kv.forward_split(be, states, 2)?;
                let ctx =
                    be.t5_attention(&q, &kv[0], &kv[1], None, shape(false), layout, enc_layout)?;
                layer.o.forward_add(be, x, &ctx)?;
            }
            block.ff.forward(be, x, eps)?;
        }
        Ok(())
    }
}

/// Whether the HF directory `dir` holds a T5-family model.
pub fn is_t5_dir(dir: &Path) -> bool {
    dir.is_dir() && T5Config::describes(&dir.join("config.json"))
}
