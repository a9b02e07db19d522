//! Causal-LM configuration: HF `config.json` (the `model_type`s of [`MODEL_TYPES`]:
//! `gpt2`, `llama`, `mistral`, `qwen2`, `qwen3`) or GGUF metadata, resolved into one
//! validated [`DecoderConfig`].
//!
//! Defaults follow transformers' `GPT2Config`, `LlamaConfig`, `MistralConfig`,
//! `Qwen2Config` and `Qwen3Config`; RoPE follows `modeling_rope_utils.py` (`default`, `linear`,
//! `llama3`). Anything the engine does not implement is rejected naming the field.

use std::path::Path;

use serde::Deserialize;

use super::config::{read_config, ConfigError};
use super::gguf::GgufFile;

/// Which block structure the decoder uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// LayerNorm, learned positions, fused Conv1D `c_attn`, `gelu_new` MLP, tied head.
    Gpt2,
    /// RMSNorm, RoPE, grouped-query attention, SwiGLU MLP (Llama, Mistral, Qwen2,
    /// Qwen3).
    Llama,
}

/// A `model_type` (config.json) or `general.architecture` (GGUF) the decoder runs, and
/// what sets it apart within its [`Family`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelType {
    /// Its name in config.json's `model_type` and in GGUF's `general.architecture`.
    pub name: &'static str,
    pub family: Family,
    /// Biases on q, k and v only, whatever `attention_bias` says (Qwen2); the GGUF
    /// head size is then never `rope.dimension_count`.
    pub qkv_bias_only: bool,
    /// RMSNorm of each q and k head before RoPE (Qwen3's `q_norm`, `k_norm`).
    pub qk_norm: bool,
    /// `head_dim` when config.json leaves it out (Qwen3Config: 128), else
    /// `hidden_size / num_attention_heads`.
    pub default_head_dim: Option<usize>,
    /// Read from GGUF files too (llama.cpp's GPT-2 layout is not: use safetensors).
    pub gguf: bool,
    /// llama.cpp stores its Q and K rows permuted for its RoPE layout (undone on load).
    pub gguf_permuted_qk: bool,
}

/// Every model type the decoder runs: the one list to extend when a new member of a
/// family comes (docs/architecture.md, "Adding a model family").
pub const MODEL_TYPES: &[ModelType] = &[
    ModelType {
        name: "gpt2",
        qk_norm: false,
        default_head_dim: None,
        family: Family::Gpt2,
        qkv_bias_only: false,
        gguf: false,
        gguf_permuted_qk: false,
    },
    ModelType {
        name: "llama",
        qk_norm: false,
        default_head_dim: None,
        family: Family::Llama,
        qkv_bias_only: false,
        gguf: true,
        gguf_permuted_qk: true,
    },
    ModelType {
        name: "mistral",
        qk_norm: false,
        default_head_dim: None,
        family: Family::Llama,
        qkv_bias_only: false,
        gguf: true,
        gguf_permuted_qk: true,
    },
    ModelType {
        name: "qwen2",
        qk_norm: false,
        default_head_dim: None,
        family: Family::Llama,
        qkv_bias_only: true,
        gguf: true,
        gguf_permuted_qk: false,
    },
    ModelType {
        name: "qwen3",
        qk_norm: true,
        default_head_dim: Some(128),
        family: Family::Llama,
        qkv_bias_only: false,
        gguf: false,
        gguf_permuted_qk: false,
    },
];

impl ModelType {
    /// The model type named `name`, if the decoder runs it.
    pub fn named(name: &str) -> Option<&'static ModelType> {
        MODEL_TYPES.iter().find(|t| t.name == name)
    }

    /// The names of the model types, of those read from GGUF when `gguf`, for errors.
    fn names(gguf: bool) -> String {
        let names: Vec<&str> = MODEL_TYPES
            .iter()
            .filter(|t| t.gguf || !gguf)
            .map(|t| t.name)
            .collect();
        names.join(", ")
    }
}

