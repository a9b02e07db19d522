//! The library API: one job per scoring strategy, built once from a plain config
//! (weights and tokenizers load in the constructor), fed Arrow record batches and
//! yielding Arrow record batches. The CLI and the Python module both drive jobs; the
//! file runners of [`crate::pipeline`] stream Parquet files through them.

pub mod beam;
pub mod classify;
pub mod device;
pub mod embed;
pub mod label;
pub mod lepus;
pub mod loglik;
pub mod questions;
pub mod rerank;
pub mod retrieve;
pub mod review;
pub mod review_io;
pub mod rows;
pub mod selftest;

use anyhow::Result;
use arrow_array::RecordBatch;
use arrow_schema::{Schema, SchemaRef};

pub use device::{DeviceConfig, DeviceKind, NoDevice};

use crate::backend::Backend;
use crate::options::{self, Options};
use crate::pipeline::files::{self, FileJob, FileRun, RunSummary};

/// What one batch of input rows gives.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// One row per good input row, in input order, with exactly the columns of the
    /// CLI's output file ([`Job::output_schema`]).
    pub rows: RecordBatch,
    /// One row per bad input row (`row`, `id`, `reason`), as the CLI's quarantine
    /// file holds them ([`Job::quarantine_schema`]).
    pub quarantine: RecordBatch,
    /// Tokens run through the model for this batch.
    pub tokens: u64,
}

/// A loaded scoring job. A bad row never makes a call fail: it goes to the
/// quarantine batch with its reason; errors are job-level (bad input schema, device
/// failures). Every job of the pipeline is one ([`FileJob`], below).
pub trait Job: Send {
    /// Refuses an input schema that lacks a column the job reads or holds one of the
    /// wrong type, naming the column.
    fn check_input(&self, input: &Schema) -> Result<()>;
    /// The output columns for an input of schema `input`, with the run metadata
    /// (`hopscore.*` keys, model fingerprint) as schema metadata.
    fn output_schema(&self, input: &Schema) -> Result<SchemaRef>;
    /// The quarantine columns, with the same metadata.
    fn quarantine_schema(&self) -> SchemaRef {
        with_metadata(&crate::io::quarantine::schema(), self.metadata())
    }
    /// The run metadata, as written into the footer of every output file.
    fn metadata(&self) -> &[(String, String)];
    /// Input rows per batch that suit the job (what the file runner reads at once).
    fn batch_rows(&self) -> usize;
    /// Processes `batch`, whose rows are the input rows numbered `rows` (the numbers
    /// the quarantine batch reports).
    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput>;
}

/// A job of the pipeline called on batches: the rows of each batch run through its
/// engine as a file's do ([`files::run_batch`]).
impl<J: FileJob + Send> Job for J {
    fn check_input(&self, input: &Schema) -> Result<()> {
        FileJob::check_input(self, input)
    }
    fn output_schema(&self, input: &Schema) -> Result<SchemaRef> {
        Ok(with_metadata(
            &*self.output_columns(input)?,
            FileJob::metadata(self),
        ))
    }
    fn metadata(&self) -> &[(String, String)] {
        FileJob::metadata(self)
    }
    fn batch_rows(&self) -> usize {
        FileJob::batch_rows(self)
    }
    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
        let run = files::run_batch(self, batch, rows)?;
        Ok(JobOutput {
            rows: RecordBatch::try_new(
                self.output_schema(&batch.schema())?,
                run.rows.columns().to_vec(),
            )?,
            quarantine: crate::io::quarantine::batch(&run.bad, self.quarantine_schema())?,
            tokens: run.tokens,
        })
    }
}

/// A job fed a stream of batches: [`Stream::process`] numbers their rows from 0 across
/// calls, as in one input file (the quarantine's `row`). Derefs to the job.
pub struct Stream {
    job: Box<dyn Job>,
    next_row: u64,
}

impl Stream {
    pub fn new(job: Box<dyn Job>) -> Self {
        Self { job, next_row: 0 }
    }

    /// Processes the next batch of the stream.
    pub fn process(&mut self, batch: &RecordBatch) -> Result<JobOutput> {
        let first = self.next_row;
        let rows: Vec<u64> = (first..first + batch.num_rows() as u64).collect();
        let out = process_checked(self.job.as_mut(), batch, &rows)?;
        self.next_row += rows.len() as u64;
        Ok(out)
    }
}

