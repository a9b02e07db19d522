//! The lepus job: LEPUS / PromptRank reranking of each question's passage pool with a
//! causal LM or a T5-family encoder-decoder (docs/spec.md §3); or, with [`LepusScorer::Bm25`], the BM25 ranking of the same
//! pools as a baseline.
//!
//! Per question (on the reader thread): the question gets `?`; each passage is cut
//! to `--max-doc-tokens` tokens as the official `shorten_paragraph_if_necessary`
//! does (decode the first tokens, clean up spaces before punctuation as
//! transformers 4.x did, append `". "` unless it ends with `.`), optionally titled
//! `Title: {t}. `; each passage's second-hop candidates are the other passages of
//! the pool ranked by TF-IDF cosine to the question (the vectorizer fitted on those
//! candidates' texts, `strip_accents="unicode"`, `stop_words="english"`, as the
//! official `TopTfIdf`), the best `--second-hops` kept. The search itself is
//! [`crate::strategy::lepus`].

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use arrow::array::{
    ArrayRef, Float32Array, Float32Builder, Int32Builder, ListBuilder, RecordBatch, StringArray,
    StringBuilder,
};
use arrow::datatypes::SchemaRef;
use rayon::prelude::*;

use super::decoder::LanguageModel;
use super::questions::{Prepare, QuestionJob, QuestionScorer};
use crate::backend::Backend;
use crate::io::columns::ScoredChainsBuilder;
use crate::io::metadata::{run_metadata, tool_metadata};
use crate::io::paths::Named;
use crate::io::questions::Question;
use crate::io::schemas::lepus_schema;
use crate::jobs::device::with_backend;
use crate::jobs::DeviceConfig;
use crate::model::batch::Sequence;
use crate::model::decoder::ScoredSequence;
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::pipeline::files::{self, FileRun, RunSummary, ToBatch};
use crate::pipeline::SchedulerConfig;
use crate::pipeline::Strategy;
use crate::retrieve::Bm25Index;
use crate::strategy::lepus::{
    parse_templates, question_text, with_demos, Demo, Ensemble, InstructionPosition,
    LepusConfig as SearchConfig, LepusResult, LepusSearch, PromptEncoder, ScoredPath, Template,
    DEFAULT_INSTRUCTIONS,
};
use crate::text::causal_tokenizer::CausalTokenizer;
use crate::text::prompt::{shorten, LmEncoder};

/// Which scorer ranks the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum LepusScorer {
    Lm,
    Bm25,
}