/// The decoder model type the `config.json` at `path` names, `None` when it names
/// another kind of model (an encoder).
pub fn decoder_type_of(path: &Path) -> Result<Option<&'static ModelType>, ConfigError> {
    #[derive(Deserialize)]
    struct Named {
        model_type: Option<String>,
    }
    let named: Named = read_config(path, "model")?;
    Ok(named.model_type.as_deref().and_then(ModelType::named))
}

/// How RoPE inverse frequencies are rescaled (`rope_type`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// `default`: `inv_freq[i] = θ^(−2i/d)`.
    None,
    /// `linear`: positions divided by `factor`.
    Linear { factor: f32 },
    /// `llama3`: low frequencies divided by `factor`, smooth in between.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: f32,
    },
}

/// Rotary embedding parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConfig {
    pub theta: f32,
    pub scaling: RopeScaling,
}

impl RopeConfig {
    /// `head_dim / 2` inverse frequencies, computed in f32 as HF does.
    pub fn inv_freq(&self, head_dim: usize) -> Vec<f32> {
        let base: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|i| 1.0 / self.theta.powf(i as f32 / head_dim as f32))
            .collect();
        match self.scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let scaled = if wavelen > low_wavelen { f / factor } else { f };
                        if wavelen < high_wavelen || wavelen > low_wavelen {
                            scaled
                        } else {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        }
                    })
                    .collect()
            }
        }
    }
}

/// A resolved, validated decoder configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    pub family: Family,
    /// `model_type` (or GGUF `general.architecture`), for messages and metadata.
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub intermediate_size: usize,
    /// Learned positions (GPT-2) or the RoPE context length (informational).
    pub max_position_embeddings: usize,
    pub norm_eps: f32,
    /// Bias on the q/k/v projections (GPT-2, Qwen2, Llama `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the attention output projection (GPT-2, Llama `attention_bias`).
    pub o_bias: bool,
    /// Biases in the MLP (GPT-2, Llama `mlp_bias`).
    pub mlp_bias: bool,
    pub tie_word_embeddings: bool,
    /// RoPE for the Llama family, `None` for GPT-2.
    pub rope: Option<RopeConfig>,
    /// Qwen3's per-head RMSNorm of q and k (`q_norm`, `k_norm`).
    pub qk_norm: bool,
    /// `*ForSequenceClassification` (config.json's `architectures`): the number of
    /// labels of its `score` head on the last token, which replaces the LM head.
    pub score_labels: Option<usize>,
}

/// `config.json` fields of the supported decoders (GPT-2 names and Llama names).
#[derive(Debug, Clone, Deserialize)]
pub struct RawDecoderConfig {
    pub model_type: String,
    pub vocab_size: usize,
    // GPT-2
    pub n_embd: Option<usize>,
    pub n_layer: Option<usize>,
    pub n_head: Option<usize>,
    pub n_positions: Option<usize>,
    pub n_inner: Option<usize>,
    pub layer_norm_epsilon: Option<f64>,
    pub activation_function: Option<String>,
    pub scale_attn_weights: Option<bool>,
    pub scale_attn_by_inverse_layer_idx: Option<bool>,
    // Llama family
    pub hidden_size: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub hidden_act: Option<String>,
    pub max_position_embeddings: Option<usize>,
    pub rms_norm_eps: Option<f64>,
    pub rope_theta: Option<f64>,
    /// transformers < 5 (`rope_scaling`) and ≥ 5 (`rope_parameters`, which also holds
    /// `rope_theta`).
    pub rope_scaling: Option<serde_json::Value>,
    pub rope_parameters: Option<serde_json::Value>,
    pub partial_rotary_factor: Option<f64>,
    pub attention_bias: Option<bool>,
    pub mlp_bias: Option<bool>,
    pub tie_word_embeddings: Option<bool>,
    pub use_sliding_window: Option<bool>,
    /// Qwen3 (transformers ≥ 4.53): `full_attention` or `sliding_attention` per layer.
    pub layer_types: Option<Vec<String>>,
    pub architectures: Option<Vec<String>>,
    pub num_labels: Option<usize>,
    pub id2label: Option<serde_json::Map<String, serde_json::Value>>,
}

