//! ModernBERT encoders (`Alibaba-NLP/gte-reranker-modernbert-base`, ModernBERT-base/
//! large fine-tunes): HF transformers' `models/modernbert/modeling_modernbert.py`
//! (v5.23), inference only, sequences packed without padding.
//!
//! - `ModernBertEmbeddings` (lines 51–70): token embeddings → LayerNorm, no positions
//!   and no token types (RoPE in every layer);
//! - `ModernBertEncoderLayer` (lines 293–323), pre-LN: `x + Wo(attn(attn_norm(x)))`
//!   (layer 0's `attn_norm` is the identity), then `x + Wo(act(input) · gate)` of
//!   `mlp_norm(x)`, `Wi` giving `[input | gate]` (`ModernBertMLP`, lines 73–90: GeGLU
//!   with the erf GELU);
//! - `ModernBertAttention` (lines 212–290): fused `Wqkv`, RoPE with the layer type's
//!   θ (`full_attention`: `global_rope_theta` 160,000; `sliding_attention`:
//!   `local_rope_theta` 10,000), scores · d^-1/2; a sliding layer's query sees the keys
//!   within `local_attention / 2` of it (masking_utils'
//!   `sliding_window_bidirectional_overlay`: `|i − j| ≤ window`);
//! - `final_norm`, then `ModernBertPredictionHead` (`dense → act → norm`, lines
//!   470–480) and `classifier` on the first token or the mean of the tokens
//!   (`classifier_pooling`), in [`crate::model::heads`].
//!
//! Differences in form, not in function: the attention runs through the `t5_attention`
//! op (unscaled scores plus a per-distance bias), with d^-1/2 folded into `Wqkv`'s query
//! rows at load (RoPE is a rotation, so scaling before it is scaling after) and the
//! window as a bias of −30,000 on the keys past it (a finite stand-in for HF's mask:
//! its weight underflows to 0 in f32, and the diagonal always lies inside); the
//! normalisations without bias (`norm_bias: false`) get a zero one.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

use super::batch::{PackedBatch, StagedBatch};
use super::config::{self, unsupported, ConfigError, DebertaConfig, EncoderFamily};
use super::decoder_config::{RopeConfig, RopeScaling};
use super::layers::{GateUp, LayerNorm, Linear};
use super::weights::Weights;
use crate::backend::{Backend, BucketBias, Gate, Input, Slot, T5AttentionShape};
use crate::tensor::HostTensor;

/// The `model_type` this file reads.
pub const MODEL_TYPE: &str = "modernbert";

/// The bias of a key past a sliding window (see the module docs).
const OUTSIDE_WINDOW: f32 = -30_000.0;

/// What sets a ModernBERT apart from the BERT-layout encoders, in [`DebertaConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct ModernBertSettings {
    /// RoPE θ of the full-attention layers and of the sliding-window ones.
    pub global_rope_theta: f32,
    pub local_rope_theta: f32,
    /// A sliding layer's query sees the keys at most this far away
    /// (`local_attention / 2`).
    pub window: usize,
    /// Per layer: full attention (`layer_types`), else the sliding window.
    pub global_layers: Vec<bool>,
    pub norm_bias: bool,
    pub attention_bias: bool,
    pub mlp_bias: bool,
    pub classifier_bias: bool,
    /// The MLP's gate: the erf GELU (`hidden_activation` "gelu"), or the tanh form.
    pub gate: Gate,
    /// `classifier_pooling` "mean" (else "cls": the first token).
    pub mean_pooling: bool,
}

/// `config.json` of a ModernBERT (the fields the model reads; `ModernBertConfig`'s
/// defaults).
#[derive(Debug, Clone, Deserialize)]
struct RawModernBertConfig {
    model_type: Option<String>,
    #[serde(default)]
    architectures: Option<Vec<String>>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default = "gelu")]
    hidden_activation: String,
    #[serde(default = "default_max_pos")]
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    norm_eps: f64,
    #[serde(default)]
    norm_bias: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default)]
    classifier_bias: bool,
    #[serde(default = "gelu")]
    classifier_activation: String,
    #[serde(default = "cls")]
    classifier_pooling: String,
    #[serde(default = "default_local_attention")]
    local_attention: usize,
    global_attn_every_n_layers: Option<usize>,
    layer_types: Option<Vec<String>>,
    global_rope_theta: Option<f64>,
    local_rope_theta: Option<f64>,
    /// transformers ≥ 5: `{"full_attention": {...}, "sliding_attention": {...}}`.
    rope_parameters: Option<serde_json::Value>,
}

