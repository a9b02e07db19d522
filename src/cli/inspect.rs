//! `hopscore inspect`: what a model directory holds, without running it.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::model::cross_encoder::ModelFiles;
use crate::model::decoder_config::{decoder_type_of, DecoderConfig};
use crate::model::heads::Pooling;
use crate::model::weights::WeightStore;
use crate::text::TextTokenizer;

#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// Model directory (config.json + safetensors weights): an encoder or a decoder.
    #[arg(long, value_parser = crate::options::values::model_path)]
    pub model: PathBuf,
    /// tokenizer.json to report on, when the model directory has none.
    #[arg(long, value_parser = crate::options::values::model_path)]
    pub tokenizer: Option<PathBuf>,
}

/// An encoder's config, parameters and heads.
fn describe_encoder(s: &mut String, args: &InspectArgs) -> Result<()> {
    let files = ModelFiles::open(&args.model)?;
    let c = &files.config;
    let store = files
        .weights
        .store()
        .expect("a model directory has a store");
    writeln!(
        s,
        "encoder    {}: {} layers, hidden {}, {} heads × {}, ffn {}, vocab {}",
        c.family.name(),
        c.num_layers,
        c.hidden_size,
        c.num_heads,
        c.head_size,
        c.intermediate_size,
        c.vocab_size
    )?;
    match &c.relative {
        Some(r) => writeln!(
            s,
            "attention  relative: {} c2p={} p2c={} share_att_key={} norm_rel_ebd={}",
            match r.buckets {
                Some(b) => format!("{b} log buckets up to {}", r.max_relative_positions),
                None => format!("offsets clamped to ±{}", r.span),
            },
            r.c2p,
            r.p2c,
            r.share_att_key,
            r.norm_rel_ebd
        )?,
        None => writeln!(s, "attention  absolute positions only")?,
    }
    writeln!(
        s,
        "inputs     max positions {} (from table row {}), position-biased input {}, token types {}{}",
        c.max_position_embeddings,
        c.position_offset,
        c.position_biased_input,
        c.type_vocab_size,
        if c.token_types_from_input { "" } else { " (all 0)" }
    )?;
    describe_parameters(s, store)?;
    let heads = files.heads();
    if heads.is_empty() {
        writeln!(s, "heads      none (encoder only)")?;
    }
    for h in heads {
        writeln!(
            s,
            "head       {:<9} {} labels, {:?} pooling (tensor `{}`{})",
            h.name,
            h.num_labels,
            h.pooling,
            h.tensor,
            match h.pooling {
                Pooling::Pooler | Pooling::MeanPooler =>
                    format!(", pooler `{}` + {:?}", h.pooler, h.pooler_act),
                _ => String::new(),
            }
        )?;
    }
    Ok(())
}

/// The parameter count per stored dtype.
fn describe_parameters(s: &mut String, store: &WeightStore) -> Result<()> {
    let dtypes = store.dtype_summary();
    let total: usize = dtypes.values().sum();
    writeln!(s, "parameters {total} ({:.1} M)", total as f64 / 1e6)?;
    for (dtype, n) in &dtypes {
        writeln!(s, "  {dtype:<8} {n}")?;
    }
    Ok(())
}

/// A decoder's config, parameters and head.
fn describe_decoder(
    s: &mut String,
    args: &InspectArgs,
    config_json: &std::path::Path,
) -> Result<()> {
    let c = DecoderConfig::from_file(config_json)?;
    writeln!(
        s,
        "decoder    {} ({:?} family): {} layers, hidden {}, {} heads × {} over {} kv heads, ffn {}, vocab {}",
        c.model_type,
        c.family,
        c.num_layers,
        c.hidden_size,
        c.num_heads,
        c.head_dim,
        c.num_kv_heads,
        c.intermediate_size,
        c.vocab_size
    )?;
    match c.rope {
        Some(r) => writeln!(
            s,
            "attention  RoPE θ = {}, {}{}",
            r.theta,
            match r.scaling {
                crate::model::decoder_config::RopeScaling::None => "no scaling".to_string(),
                other => format!("{other:?}"),
            },
            if c.qk_norm {
                ", q/k RMSNorm per head"
            } else {
                ""
            }
        )?,
        None => writeln!(
            s,
            "attention  learned positions up to {}",
            c.max_position_embeddings
        )?,
    }
    let store = WeightStore::open(&args.model)?;
    describe_parameters(s, &store)?;
    match c.score_labels {
        Some(n) => writeln!(s, "head       score: {n} labels on the last token (rerank)")?,
        None if c.tie_word_embeddings => writeln!(s, "head       LM head tied to the embeddings")?,
        None => writeln!(s, "head       LM head `lm_head.weight`")?,
    }
    Ok(())
}

/// The report as text.
pub fn run(args: &InspectArgs) -> Result<String> {
    let mut args = args.clone();
    crate::options::resolve_models(crate::options::model_and_tokenizer(
        [&mut args.model],
        args.tokenizer.as_mut(),
    ))?;
    let mut s = String::new();
    writeln!(s, "model      {}", args.model.display())?;
    let config_json = args.model.join("config.json");
    if config_json.is_file() && decoder_type_of(&config_json)?.is_some() {
        describe_decoder(&mut s, &args, &config_json)?;
    } else {
        describe_encoder(&mut s, &args)?;
    }
    match TextTokenizer::locate(&args.model, args.tokenizer.as_deref()) {
        Ok(p) => writeln!(s, "tokenizer  {}", p.display())?,
        Err(_) => writeln!(s, "tokenizer  none (pass --tokenizer to the job)")?,
    }
    let kernels: Vec<&str> = crate::backend::kernels::MODULES
        .iter()
        .map(|(n, _)| *n)
        .collect();
    writeln!(
        s,
        "engine     hopscore {}, CUDA kernels embedded: {}",
        env!("CARGO_PKG_VERSION"),
        if kernels.is_empty() {
            "none (built without nvcc)".to_string()
        } else {
            format!(
                "{} ({} entry points)",
                kernels.join(", "),
                crate::backend::kernels::KERNEL_ENTRIES.len()
            )
        }
    )?;
    Ok(s)
}