/// [`Job::process_rows`] after the check the file reader makes: a row whose text is
/// not valid UTF-8 goes to the quarantine naming the column, the others are processed.
/// Arrays from another runtime (Python, across the C data interface) arrive unchecked.
pub fn process_checked(job: &mut dyn Job, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
    let Some((kept, kept_rows, bad)) = crate::io::parquet_io::screen_text(batch, rows)? else {
        return job.process_rows(batch, rows);
    };
    let mut out = job.process_rows(&kept, &kept_rows)?;
    let schema = job.quarantine_schema();
    let screened = crate::io::quarantine::batch(&bad, schema.clone())?;
    out.quarantine = arrow_select::concat::concat_batches(&schema, [&screened, &out.quarantine])?;
    Ok(out)
}

/// A job whose work runs in a worker pool of its own (`DeviceConfig::threads`), so
/// that jobs in one process (Python, a service) each keep their thread count.
struct Pooled {
    pool: rayon::ThreadPool,
    job: Box<dyn Job>,
}

impl Job for Pooled {
    fn check_input(&self, input: &Schema) -> Result<()> {
        self.job.check_input(input)
    }
    fn output_schema(&self, input: &Schema) -> Result<SchemaRef> {
        self.job.output_schema(input)
    }
    fn metadata(&self) -> &[(String, String)] {
        self.job.metadata()
    }
    fn batch_rows(&self) -> usize {
        self.job.batch_rows()
    }
    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
        let job = &mut self.job;
        self.pool.install(|| job.process_rows(batch, rows))
    }
}

impl std::ops::Deref for Stream {
    type Target = dyn Job;
    fn deref(&self) -> &(dyn Job + 'static) {
        &*self.job
    }
}

impl std::ops::DerefMut for Stream {
    fn deref_mut(&mut self) -> &mut (dyn Job + 'static) {
        &mut *self.job
    }
}

/// Every scoring job, registered once: its [`JobConfig`] variant, its module and its
/// config type in `jobs::<module>` (which implements [`JobKind`]), with the
/// subcommand's help line. `for_each_job!(m)` calls the macro `m` with the list: the
/// library makes [`JobConfig`], [`JobConfig::from_options`] and [`build`] of it
/// (below), the command line its job subcommands (`cli::job::JobCommand`, whose flags
/// are the configs' own). docs/architecture.md, "Adding a scorer".
macro_rules! for_each_job {
    ($m:ident) => {
        $m! {
            /// Beam Retrieval over a question file: chains, scores and features.
            Beam(beam, BeamConfig),
            /// EfficientRAG over a question file: Labeler tags and kept text, Filter queries.
            Label(label, LabelConfig),
            /// LLM post-stage (Tree of Reviews or ALLIES) against an OpenAI-compatible endpoint.
            Review(review, ReviewConfig),
            /// LEPUS reranking of each question's passages with a causal LM or a T5 encoder-decoder (or BM25).
            Lepus(lepus, LepusConfig),
            /// Rerank each question's passage pool with a cross-encoder (BERT, XLM-RoBERTa, DeBERTa): the question file reordered, with scores.
            Rerank(rerank, RerankConfig),
            /// Score (id, text_a, text_b) rows with a cross-encoder head (DeBERTa, BERT, XLM-RoBERTa).
            Classify(classify, ClassifyConfig),
            /// Embed (id, text[, title]) passages with a BERT-family bi-encoder (MiniLM, Contriever, E5, BGE).
            Embed(embed, EmbedConfig),
            /// Log-likelihood of (id, prompt, target) rows' targets under a causal LM or a T5 encoder-decoder (LEPUS).
            Loglik(loglik, LoglikConfig),
        }
    };
}
#[cfg(feature = "cli")]
pub(crate) use for_each_job;

