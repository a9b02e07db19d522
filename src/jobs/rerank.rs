//! The rerank job: each question's passage pool (a question file from `import` or
//! `retrieve`) scored by a cross-encoder — BERT (`cross-encoder/ms-marco-*`),
//! XLM-RoBERTa (`BAAI/bge-reranker-v2-m3`), ModernBERT
//! (`Alibaba-NLP/gte-reranker-modernbert-base`) or DeBERTa
//! (`mixedbread-ai/mxbai-rerank-*`) — or an LLM reranker (`Qwen/Qwen3-Reranker-*` and its `*-seq-cls` conversions),
//! and written back as the same question file, each pool in score order (best
//! first) with the scores in `rerank_scores`, so that `beam`, `lepus`, `label` and
//! `eval` read it as they read `retrieve`'s output.
//!
//! A pair is `(question, document)` with document = `title + separator + text`,
//! stripped (sentence-transformers' convention for titled corpora).
//! - A cross-encoder reads it as the model's tokenizer pairs texts, truncated
//!   longest-first; the score is what `CrossEncoder.predict` gives: the head's logit
//!   through the model's activation ([`ScoreActivation`]: sigmoid by default), or with
//!   `--label K` the softmax probability of label K of a several-label head.
//! - A decoder reads it through a [`RerankTemplate`] (`--template`, `--instruction`);
//!   a causal LM scores it by the softmax over the logits of the label tokens at the
//!   last position (`--label-tokens`, the template's by default: Qwen3-Reranker's
//!   P(yes) over `no`, `yes`), computed for those LM-head rows only; a
//!   `*ForSequenceClassification` checkpoint by its `score` head on the last token, as
//!   a cross-encoder's head.
//!
//! Ties keep the input order. Gold labels follow their passages; a gold passage
//! `--top-k` drops is noted in `issues` as `retrieve` notes one it misses, which
//! `eval` counts as not found.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{Float32Builder, ListBuilder};
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rayon::prelude::*;

use super::questions::{Prepare, QuestionJob, QuestionScorer};
use crate::backend::Backend;
use crate::io::fingerprint::file_sha256;
use crate::io::metadata::run_metadata;
use crate::io::paths::Named;
use crate::io::questions::{self, gold_not_retrieved, Question};
use crate::model::batch::{PackedBatch, Sequence};
use crate::model::cross_encoder::{CrossEncoder, ModelFiles, ScoreActivation};
use crate::model::decoder::{DecoderForCausalLM, DecoderSource};
use crate::model::decoder_config::decoder_type_of;
use crate::model::heads::select;
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::pipeline::files::ToBatch;
use crate::pipeline::{SchedulerConfig, Strategy};
use crate::text::causal_tokenizer::{self, CausalTokenizer};
use crate::text::rerank_prompt::{RerankPrompt, RerankTemplate};
use crate::text::TextTokenizer;

/// The output column of the scores, one per kept passage, in the new order.
pub const SCORES_COLUMN: &str = "rerank_scores";

/// What to load and how to rank: the flags of `hopscore rerank` and the options of
/// Python's `hopscore.Reranker`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RerankConfig {
    /// Reranker directory (or hub id): config.json, safetensors and tokenizer.json
    /// (unless --tokenizer is given). A cross-encoder (`model_type` bert, xlm-roberta,
    /// roberta, modernbert or deberta-v2) with a sequence classification head, or an LLM reranker
    /// (a decoder: qwen3, qwen2, llama, mistral; a causal LM, or one with a
    /// `*ForSequenceClassification` score head).
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_MODEL",
        value_parser = crate::options::values::model_path))]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it), when the model directory has none.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_TOKENIZER",
        value_parser = crate::options::values::model_path))]
    pub tokenizer: Option<PathBuf>,
    /// Head to score with, when the checkpoint has several sequence-level heads.
    #[cfg_attr(feature = "cli", arg(long))]
    pub head: Option<String>,
    /// A head with several labels: score by the softmax probability of this label
    /// (the relevant class). A one-label head needs none; with label tokens, the
    /// index of the relevant one (default the last).
    #[cfg_attr(feature = "cli", arg(long))]
    pub label: Option<usize>,
    /// LLM rerankers: the prompt template (default qwen3-reranker).
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub template: Option<RerankTemplate>,
    /// LLM rerankers: the task the template states (default the template's: for
    /// qwen3-reranker "Given a web search query, retrieve relevant passages that
    /// answer the query").
    #[cfg_attr(feature = "cli", arg(long))]
    pub instruction: Option<String>,
    /// LLM rerankers scored by a causal LM's head: the tokens whose logits at the last
    /// position are softmaxed (each one vocabulary token; default the template's:
    /// no,yes).
    #[cfg_attr(feature = "cli", arg(long, value_delimiter = ','))]
    pub label_tokens: Option<Vec<String>>,
    /// Keep the best K passages of each pool (default: all, reordered).
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::positive_usize))]
    pub top_k: Option<usize>,
    /// What joins a passage's title and text into the document (an empty title
    /// leaves the text alone).
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value = " ", allow_hyphen_values = true)
    )]
    pub title_separator: String,
    /// Truncation length of a pair, special tokens (and an LLM template) included
    /// (longest-first). Default: a cross-encoder's max_position_embeddings, an LLM
    /// template's 8192 (Qwen3-Reranker's card).
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::positive_usize))]
    pub max_length: Option<usize>,
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub scheduler: SchedulerConfig,
}

