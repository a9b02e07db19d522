//! `hopscore classify`: cross-encoder scoring of `(id, text_a[, text_b])` rows.
//!
//! Rows stream from the input Parquet in chunks; each chunk is tokenised in parallel,
//! its rows sorted by length and packed into token-budget batches, scored, and written
//! back in input order. Rows that cannot be scored go to the quarantine file.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use arrow::array::{ArrayRef, Float32Builder, ListBuilder, RecordBatch};
use arrow::datatypes::{DataType, Field};
use clap::Args;
use rayon::prelude::*;

use super::rows::{self, RowOutput, RowSummary};
use super::{run_metadata, with_backend, DeviceOpts};
use crate::backend::Backend;
use crate::io::parquet_io::{check_text, string_column, ParquetInput};
use crate::model::batch::{token_budget_groups, PackedBatch, Sequence};
use crate::model::cross_encoder::{CrossEncoder, ModelFiles};
use crate::model::heads::select;
use crate::text::TextTokenizer;

/// Rows read from the input per chunk.
const CHUNK_ROWS: usize = 4096;

#[derive(Debug, Clone, Args)]
pub struct ClassifyArgs {
    /// Model directory: config.json, model.safetensors (or a sharded index) and,
    /// unless --tokenizer is given, tokenizer.json.
    #[arg(long, env = "HOPSCORE_MODEL")]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it), when the model directory has none.
    #[arg(long, env = "HOPSCORE_TOKENIZER")]
    pub tokenizer: Option<PathBuf>,
    /// Input Parquet with columns `id` (string or integer), `text_a` (string) and
    /// optionally `text_b` (string).
    #[arg(long)]
    pub input: PathBuf,
    /// Output Parquet: `id`, `logits` (list<float32>, one per label).
    #[arg(long)]
    pub output: PathBuf,
    /// Head to score with (`sequence`, `hop1`, `hop_n`, …; see `hopscore inspect`).
    /// Needed only when the checkpoint has several sequence-level heads.
    #[arg(long)]
    pub head: Option<String>,
    /// Token budget of one forward pass. Larger batches use the cores better and
    /// need more memory (about 4·H·(12 + L) bytes per token on CPU).
    #[arg(long, default_value_t = 16384, value_parser = super::flags::positive_usize)]
    pub max_batch_tokens: usize,
    /// Truncation length of a pair, special tokens included (longest-first).
    /// Default: the model's max_position_embeddings.
    #[arg(long, value_parser = super::flags::positive_usize)]
    pub max_length: Option<usize>,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceOpts,
}

pub fn run(args: &ClassifyArgs) -> Result<RowSummary> {
    with_backend!(&args.device, be => run_on(be, args))
}

fn run_on<B: Backend>(be: &B, args: &ClassifyArgs) -> Result<RowSummary> {
    let files = ModelFiles::open(&args.model)?;
    let config = files.config.clone();
    let head = select(&files.heads(), args.head.as_deref())?.clone();
    anyhow::ensure!(
        head.per_sequence(),
        "head `{}` scores tokens, not pairs: classify needs a sequence-level head",
        head.name
    );
    let weights_paths = files.weights_paths();
    let model = CrossEncoder::load(be, files, Some(&[head.name]))?;
    let max_len = args.max_length.unwrap_or(config.max_position_embeddings);
    let tok = TextTokenizer::from_file(
        &TextTokenizer::locate(&args.model, args.tokenizer.as_deref())?,
        Some(max_len),
    )?;

    let input = ParquetInput::open(&args.input, CHUNK_ROWS)?;
    input.check_column("id", &["string", "integer"], true)?;
    input.check_column("text_a", &["string"], true)?;
    let has_b = input.check_column("text_b", &["string"], false)?;
    let metadata = run_metadata(
        be,
        &args.model,
        &weights_paths,
        &[
            ("head", head.name.to_string()),
            ("max_length", max_len.to_string()),
            ("device", be.name()),
        ],
    )?;
    rows::run(
        input,
        RowOutput {
            input: &args.input,
            path: &args.output,
            quarantine: args.quarantine.as_deref(),
            metadata: &metadata,
            fields: vec![Field::new(
                "logits",
                DataType::List(Arc::new(Field::new("item", DataType::Float32, true))),
                false,
            )],
        },
        |chunk| tokenize_chunk(chunk, has_b, &tok),
        |s: &Sequence| s.ids.len(),
        |seqs| {
            Ok(vec![list_column(&score(
                be,
                &model,
                seqs,
                args.max_batch_tokens,
            )?)])
        },
    )
}

/// Validates and tokenises the rows of one chunk: the tokens, or why a row is bad.
fn tokenize_chunk(
    chunk: &RecordBatch,
    has_b: bool,
    tok: &TextTokenizer,
) -> Result<Vec<Result<Sequence, String>>> {
    let a = string_column(chunk, "text_a")?;
    let b = if has_b {
        Some(string_column(chunk, "text_b")?)
    } else {
        None
    };
    Ok((0..chunk.num_rows())
        .into_par_iter()
        .map(|r| {
            let text_a =
                check_text(&a, r, "text_a")?.ok_or_else(|| "text_a is null".to_string())?;
            let text_b = match &b {
                Some(b) => check_text(b, r, "text_b")?,
                None => None,
            };
            tok.encode_pair(text_a, text_b)
                .map_err(|e| format!("{e:#}"))
        })
        .collect())
}

/// Logits of the first head for every sequence, in the order given. Sequences are
/// sorted by length and packed into batches of at most `budget` tokens.
pub fn score<B: Backend>(
    be: &B,
    model: &CrossEncoder<B>,
    seqs: &[Sequence],
    budget: usize,
) -> Result<Vec<Vec<f32>>> {
    let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();
    let mut out = vec![Vec::new(); seqs.len()];
    for group in token_budget_groups(&lens, budget) {
        let batch = PackedBatch::pack(group.iter().map(|&i| &seqs[i]));
        let res = model.forward(be, &batch, false)?;
        let logits = &res.logits[0];
        let labels = logits.shape[1];
        for (k, &i) in group.iter().enumerate() {
            out[i] = logits.data[k * labels..(k + 1) * labels].to_vec();
        }
    }
    Ok(out)
}

fn list_column(rows: &[Vec<f32>]) -> ArrayRef {
    let mut b = ListBuilder::new(Float32Builder::new());
    for r in rows {
        b.values().append_slice(r);
        b.append(true);
    }
    Arc::new(b.finish())
}
