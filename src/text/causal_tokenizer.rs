//! Tokenizers of causal LMs and the prompt/target encoding of log-likelihood scoring.
//!
//! A model directory brings `tokenizer.json` (+ `tokenizer_config.json` for
//! `add_bos_token`). A GGUF file brings the tokenizer it describes in its metadata (`tokenizer.ggml.*`), built as
//! transformers' `integrations/gguf/gguf_tokenizer_mapping.py` builds it for
//! byte-level BPE vocabularies (`tokenizer.ggml.model = "gpt2"`): a BPE model over the
//! file's tokens and merges, the GPT-2 byte-level pre-tokenizer (or the split regex
//! its `tokenizer.ggml.pre` names) and decoder, and the tokens marked CONTROL (type
//! 3) added as special tokens, USER_DEFINED (type 4) as plain added tokens.
//!
//! The definition is assembled as a `tokenizer.json` document and loaded through the
//! tokenizers crate, so it runs exactly the code a `tokenizer.json` would.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value as Json};

use crate::model::decoder::DecoderSource;
use crate::model::gguf::{GgufFile, Value};
use crate::model::language_model::LanguageModelSource;

/// The pre-tokenizer split of llama.cpp's `llama-bpe` family (`_LLAMA3_SPLIT` in
/// transformers' mapping).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// `tokenizer.ggml.pre` values that use [`LLAMA3_SPLIT`].
const LLAMA3_PRE: &[&str] = &[
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "dbrx",
    "smaug-bpe",
];

/// `tokenizer.ggml.pre` values transformers maps to other split regexes, which
/// hopscore does not implement (an error rather than a silently different split).
const OTHER_SPLIT_PRE: &[&str] = &[
    "tekken",
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "megrez",
    "qwen35",
    "gpt-4o",
    "llama4",
    "kanana2",
    "talkie",
    "minimax-m2",
];

/// The tokenizer of the scoring LM `source` opened from `model`: `tokenizer` when
/// given; else a T5 or HF directory's tokenizer.json, or a GGUF file's vocabulary.
pub fn for_model(
    source: &LanguageModelSource,
    model: &Path,
    tokenizer: Option<&Path>,
) -> Result<CausalTokenizer> {
    match (source, tokenizer) {
        (_, Some(t)) => CausalTokenizer::from_dir(model, Some(t)),
        (LanguageModelSource::Seq2Seq { dir, .. }, None) => CausalTokenizer::from_dir(dir, None),
        (LanguageModelSource::Causal(DecoderSource::Gguf(g)), None) => from_gguf(g),
        (LanguageModelSource::Causal(DecoderSource::Hf { dir, .. }), None) => {
            CausalTokenizer::from_dir(dir, None)
        }
    }
}

/// A causal LM's tokenizer and its BOS policy.
pub struct CausalTokenizer {
    pub tokenizer: tokenizers::Tokenizer,
    /// Whether a BOS token starts every sequence (`tokenizer.ggml.add_bos_token`, or
    /// `add_bos_token` in tokenizer_config.json; default false).
    pub add_bos: bool,
    pub bos_id: Option<u32>,
    /// Where it came from (for messages and output metadata).
    pub source: PathBuf,
}

/// Prompt and target ids of one row: `ids[target_start..]` are the target tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedPair {
    pub ids: Vec<u32>,
    pub target_start: usize,
}

impl CausalTokenizer {
    /// `tokenizer.json` (a file, or a directory holding it; default the model
    /// directory) with `add_bos_token` / `bos_token` read from the
    /// `tokenizer_config.json` beside it.
    pub fn from_dir(model_dir: &Path, explicit: Option<&Path>) -> Result<Self> {
        let path = crate::text::TextTokenizer::locate(model_dir, explicit)?;
        let mut tokenizer = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| anyhow!("cannot load tokenizer {}: {e}", path.display()))?;
        // Truncation or padding built into a tokenizer.json would silently change the
        // scored tokens; over-long rows are quarantined instead (`--max-length`).
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| anyhow!("cannot clear truncation: {e}"))?;
        let cfg_path = path.with_file_name("tokenizer_config.json");
        let cfg: Json = if cfg_path.is_file() {
            serde_json::from_str(&std::fs::read_to_string(&cfg_path)?)
                .with_context(|| format!("{} is not valid JSON", cfg_path.display()))?
        } else {
            Json::Null
        };
        let add_bos = cfg
            .get("add_bos_token")
            .and_then(Json::as_bool)
            .unwrap_or(false);
        let bos_token = cfg
            .get("bos_token")
            .and_then(|b| b.as_str().or_else(|| b.get("content")?.as_str()));
        let bos_id = bos_token.and_then(|t| tokenizer.token_to_id(t));
        if add_bos && bos_id.is_none() {
            bail!(
                "{} sets add_bos_token but its bos_token is not in the vocabulary",
                cfg_path.display()
            );
        }
        Ok(Self {
            tokenizer,
            add_bos,
            bos_id,
            source: path,
        })
    }

    /// Ids of `text`, no special tokens added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .tokenizer
            .encode_fast(text, false)
            .map_err(|e| anyhow!("tokenizer failed: {e}"))?
            .get_ids()
            .to_vec())
    }

    /// Text of `ids`, special tokens skipped (no clean-up of spaces).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| anyhow!("tokenizer failed to decode: {e}"))
    }

    /// Tokens the tokenizer's post-processor adds to one sequence (T5's `</s>`).
    pub fn added_tokens(&self) -> usize {
        use tokenizers::PostProcessor;
        self.tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false))
    }

    /// Ids of `text` with the special tokens the tokenizer adds (HF `tokenizer(text)`),
    /// the text's own tokens cut first so that at most `max_tokens` remain (HF
    /// `truncation=True, max_length=max_tokens`).
    pub fn encode_with_specials(&self, text: &str, max_tokens: Option<usize>) -> Result<Vec<u32>> {
        let mut enc = self
            .tokenizer
            .encode_fast(text, false)
            .map_err(|e| anyhow!("tokenizer failed: {e}"))?;
        if let Some(max) = max_tokens {
            let room = max.saturating_sub(self.added_tokens());
            enc.truncate(room, 0, tokenizers::TruncationDirection::Right);
        }
        Ok(self
            .tokenizer
            .post_process(enc, None, true)
            .map_err(|e| anyhow!("tokenizer failed to add special tokens: {e}"))?
            .get_ids()
            .to_vec())
    }

    /// `[BOS] prompt target` as lm-evaluation-harness builds a context/continuation
    /// pair: trailing whitespace of the prompt moves to the start of the target, the
    /// two are tokenised separately, and BOS is prepended when the tokenizer says so.
    pub fn encode_pair(&self, prompt: &str, target: &str) -> Result<EncodedPair> {
        let trimmed = prompt.trim_end();
        let moved = format!("{}{target}", &prompt[trimmed.len()..]);
        let mut ids = Vec::new();
        if self.add_bos {
            ids.push(
                self.bos_id
                    .ok_or_else(|| anyhow!("add_bos is set but there is no BOS id"))?,
            );
        }
        ids.extend(self.encode(trimmed)?);
        let target_start = ids.len();
        ids.extend(self.encode(&moved)?);
        Ok(EncodedPair { ids, target_start })
    }
}

