//! `hopscore label`: the arguments of the label job ([`crate::jobs::label`]) and its
//! run over a question file ([`crate::pipeline::files`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::question_run::{RunArgs, RunSummary};
use super::DeviceOpts;
use crate::io::paths::Named;
use crate::jobs::device::with_backend;
use crate::jobs::embed::EmbedConfig;
use crate::jobs::label::{self, LabelConfig, LabelRetriever, TagPooling};
use crate::jobs::options::Options;
use crate::pipeline::files;

#[derive(Debug, Clone, Args)]
pub struct LabelArgs {
    /// EfficientRAG Labeler checkpoint directory (`deberta.*`, `pooler.dense.*`,
    /// `sequence_classifier.*` with 2 or 3 tags, `token_classifier.*`).
    #[arg(long, env = "HOPSCORE_LABELER", value_parser = super::flags::model_path)]
    pub labeler: PathBuf,
    /// EfficientRAG Filter checkpoint directory (a `DebertaV2ForTokenClassification`
    /// with 2 labels).
    #[arg(long, env = "HOPSCORE_FILTER", value_parser = super::flags::model_path)]
    pub filter: PathBuf,
    /// tokenizer.json (or its directory) when the Labeler directory has none; both
    /// models share it.
    #[arg(long, env = "HOPSCORE_TOKENIZER", value_parser = super::flags::tokenizer_path)]
    pub tokenizer: Option<PathBuf>,
    /// Retrieve from this corpus (Parquet `id`, `text`, optional `title`; one BM25
    /// index built at start) instead of each question's own passages.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Tag-head pooling: `cls` (the official code: ContextPooler on [CLS]) or `mean`
    /// (the paper: the pooler on the mean of the token states).
    #[arg(long, value_enum, default_value_t = LabelConfig::defaults().tag_pooling)]
    pub tag_pooling: TagPooling,
    /// Most iterations (retrieve, label, filter) per question.
    #[arg(long, default_value_t = LabelConfig::defaults().max_iter, value_parser = super::flags::positive_usize)]
    pub max_iter: usize,
    /// Chunks retrieved per iteration.
    #[arg(long, default_value_t = LabelConfig::defaults().top_k, value_parser = super::flags::positive_usize)]
    pub top_k: usize,
    /// `bm25`, or `dense` as the official code retrieves (a bi-encoder such as
    /// Contriever-MSMARCO: --encoder; over --corpus, its vectors: --index).
    #[arg(long, value_enum, default_value_t = LabelConfig::defaults().retriever)]
    pub retriever: LabelRetriever,
    /// The bi-encoder of `--retriever dense` (a BERT-family directory as for `embed`);
    /// it embeds each iteration's query on the CPU.
    #[arg(long, env = "HOPSCORE_ENCODER", value_parser = super::flags::model_path)]
    pub encoder: Option<PathBuf>,
    /// `hopscore embed` outputs of the --corpus file (dense retrieval over a corpus).
    #[arg(long, num_args = 1..)]
    pub index: Vec<PathBuf>,
    /// Text put before every query (E5: "query: ").
    #[arg(long, default_value = "")]
    pub query_prefix: String,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub device: DeviceOpts,
}

impl LabelArgs {
    /// The library's config of the job.
    pub fn config(&self) -> LabelConfig {
        LabelConfig {
            labeler: self.labeler.clone(),
            filter: self.filter.clone(),
            tokenizer: self.tokenizer.clone(),
            corpus: self.corpus.clone(),
            tag_pooling: self.tag_pooling,
            max_iter: self.max_iter,
            top_k: self.top_k,
            retriever: self.retriever,
            encoder: self.encoder.clone().map(|model| EmbedConfig {
                prefix: self.query_prefix.clone(),
                ..EmbedConfig::new(model)
            }),
            index: self.index.clone(),
            scheduler: self.run.scheduler(),
        }
    }
}

/// Runs `hopscore label`.
pub fn run(args: &LabelArgs) -> Result<RunSummary> {
    crate::pipeline::control::install_interrupt_handler();
    let mut inputs = super::inputs(&[
        ("--labeler", Some(&args.labeler)),
        ("--filter", Some(&args.filter)),
        ("--tokenizer", args.tokenizer.as_deref()),
        ("--corpus", args.corpus.as_deref()),
        ("--encoder", args.encoder.as_deref()),
    ]);
    inputs.extend(args.index.iter().map(|p| Named::new("--index", p)));
    let run = args.run.file_run(inputs);
    run.check_paths(&[])?;
    with_backend!(owned &args.device.config(), be => {
        let mut job = label::job(args.config(), be)?;
        files::run(&mut job, &run)
    })
}

impl super::Run for LabelArgs {
    fn run(&self) -> Result<i32> {
        Ok(super::question_run::report(&run(self)?))
    }
}
