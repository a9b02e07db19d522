//! `hopscore retrieve`: candidate pools for a question file from a passage corpus
//! ([`crate::jobs::retrieve`]): dense (an `embed` index), BM25, or both fused.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::DeviceOpts;
use crate::jobs::embed::EmbedConfig;
use crate::jobs::retrieve::{self, RetrieveConfig, RetrieveSummary, Retriever};
use crate::model::bert::Pooling;

#[derive(Debug, Clone, Args)]
pub struct RetrieveArgs {
    /// Question file (`hopscore import`); its passages are replaced by the hits.
    #[arg(long)]
    pub questions: PathBuf,
    /// Passage Parquet: `id`, `text`, optionally `title` (the file given to `embed`).
    #[arg(long)]
    pub corpus: PathBuf,
    /// `hopscore embed` outputs over the corpus (repeat for several files).
    #[arg(long, num_args = 1..)]
    pub index: Vec<PathBuf>,
    /// The query encoder: the model that embedded the index.
    #[arg(long, env = "HOPSCORE_ENCODER", value_parser = super::flags::model_path)]
    pub encoder: Option<PathBuf>,
    /// The encoder's tokenizer.json (or a directory holding it), when its directory has none.
    #[arg(long, value_parser = super::flags::tokenizer_path)]
    pub tokenizer: Option<PathBuf>,
    /// Text put before every question (E5: "query: "; BGE's instruction).
    #[arg(long, default_value = "")]
    pub query_prefix: String,
    /// Pooling, when it differs from the encoder directory's (as for `embed`).
    #[arg(long, value_enum)]
    pub pooling: Option<Pooling>,
    /// L2-normalise the query vectors (default: as the encoder directory says).
    #[arg(long, value_name = "on|off", value_parser = super::flags::on_off, action = clap::ArgAction::Set)]
    pub normalize: Option<bool>,
    #[arg(long, value_enum, default_value_t = Retriever::Dense)]
    pub retriever: Retriever,
    /// Passages per question.
    #[arg(long, default_value_t = 20, value_parser = super::flags::positive_usize)]
    pub k: usize,
    /// How deep each ranking goes into the fusion (`--retriever hybrid`).
    #[arg(long, default_value_t = 100, value_parser = super::flags::positive_usize)]
    pub fusion_depth: usize,
    /// Questions per index scan (each scan reads the whole index once).
    #[arg(long, default_value_t = 4096, value_parser = super::flags::positive_usize)]
    pub question_rows: usize,
    /// Output question file; the scores go to `<output stem>.retrieval.parquet`.
    #[arg(long)]
    pub output: PathBuf,
    /// Where bad questions go. Default: `<output stem>.quarantine.parquet`.
    #[arg(long)]
    pub quarantine: Option<PathBuf>,
    #[command(flatten)]
    pub device: DeviceOpts,
}

impl RetrieveArgs {
    /// The library's config of the job.
    pub fn config(&self) -> RetrieveConfig {
        RetrieveConfig {
            questions: self.questions.clone(),
            corpus: self.corpus.clone(),
            index: self.index.clone(),
            encoder: self.encoder.clone().map(|model| EmbedConfig {
                pooling: self.pooling,
                normalize: self.normalize,
                prefix: self.query_prefix.clone(),
                tokenizer: self.tokenizer.clone(),
                ..EmbedConfig::new(model)
            }),
            retriever: self.retriever,
            k: self.k,
            fusion_depth: self.fusion_depth,
            output: self.output.clone(),
            quarantine: self.quarantine.clone(),
            question_rows: self.question_rows,
        }
    }
}

/// Runs `hopscore retrieve` and prints its summary; a stop (Ctrl-C, SIGTERM) writes
/// nothing and exits 130 (retrieve has no parts to resume: it runs again).
pub fn main(args: &RetrieveArgs) -> Result<i32> {
    match run(args) {
        Ok(summary) => {
            eprintln!("{summary}");
            Ok(0)
        }
        Err(e) if e.is::<crate::pipeline::control::Interrupted>() => {
            eprintln!(
                "interrupted: retrieve wrote nothing (its files are written whole at the \
                 end); run the same command again"
            );
            Ok(super::entry::EXIT_INTERRUPTED)
        }
        Err(e) => Err(e),
    }
}

/// Runs `hopscore retrieve`.
pub fn run(args: &RetrieveArgs) -> Result<RetrieveSummary> {
    crate::pipeline::control::install_interrupt_handler();
    let config = args.config();
    crate::jobs::device::with_backend!(owned &args.device.config(), be => {
        retrieve::run(&config, be)
    })
}

impl std::fmt::Display for RetrieveSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "retrieved for {} questions in {:.1} s ({} quarantined → {}; scores → {})",
            self.questions,
            self.seconds,
            self.quarantined,
            self.quarantine_path.display(),
            self.scores_path.display()
        )?;
        if self.with_gold > 0 {
            let r: Vec<String> = self
                .recall
                .iter()
                .map(|(k, r)| format!("R@{k} {r:.4}"))
                .collect();
            write!(
                f,
                "\ngold passages over {} questions: {}",
                self.with_gold,
                r.join(", ")
            )?;
        }
        Ok(())
    }
}