/// What to load and how to rank: the flags of `hopscore lepus` and the options of
/// Python's `hopscore.Lepus`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct LepusConfig {
    /// A GGUF file, a directory holding one, or an HF directory (config.json,
    /// model.safetensors, tokenizer.json) of a causal LM or a T5-family
    /// encoder-decoder. Not needed with `--scorer bm25`.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_MODEL", value_parser = crate::options::values::model_path))]
    pub model: Option<PathBuf>,
    /// tokenizer.json (or a directory holding it) instead of the model's own.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_TOKENIZER",
        value_parser = crate::options::values::tokenizer_path))]
    pub tokenizer: Option<PathBuf>,
    /// `lm`: LEPUS with the language model; `bm25`: BM25 (Lucene scoring, k1 0.9, b 0.4)
    /// of the question against each passage's title and text, no model (a baseline).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = LepusConfig::defaults().scorer))]
    pub scorer: LepusScorer,
    /// Instruction file (see src/strategy/lepus_instructions.txt for the format).
    /// Default: hopscore's own instruction set.
    #[cfg_attr(feature = "cli", arg(long))]
    pub templates: Option<PathBuf>,
    /// Templates used (the first N of the set); scores are combined by --ensemble.
    /// 1 is the official code's default; each template multiplies the work.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().num_templates,
        value_parser = crate::options::values::positive_usize))]
    pub num_templates: usize,
    /// Where instruction lines go relative to the documents.
    #[cfg_attr(feature = "cli", arg(long, value_enum,
        default_value_t = LepusConfig::defaults().instruction_position))]
    pub instruction_position: InstructionPosition,
    /// Ensemble over templates of single-document scores (paper: max is better;
    /// official default: mean).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = LepusConfig::defaults().ensemble))]
    pub ensemble: Ensemble,
    /// Ensemble over templates of path scores (the official code always uses mean).
    #[cfg_attr(feature = "cli", arg(long, value_enum,
        default_value_t = LepusConfig::defaults().path_ensemble))]
    pub path_ensemble: Ensemble,
    /// K1: the best single documents expanded into two-document paths.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().first_hops,
        value_parser = crate::options::values::positive_usize))]
    pub first_hops: usize,
    /// K2: second documents per expanded document (the TF-IDF best of the pool).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().second_hops))]
    pub second_hops: usize,
    /// Prepend `Title: {title}. ` to every document.
    #[cfg_attr(feature = "cli", arg(long))]
    pub title: bool,
    /// Documents are cut to this many tokens.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().max_doc_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub max_doc_tokens: usize,
    /// Prompt + question are cut to this many tokens (the question's tail is lost, as
    /// in the official code); a prompt that leaves no question token fails the
    /// question.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().max_prompt_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub max_prompt_tokens: usize,
    /// Logits are divided by T before the log-softmax (1.4 is best in the paper).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().temperature,
        value_parser = crate::options::values::positive_f32))]
    pub temperature: f32,
    /// Sequences of one batch that share at least N leading tokens (LEPUS paths with
    /// the same first passage) run those tokens through the model once; scores are
    /// unchanged. 0 turns the reuse off.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().min_shared_prefix))]
    pub min_shared_prefix: usize,
    /// In-context demonstrations: a JSON list of `{"question": …, "gold_path_texts":
    /// [...]}` (the official demos file). Each set of --demo-ids goes before every
    /// template, each demonstration as the template on its gold path and its question.
    #[cfg_attr(feature = "cli", arg(long))]
    pub demos: Option<PathBuf>,
    /// The demonstrations of one set, by position in --demos (`0,1`: the first two).
    /// Repeat for an ensemble of sets, combined like templates (--ensemble).
    #[cfg_attr(feature = "cli", arg(long, default_value = "0,1",
        value_parser = crate::options::values::positions))]
    pub demo_ids: Vec<Vec<usize>>,
    /// Cut each demonstration's texts to --demo-max-doc-tokens tokens (the official
    /// `--truncate_demos`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub truncate_demos: bool,
    /// With --truncate-demos: the tokens each demonstration's texts keep.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().demo_max_doc_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub demo_max_doc_tokens: usize,
    /// With --demos, prompt + question are cut to this many tokens instead of
    /// --max-prompt-tokens (the official code's demo_max_prompt_len).
    #[cfg_attr(feature = "cli", arg(long,
        default_value_t = LepusConfig::defaults().demo_max_prompt_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub demo_max_prompt_tokens: usize,
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub scheduler: SchedulerConfig,
}

impl LepusConfig {
    /// The prompt budget a run uses: `demo_max_prompt_tokens` with demonstrations.
    pub fn prompt_tokens(&self) -> usize {
        match self.demos {
            Some(_) => self.demo_max_prompt_tokens,
            None => self.max_prompt_tokens,
        }
    }

    /// The defaults (the command line's) for `model`.
    pub fn new(model: PathBuf) -> Self {
        Self {
            model: Some(model),
            ..Self::defaults()
        }
    }
}