impl RerankConfig {
    /// The defaults (the command line's) for `model`.
    pub fn new(model: PathBuf) -> Self {
        Self {
            model,
            ..Self::defaults()
        }
    }
}

impl Options for RerankConfig {
    /// Every option at the command line's default; the paths empty.
    fn defaults() -> Self {
        Self {
            model: PathBuf::new(),
            tokenizer: None,
            head: None,
            label: None,
            template: None,
            instruction: None,
            label_tokens: None,
            top_k: None,
            title_separator: " ".into(),
            max_length: None,
            scheduler: SchedulerConfig::default(),
        }
    }

    fn check(&self) -> Result<()> {
        options::none_or_at_least_one("top_k", self.top_k)?;
        options::none_or_at_least_one("max_length", self.max_length)?;
        if let Some(tokens) = &self.label_tokens {
            if tokens.len() < 2 {
                bail!(
                    "--label-tokens names {} token(s): a softmax needs two or more",
                    tokens.len()
                );
            }
        }
        self.scheduler.check()
    }

    fn model_paths(&mut self) -> Vec<(&mut PathBuf, Need)> {
        options::model_and_tokenizer([&mut self.model], self.tokenizer.as_mut())
    }

    fn inputs(&self) -> Vec<Named> {
        options::named(&[
            ("--model", Some(&self.model)),
            ("--tokenizer", self.tokenizer.as_deref()),
        ])
    }
}

/// How a head's logits become one score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PairScore {
    /// A one-label head: its logit through the activation.
    Logit(ScoreActivation),
    /// A several-label head: the softmax probability of this label.
    Softmax(usize),
}

impl PairScore {
    /// The score of a pair's logits.
    pub fn of(self, logits: &[f32]) -> f32 {
        match self {
            PairScore::Logit(act) => act.apply(logits[0]),
            PairScore::Softmax(k) => {
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
                (logits[k] - max).exp() / sum
            }
        }
    }

    /// Its name in the run metadata.
    fn describe(self) -> String {
        match self {
            PairScore::Logit(act) => super::value_name(act),
            PairScore::Softmax(k) => format!("softmax[{k}]"),
        }
    }
}

/// One question's pairs, scored in one step.
pub struct RerankTask {
    question: Option<Question>,
    pairs: Vec<Sequence>,
    score: PairScore,
    top_k: Option<usize>,
    scores: Option<Vec<f32>>,
}

impl Strategy for RerankTask {
    type Output = Reranked;
    fn requests(&self) -> Vec<(Sequence, usize)> {
        match self.scores {
            Some(_) => Vec::new(),
            None => self.pairs.iter().map(|s| (s.clone(), 0)).collect(),
        }
    }
    fn feed(&mut self, logits: Vec<Vec<f32>>) {
        // A non-finite logit gives a NaN score, which `finish` quarantines (a sigmoid
        // would hide an infinite one).
        let score = |l: &[f32]| match l.iter().all(|v| v.is_finite()) {
            true => self.score.of(l),
            false => f32::NAN,
        };
        self.scores = Some(logits.iter().map(|l| score(l)).collect());
        self.pairs = Vec::new();
    }
    fn take_output(&mut self) -> Option<Reranked> {
        let scores = self.scores.take()?;
        Some(rerank(self.question.take()?, scores, self.top_k))
    }
}

/// A reranked question: its pool in the new order and the scores.
pub struct Reranked {
    question: Question,
    scores: Vec<f32>,
}

