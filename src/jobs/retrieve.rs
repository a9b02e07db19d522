//! The retrieve job: a question file and a passage corpus in, the same questions with
//! the corpus's top-k passages as their candidate pool out (the question file that
//! `beam`, `lepus` and `label` read), with the scores in a sibling file.
//!
//! Rankers: dense (exact inner product over an `embed` index, [`DenseIndex`], of the
//! query encoder's vectors), BM25 over the corpus, or both fused by reciprocal rank;
//! the rankers and pools are [`crate::retrieve::search`]'s (this module gives it the
//! query encoder). Questions are read in chunks of `question_rows`; each chunk scans
//! the index once. Gold labels carry over by passage: a retrieved passage with the title and text of a gold
//! passage of the input is gold in the output, and a gold passage not retrieved is
//! noted in `issues` (which `eval` counts as a miss).
//!
//! A question needs an id and a text, not passages: an open-domain question file
//! (empty passage lists) is what a first stage exists for. A run over files
//! ([`RetrieveFiles`]) holds the output's lock, writes its three files whole at the
//! end, and stops between index blocks or question chunks at Ctrl-C with nothing
//! written. For batches ([`crate::jobs::build`], Python's `hopscore.Retrieve`), each
//! batch of questions comes back with its pools and a `retrieval_scores` column.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow_array::builder::{Float32Builder, ListBuilder, StringBuilder};
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::embed::{embedder, EmbedConfig, Embedder};
use super::registry::{Files, Registered};
use super::report::{Ending, Report, INTERRUPTED};
use super::{with_metadata, DeviceConfig, JobOutput};
use crate::backend::Backend;
use crate::io::atomic::commit_all;
use crate::io::metadata::{add_settings, prefixed, tool_metadata};
use crate::io::parquet_io::{create_writer, sibling};
use crate::io::parts::OutputLock;
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::quarantine::QuarantineWriter;
use crate::io::questions::{self, Question, QuestionReader, QuestionWriter};
use crate::model::bert::Pooling;
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::retrieve::dense::DenseIndex;
use crate::retrieve::pools::{Ranking, Tally};
use crate::retrieve::search::{DenseRank, Search};
use crate::retrieve::Corpus;

/// How passages are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// What to read and how to rank: the flags of `hopscore retrieve` besides its files.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RetrieveConfig {
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
}

/// The files of `hopscore retrieve`: the question file in, the same questions with
/// their pools out, the scores beside them.
#[derive(Debug, Clone, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RetrieveFiles {
    /// Question file (`hopscore import`); its passages are replaced by the hits.
    #[cfg_attr(feature = "cli", arg(long))]
    pub questions: PathBuf,
    /// Output question file; the scores go to `<output stem>.retrieval.parquet`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub output: PathBuf,
    /// Where bad questions go. Default: `<output stem>.quarantine.parquet`.
    #[cfg_attr(feature = "cli", arg(long))]
    pub quarantine: Option<PathBuf>,
    /// The device's settings, recorded with the options ([`Files::prepare`]).
    #[cfg_attr(feature = "cli", arg(skip))]
    #[serde(skip)]
    settings: Vec<(String, String)>,
}

impl RetrieveFiles {
    /// `questions` retrieved for into `output`, the quarantine beside it.
    pub fn new(questions: &Path, output: &Path) -> Self {
        Self {
            questions: questions.to_path_buf(),
            output: output.to_path_buf(),
            quarantine: None,
            settings: Vec::new(),
        }
    }

    fn quarantine_path(&self) -> PathBuf {
        self.quarantine
            .clone()
            .unwrap_or_else(|| sibling(&self.output, "quarantine"))
    }

    fn scores_path(&self) -> PathBuf {
        sibling(&self.output, "retrieval")
    }

    fn outputs(&self) -> [(Named, Kind); 3] {
        [
            (Named::new("--output", &self.output), Kind::File),
            (
                Named::new("the quarantine file", &self.quarantine_path()),
                Kind::File,
            ),
            (
                Named::new("the scores file", &self.scores_path()),
                Kind::File,
            ),
        ]
    }
}

