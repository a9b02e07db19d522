//! DeBERTa-v2/v3 configuration: HF `config.json` (`model_type = "deberta-v2"`) parsed
//! into a [`RawConfig`] and resolved into a validated [`DebertaConfig`].
//!
//! Defaults follow `transformers/models/deberta_v2/configuration_deberta_v2.py` and
//! the `getattr(config, …, default)` calls of `modeling_deberta_v2.py`. Anything the
//! engine does not implement is rejected with an error naming the field.

use std::path::Path;

use serde::Deserialize;
use thiserror::Error;

/// A config field that is missing, malformed or not implemented. The variants that
/// wrap an error keep it as their `source` and leave it out of their message: a
/// caller prints the chain (`{:#}`) and the cause appears once.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// `kind`: the model family the config was read for (`DeBERTa`, `decoder`).
    #[error("{path} is not a valid {kind} config.json")]
    Parse {
        path: String,
        kind: &'static str,
        source: serde_json::Error,
    },
    #[error("config field `{field}` = {value}: {why}")]
    Unsupported {
        field: &'static str,
        value: String,
        why: String,
    },
}

/// `config.json` as written by HF transformers (only the fields the encoder reads).
#[derive(Debug, Clone, Deserialize)]
pub struct RawConfig {
    pub model_type: Option<String>,
    /// May be `null` in configs written for custom modules.
    #[serde(default)]
    pub architectures: Option<Vec<String>>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub relative_attention: bool,
    #[serde(default = "minus_one")]
    pub max_relative_positions: i64,
    #[serde(default = "minus_one")]
    pub position_buckets: i64,
    /// A list (`["p2c","c2p"]`) in v3 configs, a `|`-separated string in old v2 ones.
    #[serde(default)]
    pub pos_att_type: Option<serde_json::Value>,
    #[serde(default)]
    pub share_att_key: bool,
    #[serde(default)]
    pub norm_rel_ebd: Option<String>,
    /// HF defaults to `true` when the field is absent.
    #[serde(default = "yes")]
    pub position_biased_input: bool,
    pub embedding_size: Option<usize>,
    pub attention_head_size: Option<usize>,
    #[serde(default)]
    pub conv_kernel_size: usize,
    pub pooler_hidden_size: Option<usize>,
    #[serde(default = "default_act")]
    pub pooler_hidden_act: String,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_max_pos() -> usize {
    512
}
fn default_eps() -> f64 {
    1e-7
}
fn minus_one() -> i64 {
    -1
}
fn yes() -> bool {
    true
}

/// Relative-position settings of the disentangled attention.
#[derive(Debug, Clone, PartialEq)]
pub struct RelativeConfig {
    /// Log-bucket count (`position_buckets`); `None` means raw offsets `i − j`.
    pub buckets: Option<usize>,
    /// `max_relative_positions` after defaulting to `max_position_embeddings`.
    pub max_relative_positions: usize,
    /// Half-width of the relative embedding table: `buckets` or `max_relative_positions`.
    pub span: usize,
    pub c2p: bool,
    pub p2c: bool,
    /// Position projections reuse `key_proj`/`query_proj` (v3) instead of
    /// `pos_key_proj`/`pos_query_proj` (v2).
    pub share_att_key: bool,
    /// LayerNorm on the relative embedding table (`norm_rel_ebd = "layer_norm"`).
    pub norm_rel_ebd: bool,
}

/// Resolved, validated DeBERTa-v2/v3 encoder configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct DebertaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub embedding_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub head_size: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub position_biased_input: bool,
    pub layer_norm_eps: f32,
    pub relative: Option<RelativeConfig>,
    /// `1 + #{c2p, p2c} in pos_att_type`: HF divides scores by `sqrt(d · factor)`
    /// even when `relative_attention` is false.
    pub scale_factor: usize,
    pub pooler_hidden_size: usize,
    /// HF `architectures` entry, used to tell token from sequence classification.
    pub architectures: Vec<String>,
    /// The FFN's GELU is the tanh approximation (`hidden_act` "gelu_new" or
    /// "gelu_pytorch_tanh"), on a GPU fused into the up-projection's GEMM; else erf.
    pub tanh_gelu: bool,
    /// Names of the query, key and value projections under `attention.self`:
    /// [`DEBERTA_PROJECTIONS`], or BERT's (`crate::model::bert`).
    pub projections: [&'static str; 3],
    /// The HF family the checkpoint is of: where its heads are and what they compute.
    pub family: EncoderFamily,
    /// The row of the position table that position 0 reads: RoBERTa's
    /// `padding_idx + 1` (`create_position_ids_from_input_ids`), else 0.
    /// `max_position_embeddings` counts the rows from it on.
    pub position_offset: usize,
    /// The token types are the input's (BERT, DeBERTa); without, every token is of
    /// type 0 (RoBERTa and XLM-R, whose tokenizers give the model no
    /// `token_type_ids`).
    pub token_types_from_input: bool,
    /// ModernBERT's own settings (pre-LN, RoPE, sliding windows, GeGLU), `None` for the
    /// BERT-layout families.
    pub modernbert: Option<super::modernbert::ModernBertSettings>,
}

/// The HF model family of an encoder checkpoint (its `model_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderFamily {
    /// `deberta-v2` (DeBERTa v2 and v3).
    Deberta,
    /// `bert` (MiniLM, Contriever, E5, BGE, the ms-marco cross-encoders).
    Bert,
    /// `roberta` and `xlm-roberta` (bge-reranker-v2-m3, XLM-R cross-encoders).
    Roberta,
    /// `modernbert` (gte-reranker-modernbert-base): its own layers
    /// (`crate::model::modernbert`).
    ModernBert,
}

