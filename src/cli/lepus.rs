//! `hopscore lepus`: the arguments of the lepus job ([`crate::jobs::lepus`]) and its
//! run over a question file ([`crate::pipeline::files`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};

use super::question_run::{RunArgs, RunSummary};
use super::DeviceOpts;
use crate::jobs::device::with_backend;
use crate::jobs::lepus::{self, LepusConfig, LepusScorer};
use crate::jobs::options::Options;
use crate::pipeline::files;
use crate::strategy::lepus::{Ensemble, InstructionPosition};

#[derive(Debug, Clone, Args)]
pub struct LepusArgs {
    /// A GGUF file, a directory holding one, or an HF directory (config.json,
    /// model.safetensors, tokenizer.json) of a causal LM or a T5-family
    /// encoder-decoder. Not needed with `--scorer bm25`.
    #[arg(long, env = "HOPSCORE_MODEL", value_parser = super::flags::model_path)]
    pub model: Option<PathBuf>,
    /// tokenizer.json (or a directory holding it) instead of the model's own.
    #[arg(long, env = "HOPSCORE_TOKENIZER", value_parser = super::flags::tokenizer_path)]
    pub tokenizer: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
    /// `lm`: LEPUS with the language model; `bm25`: BM25 (Lucene scoring, k1 0.9, b 0.4)
    /// of the question against each passage's title and text, no model (a baseline).
    #[arg(long, value_enum, default_value_t = ScorerArg::Lm)]
    pub scorer: ScorerArg,
    /// Instruction file (see src/strategy/lepus_instructions.txt for the format).
    /// Default: hopscore's own instruction set.
    #[arg(long)]
    pub templates: Option<PathBuf>,
    /// Templates used (the first N of the set); scores are combined by --ensemble.
    /// 1 is the official code's default; each template multiplies the work.
    #[arg(long, default_value_t = LepusConfig::defaults().num_templates, value_parser = super::flags::positive_usize)]
    pub num_templates: usize,
    /// Where instruction lines go relative to the documents.
    #[arg(long, value_enum, default_value_t = PositionArg::After)]
    pub instruction_position: PositionArg,
    /// Ensemble over templates of single-document scores (paper: max is better;
    /// official default: mean).
    #[arg(long, value_enum, default_value_t = EnsembleArg::Mean)]
    pub ensemble: EnsembleArg,
    /// Ensemble over templates of path scores (the official code always uses mean).
    #[arg(long, value_enum, default_value_t = EnsembleArg::Mean)]
    pub path_ensemble: EnsembleArg,
    /// K1: the best single documents expanded into two-document paths.
    #[arg(long, default_value_t = LepusConfig::defaults().first_hops, value_parser = super::flags::positive_usize)]
    pub first_hops: usize,
    /// K2: second documents per expanded document (the TF-IDF best of the pool).
    #[arg(long, default_value_t = LepusConfig::defaults().second_hops)]
    pub second_hops: usize,
    /// Prepend `Title: {title}. ` to every document.
    #[arg(long)]
    pub title: bool,
    /// Documents are cut to this many tokens.
    #[arg(long, default_value_t = LepusConfig::defaults().max_doc_tokens, value_parser = super::flags::positive_usize)]
    pub max_doc_tokens: usize,
    /// Prompt + question are cut to this many tokens (the question's tail is lost, as
    /// in the official code); a prompt that leaves no question token fails the
    /// question.
    #[arg(long, default_value_t = LepusConfig::defaults().max_prompt_tokens, value_parser = super::flags::positive_usize)]
    pub max_prompt_tokens: usize,
    /// Logits are divided by T before the log-softmax (1.4 is best in the paper).
    #[arg(long, default_value_t = LepusConfig::defaults().temperature, value_parser = super::flags::positive_f32)]
    pub temperature: f32,
    /// Sequences of one batch that share at least N leading tokens (LEPUS paths with
    /// the same first passage) run those tokens through the model once; scores are
    /// unchanged. 0 turns the reuse off.
    #[arg(long, default_value_t = LepusConfig::defaults().min_shared_prefix)]
    pub min_shared_prefix: usize,
    /// In-context demonstrations: a JSON list of `{"question": …, "gold_path_texts":
    /// [...]}` (the official demos file). Each set of --demo-ids goes before every
    /// template, each demonstration as the template on its gold path and its question.
    #[arg(long)]
    pub demos: Option<PathBuf>,
    /// The demonstrations of one set, by position in --demos (`0,1`: the first two).
    /// Repeat for an ensemble of sets, combined like templates (--ensemble).
    #[arg(long, default_value = "0,1", value_parser = parse_ids)]
    pub demo_ids: Vec<DemoIds>,
    /// Cut each demonstration's texts to --demo-max-doc-tokens tokens.
    #[arg(long)]
    pub truncate_demos: bool,
    #[arg(long, default_value_t = LepusConfig::defaults().demo_max_doc_tokens, value_parser = super::flags::positive_usize)]
    pub demo_max_doc_tokens: usize,
    /// With --demos, prompt + question are cut to this many tokens instead of
    /// --max-prompt-tokens (the official code's demo_max_prompt_len).
    #[arg(long, default_value_t = LepusConfig::defaults().demo_max_prompt_tokens, value_parser = super::flags::positive_usize)]
    pub demo_max_prompt_tokens: usize,
    #[command(flatten)]
    pub device: DeviceOpts,
}