/// A job's config as the registry ([`for_each_job`]) and the runs over files need it:
/// its options ([`Options`]: defaults, checks, model paths, input files), its name,
/// and how it loads and runs.
pub trait JobKind: Options + serde::Serialize + serde::de::DeserializeOwned {
    /// The job's name: its subcommand, and `command` in [`JobConfig::from_options`].
    const NAME: &'static str;
    /// The options without a default (the paths of its models).
    const REQUIRED: &'static [&'static str];
    /// What an input row is, for summaries: `question` or `row`.
    const ROW: &'static str;
    /// The device options of the job's command: [`DeviceConfig`], or [`NoDevice`] for
    /// a job that runs no model.
    type Device: Into<DeviceConfig>;
    /// What a run over files returns.
    type Summary;
    /// Whether the job runs a model: a job that runs none ([`NoDevice`]) takes no
    /// device options and records no device settings.
    const RUNS_MODEL: bool = true;
    /// What a run records of `device` ([`device_settings`]; a job that runs no model,
    /// none).
    fn device_settings(device: &DeviceConfig) -> Result<Vec<(String, String)>> {
        match Self::RUNS_MODEL {
            true => device_settings(device),
            false => Ok(Vec::new()),
        }
    }
    /// The job on a backend `B`: what [`JobKind::load`] boxes and
    /// [`JobKind::run_files`] runs over files.
    type Job<B: Backend + 'static>: FileJob + Send + 'static;
    /// Builds the job on `be` (weights and tokenizers load here).
    fn job<B: Backend + 'static>(self, be: B) -> Result<Self::Job<B>>;
    /// What a run over files returns, from the file runner's summary and the job
    /// after the run.
    fn summary<B: Backend + 'static>(job: &Self::Job<B>, run: RunSummary) -> Self::Summary;
    /// Loads the job on `be`, for batches.
    fn load<B: Backend + 'static>(self, be: B) -> Result<Box<dyn Job>> {
        Ok(Box::new(self.job(be)?))
    }
    /// Loads the job on `device` and runs it over the files of `run` (Ctrl-C and
    /// SIGTERM stop it: [`crate::stop::INTERRUPTED`]).
    fn run_files(self, device: &DeviceConfig, run: &FileRun) -> Result<Self::Summary> {
        run_on_device(self, device, run)
    }
}

/// [`JobKind::run_files`] of a job that runs its model on `device`: the job built on
/// the device's backend, run over the files of `run`, then its summary.
pub fn run_on_device<C: JobKind>(
    config: C,
    device: &DeviceConfig,
    run: &FileRun,
) -> Result<C::Summary> {
    device::with_backend!(owned device, be => {
        let mut job = config.job(be)?;
        let summary = files::run(&mut job, run)?;
        Ok(C::summary(&job, summary))
    })
}

/// The settings of `device` as run metadata (`hopscore.<option>`, [`options::record`]):
/// every GPU and CPU knob, so that two runs with other kernels do not look the same.
pub fn device_settings(device: &DeviceConfig) -> Result<Vec<(String, String)>> {
    Ok(crate::io::metadata::prefixed(&options::record(
        device,
        &[],
    )?))
}

/// `C` with `options` set by name ([`options::with_options`]), the required ones given.
pub fn config_from_options<C: JobKind>(options: &options::OptionMap) -> Result<C> {
    options::with_options(options, C::REQUIRED, &format!("`{}`", C::NAME))
}

/// Whether `name` is an option of the device (a serialised field of [`DeviceConfig`])
/// among a job's options (Python's keyword arguments).
fn is_device_option(name: &str) -> bool {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES
        .get_or_init(|| {
            let fields = serde_json::to_value(DeviceConfig::CPU).unwrap_or_default();
            fields
                .as_object()
                .map(|f| f.keys().cloned().collect())
                .unwrap_or_default()
        })
        .iter()
        .any(|n| n == name)
}