fn unsupported(field: &'static str, value: impl std::fmt::Display, why: &str) -> ConfigError {
    ConfigError::Unsupported {
        field,
        value: value.to_string(),
        why: why.to_string(),
    }
}

fn need<T: Copy>(v: Option<T>, field: &'static str) -> Result<T, ConfigError> {
    v.ok_or_else(|| unsupported(field, "absent", "required for this model_type"))
}

impl DecoderConfig {
    /// Reads and resolves `<dir>/config.json`.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        Self::resolve(read_config(
            path,
            "decoder (GPT-2, Llama, Mistral, Qwen2, Qwen3)",
        )?)
    }

    /// Validates a raw config and fills in the defaults of its `model_type`.
    pub fn resolve(r: RawDecoderConfig) -> Result<Self, ConfigError> {
        match ModelType::named(&r.model_type).map(|t| t.family) {
            Some(Family::Gpt2) => Self::resolve_gpt2(r),
            Some(Family::Llama) => Self::resolve_llama(r),
            None => Err(unsupported(
                "model_type",
                &r.model_type,
                &format!("causal LMs supported: {}", ModelType::names(false)),
            )),
        }
    }

    fn resolve_gpt2(r: RawDecoderConfig) -> Result<Self, ConfigError> {
        let hidden = need(r.n_embd, "n_embd")?;
        let heads = need(r.n_head, "n_head")?;
        if heads == 0 || hidden % heads != 0 {
            return Err(unsupported("n_head", heads, "must divide n_embd"));
        }
        let act = r.activation_function.as_deref().unwrap_or("gelu_new");
        if !matches!(act, "gelu_new" | "gelu_pytorch_tanh") {
            return Err(unsupported(
                "activation_function",
                act,
                "only gelu_new is implemented",
            ));
        }
        if r.scale_attn_weights == Some(false) {
            return Err(unsupported(
                "scale_attn_weights",
                false,
                "only scaled attention is implemented",
            ));
        }
        if r.scale_attn_by_inverse_layer_idx == Some(true) {
            return Err(unsupported(
                "scale_attn_by_inverse_layer_idx",
                true,
                "not implemented",
            ));
        }
        let score_labels = score_labels(&r)?;
        Ok(Self {
            family: Family::Gpt2,
            model_type: r.model_type,
            vocab_size: r.vocab_size,
            hidden_size: hidden,
            num_layers: need(r.n_layer, "n_layer")?,
            num_heads: heads,
            num_kv_heads: heads,
            head_dim: hidden / heads,
            intermediate_size: r.n_inner.unwrap_or(4 * hidden),
            max_position_embeddings: r.n_positions.unwrap_or(1024),
            norm_eps: r.layer_norm_epsilon.unwrap_or(1e-5) as f32,
            qkv_bias: true,
            o_bias: true,
            mlp_bias: true,
            tie_word_embeddings: r.tie_word_embeddings.unwrap_or(true),
            rope: None,
            qk_norm: false,
            score_labels,
        })
    }

    fn resolve_llama(r: RawDecoderConfig) -> Result<Self, ConfigError> {
        let hidden = need(r.hidden_size, "hidden_size")?;
        let heads = need(r.num_attention_heads, "num_attention_heads")?;
        let kv = r.num_key_value_heads.unwrap_or(heads);
        if kv == 0 || heads % kv != 0 {
            return Err(unsupported(
                "num_key_value_heads",
                kv,
                "must divide num_attention_heads",
            ));
        }
        let model_type = ModelType::named(&r.model_type).expect("resolve dispatched on it");
        let head_dim = r
            .head_dim
            .or(model_type.default_head_dim)
            .unwrap_or(hidden / heads.max(1));
        if !head_dim.is_multiple_of(2) {
            return Err(unsupported(
                "head_dim",
                head_dim,
                "RoPE needs an even head size",
            ));
        }
        let act = r.hidden_act.as_deref().unwrap_or("silu");
        if act != "silu" {
            return Err(unsupported(
                "hidden_act",
                act,
                "only silu (SwiGLU) is implemented",
            ));
        }
        if r.use_sliding_window == Some(true) {
            return Err(unsupported(
                "use_sliding_window",
                true,
                "sliding-window attention is not implemented",
            ));
        }
        if let Some(t) = r
            .layer_types
            .iter()
            .flatten()
            .find(|t| *t != "full_attention")
        {
            return Err(unsupported(
                "layer_types",
                t,
                "only full_attention layers are implemented",
            ));
        }
        let params = r.rope_parameters.as_ref().or(r.rope_scaling.as_ref());
        if let Some(f) = r
            .partial_rotary_factor
            .or_else(|| params.and_then(|p| p.get("partial_rotary_factor")?.as_f64()))
        {
            if f != 1.0 {
                return Err(unsupported(
                    "partial_rotary_factor",
                    f,
                    "only full rotary is implemented",
                ));
            }
        }
        let theta = r
            .rope_theta
            .or_else(|| params.and_then(|p| p.get("rope_theta")?.as_f64()))
            .unwrap_or(10_000.0);
        let scaling = rope_scaling(params, r.max_position_embeddings)?;
        let qwen = model_type.qkv_bias_only;
        let attention_bias = r.attention_bias.unwrap_or(false);
        Ok(Self {
            family: Family::Llama,
            vocab_size: r.vocab_size,
            hidden_size: hidden,
            num_layers: need(r.num_hidden_layers, "num_hidden_layers")?,
            num_heads: heads,
            num_kv_heads: kv,
            head_dim,
            intermediate_size: need(r.intermediate_size, "intermediate_size")?,
            max_position_embeddings: r.max_position_embeddings.unwrap_or(2048),
            norm_eps: r.rms_norm_eps.unwrap_or(1e-6) as f32,
            qkv_bias: qwen || attention_bias,
            o_bias: !qwen && attention_bias,
            mlp_bias: !qwen && r.mlp_bias.unwrap_or(false),
            tie_word_embeddings: r.tie_word_embeddings.unwrap_or(false),
            rope: Some(RopeConfig {
                theta: theta as f32,
                scaling,
            }),
            qk_norm: model_type.qk_norm,
            score_labels: score_labels(&r)?,
            model_type: r.model_type,
        })
    }

    /// The config a GGUF file's metadata describes (architectures `llama`, `mistral`,
    /// `qwen2`), as transformers' `gguf_config_mapping.py` derives it.
    pub fn from_gguf(g: &GgufFile) -> Result<Self, ConfigError> {
        let arch = g
            .get("general.architecture")
            .and_then(|v| v.as_str())
            .ok_or_else(|| {
                unsupported(
                    "general.architecture",
                    "absent",
                    "GGUF metadata must name the architecture",
                )
            })?
            .to_string();
        let Some(model_type) = ModelType::named(&arch).filter(|t| t.gguf) else {
            return Err(unsupported(
                "general.architecture",
                &arch,
                &format!(
                    "GGUF decoders supported: {} (GPT-2: use safetensors)",
                    ModelType::names(true)
                ),
            ));
        };
        let int = |key: &str| {
            g.get(&format!("{arch}.{key}"))
                .and_then(|v| v.as_u64())
                .map(|v| v as usize)
        };
        let float = |key: &str| g.get(&format!("{arch}.{key}")).and_then(|v| v.as_f64());
        let field = |key: &'static str, v: Option<usize>| {
            v.ok_or_else(|| unsupported(key, "absent", "required GGUF metadata"))
        };
        let hidden = field("<arch>.embedding_length", int("embedding_length"))?;
        let heads = field("<arch>.attention.head_count", int("attention.head_count"))?;
        let vocab = int("vocab_size")
            .or_else(|| {
                g.get("tokenizer.ggml.tokens")
                    .and_then(|v| v.as_array())
                    .map(<[_]>::len)
            })
            .or_else(|| g.tensors.get("token_embd.weight").map(|t| t.shape[0]));
        let scaling = match g
            .get(&format!("{arch}.rope.scaling.type"))
            .and_then(|v| v.as_str())
        {
            None | Some("none") => None,
            Some("linear") => Some(serde_json::json!({
                "rope_type": "linear",
                "factor": float("rope.scaling.factor").unwrap_or(1.0),
            })),
            Some(other) => {
                return Err(unsupported(
                    "<arch>.rope.scaling.type",
                    other,
                    "only linear RoPE scaling is read from GGUF",
                ))
            }
        };
        let raw = RawDecoderConfig {
            model_type: arch.clone(),
            vocab_size: field("<arch>.vocab_size", vocab)?,
            n_embd: None,
            n_layer: None,
            n_head: None,
            n_positions: None,
            n_inner: None,
            layer_norm_epsilon: None,
            activation_function: None,
            scale_attn_weights: None,
            scale_attn_by_inverse_layer_idx: None,
            hidden_size: Some(hidden),
            intermediate_size: int("feed_forward_length"),
            num_hidden_layers: int("block_count"),
            num_attention_heads: Some(heads),
            num_key_value_heads: int("attention.head_count_kv"),
            head_dim: int("attention.key_length").or(if model_type.qkv_bias_only {
                None
            } else {
                int("rope.dimension_count")
            }),
            hidden_act: None,
            max_position_embeddings: int("context_length"),
            rms_norm_eps: float("attention.layer_norm_rms_epsilon"),
            rope_theta: float("rope.freq_base"),
            rope_scaling: scaling,
            rope_parameters: None,
            partial_rotary_factor: None,
            attention_bias: Some(g.tensors.contains_key("blk.0.attn_q.bias")),
            mlp_bias: Some(false),
            tie_word_embeddings: Some(!g.tensors.contains_key("output.weight")),
            use_sliding_window: None,
            layer_types: None,
            architectures: None,
            num_labels: None,
            id2label: None,
        };
        let mut c = Self::resolve(raw)?;
        // llama.cpp's qwen2 always has q/k/v biases and none on o_proj.
        if !model_type.qkv_bias_only && c.qkv_bias {
            c.o_bias = g.tensors.contains_key("blk.0.attn_output.bias");
        }
        Ok(c)
    }

    /// Width of the fused `[q | k | v]` projection.
    pub fn qkv_width(&self) -> usize {
        (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
    }
}

