//! `hopscore inspect`: what a model directory holds, without running it.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::model::cross_encoder::ModelFiles;
use crate::model::heads::Pooling;
use crate::text::TextTokenizer;

#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// Model directory (config.json + safetensors weights).
    #[arg(long, value_parser = crate::options::values::model_path)]
    pub model: PathBuf,
    /// tokenizer.json to report on, when the model directory has none.
    #[arg(long, value_parser = crate::options::values::model_path)]
    pub tokenizer: Option<PathBuf>,
}

/// The report as text.
pub fn run(args: &InspectArgs) -> Result<String> {
    let mut args = args.clone();
    crate::options::resolve_models(crate::options::model_and_tokenizer(
        [&mut args.model],
        args.tokenizer.as_mut(),
    ))?;
    let files = ModelFiles::open(&args.model)?;
    let c = &files.config;
    let store = files
        .weights
        .store()
        .expect("a model directory has a store");
    let mut s = String::new();
    writeln!(s, "model      {}", args.model.display())?;
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
    let dtypes = store.dtype_summary();
    let total: usize = dtypes.values().sum();
    writeln!(s, "parameters {total} ({:.1} M)", total as f64 / 1e6)?;
    for (dtype, n) in &dtypes {
        writeln!(s, "  {dtype:<8} {n}")?;
    }
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
    match TextTokenizer::locate(&args.model, args.tokenizer.as_deref()) {
        Ok(p) => writeln!(s, "tokenizer  {}", p.display())?,
        Err(_) => writeln!(s, "tokenizer  none (pass --tokenizer to classify)")?,
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
