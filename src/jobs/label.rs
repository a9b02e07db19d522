//! The label job: EfficientRAG (docs/spec.md §2) over question rows: the Labeler tags
//! retrieved chunks and keeps their useful tokens, the Filter writes the next query,
//! for up to `max_iter` iterations; one scheduler batch may mix Labeler and Filter
//! requests of many questions, and [`Models::score`] routes each to its model.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{Float32Builder, Int32Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, SchemaRef};

use super::embed::{embedder, EmbedConfig, Embedder};
use super::questions::{Prepare, QuestionJob, QuestionScorer, QuestionTask, Searched};
use crate::backend::cpu::CpuBackend;
use crate::backend::Backend;
use crate::io::fingerprint::{file_sha256, model_sha256};
use crate::io::metadata::run_metadata;
use crate::io::paths::Named;
use crate::io::questions::Question;
use crate::io::schemas::{iteration_fields, label_schema};
use crate::model::batch::{PackedBatch, Sequence};
use crate::model::cross_encoder::{CrossEncoder, ModelFiles};
use crate::model::heads::Pooling;
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::pipeline::files::ToBatch;
use crate::pipeline::SchedulerConfig;
use crate::retrieve::chunks::{
    corpus_vectors, ChunkSource, CorpusChunks, DensePool, DenseVectors, PoolChunks, QueryEncoder,
};
use crate::retrieve::Corpus;
use crate::strategy::efficientrag::{
    EfficientRag, Iteration, LabelResult, LoopConfig, FILTER, LABELER, MAX_ITER, TOP_K,
};
use crate::text::render::efficientrag_chunk;
use crate::text::TextTokenizer;

/// What to load and how to search: the flags of `hopscore label` and the options of
/// Python's `hopscore.EfficientRAG`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct LabelConfig {
    /// EfficientRAG Labeler checkpoint directory (`deberta.*`, `pooler.dense.*`,
    /// `sequence_classifier.*` with 2 or 3 tags, `token_classifier.*`).
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_LABELER",
        value_parser = crate::options::values::model_path))]
    pub labeler: PathBuf,
    /// EfficientRAG Filter checkpoint directory (a `DebertaV2ForTokenClassification`
    /// with 2 labels).
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_FILTER",
        value_parser = crate::options::values::model_path))]
    pub filter: PathBuf,
    /// tokenizer.json (or its directory) when the Labeler directory has none; both
    /// models share it.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_TOKENIZER",
        value_parser = crate::options::values::model_path))]
    pub tokenizer: Option<PathBuf>,
    /// Retrieve from this corpus (Parquet `id`, `text`, optional `title`; one BM25
    /// index built at start) instead of each question's own passages.
    #[cfg_attr(feature = "cli", arg(long))]
    pub corpus: Option<PathBuf>,
    /// Tag-head pooling: `cls` (the official code: ContextPooler on [CLS]) or `mean`
    /// (the paper: the pooler on the mean of the token states).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = LabelConfig::defaults().tag_pooling))]
    pub tag_pooling: TagPooling,
    /// Most iterations (retrieve, label, filter) per question.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LabelConfig::defaults().max_iter,
        value_parser = crate::options::values::positive_usize))]
    pub max_iter: usize,
    /// Chunks retrieved per iteration.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LabelConfig::defaults().top_k,
        value_parser = crate::options::values::positive_usize))]
    pub top_k: usize,
    /// `bm25`, or `dense` as the official code retrieves (a bi-encoder such as
    /// Contriever-MSMARCO: --encoder; over --corpus, its vectors: --index).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = LabelConfig::defaults().retriever))]
    pub retriever: LabelRetriever,
    /// The bi-encoder of `--retriever dense` (a BERT-family directory as for `embed`);
    /// it embeds each iteration's query on the CPU.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_ENCODER",
        value_parser = crate::options::values::model_path))]
    pub encoder: Option<PathBuf>,
    /// `hopscore embed` outputs of the --corpus file (dense retrieval over a corpus).
    #[cfg_attr(feature = "cli", arg(long, num_args = 1..))]
    pub index: Vec<PathBuf>,
    /// Text put before every query (E5: "query: ").
    #[cfg_attr(feature = "cli", arg(long, default_value = ""))]
    pub query_prefix: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub scheduler: SchedulerConfig,
}

