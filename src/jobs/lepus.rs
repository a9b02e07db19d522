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
use crate::io::questions::Question;
use crate::io::schemas::lepus_schema;
use crate::jobs::options::{self, Options};
use crate::model::batch::Sequence;
use crate::model::decoder::ScoredSequence;
use crate::model::hub::Need;
use crate::pipeline::files::ToBatch;
use crate::pipeline::SchedulerConfig;
use crate::retrieve::tfidf::TfIdfOptions;
use crate::retrieve::{Bm25Index, TfIdf};
use crate::strategy::lepus::{
    parse_templates, question_text, with_demos, Demo, Ensemble, InstructionPosition,
    LepusConfig as SearchConfig, LepusResult, LepusSearch, PromptEncoder, ScoredPath, Template,
    DEFAULT_INSTRUCTIONS,
};
use crate::strategy::Strategy;
use crate::text::causal_tokenizer::CausalTokenizer;
use crate::text::words::clean_up_tokenization;

/// Which scorer ranks the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum LepusScorer {
    Lm,
    Bm25,
}

/// What to load and how to rank.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LepusConfig {
    /// A GGUF file, a directory holding one, or an HF directory of a causal LM or a
    /// T5-family encoder-decoder (not needed with [`LepusScorer::Bm25`]).
    pub model: Option<PathBuf>,
    /// tokenizer.json (or a directory holding it) instead of the model's own.
    pub tokenizer: Option<PathBuf>,
    pub scorer: LepusScorer,
    /// Instruction file (default: hopscore's own set, src/strategy/lepus_instructions.txt).
    pub templates: Option<PathBuf>,
    /// Templates used (the first N of the set).
    pub num_templates: usize,
    pub instruction_position: InstructionPosition,
    /// Ensemble over templates of single-document scores.
    pub ensemble: Ensemble,
    /// Ensemble over templates of path scores.
    pub path_ensemble: Ensemble,
    /// K1: the best single documents expanded into two-document paths.
    pub first_hops: usize,
    /// K2: second documents per expanded document.
    pub second_hops: usize,
    /// Prepend `Title: {title}. ` to every document.
    pub title: bool,
    /// Documents are cut to this many tokens.
    pub max_doc_tokens: usize,
    /// Prompt + question are cut to this many tokens.
    pub max_prompt_tokens: usize,
    /// Logits are divided by this before the log-softmax (must be > 0).
    pub temperature: f32,
    /// Shared leading tokens from which sequences of a batch reuse one prefix pass
    /// (0: off).
    pub min_shared_prefix: usize,
    /// In-context demonstrations: the official demos file, a JSON list of
    /// `{"question", "gold_path_texts"}` ([`crate::strategy::lepus::with_demos`]).
    pub demos: Option<PathBuf>,
    /// The demonstrations each template gets, by position in `demos`: one set per
    /// ensemble member (the official `--demos_ids 0,1`; several sets: its ensemble).
    pub demo_ids: Vec<Vec<usize>>,
    /// Cut each demonstration's texts to `demo_max_doc_tokens` (the official
    /// `--truncate_demos`).
    pub truncate_demos: bool,
    pub demo_max_doc_tokens: usize,
    /// With `demos`, prompt + question are cut to this many tokens instead of
    /// `max_prompt_tokens` (the official `--demo_max_prompt_len`).
    pub demo_max_prompt_tokens: usize,
    #[serde(flatten)]
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

/// Encodes a prompt and the question for the model, as the official
/// `score_prompt_batch` does: for a causal LM `prompt.trim() + " " + question` (prompt
/// and question tokenised separately, BOS when the tokenizer asks for it), cut to
/// `max_tokens`; for an encoder-decoder the prompt as it is (the encoder input) and the
/// question (the labels), each with the tokenizer's special tokens and cut to
/// `max_tokens` (a cut that leaves every passage's prompt the same ends the question:
/// [`crate::strategy::lepus::LepusSearch`]).
pub struct LmEncoder {
    pub tok: Arc<CausalTokenizer>,
    pub max_tokens: usize,
    pub seq2seq: bool,
}

impl LmEncoder {
    fn encode_seq2seq(&self, prompt: &str, question: &str) -> Result<Sequence, String> {
        let encode = |text: &str| {
            self.tok
                .encode_with_specials(text, Some(self.max_tokens))
                .map_err(|e| format!("{e:#}"))
        };
        let (mut ids, labels) = (encode(prompt)?, encode(question)?);
        if ids.is_empty() || labels.is_empty() {
            return Err("the prompt or the question has no tokens".into());
        }
        let mut type_ids = vec![0u32; ids.len()];
        type_ids.resize(ids.len() + labels.len(), 1);
        ids.extend(labels);
        Ok(Sequence {
            ids,
            type_ids,
            mask: Vec::new(),
        })
    }
}