impl Options for LepusConfig {
    /// Every option at the command line's default; no model.
    fn defaults() -> Self {
        Self {
            model: None,
            tokenizer: None,
            scorer: LepusScorer::Lm,
            templates: None,
            num_templates: 1,
            instruction_position: InstructionPosition::After,
            ensemble: Ensemble::Mean,
            path_ensemble: Ensemble::Mean,
            first_hops: 5,
            second_hops: 3,
            title: false,
            max_doc_tokens: 230,
            max_prompt_tokens: 600,
            temperature: 1.0,
            min_shared_prefix: crate::model::decoder::MIN_SHARED_PREFIX,
            demos: None,
            demo_ids: vec![vec![0, 1]],
            truncate_demos: false,
            demo_max_doc_tokens: 100,
            demo_max_prompt_tokens: 1024,
            scheduler: SchedulerConfig::default(),
        }
    }

    fn check(&self) -> Result<()> {
        options::at_least_one("num_templates", self.num_templates)?;
        options::at_least_one("first_hops", self.first_hops)?;
        options::at_least_one("max_doc_tokens", self.max_doc_tokens)?;
        options::at_least_one("max_prompt_tokens", self.max_prompt_tokens)?;
        options::at_least_one("demo_max_doc_tokens", self.demo_max_doc_tokens)?;
        options::at_least_one("demo_max_prompt_tokens", self.demo_max_prompt_tokens)?;
        if self.demo_ids.is_empty() || self.demo_ids.iter().any(Vec::is_empty) {
            anyhow::bail!("--demo-ids (demo_ids): every set needs at least one demonstration");
        }
        options::finite("temperature", self.temperature, true)?;
        self.scheduler.check()
    }

    fn model_paths(&mut self) -> Vec<(&mut PathBuf, Need)> {
        options::model_and_tokenizer(self.model.as_mut(), self.tokenizer.as_mut())
    }

    fn inputs(&self) -> Vec<Named> {
        options::named(&[
            ("--model", self.model.as_deref()),
            ("--tokenizer", self.tokenizer.as_deref()),
            ("--templates", self.templates.as_deref()),
            ("--demos", self.demos.as_deref()),
        ])
    }
}

/// One output row.
pub struct Ranked {
    id: String,
    titles: Vec<String>,
    result: LepusResult,
    /// The best path (LEPUS) or the two best documents (BM25).
    best_path: Vec<usize>,
    best_path_score: Option<f32>,
}

/// A LEPUS search with what the output needs besides its result.
pub struct LmTask {
    id: String,
    titles: Vec<String>,
    search: LepusSearch,
}

impl Strategy for LmTask {
    type Output = Result<Ranked, (String, String)>;
    fn requests(&self) -> Vec<(Sequence, usize)> {
        self.search.requests()
    }
    fn feed(&mut self, logprobs: Vec<Vec<f32>>) {
        Strategy::feed(&mut self.search, logprobs);
    }
    fn take_output(&mut self) -> Option<Self::Output> {
        let result = self.search.take_output()?;
        let id = self.id.clone();
        Some(result.map_err(|reason| (id, reason)).map(|result| {
            let best = result.best_path();
            Ranked {
                id: std::mem::take(&mut self.id),
                titles: std::mem::take(&mut self.titles),
                best_path: best.as_ref().map_or_else(Vec::new, |p| p.chain.clone()),
                best_path_score: best.map(|p| p.score),
                result,
            }
        }))
    }
}

/// The BM25 baseline: ranked at admission, no model requests.
pub struct Bm25Task(Option<Ranked>);

impl Strategy for Bm25Task {
    type Output = Result<Ranked, (String, String)>;
    fn requests(&self) -> Vec<(Sequence, usize)> {
        Vec::new()
    }
    fn feed(&mut self, _: Vec<Vec<f32>>) {
        unreachable!("BM25 makes no model requests")
    }
    fn take_output(&mut self) -> Option<Self::Output> {
        self.0.take().map(Ok)
    }
}

/// How every question's search is set up.
pub struct LmSetup {
    pub tok: Arc<CausalTokenizer>,
    pub encoder: Arc<dyn PromptEncoder>,
    pub templates: Arc<[Template]>,
    pub config: SearchConfig,
    /// K2.
    pub second_hops: usize,
    /// `Title: {t}. ` before each document.
    pub title: bool,
    pub max_doc_tokens: usize,
    /// Special tokens the tokenizer appends to a text (counted by [`shorten`]).
    pub trailing_specials: usize,
}

