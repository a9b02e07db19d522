//! The embed job: one vector per `(id, text[, title])` row of a passage file (the
//! corpus format of `--corpus`) from a BERT, XLM-R or ModernBERT bi-encoder
//! ([`crate::model::bert`]).
//!
//! A row's text is `prefix + title + " " + text` (`prefix + text` without a title):
//! the passage form of Contriever's and BEIR's evaluation code. Rows are tokenised in
//! parallel, packed into token-budget batches longest first, embedded and returned in
//! input order as `embedding` (`fixed_size_list<float32>` or `<float16>`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use arrow_array::{ArrayRef, FixedSizeListArray, Float16Array, Float32Array, RecordBatch};
use arrow_schema::{DataType, Field, FieldRef};

use super::rows::{map_text_rows, rows_by_budget, InputColumn, RowJob, RowScorer};
use super::value_name;
use crate::backend::Backend;
use crate::io::metadata::run_metadata;
use crate::io::paths::Named;
use crate::model::batch::Sequence;
use crate::model::bert::{BertEmbedder, EmbeddingHead, Pooling};
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::text::TextTokenizer;

/// What to load, how to pool and how to write: the flags of `hopscore embed` and the
/// options of Python's `hopscore.Embedder`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct EmbedConfig {
    /// Bi-encoder model directory (BERT, XLM-R or ModernBERT; sentence-transformers or
    /// plain HF): config.json,
    /// model.safetensors, tokenizer.json, and modules.json + 1_Pooling/ where present.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_ENCODER",
        value_parser = crate::options::values::model_path))]
    pub model: PathBuf,
    /// tokenizer.json (or a directory holding it), when the model directory has none.
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::model_path))]
    pub tokenizer: Option<PathBuf>,
    /// Pooling of the token vectors. Default: the model's 1_Pooling/config.json, else
    /// mean (Contriever).
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub pooling: Option<Pooling>,
    /// L2-normalise the vectors. Default: whether modules.json has a Normalize module.
    #[cfg_attr(feature = "cli", arg(long, value_name = "on|off",
        value_parser = crate::options::values::on_off, action = clap::ArgAction::Set))]
    pub normalize: Option<bool>,
    /// Truncation length, special tokens included. Default: the model's
    /// sentence_bert_config.json max_seq_length, else max_position_embeddings.
    #[cfg_attr(feature = "cli", arg(long, value_parser = crate::options::values::positive_usize))]
    pub max_length: Option<usize>,
    /// Text put before every passage (E5: "passage: ").
    #[cfg_attr(feature = "cli", arg(long, default_value = ""))]
    pub prefix: String,
    /// Write float16 vectors (half the size; ~3 significant digits).
    #[cfg_attr(feature = "cli", arg(long))]
    pub float16: bool,
    /// Token budget of one forward pass. The default suits CPUs (on 2 cores MiniLM runs
    /// 1.2× faster than at 16384, whose activations leave the caches); on a GPU use
    /// 16384 or more.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = EmbedConfig::defaults().max_batch_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub max_batch_tokens: usize,
}

impl EmbedConfig {
    /// The defaults (the command line's) for `model`.
    pub fn new(model: PathBuf) -> Self {
        Self {
            model,
            ..Self::defaults()
        }
    }
}