impl EncoderFamily {
    /// Its name for people.
    pub fn name(self) -> &'static str {
        match self {
            Self::Deberta => "DeBERTa-v2/v3",
            Self::Bert => "BERT",
            Self::Roberta => "RoBERTa / XLM-RoBERTa",
            Self::ModernBert => "ModernBERT",
        }
    }
}

/// DeBERTa's attention projection names (`DisentangledSelfAttention.query_proj`, …).
pub const DEBERTA_PROJECTIONS: [&str; 3] = ["query_proj", "key_proj", "value_proj"];

/// `config.json` at `path` parsed as `T`, the config of a `kind` model (for messages).
pub fn read_config<T: serde::de::DeserializeOwned>(
    path: &Path,
    kind: &'static str,
) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.display().to_string(),
        kind,
        source,
    })
}

impl DebertaConfig {
    /// Reads and resolves a DeBERTa `config.json`.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        read_config::<RawConfig>(path, "DeBERTa")?.resolve()
    }

    /// Reads the `config.json` of any encoder family by its `model_type`: DeBERTa
    /// (`deberta-v2`, or no `model_type`), BERT, RoBERTa / XLM-R, ModernBERT.
    pub fn from_any_file(path: &Path) -> Result<Self, ConfigError> {
        #[derive(Deserialize)]
        struct ModelType {
            model_type: Option<String>,
        }
        let found: ModelType = read_config(path, "encoder")?;
        match found.model_type.as_deref() {
            None | Some("deberta-v2") => Self::from_file(path),
            Some("bert") => super::bert::read_config(path),
            Some(mt) if super::roberta::MODEL_TYPES.contains(&mt) => {
                super::roberta::read_config(path)
            }
            Some(super::modernbert::MODEL_TYPE) => super::modernbert::read_config(path),
            Some(mt) => Err(unsupported(
                "model_type",
                mt,
                "the encoders implemented are \"deberta-v2\", \"bert\", \"xlm-roberta\", \"roberta\" \
                 and \"modernbert\"",
            )),
        }
    }

    /// Size of the attention projections (`num_heads · head_size`).
    pub fn all_head_size(&self) -> usize {
        self.num_heads * self.head_size
    }
}

/// The error for a config field the engine does not implement.
pub fn unsupported(field: &'static str, value: impl std::fmt::Debug, why: &str) -> ConfigError {
    ConfigError::Unsupported {
        field,
        value: format!("{value:?}"),
        why: why.to_string(),
    }
}