impl LmSetup {
    fn prepare(&self, q: &Question) -> Result<LmTask, String> {
        Ok(LmTask {
            id: q.id.clone(),
            titles: q.passages.iter().map(|p| p.title.clone()).collect(),
            search: self.search(q)?,
        })
    }

    /// The search of one question: documents shortened (and titled), second hops
    /// ranked by TF-IDF.
    pub fn search(&self, q: &Question) -> Result<LepusSearch, String> {
        let question = question_text(&q.question);
        let docs = q
            .passages
            .par_iter()
            .map(|p| {
                if p.text.trim().is_empty() {
                    return Ok(None);
                }
                let body = shorten(
                    &self.tok,
                    &p.text,
                    self.max_doc_tokens,
                    self.trailing_specials,
                )?;
                Ok(Some(if self.title {
                    format!("Title: {}. {body}", p.title)
                } else {
                    body
                }))
            })
            .collect::<Result<Vec<_>>>()
            .map_err(|e| format!("passage: {e:#}"))?;
        let texts: Vec<&str> = q.passages.iter().map(|p| p.text.as_str()).collect();
        let expansions = crate::retrieve::tfidf::expansions(&question, &texts, self.second_hops);
        Ok(LepusSearch::new(
            &question,
            docs,
            expansions,
            self.templates.clone(),
            self.config,
            self.encoder.clone(),
        ))
    }
}

/// BM25 of the question against each passage's `title text`, ranked (ties: passage
/// order).
fn bm25_ranking(q: &Question) -> Ranked {
    let single = Bm25Index::over_passages(&q.passages).passage_scores(&q.question);
    let mut ranking: Vec<usize> = (0..single.len()).collect();
    ranking.sort_by(|&a, &b| single[b].total_cmp(&single[a]));
    Ranked {
        id: q.id.clone(),
        titles: q.passages.iter().map(|p| p.title.clone()).collect(),
        best_path: ranking.iter().take(2).copied().collect(),
        best_path_score: None,
        result: LepusResult {
            doc_scores: ranking.iter().map(|&d| single[d]).collect(),
            ranking,
            top_paths: Vec::new(),
            single_scores: single.into_iter().map(Some).collect(),
        },
    }
}

/// The BM25 baseline (no model).
pub struct Bm25Scorer {
    metadata: Vec<(String, String)>,
}

/// The lepus job with [`LepusScorer::Bm25`].
pub type Bm25Job = QuestionJob<Bm25Scorer>;

/// The BM25 baseline job.
pub fn bm25_job(config: &LepusConfig) -> Bm25Job {
    let metadata = tool_metadata(&[("strategy", "lepus".to_string()), ("scorer", "bm25".into())]);
    QuestionJob::new(Bm25Scorer { metadata }, config.scheduler)
}

impl QuestionScorer for Bm25Scorer {
    type Task = Bm25Task;
    type Row = Ranked;

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn schema(&self) -> SchemaRef {
        lepus_schema()
    }

    fn prepare(&self) -> Prepare<Bm25Task> {
        Arc::new(|q: &Question| Ok(Bm25Task(Some(bm25_ranking(q)))))
    }

    fn finish(outcome: Result<Ranked, (String, String)>) -> Result<Ranked, (String, String)> {
        outcome
    }

    fn to_batch(&self) -> ToBatch<Ranked> {
        Arc::new(batch)
    }

    fn score(&mut self, _: &[Sequence], _: &[usize]) -> Result<Vec<Vec<f32>>> {
        bail!("BM25 makes no model requests")
    }
}