impl Files for RetrieveFiles {
    fn prepare(&mut self, inputs: Vec<Named>, settings: Vec<(String, String)>) -> Result<()> {
        let mut all = vec![Named::new("--questions", &self.questions)];
        all.extend(inputs);
        self.settings = settings;
        Ok(check_outputs(&all, &self.outputs())?)
    }
}

impl Options for RetrieveConfig {
    /// Every option at the command line's default; the paths empty.
    fn defaults() -> Self {
        Self {
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
    /// Stopped by Ctrl-C or SIGTERM: nothing was written.
    pub interrupted: bool,
}

impl crate::jobs::JobKind for RetrieveConfig {
    const NAME: &'static str = "retrieve";
    const ABOUT: &'static str = "Candidate pools for a question file from a corpus: dense (an \
                                 `embed` index), BM25 or hybrid";
    const REQUIRED: &'static [&'static str] = &["corpus"];
    const ROW: &'static str = "question";
    type Device = crate::jobs::DeviceConfig;
    type Files = RetrieveFiles;
    type Summary = RetrieveSummary;
}

impl Registered for RetrieveConfig {
    fn load<B: Backend + 'static>(self, be: B) -> Result<Box<dyn crate::jobs::Job>> {
        Ok(Box::new(RetrieveJob::new(self, be)?))
    }

    fn run_files(self, device: &DeviceConfig, files: &RetrieveFiles) -> Result<RetrieveSummary> {
        crate::jobs::device::with_backend!(owned device, be => run(&self, files, be))
    }
}

impl Report for RetrieveSummary {
    fn report(&self, _row: &str) -> Ending {
        let e = Ending::default();
        if self.interrupted {
            return e
                .line(
                    "interrupted: retrieve wrote nothing (its files are written whole at the \
                     end); run the same command again"
                        .into(),
                )
                .code(INTERRUPTED);
        }
        let e = e.line(format!(
            "retrieved for {} questions in {:.1} s ({} quarantined → {}; scores → {})",
            self.questions,
            self.seconds,
            self.quarantined,
            self.quarantine_path.display(),
            self.scores_path.display()
        ));
        match self.with_gold {
            0 => e,
            with_gold => {
                let r: Vec<String> = self
                    .recall
                    .iter()
                    .map(|(k, r)| format!("R@{k} {r:.4}"))
                    .collect();
                e.line(format!(
                    "gold passages over {with_gold} questions: {}",
                    r.join(", ")
                ))
            }
        }
    }
}

/// The search `c` describes on `be` (the query encoder's backend).
fn open_search<B: Backend>(c: &RetrieveConfig, be: B) -> Result<Search<DenseSearch<B>>> {
    c.check()?;
    let dense = match c.retriever {
        Retriever::Bm25 => None,
        Retriever::Dense | Retriever::Hybrid => Some(DenseSearch::open(c, be)?),
    };
    let lexical = match c.retriever {
        Retriever::Dense => None,
        Retriever::Bm25 | Retriever::Hybrid => Some(Corpus::from_parquet(&c.corpus)?),
    };
    Ok(Search::new(dense, lexical, &c.corpus, c.k, c.fusion_depth))
}

/// The run metadata of `search`: every option of `c` and what the search resolved
/// (the model that embedded the index).
fn metadata<B: Backend>(
    c: &RetrieveConfig,
    search: &Search<DenseSearch<B>>,
) -> Result<Vec<(String, String)>> {
    let resolved: Vec<(&str, String)> = search
        .dense()
        .map(|d| {
            let sha = d.index.model_sha256.clone().unwrap_or_default();
            ("index_model_sha256", sha)
        })
        .into_iter()
        .collect();
    Ok(tool_metadata(&options::record(c, &resolved)?))
}

/// Runs the job over `files` on `be` (the dense encoder's backend); a stop (Ctrl-C,
/// SIGTERM) writes nothing and says so in the summary.
pub fn run<B: Backend>(
    config: &RetrieveConfig,
    files: &RetrieveFiles,
    be: B,
) -> Result<RetrieveSummary> {
    match run_whole(config, files, be) {
        Err(e) if e.is::<crate::stop::Interrupted>() => Ok(RetrieveSummary {
            interrupted: true,
            ..RetrieveSummary::default()
        }),
        done => done,
    }
}