impl Options for EmbedConfig {
    /// Every option at the command line's default; the paths empty.
    fn defaults() -> Self {
        Self {
            model: PathBuf::new(),
            tokenizer: None,
            pooling: None,
            normalize: None,
            max_length: None,
            prefix: String::new(),
            float16: false,
            max_batch_tokens: 4096,
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

/// A loaded bi-encoder with its tokenizer: texts in, vectors out.
pub struct Embedder<B: Backend> {
    be: B,
    model: BertEmbedder<B>,
    tok: TextTokenizer,
    prefix: String,
    float16: bool,
    max_batch_tokens: usize,
    metadata: Vec<(String, String)>,
}

/// The embed job on backend `B`.
pub type EmbedJob<B> = RowJob<Embedder<B>>;

/// Loads the model and tokenizer of `config` on `be`.
pub fn embedder<B: Backend>(config: EmbedConfig, be: B) -> Result<Embedder<B>> {
    config.check()?;
    let head = EmbeddingHead::resolve(&config.model, config.pooling, config.normalize)?;
    let model = BertEmbedder::load(&be, &config.model, Some(head))?;
    let head = &model.head;
    let positions = model.config.max_position_embeddings;
    // As sentence-transformers, a length the model's files give is capped at its
    // positions; one given by flag is refused past them.
    let max_len = config
        .max_length
        .or(head.max_seq_length.map(|m| m.min(positions)))
        .unwrap_or(positions);
    anyhow::ensure!(
        max_len <= positions,
        "--max-length {max_len} exceeds the model's max_position_embeddings {positions}"
    );
    let tok = TextTokenizer::from_file(
        &TextTokenizer::locate(&config.model, config.tokenizer.as_deref())?,
        Some(max_len),
    )?;
    let specials = tok.special_tokens(false);
    anyhow::ensure!(
        max_len > specials,
        "--max-length {max_len} leaves no room for text: the tokenizer adds {specials} \
         special tokens to every row; give at least {}",
        specials + 1
    );
    let metadata = run_metadata(
        &be,
        &config.model,
        &model.weights_paths,
        &options::record(
            &config,
            &[
                ("pooling", value_name(head.pooling)),
                ("normalize", head.normalize.to_string()),
                ("max_length", max_len.to_string()),
                ("embedding_dim", model.config.hidden_size.to_string()),
                ("embedding_type", element(config.float16).to_string()),
                ("device", be.name()),
            ],
        )?,
    )?;
    Ok(Embedder {
        be,
        model,
        tok,
        prefix: config.prefix,
        float16: config.float16,
        max_batch_tokens: config.max_batch_tokens,
        metadata,
    })
}

/// Loads the embed job of `config` on `be`.
pub fn job<B: Backend>(config: EmbedConfig, be: B) -> Result<EmbedJob<B>> {
    Ok(RowJob::new(embedder(config, be)?))
}

fn element(float16: bool) -> &'static str {
    if float16 {
        "float16"
    } else {
        "float32"
    }
}

/// The element field of the `embedding` column.
fn item_field(float16: bool) -> FieldRef {
    let item = if float16 {
        DataType::Float16
    } else {
        DataType::Float32
    };
    Arc::new(Field::new("item", item, false))
}

/// The `embedding` column's type: `fixed_size_list<float32|float16>[dim]`.
pub fn embedding_type(dim: usize, float16: bool) -> DataType {
    DataType::FixedSizeList(item_field(float16), dim as i32)
}

impl<B: Backend> Embedder<B> {
    /// The backend the model runs on.
    pub fn backend(&self) -> &B {
        &self.be
    }

    /// The checkpoint's checksum, as the output metadata records it.
    pub fn model_sha256(&self) -> Option<&str> {
        self.recorded("model_sha256")
    }

    /// What the output metadata records as `hopscore.<key>` (the resolved pooling,
    /// normalisation, max length, prefix, model checksum).
    pub fn recorded(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k.strip_prefix("hopscore.") == Some(key))
            .map(|(_, v)| v.as_str())
    }

    /// Vector width.
    pub fn dim(&self) -> usize {
        self.model.config.hidden_size
    }

    /// The tokenised form of one text (the prefix added, truncated).
    pub fn encode(&self, text: &str) -> Result<Sequence> {
        self.tok
            .encode_pair(&format!("{}{text}", self.prefix), None)
    }

    /// Embeddings of `seqs` in the order given, `[seqs, dim]` row-major; sequences
    /// are packed longest first into batches of the token budget. A stop request ends
    /// it between batches ([`crate::stop::Interrupted`]).
    pub fn embed(&self, seqs: &[Sequence]) -> Result<Vec<f32>> {
        self.forward(seqs, true)
    }

    /// Embeddings of `texts` (the prefix added), `[texts, dim]`, run to the end
    /// whatever stop is requested: for rankings inside a strategy step, whose result
    /// must not be cut short.
    pub fn embed_texts(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let seqs = texts
            .iter()
            .map(|t| self.encode(t))
            .collect::<Result<Vec<_>>>()?;
        self.forward(&seqs, false)
    }

    fn forward(&self, seqs: &[Sequence], interruptible: bool) -> Result<Vec<f32>> {
        let rows = rows_by_budget(seqs, self.max_batch_tokens, interruptible, |batch| {
            self.model.embed(&self.be, batch)
        })?;
        Ok(rows.concat())
    }

    /// Embeddings of passages as the embed job renders them (`title + " " + text`),
    /// run to the end like [`Embedder::embed_texts`].
    pub fn embed_passages(&self, passages: &[crate::io::questions::Passage]) -> Result<Vec<f32>> {
        let texts: Vec<String> = passages
            .iter()
            .map(|p| passage_text(Some(&p.title), &p.text))
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        self.embed_texts(&refs)
    }
}

/// A passage as the embedder reads it: `title + " " + text`, the text alone without a
/// (non-blank) title.
fn passage_text(title: Option<&str>, text: &str) -> String {
    match title.filter(|t| !t.trim().is_empty()) {
        Some(t) => format!("{t} {text}"),
        None => text.to_string(),
    }
}

impl<B: Backend> RowScorer for Embedder<B> {
    type Prepared = Sequence;
    const COLUMNS: &'static [InputColumn] = &[
        ("id", &["string", "integer"], true),
        ("text", &["string"], true),
        ("title", &["string"], false),
    ];
    const BATCH_ROWS: usize = 4096;