/// How the loop retrieves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum LabelRetriever {
    /// BM25 over `title + " " + text` (only chunks that share a term with the query).
    Bm25,
    /// Inner product of bi-encoder vectors (`--encoder`; over a corpus, `--index`).
    Dense,
}

impl LabelConfig {
    /// The defaults (the command line's) for `labeler` and `filter`.
    pub fn new(labeler: PathBuf, filter: PathBuf) -> Self {
        Self {
            labeler,
            filter,
            ..Self::defaults()
        }
    }
}

impl Options for LabelConfig {
    /// Every option at the command line's default; the paths empty.
    fn defaults() -> Self {
        Self {
            labeler: PathBuf::new(),
            filter: PathBuf::new(),
            tokenizer: None,
            corpus: None,
            tag_pooling: TagPooling::Cls,
            max_iter: MAX_ITER,
            top_k: TOP_K,
            retriever: LabelRetriever::Bm25,
            encoder: None,
            index: Vec::new(),
            query_prefix: String::new(),
            scheduler: SchedulerConfig::default(),
        }
    }

    fn check(&self) -> Result<()> {
        options::at_least_one("max_iter", self.max_iter)?;
        options::at_least_one("top_k", self.top_k)?;
        anyhow::ensure!(
            self.index.is_empty() || self.corpus.is_some(),
            "--index is the vectors of a --corpus: without --corpus the loop retrieves from \
             each question's own passages and would ignore it; give --corpus FILE (the \
             file the index was embedded from) or leave --index out"
        );
        anyhow::ensure!(
            self.index.is_empty() || self.retriever == LabelRetriever::Dense,
            "--index is read by --retriever dense only; give --retriever dense or leave \
             --index out"
        );
        if self.retriever == LabelRetriever::Bm25 {
            options::unused_in_mode(
                self,
                "--retriever bm25",
                "--retriever dense",
                &["encoder", "query_prefix"],
            )?;
        }
        self.scheduler.check()
    }

    fn model_paths(&mut self) -> Vec<(&mut PathBuf, Need)> {
        let models = [&mut self.labeler, &mut self.filter];
        let mut paths = options::model_and_tokenizer(models, self.tokenizer.as_mut());
        paths.extend(self.encoder.as_mut().map(|e| (e, Need::Model)));
        paths
    }

    fn inputs(&self) -> Vec<Named> {
        let mut inputs = options::named(&[
            ("--labeler", Some(&self.labeler)),
            ("--filter", Some(&self.filter)),
            ("--tokenizer", self.tokenizer.as_deref()),
            ("--corpus", self.corpus.as_deref()),
            ("--encoder", self.encoder.as_deref()),
        ]);
        inputs.extend(self.index.iter().map(|p| Named::new("--index", p)));
        inputs
    }
}

/// Pooling of the Labeler's tag head: `Cls` (the official code: ContextPooler on
/// [CLS]) or `Mean` (the paper: the pooler on the mean of the token states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum TagPooling {
    Cls,
    Mean,
}

/// A loaded model and where its heads' logits are.
struct Scorer<B: Backend> {
    model: CrossEncoder<B>,
    /// Every weight file (their checksums go into the run metadata).
    weights: Vec<PathBuf>,
    /// Index of the tag head (Labeler only) and its class count.
    tags: Option<(usize, usize)>,
    tokens: usize,
}

impl<B: Backend> Scorer<B> {
    /// Loads `dir` and finds its token head (2 labels) and, when `tags`, its tag head.
    fn load(be: &B, dir: &Path, role: &str, tags: Option<TagPooling>) -> Result<Self> {
        let files = ModelFiles::open(dir)?;
        let mut specs = files.heads();
        let names = specs.iter().map(|s| s.name).collect::<Vec<_>>().join(", ");
        let need = if tags.is_some() {
            "`token_classifier` (2 labels) and `pooler.dense` + `sequence_classifier` (2 or 3 tags)"
        } else {
            "a token-classification `classifier` (2 labels)"
        };
        let bad = || {
            anyhow::anyhow!(
                "{} is not an EfficientRAG {role} checkpoint: it needs {need} (heads found: {})",
                dir.display(),
                if names.is_empty() { "none" } else { &names }
            )
        };
        specs.retain(|s| s.name == "token" || (tags.is_some() && s.name == "sequence"));
        let tokens = specs
            .iter()
            .position(|s| s.name == "token" && s.num_labels == 2)
            .ok_or_else(bad)?;
        let tags = match tags {
            None => None,
            Some(pooling) => {
                let k = specs
                    .iter()
                    .position(|s| s.name == "sequence" && matches!(s.num_labels, 2 | 3))
                    .ok_or_else(bad)?;
                if pooling == TagPooling::Mean {
                    specs[k].pooling = Pooling::MeanPooler;
                }
                Some((k, specs[k].num_labels))
            }
        };
        let weights = files.weights_paths();
        let model = CrossEncoder::from_weights(be, &files.weights, files.config, specs)
            .with_context(|| format!("loading the {role} in {}", dir.display()))?;
        Ok(Self {
            model,
            weights,
            tags,
            tokens,
        })
    }