impl PromptEncoder for LmEncoder {
    fn encode(&self, prompt: &str, question: &str) -> Result<Sequence, String> {
        if self.seq2seq {
            return self.encode_seq2seq(prompt, question);
        }
        let enc = self
            .tok
            .encode_pair(&format!("{} ", prompt.trim()), question)
            .map_err(|e| format!("{e:#}"))?;
        if enc.target_start == 0 {
            return Err("the prompt is empty and the model adds no BOS".into());
        }
        if enc.target_start >= self.max_tokens {
            return Err(format!(
                "the prompt is {} tokens: no question token fits in the prompt budget of {} \
                 (--max-prompt-tokens; --demo-max-prompt-tokens with --demos)",
                enc.target_start, self.max_tokens
            ));
        }
        let mut ids = enc.ids;
        ids.truncate(self.max_tokens);
        let mut type_ids = vec![0u32; ids.len()];
        type_ids[enc.target_start..].fill(1);
        Ok(Sequence {
            ids,
            type_ids,
            mask: Vec::new(),
        })
    }
}

/// The official `shorten_paragraph_if_necessary`: a text over `max_tokens` tokens is
/// decoded from its first `max_tokens`, with `". "` appended unless it ends with `.`.
/// `trailing` special tokens that the tokenizer appends (T5's `</s>`, which the
/// official `tokenizer.encode` adds) count toward the length.
pub fn shorten(
    tok: &CausalTokenizer,
    text: &str,
    max_tokens: usize,
    trailing: usize,
) -> Result<String> {
    let ids = crate::text::leading_ids(|t| tok.encode(t), text, max_tokens)?;
    if ids.len() + trailing <= max_tokens {
        return Ok(text.to_string());
    }
    let cut = clean_up_tokenization(&tok.decode(&ids[..max_tokens.min(ids.len())])?);
    Ok(if cut.trim().ends_with('.') {
        cut
    } else {
        format!("{cut}. ")
    })
}

/// Per passage, the other non-blank passages ranked by TF-IDF cosine to the question
/// (fitted on those candidates), the best `k` (none when their vocabulary is empty).
pub fn tfidf_expansions(question: &str, texts: &[&str], k: usize) -> Vec<Vec<usize>> {
    (0..texts.len())
        .map(|d| {
            let cands: Vec<usize> = (0..texts.len())
                .filter(|&j| j != d && !texts[j].trim().is_empty())
                .collect();
            let docs: Vec<&str> = cands.iter().map(|&j| texts[j]).collect();
            let model = TfIdf::with_options(&docs, TfIdfOptions::LEPUS);
            if model.is_empty() {
                return Vec::new();
            }
            let all: Vec<usize> = (0..docs.len()).collect();
            model
                .rank(question, &all, k)
                .into_iter()
                .map(|h| cands[h.doc])
                .collect()
        })
        .collect()
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
        let expansions = tfidf_expansions(&question, &texts, self.second_hops);
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
    let index = Bm25Index::over_passages(&q.passages);
    let scores = index.scores(&q.question);
    let single: Vec<f32> = (0..index.len())
        .map(|d| scores.get(&d).copied().unwrap_or(0.0) as f32)
        .collect();
    let mut ranking: Vec<usize> = (0..index.len()).collect();
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

    fn from_options(options: &crate::jobs::options::OptionMap) -> Result<Self> {
        crate::jobs::options::with_options(options, &[], "`lepus`")
    }

    fn load<B: Backend + 'static>(self, be: B) -> Result<Box<dyn crate::jobs::Job>> {
        Ok(match self.scorer {
            LepusScorer::Bm25 => Box::new(bm25_job(&self)),
            LepusScorer::Lm => Box::new(lm_job(&self, templates(&self)?, be)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansions_rank_the_other_passages_by_tfidf() {
        let texts = [
            "The river flows north.",
            "Apricots grow on the terraces.",
            "",
            "The terraces face the river.",
        ];
        let e = tfidf_expansions("Which terraces grow apricots?", &texts, 2);
        assert_eq!(e[0], vec![1, 3]);
        assert_eq!(e[1], vec![3, 0]);
        assert_eq!(e[3], vec![1, 0]);
        assert_eq!(
            e[2].len(),
            2,
            "a blank passage is no candidate but can be expanded"
        );
    }
}