fn gelu() -> String {
    "gelu".into()
}
fn cls() -> String {
    "cls".into()
}
fn default_max_pos() -> usize {
    8192
}
fn default_eps() -> f64 {
    1e-5
}
fn default_local_attention() -> usize {
    128
}

/// Reads a ModernBERT `config.json` as the encoder config it amounts to.
pub fn read_config(path: &Path) -> Result<DebertaConfig, ConfigError> {
    resolve(config::read_config(path, "ModernBERT")?)
}

/// The RoPE θ of `layer_type` in `rope_parameters`, else the older field, else
/// `ModernBertConfig.default_theta`.
fn theta(
    r: &RawModernBertConfig,
    layer_type: &str,
    old: Option<f64>,
    default: f64,
) -> Result<f32, ConfigError> {
    let params = r.rope_parameters.as_ref().and_then(|p| p.get(layer_type));
    if let Some(kind) = params
        .and_then(|p| p.get("rope_type"))
        .and_then(|t| t.as_str())
    {
        if kind != "default" {
            return Err(unsupported(
                "rope_parameters.rope_type",
                kind,
                "only the default RoPE is implemented for ModernBERT",
            ));
        }
    }
    Ok(params
        .and_then(|p| p.get("rope_theta"))
        .and_then(|t| t.as_f64())
        .or(old)
        .unwrap_or(default) as f32)
}

fn resolve(r: RawModernBertConfig) -> Result<DebertaConfig, ConfigError> {
    let model_type = r.model_type.as_deref().unwrap_or_default();
    if model_type != MODEL_TYPE {
        return Err(unsupported(
            "model_type",
            model_type,
            "this reader implements model_type \"modernbert\"",
        ));
    }
    let heads = r.num_attention_heads;
    if heads == 0 || !r.hidden_size.is_multiple_of(heads) {
        return Err(unsupported(
            "num_attention_heads",
            heads,
            &format!("must divide hidden_size {}", r.hidden_size),
        ));
    }
    let gate = match r.hidden_activation.as_str() {
        "gelu" => Gate::Gelu,
        "gelu_new" | "gelu_pytorch_tanh" => Gate::GeluNew,
        other => {
            return Err(unsupported(
                "hidden_activation",
                other,
                "\"gelu\", \"gelu_new\" and \"gelu_pytorch_tanh\" are implemented",
            ))
        }
    };
    if r.classifier_activation != "gelu" {
        return Err(unsupported(
            "classifier_activation",
            &r.classifier_activation,
            "only \"gelu\" is implemented",
        ));
    }
    let mean_pooling = match r.classifier_pooling.as_str() {
        "cls" => false,
        "mean" => true,
        other => {
            return Err(unsupported(
                "classifier_pooling",
                other,
                "\"cls\" and \"mean\" are implemented",
            ))
        }
    };
    let every = r.global_attn_every_n_layers.unwrap_or(3).max(1);
    let global_layers: Vec<bool> = match &r.layer_types {
        Some(types) => {
            if types.len() != r.num_hidden_layers {
                return Err(unsupported(
                    "layer_types",
                    types.len(),
                    &format!(
                        "must name num_hidden_layers = {} layers",
                        r.num_hidden_layers
                    ),
                ));
            }
            types
                .iter()
                .map(|t| match t.as_str() {
                    "full_attention" => Ok(true),
                    "sliding_attention" => Ok(false),
                    other => Err(unsupported(
                        "layer_types",
                        other,
                        "\"full_attention\" and \"sliding_attention\" are implemented",
                    )),
                })
                .collect::<Result<_, _>>()?
        }
        None => (0..r.num_hidden_layers).map(|i| i % every == 0).collect(),
    };
    let settings = ModernBertSettings {
        global_rope_theta: theta(&r, "full_attention", r.global_rope_theta, 160_000.0)?,
        local_rope_theta: theta(&r, "sliding_attention", r.local_rope_theta, 10_000.0)?,
        window: r.local_attention / 2,
        global_layers,
        norm_bias: r.norm_bias,
        attention_bias: r.attention_bias,
        mlp_bias: r.mlp_bias,
        classifier_bias: r.classifier_bias,
        gate,
        mean_pooling,
    };
    Ok(DebertaConfig {
        vocab_size: r.vocab_size,
        hidden_size: r.hidden_size,
        embedding_size: r.hidden_size,
        num_layers: r.num_hidden_layers,
        num_heads: heads,
        head_size: r.hidden_size / heads,
        intermediate_size: r.intermediate_size,
        max_position_embeddings: r.max_position_embeddings,
        type_vocab_size: 0,
        position_biased_input: false,
        layer_norm_eps: r.norm_eps as f32,
        relative: None,
        scale_factor: 1,
        pooler_hidden_size: r.hidden_size,
        architectures: r.architectures.unwrap_or_default(),
        tanh_gelu: false,
        projections: ["Wqkv", "Wqkv", "Wqkv"],
        family: EncoderFamily::ModernBert,
        position_offset: 0,
        token_types_from_input: false,
        modernbert: Some(settings),
    })
}

