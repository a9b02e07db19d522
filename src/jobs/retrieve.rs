//! The retrieve job: a question file and a passage corpus in, the same questions with
//! the corpus's top-k passages as their candidate pool out (the question file that
//! `beam`, `lepus` and `label` read), with the scores in a sibling file.
//!
//! Rankers: dense (exact inner product over an `embed` index, [`DenseIndex`], of the
//! query encoder's vectors), BM25 over the corpus, or both fused by reciprocal rank;
//! the pools and their gold labels are built by [`crate::retrieve::pools`]. Questions
//! are read in chunks of `question_rows`; each chunk scans the index once. Gold labels
//! carry over by passage: a retrieved passage with the title and text of a gold
//! passage of the input is gold in the output, and a gold passage not retrieved is
//! noted in `issues` (which `eval` counts as a miss).
//!
//! A question needs an id and a text, not passages: an open-domain question file
//! (empty passage lists) is what a first stage exists for. The run holds the
//! output's lock, writes its three files whole at the end, and stops between index
//! blocks or question chunks at Ctrl-C with nothing written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow_array::builder::{Float32Builder, ListBuilder, StringBuilder};
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema};

use super::embed::{embedder, EmbedConfig, Embedder};
use crate::backend::Backend;
use crate::io::atomic::commit_all;
use crate::io::metadata::tool_metadata;
use crate::io::parquet_io::{create_writer, sibling};
use crate::io::parts::OutputLock;
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::quarantine::QuarantineWriter;
use crate::io::questions::{Question, QuestionReader, QuestionWriter};
use crate::model::bert::Pooling;
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::retrieve::dense::DenseIndex;
use crate::retrieve::pools::{self, Ranking, Tally};
use crate::retrieve::Corpus;

/// How passages are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Retriever {
    /// Inner product of the encoder's vectors (needs --encoder and --index).
    Dense,
    /// BM25 over the corpus's `title + " " + text`.
    Bm25,
    /// Reciprocal rank fusion (c = 60) of the dense and BM25 rankings.
    Hybrid,
}

/// What to read, how to rank, where to write: the flags of `hopscore retrieve`.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RetrieveConfig {
    /// Question file (`hopscore import`); its passages are replaced by the hits.
    #[cfg_attr(feature = "cli", arg(long))]
    pub questions: PathBuf,
    /// Passage Parquet: `id`, `text`, optionally `title` (the file given to `embed`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub corpus: PathBuf,
    /// `hopscore embed` outputs over the corpus (repeat for several files).
    #[cfg_attr(feature = "cli", arg(long, num_args = 1..))]
    pub index: Vec<PathBuf>,
    /// The query encoder: the model that embedded the index.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_ENCODER", value_parser = crate::options::values::model_path))]
    pub encoder: Option<PathBuf>,
    /// The encoder's tokenizer.json (or a directory holding it), when its directory has none.
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::model_path))]
    pub tokenizer: Option<PathBuf>,
    /// Text put before every question (E5: "query: "; BGE's instruction).
    #[cfg_attr(feature = "cli", arg(long, default_value = ""))]
    pub query_prefix: String,
    /// Pooling, when it differs from the encoder directory's (as for `embed`).
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub pooling: Option<Pooling>,
    /// L2-normalise the query vectors (default: as the encoder directory says).
    #[cfg_attr(feature = "cli", arg(long, value_name = "on|off", value_parser = crate::options::values::on_off,
        action = clap::ArgAction::Set))]
    pub normalize: Option<bool>,
    /// How passages are ranked.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = RetrieveConfig::defaults().retriever))]
    pub retriever: Retriever,
    /// Passages per question.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = RetrieveConfig::defaults().k,
        value_parser = crate::options::values::positive_usize))]
    pub k: usize,
    /// How deep each ranking goes into the fusion (`--retriever hybrid`).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = RetrieveConfig::defaults().fusion_depth,
        value_parser = crate::options::values::positive_usize))]
    pub fusion_depth: usize,
    /// Questions per index scan (each scan reads the whole index once).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = RetrieveConfig::defaults().question_rows,
        value_parser = crate::options::values::positive_usize))]
    pub question_rows: usize,
    /// Output question file; the scores go to `<output stem>.retrieval.parquet`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub output: PathBuf,
    /// Where bad questions go. Default: `<output stem>.quarantine.parquet`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub quarantine: Option<PathBuf>,
}

impl Options for RetrieveConfig {
    /// Every option at the command line's default; the paths empty.
    fn defaults() -> Self {
        Self {
            questions: PathBuf::new(),
            corpus: PathBuf::new(),
            index: Vec::new(),
            encoder: None,
            tokenizer: None,
            query_prefix: String::new(),
            pooling: None,
            normalize: None,
            retriever: Retriever::Dense,
            k: 20,
            fusion_depth: 100,
            question_rows: 4096,
            output: PathBuf::new(),
            quarantine: None,
        }
    }