    /// Per sequence: the tag logits (if any), then each token's label (0 or 1).
    fn score(&self, be: &B, seqs: &[&Sequence]) -> Result<Vec<Vec<f32>>> {
        let batch = PackedBatch::pack(seqs.iter().copied());
        let out = self.model.forward(be, &batch, false)?;
        let cu = &batch.layout.cu_seqlens;
        let labels = out.labels[self.tokens]
            .as_deref()
            .expect("the token head gives labels");
        Ok((0..seqs.len())
            .map(|j| {
                let mut v = Vec::new();
                if let Some((h, n)) = self.tags {
                    v.extend_from_slice(&out.logits[h].data[j * n..(j + 1) * n]);
                }
                v.extend(labels[cu[j]..cu[j + 1]].iter().map(|&l| l as f32));
                v
            })
            .collect())
    }
}

/// The Labeler and the Filter, scoring the requests of [`EfficientRag`] searches.
pub struct Models<B: Backend> {
    labeler: Scorer<B>,
    filter: Scorer<B>,
}

impl<B: Backend> Models<B> {
    /// Loads both checkpoints (their heads are checked; errors name what is missing).
    pub fn load(be: &B, labeler: &Path, filter: &Path, pooling: TagPooling) -> Result<Self> {
        Ok(Self {
            labeler: Scorer::load(be, labeler, "Labeler", Some(pooling))?,
            filter: Scorer::load(be, filter, "Filter", None)?,
        })
    }

    /// Classes of the Labeler's tag head (2 or 3).
    pub fn n_tags(&self) -> usize {
        self.labeler.tags.expect("the Labeler has a tag head").1
    }

    /// Logits of a mixed batch: [`LABELER`] requests go to the Labeler, [`FILTER`]
    /// requests to the Filter (the layouts the strategy expects).
    pub fn score(&self, be: &B, seqs: &[Sequence], heads: &[usize]) -> Result<Vec<Vec<f32>>> {
        let mut out = vec![Vec::new(); seqs.len()];
        for (head, scorer) in [(LABELER, &self.labeler), (FILTER, &self.filter)] {
            let picked: Vec<usize> = (0..seqs.len()).filter(|&k| heads[k] == head).collect();
            if picked.is_empty() {
                continue;
            }
            let batch: Vec<&Sequence> = picked.iter().map(|&k| &seqs[k]).collect();
            for (k, l) in picked.into_iter().zip(scorer.score(be, &batch)?) {
                out[k] = l;
            }
        }
        Ok(out)
    }
}

/// `encoder` embedding one query at a time.
fn query_encoder(encoder: &Arc<Embedder<CpuBackend>>) -> QueryEncoder {
    let encoder = encoder.clone();
    Arc::new(move |query: &str| encoder.embed_texts(&[query]))
}

/// The query encoder of dense retrieval (`None` for BM25).
fn dense_encoder(config: &LabelConfig) -> Result<Option<Arc<Embedder<CpuBackend>>>> {
    if config.retriever == LabelRetriever::Bm25 {
        return Ok(None);
    }
    let model = config
        .encoder
        .clone()
        .context("--retriever dense needs the bi-encoder (--encoder DIR)")?;
    let encoder = EmbedConfig {
        prefix: config.query_prefix.clone(),
        ..EmbedConfig::new(model)
    };
    Ok(Some(Arc::new(embedder(encoder, CpuBackend::F32)?)))
}

/// One question's loop (its rows need no titles).
pub type LabelTask = QuestionTask<EfficientRag>;

/// A finished question.
pub struct Labeled {
    id: String,
    result: LabelResult,
}