/// The settings of a ModernBERT config (its reader always sets them).
pub fn settings(c: &DebertaConfig) -> Result<&ModernBertSettings> {
    c.modernbert.as_ref().context(
        "a ModernBERT model needs its settings (read the config with modernbert::read_config)",
    )
}

/// A LayerNorm of `size` at `w`, with a zero bias when the config has none.
pub fn layer_norm<B: Backend>(
    be: &B,
    w: &Weights,
    size: usize,
    c: &DebertaConfig,
    s: &ModernBertSettings,
) -> Result<LayerNorm<B>> {
    let bias = match s.norm_bias {
        true => w.get("bias", &[size])?,
        false => HostTensor::new(vec![size], vec![0.0; size]),
    };
    Ok(LayerNorm {
        weight: be.upload(&w.get("weight", &[size])?)?,
        bias: be.upload(&bias)?,
        eps: c.layer_norm_eps,
    })
}

/// The normalised copy of `x`.
fn normed<B: Backend>(be: &B, norm: &LayerNorm<B>, x: &B::Tensor) -> Result<B::Tensor> {
    let mut y = be.copy(x)?;
    norm.forward(be, &mut y, None)?;
    Ok(y)
}

/// One `ModernBertEncoderLayer`.
struct ModernBertLayer<B: Backend> {
    /// `None` in layer 0 (HF's `nn.Identity`).
    attn_norm: Option<LayerNorm<B>>,
    /// `Wqkv` with its query rows scaled by d^-1/2.
    wqkv: Linear<B>,
    wo: Linear<B>,
    mlp_norm: LayerNorm<B>,
    wi: GateUp<B>,
    mlp_wo: Linear<B>,
    global: bool,
}

impl<B: Backend> ModernBertLayer<B> {
    fn load(be: &B, w: &Weights, i: usize, c: &DebertaConfig) -> Result<Self> {
        let s = settings(c)?;
        let (h, inter) = (c.hidden_size, c.intermediate_size);
        let attn = w.pp("attn");
        let mut qkv = attn.pp("Wqkv").get("weight", &[3 * h, h])?;
        let mut qkv_bias = match s.attention_bias {
            true => Some(attn.pp("Wqkv").get("bias", &[3 * h])?),
            false => None,
        };
        let scale = 1.0 / (c.head_size as f32).sqrt();
        qkv.stored = None; // the data changes (a safetensors checkpoint stores none)
        qkv.data[..h * h].iter_mut().for_each(|v| *v *= scale);
        if let Some(b) = &mut qkv_bias {
            b.data[..h].iter_mut().for_each(|v| *v *= scale);
        }
        let mlp = w.pp("mlp");
        let wi = mlp.pp("Wi").get("weight", &[2 * inter, h])?;
        let wi_bias = match s.mlp_bias {
            true => Some(mlp.pp("Wi").get("bias", &[2 * inter])?),
            false => None,
        };
        Ok(Self {
            attn_norm: match i {
                0 => None,
                _ => Some(layer_norm(be, &w.pp("attn_norm"), h, c, s)?),
            },
            wqkv: Linear::from_host(be, &qkv, qkv_bias.as_ref())?,
            wo: Linear::load(be, &attn.pp("Wo"), h, h, s.attention_bias)?,
            mlp_norm: layer_norm(be, &w.pp("mlp_norm"), h, c, s)?,
            // `input, gate = Wi(x).chunk(2)`: the activated half comes first.
            wi: GateUp::from_host(be, &wi, wi_bias.as_ref(), s.gate, inter)?,
            mlp_wo: Linear::load(be, &mlp.pp("Wo"), inter, h, s.mlp_bias)?,
            global: s.global_layers[i],
        })
    }