fn strings<'a>(g: &'a GgufFile, key: &str) -> Result<Vec<&'a str>> {
    let arr = g
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("GGUF metadata `{key}` is missing or not an array"))?;
    arr.iter()
        .map(|v| {
            v.as_str()
                .ok_or_else(|| anyhow!("GGUF metadata `{key}` holds a non-string"))
        })
        .collect()
}

/// Builds the tokenizer of `g`.
pub fn from_gguf(g: &GgufFile) -> Result<CausalTokenizer> {
    let model = g
        .get("tokenizer.ggml.model")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("GGUF metadata `tokenizer.ggml.model` is missing: the file has no tokenizer (pass --tokenizer tokenizer.json)"))?;
    if model != "gpt2" {
        bail!(
            "GGUF tokenizer.ggml.model = {model:?}: hopscore builds byte-level BPE (\"gpt2\") \
             tokenizers from GGUF; pass --tokenizer tokenizer.json for this model"
        );
    }
    let tokens = strings(g, "tokenizer.ggml.tokens")?;
    let merges = strings(g, "tokenizer.ggml.merges")?;
    let types: Vec<u64> = match g.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
        Some(a) => a.iter().map(|v| v.as_u64().unwrap_or(1)).collect(),
        None => Vec::new(),
    };
    let pre = g
        .get("tokenizer.ggml.pre")
        .and_then(Value::as_str)
        .unwrap_or("default");
    if OTHER_SPLIT_PRE.contains(&pre) {
        bail!("GGUF tokenizer.ggml.pre = {pre:?} needs a split regex hopscore does not implement; pass --tokenizer tokenizer.json");
    }

    let vocab: serde_json::Map<String, Json> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| ((*t).to_string(), json!(i)))
        .collect();
    if vocab.len() != tokens.len() {
        bail!("GGUF tokenizer.ggml.tokens has duplicate tokens");
    }
    // Every token of a byte-level vocabulary is spelled in the 256-character byte
    // alphabet; a CONTROL token outside it is a llama.cpp mislabel and is skipped (as
    // transformers does).
    let alphabet: std::collections::HashSet<char> = byte_alphabet();
    let mut added = Vec::new();
    for (i, (t, ty)) in tokens.iter().zip(&types).enumerate() {
        let special = match ty {
            3 if t.chars().all(|c| alphabet.contains(&c)) => true,
            4 => false,
            _ => continue,
        };
        added.push(json!({
            "id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": special,
        }));
    }
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let pre_tokenizer = if LLAMA3_PRE.contains(&pre) {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]})
    } else {
        byte_level(true)
    };
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": byte_level(true),
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": "", "end_of_word_suffix": "",
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges,
        },
    });
    let tokenizer: tokenizers::Tokenizer = doc
        .to_string()
        .parse()
        .map_err(|e| anyhow!("cannot build the GGUF tokenizer: {e}"))?;
    Ok(CausalTokenizer {
        tokenizer,
        source: g.path().to_path_buf(),
        add_bos: g
            .get("tokenizer.ggml.add_bos_token")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        bos_id: g
            .get("tokenizer.ggml.bos_token_id")
            .and_then(Value::as_u64)
            .map(|v| v as u32),
    })
}

/// The 256 characters GPT-2's byte-level encoding maps bytes to.
fn byte_alphabet() -> std::collections::HashSet<char> {
    let mut set = std::collections::HashSet::new();
    let mut n = 0u32;
    for b in 0u32..256 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        if printable {
            set.insert(char::from_u32(b).expect("valid"));
        } else {
            set.insert(char::from_u32(256 + n).expect("valid"));
            n += 1;
        }
    }
    set
}
