//! The classify job: cross-encoder scoring of `(id, text_a[, text_b])` rows with a
//! sequence-level head of a DeBERTa checkpoint.
//!
//! Each batch is tokenised in parallel, its rows sorted by length and packed into
//! token-budget batches, scored, and returned in input order.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use arrow_array::builder::{Float32Builder, ListBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::Field;

use super::rows::{map_text_rows, rows_by_budget, InputColumn, RowJob, RowScorer};
use crate::backend::Backend;
use crate::io::metadata::run_metadata;
use crate::io::parquet_io::check_str;
use crate::io::paths::Named;
use crate::model::batch::Sequence;
use crate::model::cross_encoder::{CrossEncoder, ModelFiles};
use crate::model::heads::select;
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::text::TextTokenizer;

/// What to load and how to batch: the flags of `hopscore classify` and the options of
/// Python's `hopscore.CrossEncoder`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct ClassifyConfig {
    /// Model directory: config.json, model.safetensors (or a sharded index) and,
    /// unless --tokenizer is given, tokenizer.json.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_MODEL",
        value_parser = crate::options::values::model_path))]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it), when the model directory has none.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_TOKENIZER",
        value_parser = crate::options::values::model_path))]
    pub tokenizer: Option<PathBuf>,
    /// Head to score with (`sequence`, `hop1`, `hop_n`, …; see `hopscore inspect`).
    /// Needed only when the checkpoint has several sequence-level heads.
    #[cfg_attr(feature = "cli", arg(long))]
    pub head: Option<String>,
    /// Token budget of one forward pass. Larger batches use the cores better and
    /// need more memory (about 4·H·(12 + L) bytes per token on CPU).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ClassifyConfig::defaults().max_batch_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub max_batch_tokens: usize,
    /// Truncation length of a pair, special tokens included (longest-first).
    /// Default: the model's max_position_embeddings.
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::positive_usize))]
    pub max_length: Option<usize>,
}

impl ClassifyConfig {
    /// The defaults (the command line's) for `model`.
    pub fn new(model: PathBuf) -> Self {
        Self {
            model,
            ..Self::defaults()
        }
    }
}

impl Options for ClassifyConfig {
    /// Every option at the command line's default; the paths empty.
    fn defaults() -> Self {
        Self {
            model: PathBuf::new(),
            tokenizer: None,
            head: None,
            max_batch_tokens: 16384,
            max_length: None,
        }
    }

    fn check(&self) -> Result<()> {
        options::at_least_one("max_batch_tokens", self.max_batch_tokens)?;
        options::none_or_at_least_one("max_length", self.max_length)
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

/// A loaded cross-encoder with its tokenizer.
pub struct Classifier<B: Backend> {
    be: B,
    model: CrossEncoder<B>,
    tok: TextTokenizer,
    max_batch_tokens: usize,
    metadata: Vec<(String, String)>,
}

/// The classify job on backend `B`.
pub type ClassifyJob<B> = RowJob<Classifier<B>>;

/// Loads the model, head and tokenizer of `config` on `be`.
pub fn job<B: Backend>(config: ClassifyConfig, be: B) -> Result<ClassifyJob<B>> {
    config.check()?;
    let files = ModelFiles::open(&config.model)?;
    let model_config = files.config.clone();
    let head = select(&files.heads(), config.head.as_deref())?.clone();
    anyhow::ensure!(
        head.per_sequence(),
        "head `{}` scores tokens, not pairs: classify needs a sequence-level head",
        head.name
    );
    let weights_paths = files.weights_paths();
    let model = CrossEncoder::load(&be, files, Some(&[head.name]))?;
    let max_len = config
        .max_length
        .unwrap_or(model_config.max_position_embeddings);
    let tok = TextTokenizer::from_file(
        &TextTokenizer::locate(&config.model, config.tokenizer.as_deref())?,
        Some(max_len),
    )?;
    let metadata = run_metadata(
        &be,
        &config.model,
        &weights_paths,
        &options::record(
            &config,
            &[
                ("head", head.name.to_string()),
                ("max_length", max_len.to_string()),
                ("device", be.name()),
            ],
        )?,
    )?;
    Ok(RowJob::new(Classifier {
        be,
        model,
        tok,
        max_batch_tokens: config.max_batch_tokens,
        metadata,
    }))
}

impl<B: Backend> RowScorer for Classifier<B> {
    type Prepared = Sequence;
    const COLUMNS: &'static [InputColumn] = &[
        ("id", &["string", "integer"], true),
        ("text_a", &["string"], true),
        ("text_b", &["string"], false),
    ];
    const BATCH_ROWS: usize = 4096;

    fn fields(&self) -> Vec<Field> {
        crate::io::schemas::classify_fields()
    }

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn prepare(&self, batch: &RecordBatch) -> Result<Vec<Result<Sequence, String>>> {
        map_text_rows(batch, "text_a", "text_b", |a, b| {
            let b = b.map(|b| check_str(b, "text_b")).transpose()?;
            self.tok.encode_pair(a, b).map_err(|e| format!("{e:#}"))
        })
    }

    fn tokens(row: &Sequence) -> usize {
        row.ids.len()
    }

    fn score(&mut self, rows: &[Sequence]) -> Result<Vec<ArrayRef>> {
        let logits = score(&self.be, &self.model, rows, self.max_batch_tokens)?;
        let mut b = ListBuilder::new(Float32Builder::new());
        for r in &logits {
            b.values().append_slice(r);
            b.append(true);
        }
        Ok(vec![Arc::new(b.finish())])
    }
}

/// Logits of the first head for every sequence, in the order given (batches of at
/// most `budget` tokens, longest first).
fn score<B: Backend>(
    be: &B,
    model: &CrossEncoder<B>,
    seqs: &[Sequence],
    budget: usize,
) -> Result<Vec<Vec<f32>>> {
    rows_by_budget(seqs, budget, true, |batch| {
        let mut res = model.forward(be, batch, false)?;
        Ok(res.logits.swap_remove(0))
    })
}

impl crate::jobs::JobKind for ClassifyConfig {
    const NAME: &'static str = "classify";
    const ABOUT: &'static str =
        "Score (id, text_a, text_b) rows with a cross-encoder head (DeBERTa, BERT, XLM-RoBERTa)";
    const REQUIRED: &'static [&'static str] = &["model"];
    const ROW: &'static str = "row";
    type Device = crate::jobs::DeviceConfig;
    type Summary = crate::pipeline::files::RunSummary;
    type Files = crate::pipeline::files::FileRun;
}

impl crate::jobs::FileJobKind for ClassifyConfig {
    type Job<B: Backend + 'static> = ClassifyJob<B>;

    fn job<B: Backend + 'static>(self, be: B) -> Result<ClassifyJob<B>> {
        job(self, be)
    }

    fn summary<B: Backend + 'static>(_job: &ClassifyJob<B>, run: Self::Summary) -> Self::Summary {
        run
    }
}