/// `q` with its passages in the order of `scores` (best first; ties keep the input
/// order), the best `top_k` kept; the gold indices follow their passages, and a gold
/// passage dropped is noted as not retrieved.
pub fn rerank(mut q: Question, scores: Vec<f32>, top_k: Option<usize>) -> Reranked {
    // A problem of the input's gold labels is recorded before the indices move.
    q.note_gold_problems(Vec::new());
    let mut order: Vec<usize> = (0..q.passages.len()).collect();
    order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]).then(i.cmp(&j)));
    order.truncate(top_k.unwrap_or(usize::MAX));
    let mut new_index = vec![None; q.passages.len()];
    for (to, &from) in order.iter().enumerate() {
        new_index[from] = Some(to);
    }
    let mut supporting = Vec::new();
    for &s in &q.supporting {
        match new_index.get(s) {
            Some(&Some(to)) => supporting.push(to),
            Some(None) => q.issues.push(gold_not_retrieved(&q.passages[s].title)),
            None => {}
        }
    }
    supporting.sort_unstable();
    let mut passages: Vec<Option<_>> = std::mem::take(&mut q.passages)
        .into_iter()
        .map(Some)
        .collect();
    q.passages = order.iter().filter_map(|&i| passages[i].take()).collect();
    q.supporting = supporting;
    Reranked {
        scores: order.iter().map(|&i| scores[i]).collect(),
        question: q,
    }
}

/// The model that scores pairs.
enum PairModel<B: Backend> {
    CrossEncoder(Box<CrossEncoder<B>>),
    /// A decoder and the head (`[k, hidden]`) read at each pair's last token: the
    /// label tokens' LM-head rows, or `None` for a classifier's own `score`.
    Llm {
        model: Box<DecoderForCausalLM<B>>,
        label_head: Option<B::Tensor>,
    },
}

/// A pair's ids, from (question, document).
type EncodePair = Arc<dyn Fn(&str, &str) -> Result<Sequence> + Send + Sync>;

/// A loaded reranker with its tokenizer and ranking settings.
pub struct RerankScorer<B: Backend> {
    be: B,
    model: PairModel<B>,
    encode: EncodePair,
    score: PairScore,
    top_k: Option<usize>,
    separator: Arc<str>,
    metadata: Vec<(String, String)>,
}

/// The rerank job on backend `B`.
pub type RerankJob<B> = QuestionJob<RerankScorer<B>>;