/// A loaded causal LM with the search setup.
pub struct LmScorer<B: Backend> {
    be: B,
    model: LanguageModel<B>,
    setup: Arc<LmSetup>,
    temperature: f32,
    metadata: Vec<(String, String)>,
}

/// The lepus job with [`LepusScorer::Lm`] on backend `B`.
pub type LmJob<B> = QuestionJob<LmScorer<B>>;

/// The instruction templates of a run and its demonstration sets (empty without
/// `--demos`).
pub struct Templates {
    pub instructions: Vec<Template>,
    pub demo_sets: Vec<Vec<Demo>>,
}

/// Checks the settings of `config` and reads its instruction templates and
/// demonstrations (before any model loads).
pub fn templates(config: &LepusConfig) -> Result<Templates> {
    config.check()?;
    model_path(config)?;
    let instructions = match &config.templates {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("cannot read --templates {}", p.display()))?,
        None => DEFAULT_INSTRUCTIONS.to_string(),
    };
    let instructions = parse_templates(
        &instructions,
        config.instruction_position,
        config.num_templates,
    )
    .map_err(anyhow::Error::msg)?;
    let demo_sets = match &config.demos {
        Some(path) => demo_sets(path, &config.demo_ids)?,
        None => Vec::new(),
    };
    Ok(Templates {
        instructions,
        demo_sets,
    })
}

/// The demonstration sets `ids` picks from the demos file `path`.
fn demo_sets(path: &std::path::Path, ids: &[Vec<usize>]) -> Result<Vec<Vec<Demo>>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --demos {}", path.display()))?;
    let demos: Vec<Demo> = serde_json::from_str(&text).with_context(|| {
        format!(
            "--demos {}: expected a JSON list of {{\"question\": …, \"gold_path_texts\": [...]}}",
            path.display()
        )
    })?;
    ids.iter()
        .map(|set| {
            set.iter()
                .map(|&i| {
                    demos.get(i).cloned().with_context(|| {
                        format!(
                            "--demo-ids: demonstration {i} is not in {} ({} demonstrations)",
                            path.display(),
                            demos.len()
                        )
                    })
                })
                .collect()
        })
        .collect()
}

/// The templates a run scores with: the instructions, or with demonstrations the
/// instructions behind each set ([`with_demos`]), their texts cut to
/// `demo_max_doc_tokens` first when `truncate_demos` is set.
pub fn demo_templates(
    config: &LepusConfig,
    templates: Templates,
    tok: &CausalTokenizer,
    trailing: usize,
) -> Result<Vec<Template>> {
    if templates.demo_sets.is_empty() {
        return Ok(templates.instructions);
    }
    let mut sets = templates.demo_sets;
    if config.truncate_demos {
        for d in sets.iter_mut().flatten() {
            for text in &mut d.gold_path_texts {
                *text = shorten(tok, text, config.demo_max_doc_tokens, trailing)?;
            }
        }
    }
    Ok(with_demos(&templates.instructions, &sets))
}

fn model_path(config: &LepusConfig) -> Result<&std::path::Path> {
    config
        .model
        .as_deref()
        .context("--model is required with --scorer lm (a GGUF file or HF directory)")
}