    fn check(&self) -> Result<()> {
        options::at_least_one("k", self.k)?;
        options::at_least_one("fusion_depth", self.fusion_depth)?;
        options::at_least_one("question_rows", self.question_rows)
    }

    fn model_paths(&mut self) -> Vec<(&mut PathBuf, Need)> {
        options::model_and_tokenizer(self.encoder.as_mut(), self.tokenizer.as_mut())
    }

    fn inputs(&self) -> Vec<Named> {
        let mut inputs = options::named(&[
            ("--questions", Some(&self.questions)),
            ("--corpus", Some(&self.corpus)),
            ("--encoder", self.encoder.as_deref()),
            ("--tokenizer", self.tokenizer.as_deref()),
        ]);
        inputs.extend(self.index.iter().map(|p| Named::new("--index", p)));
        inputs
    }
}

impl RetrieveConfig {
    /// The query encoder's config (`None` without `encoder`).
    fn encoder_config(&self) -> Option<EmbedConfig> {
        self.encoder.clone().map(|model| EmbedConfig {
            tokenizer: self.tokenizer.clone(),
            pooling: self.pooling,
            normalize: self.normalize,
            prefix: self.query_prefix.clone(),
            ..EmbedConfig::new(model)
        })
    }
}

/// Counts and recalls of a run.
#[derive(Debug, Clone, Default)]
pub struct RetrieveSummary {
    pub questions: u64,
    pub quarantined: u64,
    pub quarantine_path: PathBuf,
    pub scores_path: PathBuf,
    /// Questions with gold passages, over which `recall` averages.
    pub with_gold: u64,
    /// `(k, mean R@k)`: the share of a question's gold passages among its top k.
    pub recall: Vec<(usize, f64)>,
    pub seconds: f64,
}

