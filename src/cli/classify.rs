//! `hopscore classify`: cross-encoder scoring of `(id, text_a[, text_b])` rows.
//!
//! Rows stream from the input Parquet in chunks; each chunk is tokenised in parallel,
//! its rows sorted by length and packed into token-budget batches, scored, and written
//! back in input order. Rows that cannot be scored go to the quarantine file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef, Float32Builder, ListBuilder, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema};
use clap::Args;
use rayon::prelude::*;

use super::{progress_bar, run_metadata, DeviceArg};
use crate::backend::cpu::CpuBackend;
use crate::io::parquet_io::{
    check_text, create_writer, display_column, sibling, string_column, ParquetInput,
};
use crate::io::quarantine::{BadRow, QuarantineWriter};
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
    #[arg(long, default_value_t = 16384)]
    pub max_batch_tokens: usize,
    /// Truncation length of a pair, special tokens included (longest-first).
    /// Default: the model's max_position_embeddings.
    #[arg(long)]
    pub max_length: Option<usize>,
    /// Where bad rows go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
}

/// Counts printed at the end of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifySummary {
    pub scored: u64,
    pub quarantined: u64,
    pub tokens: u64,
    pub seconds: f64,
    pub quarantine_path: PathBuf,
}

pub fn run(args: &ClassifyArgs) -> Result<ClassifySummary> {
    let started = Instant::now();
    let be = match args.device {
        DeviceArg::Cpu => CpuBackend,
    };
    let files = ModelFiles::open(&args.model)?;
    let config = files.config.clone();
    let head = select(&files.heads(), args.head.as_deref())?.clone();
    anyhow::ensure!(
        head.per_sequence(),
        "head `{}` scores tokens, not pairs: classify needs a sequence-level head",
        head.name
    );
    let weights_path = files.weights_path();
    let model = CrossEncoder::load(&be, files, Some(&[head.name]))?;
    let max_len = args.max_length.unwrap_or(config.max_position_embeddings);
    let tok = TextTokenizer::from_file(
        &TextTokenizer::locate(&args.model, args.tokenizer.as_deref())?,
        Some(max_len),
    )?;

    let mut input = ParquetInput::open(&args.input, CHUNK_ROWS)?;
    input.check_column("id", &["string", "integer"], true)?;
    input.check_column("text_a", &["string"], true)?;
    let has_b = input.check_column("text_b", &["string"], false)?;
    let id_type = input.schema.field_with_name("id")?.data_type().clone();

    let metadata = run_metadata(
        &args.model,
        &weights_path,
        &[
            ("head", head.name.to_string()),
            ("max_length", max_len.to_string()),
            ("device", be_name(&args.device)),
        ],
    )?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", id_type, false),
        Field::new(
            "logits",
            DataType::List(Arc::new(Field::new("item", DataType::Float32, true))),
            false,
        ),
    ]));
    let mut writer = create_writer(&args.output, schema.clone(), &metadata)?;
    let quarantine_path = args
        .quarantine
        .clone()
        .unwrap_or_else(|| sibling(&args.output, "quarantine"));
    let mut quarantine = QuarantineWriter::create(&quarantine_path, &metadata)?;

    let bar = progress_bar(input.total_rows, "rows");
    let (mut scored, mut tokens, mut row0) = (0u64, 0u64, 0u64);
    for chunk in input.reader.by_ref() {
        let chunk = chunk.context("reading the input Parquet")?;
        let n = chunk.num_rows();
        let (good, bad) = tokenize_chunk(&chunk, has_b, &tok, row0)?;
        quarantine.write(&bad)?;
        let rows: Vec<usize> = good.iter().map(|(r, _)| *r).collect();
        let seqs: Vec<Sequence> = good.into_iter().map(|(_, s)| s).collect();
        tokens += seqs.iter().map(|s| s.ids.len() as u64).sum::<u64>();
        let logits = score(&be, &model, &seqs, args.max_batch_tokens)?;
        if !rows.is_empty() {
            let ids = arrow::compute::take(
                chunk.column_by_name("id").expect("checked"),
                &UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32)),
                None,
            )?;
            writer.write(&RecordBatch::try_new(
                schema.clone(),
                vec![ids, list_column(&logits)],
            )?)?;
        }
        scored += rows.len() as u64;
        row0 += n as u64;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    writer.close()?;
    let (quarantine_path, quarantined) = quarantine.finish()?;
    Ok(ClassifySummary {
        scored,
        quarantined,
        tokens,
        seconds: started.elapsed().as_secs_f64(),
        quarantine_path,
    })
}

fn be_name(d: &DeviceArg) -> String {
    match d {
        DeviceArg::Cpu => "cpu".into(),
    }
}

type Tokenized = (Vec<(usize, Sequence)>, Vec<BadRow>);

/// Validates and tokenises the rows of one chunk: good rows `(index in chunk, tokens)`
/// and bad rows with their reason.
fn tokenize_chunk(
    chunk: &RecordBatch,
    has_b: bool,
    tok: &TextTokenizer,
    row0: u64,
) -> Result<Tokenized> {
    let ids = display_column(chunk.column_by_name("id").expect("checked"))?;
    let a = string_column(chunk, "text_a")?;
    let b = if has_b {
        Some(string_column(chunk, "text_b")?)
    } else {
        None
    };
    let results: Vec<Result<Sequence, String>> = (0..chunk.num_rows())
        .into_par_iter()
        .map(|r| {
            if ids.is_null(r) {
                return Err("id is null".to_string());
            }
            let text_a =
                check_text(&a, r, "text_a")?.ok_or_else(|| "text_a is null".to_string())?;
            let text_b = match &b {
                Some(b) => check_text(b, r, "text_b")?,
                None => None,
            };
            tok.encode_pair(text_a, text_b)
                .map_err(|e| format!("{e:#}"))
        })
        .collect();
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for (r, res) in results.into_iter().enumerate() {
        match res {
            Ok(s) => good.push((r, s)),
            Err(reason) => bad.push(BadRow {
                row: row0 + r as u64,
                id: (!ids.is_null(r)).then(|| ids.value(r).to_string()),
                reason,
            }),
        }
    }
    Ok((good, bad))
}

/// Logits of the first head for every sequence, in the order given. Sequences are
/// sorted by length and packed into batches of at most `budget` tokens.
pub fn score<B: crate::backend::Backend>(
    be: &B,
    model: &CrossEncoder<B>,
    seqs: &[Sequence],
    budget: usize,
) -> Result<Vec<Vec<f32>>> {
    let mut order: Vec<usize> = (0..seqs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(seqs[i].ids.len()));
    let mut out = vec![Vec::new(); seqs.len()];
    for group in token_budget_groups(&order, |i| seqs[i].ids.len(), budget) {
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