/// What a loaded model contributes to the scorer.
struct Loaded<B: Backend> {
    model: PairModel<B>,
    encode: EncodePair,
    score: PairScore,
    /// Run metadata of the model side (tokenizer, head, template, …).
    metadata: Vec<(&'static str, String)>,
    weights_paths: Vec<PathBuf>,
}

/// Loads the reranker and tokenizer of `config` on `be`.
pub fn job<B: Backend>(config: RerankConfig, be: B) -> Result<RerankJob<B>> {
    config.check()?;
    let config_json = config.model.join("config.json");
    let decoder = config.model.extension().is_some_and(|e| e == "gguf")
        || (config_json.is_file() && decoder_type_of(&config_json)?.is_some());
    let loaded = match decoder {
        true => load_llm(&config, &be)?,
        false => load_cross_encoder(&config, &be)?,
    };
    let mut resolved: Vec<(&str, String)> = vec![("strategy", "rerank".into())];
    resolved.extend(loaded.metadata);
    resolved.extend([
        ("score", loaded.score.describe()),
        (
            "top_k",
            config.top_k.map_or("all".into(), |k| k.to_string()),
        ),
        ("device", be.name()),
    ]);
    let options = options::record(&config, &resolved)?;
    let metadata = run_metadata(&be, &config.model, &loaded.weights_paths, &options)?;
    Ok(QuestionJob::new(
        RerankScorer {
            be,
            model: loaded.model,
            encode: loaded.encode,
            score: loaded.score,
            top_k: config.top_k,
            separator: config.title_separator.into(),
            metadata,
        },
        config.scheduler,
    ))
}

/// The score of a head with `labels` labels under `--label`.
fn head_score(
    config: &RerankConfig,
    head: &str,
    labels: usize,
    config_json: &std::path::Path,
) -> Result<PairScore> {
    Ok(match (labels, config.label) {
        (_, Some(k)) if k >= labels => bail!(
            "--label {k}: head `{head}` has {labels} labels (0 to {})",
            labels - 1
        ),
        (1, None) => PairScore::Logit(ScoreActivation::of_model(config_json, 1)?),
        (1, Some(_)) => bail!("--label: head `{head}` has one label; leave it out"),
        (n, None) => bail!(
            "head `{head}` has {n} labels: pass --label K, the label whose probability ranks \
             (the relevant class)"
        ),
        (_, Some(k)) => PairScore::Softmax(k),
    })
}

/// A cross-encoder and its pair tokenizer.
fn load_cross_encoder<B: Backend>(config: &RerankConfig, be: &B) -> Result<Loaded<B>> {
    for (flag, set) in [
        ("--template", config.template.is_some()),
        ("--instruction", config.instruction.is_some()),
        ("--label-tokens", config.label_tokens.is_some()),
    ] {
        if set {
            bail!(
                "{flag} is for LLM rerankers (decoders); {} is a cross-encoder",
                config.model.display()
            );
        }
    }
    let files = ModelFiles::open(&config.model)?;
    let model_config = files.config.clone();
    let head = select(&files.heads(), config.head.as_deref())?.clone();
    if !head.per_sequence() {
        bail!(
            "head `{}` scores tokens, not pairs: rerank needs a sequence classification head",
            head.name
        );
    }
    let score = head_score(
        config,
        head.name,
        head.num_labels,
        &config.model.join("config.json"),
    )?;
    let weights_paths = files.weights_paths();
    let model = CrossEncoder::load(be, files, Some(&[head.name]))?;
    let max_len = config
        .max_length
        .unwrap_or(model_config.max_position_embeddings);
    let tok_path = TextTokenizer::locate(&config.model, config.tokenizer.as_deref())?;
    let tok = TextTokenizer::from_file(&tok_path, Some(max_len))?;
    Ok(Loaded {
        model: PairModel::CrossEncoder(Box::new(model)),
        encode: Arc::new(move |q, doc| tok.encode_pair(q, Some(doc))),
        score,
        metadata: vec![
            ("tokenizer_sha256", file_sha256(&tok_path)?),
            ("head", head.name.to_string()),
            ("max_length", max_len.to_string()),
        ],
        weights_paths,
    })
}

/// The default `--max-length` of an LLM template (Qwen3-Reranker's card).
const LLM_MAX_LENGTH: usize = 8192;

/// A decoder, its template and the head read at the last token.
fn load_llm<B: Backend>(config: &RerankConfig, be: &B) -> Result<Loaded<B>> {
    if config.head.is_some() {
        bail!("--head is for cross-encoders; an LLM reranker reads its label tokens or its score head");
    }
    let source = DecoderSource::open(&config.model)?;
    let weights_paths = source.weights_paths();
    let tok = match (&source, config.tokenizer.as_deref()) {
        (DecoderSource::Gguf(g), None) => causal_tokenizer::from_gguf(g)?,
        (_, explicit) => CausalTokenizer::from_dir(&config.model, explicit)?,
    };
    let model = DecoderForCausalLM::load(be, source)?;
    let template = config.template.unwrap_or(RerankTemplate::Qwen3Reranker);
    let max_len = config.max_length.unwrap_or(LLM_MAX_LENGTH);
    let prompt = RerankPrompt::new(&tok, template, config.instruction.as_deref(), max_len)?;
    let mut metadata = vec![
        ("template", template.name().to_string()),
        ("instruction", prompt.instruction().to_string()),
        ("max_length", max_len.to_string()),
    ];
    // A GGUF file's tokenizer is in the weights, whose checksum the metadata holds.
    if tok.source.extension().is_some_and(|e| e == "json") {
        metadata.push(("tokenizer_sha256", file_sha256(&tok.source)?));
    }
    let (label_head, score) = match model.score_head() {
        Some(_) if config.label_tokens.is_some() => bail!(
            "--label-tokens: {} is a sequence classifier (a `score` head, no LM head); leave \
             them out",
            config.model.display()
        ),
        Some(_) => {
            let labels = model.config.score_labels.unwrap_or(1);
            let score = head_score(config, "score", labels, &config.model.join("config.json"))?;
            metadata.push(("head", "score".into()));
            (None, score)
        }
        None => {
            let names: Vec<String> = match &config.label_tokens {
                Some(t) => t.clone(),
                None => template
                    .label_tokens()
                    .iter()
                    .map(|t| t.to_string())
                    .collect(),
            };
            let ids = names
                .iter()
                .map(|t| {
                    tok.tokenizer.token_to_id(t).with_context(|| {
                        format!(
                            "label token {t:?} is not one token of the vocabulary of {}",
                            tok.source.display()
                        )
                    })
                })
                .collect::<Result<Vec<u32>>>()?;
            let k = match config.label {
                Some(k) if k >= ids.len() => bail!(
                    "--label {k}: there are {} label tokens (0 to {})",
                    ids.len(),
                    ids.len() - 1
                ),
                Some(k) => k,
                None => ids.len() - 1,
            };
            metadata.push(("label_tokens", names.join(",")));
            (Some(model.label_head(be, &ids)?), PairScore::Softmax(k))
        }
    };
    let tok = Arc::new(tok);
    let prompt = Arc::new(prompt);
    Ok(Loaded {
        model: PairModel::Llm {
            model: Box::new(model),
            label_head,
        },
        encode: Arc::new(move |q, doc| {
            Ok(Sequence {
                ids: prompt.encode(&tok, q, doc)?,
                ..Default::default()
            })
        }),
        score,
        metadata,
        weights_paths,
    })
}

/// The document of a passage: `title + separator + text`, stripped; the text alone
/// when the title is empty.
pub fn document(title: &str, text: &str, separator: &str) -> String {
    if title.is_empty() {
        text.trim().to_string()
    } else {
        format!("{title}{separator}{text}").trim().to_string()
    }
}

/// The output schema: a question file with [`SCORES_COLUMN`].
pub fn rerank_schema() -> SchemaRef {
    let mut fields: Vec<Field> = questions::schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(
        SCORES_COLUMN,
        DataType::List(Arc::new(Field::new("item", DataType::Float32, true))),
        false,
    ));
    Arc::new(Schema::new(fields))
}