/// One `--demo-ids` set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoIds(pub Vec<usize>);

/// `0,1`: positions in the demos file.
fn parse_ids(s: &str) -> Result<DemoIds, String> {
    s.split(',')
        .map(|i| {
            i.trim()
                .parse()
                .map_err(|_| format!("`{s}`: expected positions such as 0,1"))
        })
        .collect::<Result<_, _>>()
        .map(DemoIds)
}

/// The `--scorer` setting.
pub type ScorerArg = LepusScorer;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PositionArg {
    After,
    Before,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EnsembleArg {
    Mean,
    Max,
}

impl From<EnsembleArg> for Ensemble {
    fn from(e: EnsembleArg) -> Self {
        match e {
            EnsembleArg::Mean => Ensemble::Mean,
            EnsembleArg::Max => Ensemble::Max,
        }
    }
}

impl LepusArgs {
    /// The library's config of the job.
    pub fn config(&self) -> LepusConfig {
        LepusConfig {
            model: self.model.clone(),
            tokenizer: self.tokenizer.clone(),
            scorer: self.scorer,
            templates: self.templates.clone(),
            num_templates: self.num_templates,
            instruction_position: match self.instruction_position {
                PositionArg::After => InstructionPosition::After,
                PositionArg::Before => InstructionPosition::Before,
            },
            ensemble: self.ensemble.into(),
            path_ensemble: self.path_ensemble.into(),
            first_hops: self.first_hops,
            second_hops: self.second_hops,
            title: self.title,
            max_doc_tokens: self.max_doc_tokens,
            max_prompt_tokens: self.max_prompt_tokens,
            temperature: self.temperature,
            min_shared_prefix: self.min_shared_prefix,
            demos: self.demos.clone(),
            demo_ids: self.demo_ids.iter().map(|s| s.0.clone()).collect(),
            truncate_demos: self.truncate_demos,
            demo_max_doc_tokens: self.demo_max_doc_tokens,
            demo_max_prompt_tokens: self.demo_max_prompt_tokens,
            scheduler: self.run.scheduler(),
        }
    }
}

/// Where a lepus run reads and writes: `--input`, `--output` and the files it reads
/// besides (model, tokenizer, templates, demonstrations).
pub fn file_run(args: &LepusArgs) -> files::FileRun {
    args.run.file_run(super::inputs(&[
        ("--model", args.model.as_deref()),
        ("--tokenizer", args.tokenizer.as_deref()),
        ("--templates", args.templates.as_deref()),
        ("--demos", args.demos.as_deref()),
    ]))
}

/// Runs `hopscore lepus`.
pub fn run(args: &LepusArgs) -> Result<RunSummary> {
    // First, so that a Ctrl-C while the model loads is handled too.
    crate::pipeline::control::install_interrupt_handler();
    let run = file_run(args);
    run.check_paths(&[])?;
    let config = args.config();
    if args.scorer == LepusScorer::Bm25 {
        return files::run(&mut lepus::bm25_job(&config), &run);
    }
    let templates = lepus::templates(&config)?;
    with_backend!(owned &args.device.config(), be => {
        let mut job = lepus::lm_job(&config, templates, be)?;
        let summary = files::run(&mut job, &run)?;
        let (all, packed) = job.scorer.prefix_token_counts();
        if all > 0 {
            eprintln!(
                "shared-prefix reuse: {packed} of {all} prompt tokens ran through the model \
                 ({:.1}% saved; --min-shared-prefix {})",
                100.0 * (all - packed) as f64 / all as f64,
                args.min_shared_prefix
            );
        }
        Ok(summary)
    })
}

impl super::Run for LepusArgs {
    fn run(&self) -> Result<i32> {
        Ok(super::question_run::report(&run(self)?))
    }
}
