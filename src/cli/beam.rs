//! `hopscore beam`: Beam Retrieval over a question file (SPEC §1), through the
//! streaming pipeline, with every score kept as a feature.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow::array::{
    ArrayRef, Float32Array, Float32Builder, Int32Array, Int32Builder, ListBuilder, RecordBatch,
    StringArray, StringBuilder,
};
use arrow::datatypes::{DataType, Field, Schema};
use clap::Args;
use rayon::prelude::*;

use super::question_run::{self, RunArgs, RunSummary};
use super::DeviceOpts;
use crate::backend::Backend;
use crate::io::columns::{list_of, ScoredChainsBuilder};
use crate::io::fingerprint::file_sha256;
use crate::io::metadata::run_metadata;
use crate::io::parquet_io::write_in_batches;
use crate::io::questions::Question;
use crate::jobs::device::with_backend;
use crate::model::batch::{PackedBatch, Sequence};
use crate::model::cross_encoder::{CrossEncoder, ModelFiles};
use crate::strategy::beam::{truncate_inputs, BeamResult, BeamSearch, HopMode};
use crate::strategy::Strategy;
use crate::text::render::{beam_passage, beam_question, PassageStyle};
use crate::text::TextTokenizer;

/// Rows written per output record batch.
const WRITE_ROWS: usize = 256;

#[derive(Debug, Clone, Args)]
pub struct BeamArgs {
    /// Beam Retrieval checkpoint directory (config.json + safetensors with the
    /// `hop_classifier_layer` and `hop_n_classifier_layer` heads).
    #[arg(long, env = "HOPSCORE_MODEL")]
    pub model: PathBuf,
    /// tokenizer.json (or its directory) when the model directory has none.
    #[arg(long, env = "HOPSCORE_TOKENIZER")]
    pub tokenizer: Option<PathBuf>,
    /// Beams kept per hop (the official models were trained with 1 or 2).
    #[arg(long, default_value_t = 2, value_parser = super::flags::positive_usize)]
    pub beam_size: usize,
    /// Hop count: a number, `from-data` (the question file's `hops`, as the official
    /// evaluation does), or `auto` (the paper's τ rule, with --tau and --max-hops).
    #[arg(long, default_value = "from-data", value_parser = parse_hops)]
    pub hops: HopsArg,
    /// `--hops auto`: continue while the best score of a hop is at least this.
    #[arg(long, default_value_t = -1.0, allow_hyphen_values = true, value_parser = super::flags::finite_f32)]
    pub tau: f32,
    /// `--hops auto`: most hops searched (truncation budgets use this count).
    #[arg(long, default_value_t = 4, value_parser = super::flags::positive_usize)]
    pub max_hops: usize,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub device: DeviceOpts,
}

/// The `--hops` setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HopsArg {
    Fixed(usize),
    FromData,
    Auto,
}

fn parse_hops(s: &str) -> Result<HopsArg, String> {
    match s {
        "from-data" => Ok(HopsArg::FromData),
        "auto" => Ok(HopsArg::Auto),
        n => match n.parse::<usize>() {
            Ok(h) if h >= 1 => Ok(HopsArg::Fixed(h)),
            _ => Err(format!(
                "`{s}`: expected a hop count ≥ 1, `from-data` or `auto`"
            )),
        },
    }
}

/// One question's search plus what the output needs besides the result.
struct Job {
    id: String,
    titles: Vec<String>,
    search: BeamSearch,
}

/// A finished question.
struct Chain {
    id: String,
    titles: Vec<String>,
    result: BeamResult,
}

impl Strategy for Job {
    type Output = Chain;
    fn requests(&self) -> Vec<(Sequence, usize)> {
        self.search.requests()
    }
    fn feed(&mut self, logits: Vec<Vec<f32>>) {
        Strategy::feed(&mut self.search, logits);
    }
    fn take_output(&mut self) -> Option<Chain> {
        let result = self.search.take_output()?;
        Some(Chain {
            id: std::mem::take(&mut self.id),
            titles: std::mem::take(&mut self.titles),
            result,
        })
    }
}

pub fn run(args: &BeamArgs) -> Result<RunSummary> {
    crate::pipeline::control::install_interrupt_handler();
    args.run.check_paths(&[])?;
    anyhow::ensure!(args.beam_size >= 1, "--beam-size must be at least 1");
    anyhow::ensure!(args.max_hops >= 1, "--max-hops must be at least 1");
    with_backend!(&args.device.config(), be => run_on(be, args))
}