/// Runs the job on `be` (the dense encoder's backend).
pub fn run<B: Backend>(config: &RetrieveConfig, be: B) -> Result<RetrieveSummary> {
    let started = Instant::now();
    let c = config;
    c.check()?;
    let quarantine = c
        .quarantine
        .clone()
        .unwrap_or_else(|| sibling(&c.output, "quarantine"));
    let scores_path = sibling(&c.output, "retrieval");
    check_outputs(
        &c.inputs(),
        &[
            (Named::new("--output", &c.output), Kind::File),
            (Named::new("the quarantine file", &quarantine), Kind::File),
            (Named::new("the scores file", &scores_path), Kind::File),
        ],
    )?;
    let _lock = OutputLock::acquire(&c.output, &[&c.output, &quarantine, &scores_path])?;
    let dense = match c.retriever {
        Retriever::Bm25 => None,
        Retriever::Dense | Retriever::Hybrid => Some(DenseSearch::open(c, be)?),
    };
    let lexical = match c.retriever {
        Retriever::Dense => None,
        Retriever::Bm25 | Retriever::Hybrid => Some(Corpus::from_parquet(&c.corpus)?),
    };
    // The corpus row of each id (distinct: `Corpus::from_parquet` checks).
    let doc_of: HashMap<&str, usize> = lexical
        .iter()
        .flat_map(|corpus| {
            corpus
                .ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), i))
        })
        .collect();
    let resolved: Vec<(&str, String)> = dense
        .iter()
        .map(|d| {
            (
                "index_model_sha256",
                d.index.model_sha256.clone().unwrap_or_default(),
            )
        })
        .collect();
    let metadata = tool_metadata(&options::record(c, &resolved)?);
    let mut writer = QuestionWriter::create(&c.output, &metadata)?;
    let mut scores = ScoresWriter::create(&scores_path, &metadata)?;
    let mut bad = QuarantineWriter::create(&quarantine, &metadata)?;
    let mut reader = QuestionReader::open_queries(&c.questions, c.question_rows.max(1))?;
    let total = reader.total_rows();
    let mut tally = Tally::default();
    loop {
        crate::stop::stop_point()?;
        let (mut chunk, seen) = (Vec::new(), tally.seen);
        for row in reader.by_ref().take(c.question_rows.max(1)) {
            match row? {
                Ok(q) => chunk.push(q),
                Err(b) => bad.write(&[b])?,
            }
            tally.seen += 1;
        }
        if tally.seen == seen {
            break; // the reader is done
        }
        let texts: Vec<&str> = chunk.iter().map(|q| q.question.as_str()).collect();
        let depth = c.k.max(c.fusion_depth);
        let dense_rankings = dense.as_ref().map(|d| d.rank(&texts, depth)).transpose()?;
        let lexical_rankings = lexical
            .as_ref()
            .map(|corpus| pools::lexical(corpus, &texts, depth))
            .transpose()?;
        let mut rankings = pools::fuse(dense_rankings, lexical_rankings, c.k);
        let loaded = lexical.as_ref().map(|corpus| (corpus, &doc_of));
        let passages = pools::passages(loaded, &c.corpus, &rankings)?;
        tally.keep_usable(&mut rankings, &passages);
        let out: Vec<Question> = chunk
            .into_iter()
            .zip(&rankings)
            .map(|(q, r)| tally.retrieved(q, r, &passages))
            .collect();
        writer.write(&out)?;
        scores.write(&out, &rankings)?;
        log::info!(
            "retrieve: {}/{total} questions, {:.1} s",
            tally.seen,
            started.elapsed().as_secs_f64()
        );
    }
    if tally.duplicate_hits > 0 {
        log::warn!(
            "{} hits repeated the title and text of a higher-ranked passage under another \
             id (--corpus {} holds duplicate passages): each was collapsed into the first, \
             so some pools are shorter than --k {}; drop the repeated rows from the corpus \
             to keep every pool full",
            tally.duplicate_hits,
            c.corpus.display(),
            c.k
        );
    }
    if tally.unknown_hits > 0 {
        log::warn!(
            "{} hits named index ids that --corpus {} lacks (or holds without usable \
             text): they were left out, so some pools are shorter than --k {}",
            tally.unknown_hits,
            c.corpus.display(),
            c.k
        );
    }
    // All three files are complete before any is put in place.
    let (questions_file, questions, _) = writer.seal()?;
    let (quarantine_file, quarantined) = bad.seal()?;
    let quarantine_path = quarantine_file.dest().to_path_buf();
    commit_all([questions_file, scores.sink.seal()?, quarantine_file])?;
    Ok(RetrieveSummary {
        questions,
        quarantined,
        quarantine_path,
        scores_path,
        with_gold: tally.with_gold,
        recall: tally.recall(c.k),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The dense side: the query encoder and the index.
struct DenseSearch<B: Backend> {
    embedder: Embedder<B>,
    index: DenseIndex,
}

impl<B: Backend> DenseSearch<B> {
    fn open(c: &RetrieveConfig, be: B) -> Result<Self> {
        let encoder = c
            .encoder_config()
            .context("dense retrieval needs the query encoder (--encoder DIR)")?;
        let index = DenseIndex::open(&c.index)?;
        index.check_corpus(&c.corpus)?;
        let embedder = embedder(encoder, be)?;
        index.check_encoder(embedder.dim(), |key| embedder.recorded(key))?;
        Ok(Self { embedder, index })
    }

    fn rank(&self, texts: &[&str], k: usize) -> Result<Vec<Ranking>> {
        let seqs = texts
            .iter()
            .map(|t| self.embedder.encode(t))
            .collect::<Result<Vec<_>>>()?;
        let queries = self.embedder.embed(&seqs)?;
        let hits = self.index.search(self.embedder.backend(), &queries, k)?;
        Ok(hits
            .into_iter()
            .map(|h| h.into_iter().map(|h| (h.id, f64::from(h.score))).collect())
            .collect())
    }
}

/// The sibling file of the scores: `id`, `passage_ids` and `scores`, one row per
/// question in output order.
struct ScoresWriter {
    sink: crate::io::parquet_io::ParquetSink,
    schema: Arc<Schema>,
}

impl ScoresWriter {
    fn create(path: &Path, metadata: &[(String, String)]) -> Result<Self> {
        let list = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("passage_ids", list(DataType::Utf8), false),
            Field::new("scores", list(DataType::Float32), false),
        ]));
        Ok(Self {
            sink: create_writer(path, schema.clone(), metadata)?,
            schema,
        })
    }

    fn write(&mut self, questions: &[Question], rankings: &[Ranking]) -> Result<()> {
        let mut ids = StringBuilder::new();
        let mut pids = ListBuilder::new(StringBuilder::new());
        let mut scores = ListBuilder::new(Float32Builder::new());
        for (q, r) in questions.iter().zip(rankings) {
            ids.append_value(&q.id);
            for (id, s) in r {
                pids.values().append_value(id);
                scores.values().append_value(*s as f32);
            }
            pids.append(true);
            scores.append(true);
        }
        self.sink.write(&RecordBatch::try_new(
            self.schema.clone(),
            vec![
                Arc::new(ids.finish()),
                Arc::new(pids.finish()),
                Arc::new(scores.finish()),
            ],
        )?)?;
        Ok(())
    }
}