/// [`JobConfig`], [`JobConfig::from_options`] and [`build`] for the registered jobs.
macro_rules! job_configs {
    ($($(#[$doc:meta])* $variant:ident($module:ident, $config:ident)),* $(,)?) => {
        /// The config of any job, to build it without naming its type.
        #[derive(Debug, Clone)]
        pub enum JobConfig {
            $($(#[$doc])* $variant($module::$config)),*
        }

        impl JobConfig {
            /// The names of the jobs.
            pub const NAMES: &'static [&'static str] = &[$(<$module::$config as JobKind>::NAME),*];

            /// The options of the job `command` by name, each at its default (the
            /// command line's: [`Options::defaults`], required paths empty), the
            /// device's among them where the job runs a model, and the names of the
            /// options without a default: what Python's job classes must take.
            pub fn option_defaults(
                command: &str,
            ) -> Result<(options::OptionMap, &'static [&'static str])> {
                fn of<C: JobKind>() -> Result<(options::OptionMap, &'static [&'static str])> {
                    let mut all = options::OptionMap::new();
                    let device = serde_json::to_value(DeviceConfig::CPU)?;
                    let config = serde_json::to_value(C::defaults())?;
                    let device = device.as_object().filter(|_| C::RUNS_MODEL);
                    for fields in [config.as_object(), device].into_iter().flatten() {
                        all.extend(fields.clone());
                    }
                    Ok((all, C::REQUIRED))
                }
                match command {
                    $(<$module::$config as JobKind>::NAME => of::<$module::$config>(),)*
                    _ => anyhow::bail!(
                        "`{command}` is not a job: use one of {}",
                        Self::NAMES.join(", ")
                    ),
                }
            }

            /// The job `command` names with `options` set by name — its config's field
            /// names (the command line's flags with `_` for `-`) — and the device among
            /// them (the fields of [`DeviceConfig`]: `device`, `gpu`, `dtype`,
            /// `cpu_gemm`, …); every option not given keeps the default the command line
            /// has. What Python's keyword arguments build.
            pub fn from_options(
                command: &str,
                options: &options::OptionMap,
            ) -> Result<(JobConfig, DeviceConfig)> {
                let (device, job): (options::OptionMap, options::OptionMap) = options
                    .clone()
                    .into_iter()
                    .partition(|(name, _)| is_device_option(name));
                let config = match command {
                    $(<$module::$config as JobKind>::NAME => {
                        JobConfig::$variant(config_from_options(&job)?)
                    })*
                    _ => anyhow::bail!(
                        "`{command}` is not a job: use one of {}",
                        Self::NAMES.join(", ")
                    ),
                };
                let device: DeviceConfig = options::with_options(&device, &[], "the device")?;
                options::none_or_at_least_one("threads", device.threads)?;
                Ok((config, device))
            }
        }

        /// Loads the job `config` describes on `device` (`review` runs no model: give
        /// it [`DeviceConfig::CPU`]). With `device.threads`, the job loads and runs in
        /// a worker pool of that many threads of its own; without, in the process's
        /// global pool. Models named by a hub id are taken from the hub cache, or
        /// downloaded into it, first ([`options::resolve_models`]).
        pub fn build(config: JobConfig, device: &DeviceConfig) -> Result<Box<dyn Job>> {
            let config = match config {
                $(JobConfig::$variant(mut c) => {
                    options::resolve_models(c.model_paths())?;
                    JobConfig::$variant(c)
                })*
            };
            let (inputs, settings) = match &config {
                $(JobConfig::$variant(c) => {
                    (c.inputs(), <$module::$config as JobKind>::device_settings(device)?)
                })*
            };
            let job = build_resolved(config, device)?;
            Ok(Box::new(WithInputs::new(job, &inputs, &settings)?))
        }

        fn build_resolved(config: JobConfig, device: &DeviceConfig) -> Result<Box<dyn Job>> {
            let load = move || device::with_backend!(owned device, be => match config {
                $(JobConfig::$variant(c) => c.load(be),)*
            });
            match device.thread_pool()? {
                None => load(),
                Some(pool) => {
                    let job = pool.install(load)?;
                    Ok(Box::new(Pooled { pool, job }))
                }
            }
        }
    };
}
for_each_job!(job_configs);

/// A built job whose metadata also holds the SHA-256 of its other input files
/// (`hopscore.sha256.<flag>`: model, tokenizer, corpus, …) and the device's settings,
/// as the CLI's file runner records them, so that rows from the API name the bytes and
/// the kernels that made them.
struct WithInputs {
    job: Box<dyn Job>,
    metadata: Vec<(String, String)>,
}

impl WithInputs {
    fn new(
        job: Box<dyn Job>,
        inputs: &[crate::io::paths::Named],
        settings: &[(String, String)],
    ) -> Result<Self> {
        let mut metadata = job.metadata().to_vec();
        metadata.extend(crate::io::fingerprint::contents(inputs)?);
        crate::io::metadata::add_settings(&mut metadata, settings);
        Ok(Self { job, metadata })
    }
}

impl Job for WithInputs {
    fn check_input(&self, input: &Schema) -> Result<()> {
        self.job.check_input(input)
    }
    fn output_schema(&self, input: &Schema) -> Result<SchemaRef> {
        Ok(with_metadata(
            &*self.job.output_schema(input)?,
            &self.metadata,
        ))
    }
    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }
    fn batch_rows(&self) -> usize {
        self.job.batch_rows()
    }
    fn process_rows(&mut self, batch: &RecordBatch, rows: &[u64]) -> Result<JobOutput> {
        let out = self.job.process_rows(batch, rows)?;
        let rebind =
            |b: &RecordBatch, schema: SchemaRef| RecordBatch::try_new(schema, b.columns().to_vec());
        Ok(JobOutput {
            rows: rebind(&out.rows, self.output_schema(&batch.schema())?)?,
            quarantine: rebind(&out.quarantine, self.quarantine_schema())?,
            tokens: out.tokens,
        })
    }
}

/// The name of an option's value as run metadata records it: its serde name
/// (kebab-case, the command line's spelling; `cli::tests` holds the two together).
pub fn value_name(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

/// `schema` with `metadata` as its key-value metadata.
pub fn with_metadata(schema: &Schema, metadata: &[(String, String)]) -> SchemaRef {
    std::sync::Arc::new(
        schema
            .clone()
            .with_metadata(metadata.iter().cloned().collect()),
    )
}