fn run_on<B: Backend>(be: &B, args: &BeamArgs) -> Result<RunSummary> {
    let files = ModelFiles::open(&args.model)?;
    let names: Vec<&str> = files.heads().iter().map(|h| h.name).collect();
    if !(names.contains(&"hop1") && names.contains(&"hop_n")) {
        bail!(
            "{} is not a Beam Retrieval checkpoint: it needs the hop_classifier_layer and \
             hop_n_classifier_layer heads (found: {})",
            args.model.display(),
            names.join(", ")
        );
    }
    let weights_paths = files.weights_paths();
    let model = CrossEncoder::load(be, files, Some(&["hop1", "hop_n"]))?;
    debug_assert_eq!(model.heads[0].spec.name, "hop1");
    let tok_path = TextTokenizer::locate(&args.model, args.tokenizer.as_deref())?;
    let tok = Arc::new(TextTokenizer::from_file(&tok_path, None)?);
    let metadata = run_metadata(
        be,
        &args.model,
        &weights_paths,
        &[
            ("strategy", "beam".into()),
            ("tokenizer_sha256", file_sha256(&tok_path)?),
            ("beam_size", args.beam_size.to_string()),
            ("hops", format!("{:?}", args.hops)),
            ("tau", args.tau.to_string()),
            ("max_hops", args.max_hops.to_string()),
            ("device", be.name()),
        ],
    )?;
    let (beam_size, hops, tau, max_hops) = (args.beam_size, args.hops, args.tau, args.max_hops);
    let score = |seqs: &[Sequence], heads: &[usize]| -> Result<Vec<Vec<f32>>> {
        let out = model.forward(be, &PackedBatch::pack(seqs), false)?;
        Ok(heads
            .iter()
            .enumerate()
            .map(|(k, &h)| out.logits[h].data[2 * k..2 * k + 2].to_vec())
            .collect())
    };
    question_run::run(
        &args.run,
        question_run::Command {
            metadata,
            prepare: move |q: &Question| prepare(q, &tok, beam_size, hops, tau, max_hops),
            finish: Ok,
            write_part: |path: &std::path::Path, chains: Vec<Chain>, meta: &[(String, String)]| {
                write_in_batches(path, chain_schema(), meta, &chains, WRITE_ROWS, chain_batch)
            },
            schema: chain_schema(),
            score,
        },
    )
}

/// Renders and tokenises one question (SPEC §1), or says why it cannot be searched.
fn prepare(
    q: &Question,
    tok: &TextTokenizer,
    beam_size: usize,
    hops: HopsArg,
    tau: f32,
    max_hops: usize,
) -> Result<Job, String> {
    let mode =
        match hops {
            HopsArg::Fixed(h) => HopMode::Fixed(h),
            HopsArg::Auto => HopMode::Auto { tau, max_hops },
            HopsArg::FromData => match q.hop_count() {
                0 => return Err(
                    "no hop count in the data (no `hops`, no supporting passages): pass --hops N"
                        .into(),
                ),
                h => HopMode::Fixed(h),
            },
        };
    let style = PassageStyle::for_dataset(q.dataset.as_str());
    let question = tok
        .encode_plain(beam_question(&q.question))
        .map_err(|e| format!("question: {e:#}"))?;
    let passages = q
        .passages
        .par_iter()
        .map(|p| tok.encode_plain(&beam_passage(style, &p.title, &p.text)))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| format!("passage: {e:#}"))?;
    let (question, passages) = truncate_inputs(question, passages);
    Ok(Job {
        id: q.id.clone(),
        titles: q.passages.iter().map(|p| p.title.clone()).collect(),
        search: BeamSearch::new(question, passages, beam_size, mode),
    })
}

/// Output columns, in order.
fn chain_schema() -> Arc<Schema> {
    let f32_list = || list_of(DataType::Float32);
    let i32_list = || list_of(DataType::Int32);
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("chain", i32_list(), false),
        Field::new("chain_titles", list_of(DataType::Utf8), false),
        Field::new("chain_score", DataType::Float32, true),
        Field::new("hop_scores", f32_list(), false),
        Field::new("beams", ScoredChainsBuilder::data_type(), false),
        Field::new("hop1_logits", list_of(f32_list()), false),
    ]))
}

/// One record batch of output rows.
fn chain_batch(rows: &[Chain]) -> Result<RecordBatch> {
    let i32_list = |v: &[usize]| Int32Array::from_iter_values(v.iter().map(|&x| x as i32));
    let mut chain = ListBuilder::new(Int32Builder::new());
    let mut titles = ListBuilder::new(StringBuilder::new());
    let mut hop_scores = ListBuilder::new(Float32Builder::new());
    let mut hop1 = ListBuilder::new(ListBuilder::new(Float32Builder::new()));
    let mut beams = ScoredChainsBuilder::default();
    for r in rows {
        let res = &r.result;
        chain
            .values()
            .append_slice(&i32_list(&res.chain).values()[..]);
        chain.append(true);
        for &j in &res.chain {
            titles.values().append_value(&r.titles[j]);
        }
        titles.append(true);
        hop_scores.values().append_slice(&res.hop_scores);
        hop_scores.append(true);
        for l in &res.hop1_logits {
            hop1.values().values().append_slice(l);
            hop1.values().append(true);
        }
        hop1.append(true);
        for b in &res.beams {
            beams.push(&b.chain, b.score());
        }
        beams.end_row();
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.id.as_str()),
        )),
        Arc::new(chain.finish()),
        Arc::new(titles.finish()),
        Arc::new(Float32Array::from_iter(
            rows.iter().map(|r| r.result.hop_scores.last().copied()),
        )),
        Arc::new(hop_scores.finish()),
        Arc::new(beams.finish()),
        Arc::new(hop1.finish()),
    ];
    RecordBatch::try_new(chain_schema(), columns).context("building the output batch")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_flag_parses() {
        assert_eq!(parse_hops("3"), Ok(HopsArg::Fixed(3)));
        assert_eq!(parse_hops("from-data"), Ok(HopsArg::FromData));
        assert_eq!(parse_hops("auto"), Ok(HopsArg::Auto));
        assert!(parse_hops("0").is_err() && parse_hops("two").is_err());
    }
}