/// The labels of a `*ForSequenceClassification` checkpoint (`id2label`, else
/// `num_labels`, else transformers' default 2); `None` for a causal LM.
fn score_labels(r: &RawDecoderConfig) -> Result<Option<usize>, ConfigError> {
    let Some(arch) = r.architectures.as_ref().and_then(|a| a.first()) else {
        return Ok(None);
    };
    if arch.ends_with("ForCausalLM") || arch.ends_with("LMHeadModel") {
        return Ok(None);
    }
    if !arch.ends_with("ForSequenceClassification") {
        return Err(unsupported(
            "architectures",
            arch,
            "decoders run as *ForCausalLM or *ForSequenceClassification",
        ));
    }
    let n = r
        .id2label
        .as_ref()
        .map(|m| m.len())
        .or(r.num_labels)
        .unwrap_or(2);
    if n == 0 {
        return Err(unsupported("id2label", "{}", "a classifier needs a label"));
    }
    Ok(Some(n))
}

/// Reads `rope_type` / `type` and its parameters.
fn rope_scaling(
    params: Option<&serde_json::Value>,
    max_positions: Option<usize>,
) -> Result<RopeScaling, ConfigError> {
    let Some(p) = params.filter(|p| !p.is_null()) else {
        return Ok(RopeScaling::None);
    };
    let kind = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    let num = |key: &'static str| {
        p.get(key)
            .and_then(|v| v.as_f64())
            .map(|v| v as f32)
            .ok_or_else(|| unsupported(key, "absent", &format!("required by rope_type {kind}")))
    };
    Ok(match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: num("factor")?,
        },
        "llama3" => RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_max_position_embeddings: num("original_max_position_embeddings")
                .or_else(|e| max_positions.map(|m| m as f32).ok_or(e))?,
        },
        other => {
            return Err(unsupported(
                "rope_parameters.rope_type",
                other,
                "implemented: default, linear, llama3",
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_config_names_the_decoder_kind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, b"{\"model_type\": ").unwrap();
        let err = DecoderConfig::from_file(&path).unwrap_err().to_string();
        assert!(
            err.ends_with(
                "is not a valid decoder (GPT-2, Llama, Mistral, Qwen2, Qwen3) config.json"
            ),
            "{err}"
        );
        assert!(!err.contains("DeBERTa"), "{err}");
    }

    fn raw(json: &str) -> Result<DecoderConfig, ConfigError> {
        DecoderConfig::resolve(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn llama_defaults_and_gqa() {
        let c = raw(
            r#"{"model_type":"llama","vocab_size":100,"hidden_size":64,"intermediate_size":96,
            "num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2}"#,
        )
        .unwrap();
        assert_eq!((c.head_dim, c.num_kv_heads, c.qkv_width()), (8, 2, 96));
        assert!(!c.tie_word_embeddings && !c.qkv_bias);
        assert_eq!(c.rope.unwrap().theta, 10_000.0);
    }

    #[test]
    fn qwen2_has_qkv_bias_only() {
        let c = raw(r#"{"model_type":"qwen2","vocab_size":10,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":2,"rope_parameters":{"rope_type":"default","rope_theta":1e6}}"#)
        .unwrap();
        assert!(c.qkv_bias && !c.o_bias && !c.mlp_bias);
        assert_eq!(c.rope.unwrap().theta, 1e6);
    }

    #[test]
    fn qwen3_normalises_q_and_k_and_reads_its_classifier_labels() {
        let c = raw(
            r#"{"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":2,"layer_types":["full_attention"]}"#,
        )
        .unwrap();
        assert!(c.qk_norm && !c.qkv_bias && c.score_labels.is_none());
        assert_eq!(c.head_dim, 128, "Qwen3Config's default head_dim");
        let c = raw(
            r#"{"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":2,"head_dim":4,
            "architectures":["Qwen3ForSequenceClassification"],"id2label":{"0":"LABEL_0"}}"#,
        )
        .unwrap();
        assert_eq!((c.head_dim, c.score_labels), (4, Some(1)));
        let e = raw(
            r#"{"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":2,
            "layer_types":["full_attention","sliding_attention"]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("layer_types"), "{e}");
        let e = raw(
            r#"{"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":2,
            "architectures":["Qwen3ForQuestionAnswering"]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("architectures"), "{e}");
    }

    #[test]
    fn rejects_unimplemented_fields_by_name() {
        let e = raw(
            r#"{"model_type":"gpt2","vocab_size":10,"n_embd":8,"n_layer":1,"n_head":2,
            "activation_function":"relu"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("activation_function"), "{e}");
        let e = raw(r#"{"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":8,
            "num_hidden_layers":1,"num_attention_heads":2,"rope_scaling":{"rope_type":"yarn","factor":2.0}}"#)
        .unwrap_err();
        assert!(e.to_string().contains("rope_type"), "{e}");
    }

    #[test]
    fn llama3_scaling_matches_transformers() {
        // transformers 5.23 `_compute_llama3_parameters` with θ = 500000, d = 8, factor 8,
        // low 1, high 4, original 8192 (values computed by torch in f32).
        let r = RopeConfig {
            theta: 500_000.0,
            scaling: RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            },
        };
        let got = r.inv_freq(8);
        let want = [1.0f32, 0.037_606_03, 0.000_524_846, 6.647_87e-6];
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1e-3), "{a} vs {b}");
        }
    }
}