impl RawConfig {
    /// Validates the raw config and fills in HF defaults.
    pub fn resolve(self) -> Result<DebertaConfig, ConfigError> {
        if let Some(mt) = &self.model_type {
            if mt != "deberta-v2" {
                return Err(unsupported(
                    "model_type",
                    mt,
                    "hopscore's encoder implements model_type \"deberta-v2\" (DeBERTa v2 and v3)",
                ));
            }
        }
        // HF ACT2FN: "gelu" is erf's; "gelu_new" and "gelu_pytorch_tanh" the tanh form.
        let tanh_gelu =
            match self.hidden_act.as_str() {
                "gelu" => false,
                "gelu_new" | "gelu_pytorch_tanh" => true,
                other => return Err(unsupported(
                    "hidden_act",
                    other,
                    "\"gelu\" (erf), \"gelu_new\" and \"gelu_pytorch_tanh\" (tanh) are implemented",
                )),
            };
        if self.pooler_hidden_act != "gelu" {
            return Err(unsupported(
                "pooler_hidden_act",
                &self.pooler_hidden_act,
                "only \"gelu\" is implemented",
            ));
        }
        if self.conv_kernel_size > 0 {
            return Err(unsupported(
                "conv_kernel_size",
                self.conv_kernel_size,
                "the v2 ConvLayer (deberta-v2-xlarge/xxlarge) is not implemented",
            ));
        }
        if self.num_attention_heads == 0 || self.hidden_size == 0 {
            return Err(unsupported(
                "num_attention_heads",
                self.num_attention_heads,
                "must be > 0",
            ));
        }
        let head_size = self
            .attention_head_size
            .unwrap_or(self.hidden_size / self.num_attention_heads);
        if self.attention_head_size.is_none()
            && !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(unsupported(
                "num_attention_heads",
                self.num_attention_heads,
                &format!("hidden_size {} is not a multiple of it", self.hidden_size),
            ));
        }
        let (c2p, p2c) = self.pos_att_flags()?;
        let relative = if self.relative_attention {
            Some(self.resolve_relative(c2p, p2c)?)
        } else {
            None
        };
        Ok(DebertaConfig {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            embedding_size: self.embedding_size.unwrap_or(self.hidden_size),
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            head_size,
            intermediate_size: self.intermediate_size,
            max_position_embeddings: self.max_position_embeddings,
            type_vocab_size: self.type_vocab_size,
            position_biased_input: self.position_biased_input,
            layer_norm_eps: self.layer_norm_eps as f32,
            relative,
            scale_factor: 1 + usize::from(c2p) + usize::from(p2c),
            pooler_hidden_size: self.pooler_hidden_size.unwrap_or(self.hidden_size),
            architectures: self.architectures.unwrap_or_default(),
            tanh_gelu,
            projections: DEBERTA_PROJECTIONS,
            family: EncoderFamily::Deberta,
            position_offset: 0,
            token_types_from_input: true,
            modernbert: None,
        })
    }

    /// `(c2p, p2c)` from `pos_att_type`.
    fn pos_att_flags(&self) -> Result<(bool, bool), ConfigError> {
        let mut c2p = false;
        let mut p2c = false;
        for kind in self.pos_att_types()? {
            match kind.as_str() {
                "c2p" => c2p = true,
                "p2c" => p2c = true,
                other => {
                    return Err(unsupported(
                        "pos_att_type",
                        other,
                        "only \"c2p\" and \"p2c\" are implemented (DeBERTa-v2 has no p2p)",
                    ))
                }
            }
        }
        Ok((c2p, p2c))
    }

    fn resolve_relative(&self, c2p: bool, p2c: bool) -> Result<RelativeConfig, ConfigError> {
        let max_rel = if self.max_relative_positions < 1 {
            self.max_position_embeddings
        } else {
            self.max_relative_positions as usize
        };
        let buckets = (self.position_buckets > 0).then_some(self.position_buckets as usize);
        if let Some(b) = buckets.filter(|&b| max_rel <= b / 2 + 1) {
            // HF's make_log_bucket_position divides by log((max_position − 1) / (b/2)):
            // at or below 1 the buckets are no longer ordered by offset (or divide by 0).
            let (field, value) = match self.max_relative_positions < 1 {
                true => (
                    "max_position_embeddings",
                    self.max_position_embeddings as i64,
                ),
                false => ("max_relative_positions", self.max_relative_positions),
            };
            return Err(unsupported(
                field,
                value,
                &format!(
                    "with position_buckets {b} the relative positions must reach beyond \
                     {} (position_buckets / 2 + 1) for the log buckets to be ordered; \
                     raise it (DeBERTa-v3: 512) or lower position_buckets",
                    b / 2 + 1
                ),
            ));
        }
        let norm = self
            .norm_rel_ebd
            .as_deref()
            .unwrap_or("none")
            .to_lowercase();
        let mut norm_rel_ebd = false;
        for part in norm.split('|').map(str::trim) {
            match part {
                "layer_norm" => norm_rel_ebd = true,
                "none" | "" => {}
                other => {
                    return Err(unsupported(
                        "norm_rel_ebd",
                        other,
                        "expected \"layer_norm\" or \"none\"",
                    ))
                }
            }
        }
        Ok(RelativeConfig {
            buckets,
            max_relative_positions: max_rel,
            span: buckets.unwrap_or(max_rel),
            c2p,
            p2c,
            share_att_key: self.share_att_key,
            norm_rel_ebd,
        })
    }

    fn pos_att_types(&self) -> Result<Vec<String>, ConfigError> {
        use serde_json::Value;
        let norm = |s: &str| s.trim().to_lowercase();
        Ok(match &self.pos_att_type {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => s
                .split('|')
                .map(norm)
                .filter(|s| !s.is_empty() && s != "none")
                .collect(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(norm)
                        .ok_or_else(|| unsupported("pos_att_type", v, "entries must be strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(unsupported(
                    "pos_att_type",
                    other,
                    "expected a list or a |-separated string",
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(extra: serde_json::Value) -> RawConfig {
        let mut base = serde_json::json!({
            "model_type": "deberta-v2", "vocab_size": 100, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
        });
        base.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn v3_defaults_resolve() {
        let c = raw(serde_json::json!({
            "relative_attention": true, "position_buckets": 256, "pos_att_type": ["p2c", "c2p"],
            "share_att_key": true, "norm_rel_ebd": "layer_norm", "position_biased_input": false
        }))
        .resolve()
        .unwrap();
        let r = c.relative.as_ref().unwrap();
        assert_eq!((r.span, r.max_relative_positions), (256, 512));
        assert!(r.c2p && r.p2c && r.share_att_key && r.norm_rel_ebd);
        assert_eq!((c.head_size, c.scale_factor), (8, 3));
    }

    #[test]
    fn v2_string_pos_att_type_and_default_position_bias() {
        let c = raw(serde_json::json!({
            "relative_attention": true, "pos_att_type": "c2p|p2c", "max_relative_positions": 128
        }))
        .resolve()
        .unwrap();
        let r = c.relative.unwrap();
        assert_eq!((r.buckets, r.span), (None, 128));
        assert!(
            c.position_biased_input,
            "HF defaults position_biased_input to true"
        );
    }

    #[test]
    fn scale_counts_pos_att_type_without_relative_attention() {
        let c = raw(serde_json::json!({"pos_att_type": ["p2c", "c2p"]}))
            .resolve()
            .unwrap();
        assert!(c.relative.is_none());
        assert_eq!(c.scale_factor, 3);
    }

    #[test]
    fn unsupported_fields_are_named() {
        for (extra, field) in [
            (
                serde_json::json!({"conv_kernel_size": 3}),
                "conv_kernel_size",
            ),
            (serde_json::json!({"hidden_act": "relu"}), "hidden_act"),
            (serde_json::json!({"hidden_act": "gelu_fast"}), "hidden_act"),
            (
                serde_json::json!({"relative_attention": true, "pos_att_type": ["p2p"]}),
                "pos_att_type",
            ),
            (serde_json::json!({"model_type": "bert"}), "model_type"),
        ] {
            let err = raw(extra).resolve().unwrap_err().to_string();
            assert!(err.contains(&format!("`{field}`")), "{err}");
        }
    }

    #[test]
    fn relative_positions_too_short_for_the_log_buckets_are_named() {
        // Issue 26: max_position_embeddings 8–128 with 256 buckets made `beam` panic.
        let rel = |extra: serde_json::Value| {
            let mut v = serde_json::json!({"relative_attention": true, "position_buckets": 256,
                "pos_att_type": ["p2c", "c2p"], "max_relative_positions": -1});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            raw(v).resolve()
        };
        for (extra, field) in [
            (
                serde_json::json!({"max_position_embeddings": 8}),
                "max_position_embeddings",
            ),
            (
                serde_json::json!({"max_position_embeddings": 129}),
                "max_position_embeddings",
            ),
            (
                serde_json::json!({"max_relative_positions": 64}),
                "max_relative_positions",
            ),
        ] {
            let err = rel(extra).unwrap_err().to_string();
            assert!(err.contains(&format!("`{field}`")), "{err}");
        }
        assert!(rel(serde_json::json!({"max_position_embeddings": 130})).is_ok());
        assert!(rel(serde_json::json!({"max_position_embeddings": 512})).is_ok());
    }
}