/// The loaded Labeler and Filter with the tokenizer, the corpus and the loop settings.
pub struct LabelScorer<B: Backend> {
    be: B,
    models: Models<B>,
    tok: Arc<TextTokenizer>,
    corpus: Option<Arc<CorpusChunks>>,
    /// Dense retrieval over each question's pool (without a corpus).
    pool_encoder: Option<Arc<Embedder<CpuBackend>>>,
    loop_config: LoopConfig,
    metadata: Vec<(String, String)>,
}

/// The label job on backend `B`.
pub type LabelJob<B> = QuestionJob<LabelScorer<B>>;

/// Loads both checkpoints, the tokenizer and the corpus of `config` on `be`.
pub fn job<B: Backend>(config: LabelConfig, be: B) -> Result<LabelJob<B>> {
    config.check()?;

    let models = Models::load(&be, &config.labeler, &config.filter, config.tag_pooling)?;
    let n_tags = models.n_tags();
    let tok_path = TextTokenizer::locate(&config.labeler, config.tokenizer.as_deref())?;
    let tok = Arc::new(TextTokenizer::from_file(&tok_path, None)?);
    let encoder = dense_encoder(&config)?;
    let corpus = match &config.corpus {
        None => None,
        Some(path) => {
            let c = Corpus::from_parquet(path)?;
            if c.is_empty() {
                bail!("the corpus {} has no usable rows", path.display());
            }
            let dense = match &encoder {
                Some(e) => Some(DenseVectors {
                    vectors: corpus_vectors(&c, path, &config.index, e.dim(), |key| {
                        e.recorded(key)
                    })?,
                    encoder: query_encoder(e),
                }),
                None => None,
            };
            Some(Arc::new(CorpusChunks { corpus: c, dense }))
        }
    };
    let mut resolved = vec![
        ("strategy", "efficientrag".to_string()),
        ("tokenizer_sha256", file_sha256(&tok_path)?),
        (
            "filter_sha256",
            model_sha256(&config.filter, &models.filter.weights)?,
        ),
        ("n_tags", n_tags.to_string()),
        ("device", be.name()),
    ];
    if let Some(path) = &config.corpus {
        resolved.push(("corpus_sha256", file_sha256(path)?));
    }
    if let Some(e) = &encoder {
        resolved.push((
            "encoder_sha256",
            e.model_sha256().unwrap_or_default().to_string(),
        ));
    }
    let options = options::record(&config, &resolved)?;
    let metadata = run_metadata(&be, &config.labeler, &models.labeler.weights, &options)?;
    let loop_config = LoopConfig {
        max_iter: config.max_iter,
        top_k: config.top_k,
        n_tags,
    };
    Ok(QuestionJob::new(
        LabelScorer {
            be,
            models,
            tok,
            pool_encoder: encoder.filter(|_| corpus.is_none()),
            corpus,
            loop_config,
            metadata,
        },
        config.scheduler,
    ))
}

impl<B: Backend> QuestionScorer for LabelScorer<B> {
    type Task = LabelTask;
    type Row = Labeled;

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn schema(&self) -> SchemaRef {
        label_schema(self.corpus.is_some())
    }

    fn prepare(&self) -> Prepare<LabelTask> {
        let (source, tok, config) = (self.corpus.clone(), self.tok.clone(), self.loop_config);
        let encoder = self.pool_encoder.clone();
        Arc::new(move |q: &Question| {
            // The question reader has checked that there are passages.
            let chunks = || {
                q.passages
                    .iter()
                    .map(|p| efficientrag_chunk(&p.title, &p.text, p.sentences.as_deref()))
                    .collect()
            };
            let source: Arc<dyn ChunkSource> = match (&source, &encoder) {
                (Some(c), _) => c.clone(),
                (None, None) => Arc::new(PoolChunks::new(chunks())),
                (None, Some(e)) => {
                    let vectors = e
                        .embed_passages(&q.passages)
                        .map_err(|e| format!("{e:#}"))?;
                    Arc::new(DensePool {
                        chunks: chunks(),
                        dense: DenseVectors {
                            encoder: query_encoder(e),
                            vectors,
                        },
                    })
                }
            };
            Ok(LabelTask {
                id: q.id.clone(),
                titles: Vec::new(),
                search: EfficientRag::new(&q.question, source, tok.clone(), config),
            })
        })
    }

    fn finish(done: Searched<Result<LabelResult, String>>) -> Result<Labeled, (String, String)> {
        match done.result {
            Ok(result) => Ok(Labeled {
                id: done.id,
                result,
            }),
            Err(reason) => Err((done.id, reason)),
        }
    }