    fn forward(&self, be: &B, x: &mut B::Tensor, ctx: &LayerContext<'_, B>) -> Result<()> {
        let normed_x = self
            .attn_norm
            .as_ref()
            .map(|n| normed(be, n, x))
            .transpose()?;
        let mut qkv = self
            .wqkv
            .forward_split(be, normed_x.as_ref().unwrap_or(x), 3)?
            .into_iter();
        drop(normed_x);
        let (mut q, mut k, v) = match (qkv.next(), qkv.next(), qkv.next()) {
            (Some(q), Some(k), Some(v)) => (q, k, v),
            _ => anyhow::bail!("the fused Wqkv projection did not split in three"),
        };
        let (inv_freq, bias) = match self.global {
            true => (ctx.global_freq, None),
            false => (ctx.local_freq, Some(&ctx.window)),
        };
        for t in [&mut q, &mut k] {
            be.rope(
                t,
                ctx.shape.heads,
                ctx.shape.head_dim,
                ctx.batch.positions_input(),
                inv_freq,
                None,
            )?;
        }
        let layout = ctx.batch.layout_input();
        let attn = be.t5_attention(&q, &k, &v, bias, ctx.shape, layout, layout)?;
        drop((q, k, v));
        self.wo.forward_add(be, x, &attn)?;
        let h = normed(be, &self.mlp_norm, x)?;
        let act = self.wi.forward(be, &h)?;
        self.mlp_wo.forward_add(be, x, &act)?;
        Ok(())
    }
}

/// What every layer of one forward shares.
struct LayerContext<'a, B: Backend> {
    batch: &'a StagedBatch<'a>,
    shape: T5AttentionShape,
    global_freq: Input<'a, [f32]>,
    local_freq: Input<'a, [f32]>,
    window: BucketBias<'a, B::Tensor>,
}

/// `ModernBertModel`: the last hidden state (after `final_norm`) of packed sequences.
pub struct ModernBertModel<B: Backend> {
    tok_embeddings: B::Tensor,
    emb_norm: LayerNorm<B>,
    layers: Vec<ModernBertLayer<B>>,
    final_norm: LayerNorm<B>,
    /// RoPE frequencies of the full and the sliding layers, kept on the device.
    freqs: [(Vec<f32>, Option<Slot>); 2],
    /// `[2, heads]`: bias 0 inside the window, [`OUTSIDE_WINDOW`] past it.
    window_table: B::Tensor,
    window: usize,
    shape: T5AttentionShape,
}