    fn fields(&self) -> Vec<Field> {
        vec![Field::new(
            "embedding",
            embedding_type(self.dim(), self.float16),
            false,
        )]
    }

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn prepare(&self, batch: &RecordBatch) -> Result<Vec<Result<Sequence, String>>> {
        map_text_rows(batch, "text", "title", |text, title| {
            self.encode(&passage_text(title, text))
                .map_err(|e| format!("{e:#}"))
        })
    }

    fn tokens(row: &Sequence) -> usize {
        row.ids.len()
    }

    fn score(&mut self, rows: &[Sequence]) -> Result<Vec<ArrayRef>> {
        let values = self.embed(rows)?;
        let values: ArrayRef = if self.float16 {
            Arc::new(Float16Array::from_iter_values(
                values.iter().map(|&v| half::f16::from_f32(v)),
            ))
        } else {
            Arc::new(Float32Array::from(values))
        };
        Ok(vec![Arc::new(FixedSizeListArray::try_new(
            item_field(self.float16),
            self.dim() as i32,
            values,
            None,
        )?)])
    }
}

impl crate::jobs::JobKind for EmbedConfig {
    const NAME: &'static str = "embed";
    const ABOUT: &'static str =
        "Embed (id, text[, title]) passages with a BERT-family bi-encoder (MiniLM, Contriever, E5, BGE)";
    const REQUIRED: &'static [&'static str] = &["model"];
    const ROW: &'static str = "row";
    type Device = crate::jobs::DeviceConfig;
    type Summary = crate::pipeline::files::RunSummary;
    type Files = crate::pipeline::files::FileRun;
}

impl crate::jobs::FileJobKind for EmbedConfig {
    type Job<B: Backend + 'static> = EmbedJob<B>;

    fn job<B: Backend + 'static>(self, be: B) -> Result<EmbedJob<B>> {
        job(self, be)
    }

    fn summary<B: Backend + 'static>(_job: &EmbedJob<B>, run: Self::Summary) -> Self::Summary {
        run
    }
}