    fn to_batch(&self) -> ToBatch<Labeled> {
        let ids = self.corpus.clone().map(DocIds);
        Arc::new(move |rows: &[Labeled]| label_batch(rows, ids.as_ref()))
    }

    fn score(&mut self, seqs: &[Sequence], heads: &[usize]) -> Result<Vec<Vec<f32>>> {
        self.models.score(&self.be, seqs, heads)
    }
}

/// Corpus ids for the output (in `--corpus` mode).
struct DocIds(Arc<CorpusChunks>);

/// A list column of passage references.
fn doc_lists<'a>(lists: impl Iterator<Item = &'a [usize]>, ids: Option<&DocIds>) -> ArrayRef {
    match ids {
        Some(DocIds(c)) => {
            let mut b = ListBuilder::new(StringBuilder::new());
            for l in lists {
                for &d in l {
                    b.values().append_value(&c.corpus.ids[d]);
                }
                b.append(true);
            }
            Arc::new(b.finish())
        }
        None => {
            let mut b = ListBuilder::new(Int32Builder::new());
            for l in lists {
                for &d in l {
                    b.values().append_value(d as i32);
                }
                b.append(true);
            }
            Arc::new(b.finish())
        }
    }
}

fn string_lists<'a, S: AsRef<str> + 'a>(
    lists: impl Iterator<Item = impl Iterator<Item = S>>,
) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for l in lists {
        for s in l {
            b.values().append_value(s.as_ref());
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

/// A `list<list<float32>>` column.
fn nested_f32<'a>(rows: impl Iterator<Item = &'a Vec<Vec<f32>>>) -> ListArray {
    let mut b = ListBuilder::new(ListBuilder::new(Float32Builder::new()));
    for row in rows {
        for l in row {
            b.values().values().append_slice(l);
            b.values().append(true);
        }
        b.append(true);
    }
    b.finish()
}

/// One record batch of output rows.
fn label_batch(chunk: &[Labeled], ids: Option<&DocIds>) -> Result<RecordBatch> {
    let schema = label_schema(ids.is_some());
    {
        let its: Vec<&Iteration> = chunk.iter().flat_map(|r| &r.result.iterations).collect();
        let doc = if ids.is_some() {
            DataType::Utf8
        } else {
            DataType::Int32
        };
        let fields = iteration_fields(&doc);
        let iterations = StructArray::new(
            fields.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    its.iter().map(|i| i.query.as_str()),
                )),
                doc_lists(its.iter().map(|i| i.retrieved.as_slice()), ids),
                string_lists(its.iter().map(|i| i.tags.iter().map(|t| t.as_str()))),
                Arc::new(nested_f32(its.iter().map(|i| &i.tag_logits))),
                string_lists(its.iter().map(|i| i.kept_text.iter())),
                Arc::new(StringArray::from_iter(
                    its.iter().map(|i| i.next_query.as_deref()),
                )),
            ],
            None,
        );
        let iterations = ListArray::new(
            Arc::new(Field::new("item", DataType::Struct(fields), true)),
            OffsetBuffer::from_lengths(chunk.iter().map(|r| r.result.iterations.len())),
            Arc::new(iterations),
            None,
        );
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                chunk.iter().map(|r| r.id.as_str()),
            )),
            Arc::new(iterations),
            doc_lists(chunk.iter().map(|r| r.result.kept.as_slice()), ids),
            Arc::new(StringArray::from_iter_values(
                chunk.iter().map(|r| r.result.stop.as_str()),
            )),
        ];
        RecordBatch::try_new(schema.clone(), columns).context("building the output batch")
    }
}

impl crate::jobs::JobKind for LabelConfig {
    const NAME: &'static str = "label";
    const ABOUT: &'static str =
        "EfficientRAG over a question file: Labeler tags and kept text, Filter queries";
    const REQUIRED: &'static [&'static str] = &["labeler", "filter"];
    const ROW: &'static str = "question";
    type Device = crate::jobs::DeviceConfig;
    type Summary = crate::pipeline::files::RunSummary;
    type Files = crate::pipeline::files::FileRun;
}

impl crate::jobs::FileJobKind for LabelConfig {
    type Job<B: Backend + 'static> = LabelJob<B>;

    fn job<B: Backend + 'static>(self, be: B) -> Result<LabelJob<B>> {
        job(self, be)
    }

    fn summary<B: Backend + 'static>(_job: &LabelJob<B>, run: Self::Summary) -> Self::Summary {
        run
    }
}
