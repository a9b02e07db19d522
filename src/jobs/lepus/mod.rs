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
//! [`crate::strategy::lepus`]; the run's settings (its config, instruction templates
//! and demonstrations) are in `config.rs`.

use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use arrow_array::builder::{Float32Builder, Int32Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, Float32Array, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use rayon::prelude::*;

mod config;
pub mod instruction_search;

pub use config::{demo_templates, templates, LepusConfig, LepusScorer, Templates};

use crate::backend::Backend;
use crate::io::columns::ScoredChainsBuilder;
use crate::io::metadata::{run_metadata, tool_metadata};
use crate::io::questions::Question;
use crate::io::schemas::lepus_schema;
use crate::jobs::questions::{Output, Prepare, QuestionJob, QuestionScorer, QuestionTask};
use crate::jobs::DeviceConfig;
use crate::model::batch::Sequence;
use crate::model::decoder::ScoredSequence;
use crate::model::language_model::{LanguageModel, LanguageModelSource};
use crate::options;
use crate::pipeline::files::{self, FileRun, RunSummary, ToBatch};
use crate::pipeline::Strategy;
use crate::retrieve::Bm25Index;
use crate::strategy::lepus::{
    question_text, LepusConfig as SearchConfig, LepusResult, LepusSearch, PromptEncoder,
    ScoredPath, Template,
};
use crate::text::causal_tokenizer::{self, CausalTokenizer};
use crate::text::prompt::{shorten, LmEncoder};
use config::model_path;

/// One output row.
pub struct Ranked {
    id: String,
    titles: Vec<String>,
    result: LepusResult,
    /// The best path (LEPUS) or the two best documents (BM25).
    best_path: Vec<usize>,
    best_path_score: Option<f32>,
}

/// A LEPUS search.
pub type LmTask = QuestionTask<LepusSearch>;

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
    let single: Vec<f32> = Bm25Index::over_passages(&q.passages)
        .scores_in_order(&q.question)
        .into_iter()
        .map(|s| s as f32)
        .collect();
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

/// The BM25 baseline job, its settings checked first.
pub fn bm25_job(config: &LepusConfig) -> Result<Bm25Job> {
    crate::options::Options::check(config)?;
    let metadata = tool_metadata(&options::record(
        config,
        &[("strategy", "lepus".to_string())],
    )?);
    Ok(QuestionJob::new(Bm25Scorer { metadata }, config.scheduler))
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

/// Loads the LM and tokenizer of `config` on `be`; `templates` from [`templates`].
pub fn lm_job<B: Backend>(config: &LepusConfig, templates: Templates, be: B) -> Result<LmJob<B>> {
    let model_path = model_path(config)?;
    let source = LanguageModelSource::open(model_path)?;
    let tokenizer = causal_tokenizer::for_model(&source, model_path, config.tokenizer.as_deref())?;
    let weights_paths = source.weights_paths();
    let mut model = source.load(&be)?;
    model.set_min_shared_prefix(config.min_shared_prefix);
    let context = model.context();
    let prompt_tokens = config.prompt_tokens();
    ensure!(
        prompt_tokens <= context,
        "--{} {prompt_tokens} is over the model's context of {context} tokens",
        match config.demos {
            Some(_) => "demo-max-prompt-tokens",
            None => "max-prompt-tokens",
        }
    );
    let seq2seq = model.is_seq2seq();
    // The official shortening counts what `tokenizer.encode` appends: T5's `</s>`.
    let trailing = if seq2seq { tokenizer.added_tokens() } else { 0 };
    let templates = demo_templates(config, templates, &tokenizer, trailing)?;
    let search = SearchConfig {
        first_hops: config.first_hops,
        ensemble: config.ensemble,
        path_ensemble: config.path_ensemble,
    };
    let options = options::record(
        config,
        &[
            ("strategy", "lepus".to_string()),
            ("model_type", model.model_type().to_string()),
            (
                "templates",
                serde_json::to_string(&templates.iter().map(|t| &t.0).collect::<Vec<_>>())?,
            ),
            ("add_bos", tokenizer.add_bos.to_string()),
            ("device", be.name()),
        ],
    )?;
    let metadata = run_metadata(&be, model_path, &weights_paths, &options)?;
    let tok = Arc::new(tokenizer);
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
            model,
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

    fn finish(done: Output<Self>) -> Result<Ranked, (String, String)> {
        let result = done.result.map_err(|reason| (done.id.clone(), reason))?;
        let best = result.best_path();
        let ranked = Ranked {
            best_path: best.as_ref().map_or_else(Vec::new, |p| p.chain.clone()),
            best_path_score: best.map(|p| p.score),
            id: done.id,
            titles: done.titles,
            result,
        };
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
    const ABOUT: &'static str =
        "LEPUS reranking of each question's passages with a causal LM or a T5 encoder-decoder (or BM25)";
    const REQUIRED: &'static [&'static str] = &[];
    const ROW: &'static str = "question";
    type Device = DeviceConfig;
    type Summary = RunSummary;
    type Files = crate::pipeline::files::FileRun;
}

impl crate::jobs::FileJobKind for LepusConfig {
    /// The LM scorer's job; BM25 runs no model (its job in `load` and `run_files`).
    type Job<B: Backend + 'static> = LmJob<B>;

    fn job<B: Backend + 'static>(self, be: B) -> Result<LmJob<B>> {
        lm_job(&self, templates(&self)?, be)
    }

    /// Logs how many prompt tokens the shared-prefix reuse saved.
    fn summary<B: Backend + 'static>(job: &LmJob<B>, run: RunSummary) -> RunSummary {
        let (all, packed) = job.scorer.prefix_token_counts();
        if all > 0 {
            log::info!(
                "shared-prefix reuse: {packed} of {all} prompt tokens ran through the model \
                 ({:.1}% saved; --min-shared-prefix sets the shortest prefix shared)",
                100.0 * (all - packed) as f64 / all as f64
            );
        }
        run
    }

    fn load<B: Backend + 'static>(self, be: B) -> Result<Box<dyn crate::jobs::Job>> {
        Ok(match self.scorer {
            LepusScorer::Bm25 => Box::new(bm25_job(&self)?),
            LepusScorer::Lm => Box::new(self.job(be)?),
        })
    }

    /// A templates file that cannot be read or parsed is refused before the device
    /// opens (its self-test can take seconds).
    fn run_files(self, device: &DeviceConfig, run: &FileRun) -> Result<RunSummary> {
        match self.scorer {
            LepusScorer::Bm25 => files::run(&mut bm25_job(&self)?, run),
            LepusScorer::Lm => {
                templates(&self)?;
                crate::jobs::run_on_device(self, device, run)
            }
        }
    }
}