fn run_whole<B: Backend>(
    c: &RetrieveConfig,
    files: &RetrieveFiles,
    be: B,
) -> Result<RetrieveSummary> {
    let started = Instant::now();
    let (quarantine, scores_path) = (files.quarantine_path(), files.scores_path());
    let _lock = OutputLock::acquire(&files.output, &[&files.output, &quarantine, &scores_path])?;
    let search = open_search(c, be)?;
    let mut metadata = metadata(c, &search)?;
    metadata.extend(prefixed(&options::record(files, &[])?));
    add_settings(&mut metadata, &files.settings);
    let mut writer = QuestionWriter::create(&files.output, &metadata)?;
    let mut scores = ScoresWriter::create(&scores_path, &metadata)?;
    let mut bad = QuarantineWriter::create(&quarantine, &metadata)?;
    let mut reader = QuestionReader::open_queries(&files.questions, c.question_rows)?;
    let total = reader.total_rows();
    let mut tally = Tally::default();
    loop {
        crate::stop::stop_point()?;
        let (mut chunk, seen) = (Vec::new(), tally.seen);
        for row in reader.by_ref().take(c.question_rows) {
            match row? {
                Ok(q) => chunk.push(q),
                Err(b) => bad.write(&[b])?,
            }
            tally.seen += 1;
        }
        if tally.seen == seen {
            break; // the reader is done
        }
        let (out, rankings) = search.pools(chunk, &mut tally)?;
        writer.write(&out)?;
        scores.write(&out, &rankings)?;
        log::info!(
            "retrieve: {}/{total} questions, {:.1} s",
            tally.seen,
            started.elapsed().as_secs_f64()
        );
    }
    search.warn_left_out(&tally);
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
        interrupted: false,
    })
}

/// The job for batches: question rows (the question file's columns) in, the same
/// questions with their pools out, plus `retrieval_scores` (each pool passage's score,
/// in pool order); a question without an id or a text goes to the quarantine.
pub struct RetrieveJob<B: Backend> {
    search: Search<DenseSearch<B>>,
    metadata: Vec<(String, String)>,
    question_rows: usize,
}

impl<B: Backend> RetrieveJob<B> {
    pub fn new(config: RetrieveConfig, be: B) -> Result<Self> {
        let search = open_search(&config, be)?;
        Ok(Self {
            metadata: metadata(&config, &search)?,
            search,
            question_rows: config.question_rows,
        })
    }
}

fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", t, true)))
}

impl<B: Backend> crate::jobs::Job for RetrieveJob<B> {
    fn check_input(&self, input: &Schema) -> Result<()> {
        crate::io::questions::check_schema(input, "the input")
    }

    fn output_schema(&self, _input: &Schema) -> Result<SchemaRef> {
        let mut fields: Vec<Field> = questions::schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(
            "retrieval_scores",
            list_of(DataType::Float32),
            false,
        ));
        Ok(with_metadata(&Schema::new(fields), &self.metadata))
    }

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn batch_rows(&self) -> usize {
        self.question_rows
    }

    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
        self.check_input(&batch.schema())?;
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        for row in questions::decode_queries(batch, rows)? {
            match row {
                Ok(q) => good.push(q),
                Err(b) => bad.push(b),
            }
        }
        let mut tally = Tally::default();
        let (out, rankings) = self.search.pools(good, &mut tally)?;
        self.search.warn_left_out(&tally);
        let mut scores = ListBuilder::new(Float32Builder::new());
        for r in &rankings {
            scores
                .values()
                .extend(r.iter().map(|(_, s)| Some(*s as f32)));
            scores.append(true);
        }
        let mut columns = questions::to_batch(&out)?.columns().to_vec();
        columns.push(Arc::new(scores.finish()));
        Ok(JobOutput {
            rows: RecordBatch::try_new(self.output_schema(&batch.schema())?, columns)?,
            quarantine: crate::io::quarantine::batch(&bad, self.quarantine_schema())?,
            tokens: 0,
        })
    }
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
}

impl<B: Backend> DenseRank for DenseSearch<B> {
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
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("passage_ids", list_of(DataType::Utf8), false),
            Field::new("scores", list_of(DataType::Float32), false),
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