impl<B: Backend> ModernBertModel<B> {
    /// Loads the encoder from `w` (the `model.` prefix of a `*For…` checkpoint, or
    /// none); a tensor the config leaves out is refused by name.
    pub fn load(be: &B, root: &Weights, c: &DebertaConfig) -> Result<Self> {
        let s = settings(c)?;
        let w = match root.contains("model.embeddings.tok_embeddings.weight") {
            true => root.pp("model"),
            false => root.clone(),
        };
        let (h, heads) = (c.hidden_size, c.num_heads);
        let layers = (0..c.num_layers)
            .map(|i| {
                ModernBertLayer::load(be, &w.pp("layers").pp(i), i, c)
                    .with_context(|| format!("loading ModernBERT layer {i}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let freq = |theta: f32| -> Result<(Vec<f32>, Option<Slot>)> {
            let f = RopeConfig {
                theta,
                scaling: RopeScaling::None,
            }
            .inv_freq(c.head_size);
            let slot = be.keep_constant(&f)?;
            Ok((f, slot))
        };
        let mut table = vec![0f32; 2 * heads];
        table[heads..].fill(OUTSIDE_WINDOW);
        let model = Self {
            tok_embeddings: be.upload(
                &w.pp("embeddings")
                    .get("tok_embeddings.weight", &[c.vocab_size, h])?,
            )?,
            emb_norm: layer_norm(be, &w.pp("embeddings").pp("norm"), h, c, s)?,
            layers,
            final_norm: layer_norm(be, &w.pp("final_norm"), h, c, s)?,
            freqs: [freq(s.global_rope_theta)?, freq(s.local_rope_theta)?],
            window_table: be.upload(&HostTensor::new(vec![2, heads], table))?,
            window: s.window,
            shape: T5AttentionShape {
                heads,
                head_dim: c.head_size,
                causal: false,
            },
        };
        w.refuse_unread(&["embeddings.", "layers.", "final_norm."])?;
        Ok(model)
    }

    /// `index[j − i + max_len − 1]`: 0 for keys within the window, 1 past it.
    fn window_index(&self, max_len: usize) -> Vec<u32> {
        (0..(2 * max_len).saturating_sub(1))
            .map(|r| {
                u32::from((r as i64 - max_len as i64 + 1).unsigned_abs() as usize > self.window)
            })
            .collect()
    }

    /// The last hidden state `[tokens, H]` and the batch as staged (the heads read
    /// its layout).
    pub fn forward_staged<'a>(
        &self,
        be: &B,
        batch: &'a PackedBatch,
    ) -> Result<(B::Tensor, StagedBatch<'a>)> {
        let index = self.window_index(batch.layout.max_len());
        let mut inputs = batch.inputs();
        let at = inputs.ids.len();
        inputs.ids.push(&index);
        let (x, prepared) = be.run_forward(None, &inputs, at + 1, batch.num_tokens(), &mut |p| {
            let staged = StagedBatch {
                batch,
                prepared: p.clone(),
            };
            let ctx = LayerContext {
                batch: &staged,
                shape: self.shape,
                global_freq: constant(&self.freqs[0]),
                local_freq: constant(&self.freqs[1]),
                window: BucketBias {
                    table: &self.window_table,
                    index: p.ids(at, &index[..]),
                },
            };
            let mut x = be
                .embedding(&[(&self.tok_embeddings, staged.ids_input())])
                .context("token ids must be below the model's vocab_size (tokenizer and model differ?)")?;
            self.emb_norm.forward(be, &mut x, None)?;
            for layer in &self.layers {
                layer.forward(be, &mut x, &ctx)?;
            }
            self.final_norm.forward(be, &mut x, None)?;
            Ok(x)
        })?;
        Ok((x, StagedBatch { batch, prepared }))
    }
}

/// A table kept on the device as an op input.
fn constant((values, slot): &(Vec<f32>, Option<Slot>)) -> Input<'_, [f32]> {
    Input {
        host: values,
        slot: *slot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Result<DebertaConfig, ConfigError> {
        resolve(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn defaults_alternate_global_layers_and_read_both_thetas() {
        let c = raw(
            r#"{"model_type":"modernbert","vocab_size":10,"hidden_size":8,
            "intermediate_size":12,"num_hidden_layers":4,"num_attention_heads":2,
            "rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":1000.0},
            "sliding_attention":{"rope_type":"default","rope_theta":50.0}}}"#,
        )
        .unwrap();
        let s = c.modernbert.unwrap();
        assert_eq!(s.global_layers, [true, false, false, true]);
        assert_eq!(
            (s.global_rope_theta, s.local_rope_theta, s.window),
            (1000.0, 50.0, 64)
        );
        assert_eq!((s.gate, s.mean_pooling), (Gate::Gelu, false));
        let e = raw(
            r#"{"model_type":"modernbert","vocab_size":10,"hidden_size":8,
            "intermediate_size":12,"num_hidden_layers":1,"num_attention_heads":2,
            "classifier_pooling":"max"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("classifier_pooling"), "{e}");
    }
}