impl<B: Backend> QuestionScorer for RerankScorer<B> {
    type Task = RerankTask;
    type Row = Reranked;

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn schema(&self) -> SchemaRef {
        rerank_schema()
    }

    fn prepare(&self) -> Prepare<RerankTask> {
        let (encode, separator) = (self.encode.clone(), self.separator.clone());
        let (score, top_k) = (self.score, self.top_k);
        Arc::new(move |q: &Question| {
            let pairs = q
                .passages
                .par_iter()
                .map(|p| {
                    let doc = document(&p.title, &p.text, &separator);
                    encode(&q.question, &doc)
                })
                .collect::<Result<Vec<_>>>()
                .map_err(|e| format!("{e:#}"))?;
            Ok(RerankTask {
                question: Some(q.clone()),
                pairs,
                score,
                top_k,
                scores: None,
            })
        })
    }

    fn finish(row: Reranked) -> Result<Reranked, (String, String)> {
        match crate::strategy::non_finite(&row.scores) {
            Some(why) => Err((row.question.id, why)),
            None => Ok(row),
        }
    }

    fn to_batch(&self) -> ToBatch<Reranked> {
        Arc::new(|rows: &[Reranked]| rerank_batch(rows))
    }

    fn score(&mut self, seqs: &[Sequence], _heads: &[usize]) -> Result<Vec<Vec<f32>>> {
        match &self.model {
            PairModel::CrossEncoder(model) => {
                let out = model.forward(&self.be, &PackedBatch::pack(seqs), false)?;
                let logits = &out.logits[0];
                let labels = logits.shape[1];
                Ok(logits
                    .data
                    .chunks_exact(labels)
                    .map(<[f32]>::to_vec)
                    .collect())
            }
            PairModel::Llm { model, label_head } => {
                let ids: Vec<&[u32]> = seqs.iter().map(|s| s.ids.as_slice()).collect();
                let head = label_head
                    .as_ref()
                    .or(model.score_head())
                    .context("an LLM reranker has label tokens or a score head")?;
                model.last_token_logits(&self.be, &ids, head)
            }
        }
    }
}

/// One record batch of reranked questions.
fn rerank_batch(rows: &[Reranked]) -> Result<RecordBatch> {
    let qs: Vec<&Question> = rows.iter().map(|r| &r.question).collect();
    let base = questions::to_batch(&qs)?;
    let mut scores = ListBuilder::new(Float32Builder::new());
    for r in rows {
        scores.values().append_slice(&r.scores);
        scores.append(true);
    }
    let mut columns = base.columns().to_vec();
    columns.push(Arc::new(scores.finish()));
    RecordBatch::try_new(rerank_schema(), columns).context("building the output batch")
}

impl crate::jobs::JobKind for RerankConfig {
    const NAME: &'static str = "rerank";
    const ABOUT: &'static str =
        "Rerank each question's passage pool with a cross-encoder (BERT, XLM-RoBERTa, DeBERTa): the question file reordered, with scores";
    const REQUIRED: &'static [&'static str] = &["model"];
    const ROW: &'static str = "question";
    type Device = crate::jobs::DeviceConfig;
    type Summary = crate::pipeline::files::RunSummary;
    type Files = crate::pipeline::files::FileRun;
}

impl crate::jobs::FileJobKind for RerankConfig {
    type Job<B: Backend + 'static> = RerankJob<B>;

    fn job<B: Backend + 'static>(self, be: B) -> Result<RerankJob<B>> {
        job(self, be)
    }

    fn summary<B: Backend + 'static>(_job: &RerankJob<B>, run: Self::Summary) -> Self::Summary {
        run
    }
}