/// Loads the LM and tokenizer of `config` on `be`; `templates` from [`templates`].
pub fn lm_job<B: Backend>(config: &LepusConfig, templates: Templates, be: B) -> Result<LmJob<B>> {
    let model_path = model_path(config)?;
    let mut loaded = super::decoder::load_decoder(&be, model_path, config.tokenizer.as_deref())?;
    loaded.model.set_min_shared_prefix(config.min_shared_prefix);
    let context = loaded.model.context();
    let prompt_tokens = config.prompt_tokens();
    ensure!(
        prompt_tokens <= context,
        "--{} {prompt_tokens} is over the model's context of {context} tokens",
        match config.demos {
            Some(_) => "demo-max-prompt-tokens",
            None => "max-prompt-tokens",
        }
    );
    let seq2seq = loaded.model.is_seq2seq();
    // The official shortening counts what `tokenizer.encode` appends: T5's `</s>`.
    let trailing = if seq2seq {
        loaded.tokenizer.added_tokens()
    } else {
        0
    };
    let templates = demo_templates(config, templates, &loaded.tokenizer, trailing)?;
    let search = SearchConfig {
        first_hops: config.first_hops,
        ensemble: config.ensemble,
        path_ensemble: config.path_ensemble,
    };
    let options = [
        ("strategy", "lepus".to_string()),
        ("scorer", "lm".to_string()),
        ("model_type", loaded.model.model_type().to_string()),
        (
            "templates",
            serde_json::to_string(&templates.iter().map(|t| &t.0).collect::<Vec<_>>())?,
        ),
        ("ensemble", format!("{:?}", config.ensemble).to_lowercase()),
        (
            "path_ensemble",
            format!("{:?}", config.path_ensemble).to_lowercase(),
        ),
        ("first_hops", config.first_hops.to_string()),
        ("second_hops", config.second_hops.to_string()),
        ("title", config.title.to_string()),
        ("max_doc_tokens", config.max_doc_tokens.to_string()),
        ("max_prompt_tokens", config.max_prompt_tokens.to_string()),
        ("temperature", config.temperature.to_string()),
        ("add_bos", loaded.tokenizer.add_bos.to_string()),
        ("device", be.name()),
    ];
    let mut options = options.to_vec();
    if config.demos.is_some() {
        options.extend([
            ("demo_ids", serde_json::to_string(&config.demo_ids)?),
            ("truncate_demos", config.truncate_demos.to_string()),
            (
                "demo_max_doc_tokens",
                config.demo_max_doc_tokens.to_string(),
            ),
            ("demo_max_prompt_tokens", prompt_tokens.to_string()),
        ]);
    }
    let metadata = run_metadata(&be, model_path, &loaded.weights_paths, &options)?;
    let tok = Arc::new(loaded.tokenizer);
    let setup = LmSetup {
        encoder: Arc::new(LmEncoder {
            tok: tok.clone(),
            max_tokens: prompt_tokens,
            seq2seq,
        }),
        tok,
        templates: templates.into(),
        config: search,
        second_hops: config.second_hops,
        title: config.title,
        max_doc_tokens: config.max_doc_tokens,
        trailing_specials: trailing,
    };
    Ok(QuestionJob::new(
        LmScorer {
            be,
            model: loaded.model,
            setup: Arc::new(setup),
            temperature: config.temperature,
            metadata,
        },
        config.scheduler,
    ))
}

impl<B: Backend> LmScorer<B> {
    /// Prompt tokens of the scored sequences, and those run through the model after
    /// shared-prefix reuse.
    pub fn prefix_token_counts(&self) -> (usize, usize) {
        self.model.token_counts()
    }
}

impl<B: Backend> QuestionScorer for LmScorer<B> {
    type Task = LmTask;
    type Row = Ranked;

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn schema(&self) -> SchemaRef {
        lepus_schema()
    }

    fn prepare(&self) -> Prepare<LmTask> {
        let setup = self.setup.clone();
        Arc::new(move |q: &Question| setup.prepare(q))
    }

    fn finish(outcome: Result<Ranked, (String, String)>) -> Result<Ranked, (String, String)> {
        let ranked = outcome?;
        let r = &ranked.result;
        let paths = r.top_paths.iter().map(|p| &p.score);
        let singles = r.single_scores.iter().flatten();
        match crate::strategy::non_finite(r.doc_scores.iter().chain(paths).chain(singles)) {
            Some(why) => Err((ranked.id, why)),
            None => Ok(ranked),
        }
    }

    fn to_batch(&self) -> ToBatch<Ranked> {
        Arc::new(batch)
    }

    fn score(&mut self, seqs: &[Sequence], _: &[usize]) -> Result<Vec<Vec<f32>>> {
        score_requests(&self.be, &self.model, seqs, self.temperature)
    }
}

/// Log-probabilities of the question tokens (`type_ids` 1) of each request.
pub fn score_requests<B: Backend>(
    be: &B,
    model: &LanguageModel<B>,
    seqs: &[Sequence],
    temperature: f32,
) -> Result<Vec<Vec<f32>>> {
    let scored: Vec<ScoredSequence> = seqs
        .iter()
        .map(|s| ScoredSequence {
            ids: s.ids.clone(),
            target_start: s
                .type_ids
                .iter()
                .position(|&t| t == 1)
                .expect("every prompt marks its question tokens"),
        })
        .collect();
    model.target_logprobs(be, &scored, temperature)
}

fn indices(v: &[usize]) -> impl Iterator<Item = i32> + '_ {
    v.iter().map(|&x| x as i32)
}

/// One record batch of output rows.
fn batch(rows: &[Ranked]) -> Result<RecordBatch> {
    let mut chain = ListBuilder::new(Int32Builder::new());
    let mut titles = ListBuilder::new(StringBuilder::new());
    let mut doc_scores = ListBuilder::new(Float32Builder::new());
    let mut best = ListBuilder::new(Int32Builder::new());
    let mut single = ListBuilder::new(Float32Builder::new());
    let mut top_paths = ScoredChainsBuilder::default();
    for r in rows {
        let res = &r.result;
        chain.values().extend(indices(&res.ranking).map(Some));
        chain.append(true);
        for &j in &res.ranking {
            titles.values().append_value(&r.titles[j]);
        }
        titles.append(true);
        doc_scores.values().append_slice(&res.doc_scores);
        doc_scores.append(true);
        best.values().extend(indices(&r.best_path).map(Some));
        best.append(true);
        single.values().extend(res.single_scores.iter().copied());
        single.append(true);
        for ScoredPath { chain, score } in &res.top_paths {
            top_paths.push(chain, *score);
        }
        top_paths.end_row();
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.id.as_str()),
        )),
        Arc::new(chain.finish()),
        Arc::new(titles.finish()),
        Arc::new(doc_scores.finish()),
        Arc::new(best.finish()),
        Arc::new(Float32Array::from_iter(
            rows.iter().map(|r| r.best_path_score),
        )),
        Arc::new(top_paths.finish()),
        Arc::new(single.finish()),
    ];
    RecordBatch::try_new(lepus_schema(), columns).context("building the output batch")
}

impl crate::jobs::JobKind for LepusConfig {
    const NAME: &'static str = "lepus";
    const REQUIRED: &'static [&'static str] = &[];
    const ROW: &'static str = "question";
    const PART_ROWS: u64 = 256;
    type Device = DeviceConfig;
    type Summary = RunSummary;

    fn load<B: Backend + 'static>(self, be: B) -> Result<Box<dyn crate::jobs::Job>> {
        Ok(match self.scorer {
            LepusScorer::Bm25 => Box::new(bm25_job(&self)),
            LepusScorer::Lm => Box::new(lm_job(&self, templates(&self)?, be)?),
        })
    }

    /// Logs how many prompt tokens the shared-prefix reuse saved.
    fn run_files(self, device: &DeviceConfig, run: &FileRun) -> Result<RunSummary> {
        if self.scorer == LepusScorer::Bm25 {
            return files::run(&mut bm25_job(&self), run);
        }
        let templates = templates(&self)?;
        with_backend!(owned device, be => {
            let mut job = lm_job(&self, templates, be)?;
            let summary = files::run(&mut job, run)?;
            let (all, packed) = job.scorer.prefix_token_counts();
            if all > 0 {
                log::info!(
                    "shared-prefix reuse: {packed} of {all} prompt tokens ran through the \
                     model ({:.1}% saved; --min-shared-prefix {})",
                    100.0 * (all - packed) as f64 / all as f64,
                    self.min_shared_prefix
                );
            }
            Ok(summary)
        })
    }
}
