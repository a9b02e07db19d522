//! The beam job: Beam Retrieval over question rows (docs/spec.md §1) with every score kept as
//! a feature. Each question's passages are rendered and tokenised, and a
//! [`BeamSearch`] asks for the hop scores the scheduler batches across questions.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{Float32Builder, Int32Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, Float32Array, Int32Array, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use rayon::prelude::*;

use super::questions::{Prepare, QuestionJob, QuestionScorer, QuestionTask, Searched};
use crate::backend::Backend;
use crate::io::columns::ScoredChainsBuilder;
use crate::io::fingerprint::file_sha256;
use crate::io::metadata::run_metadata;
use crate::io::paths::Named;
use crate::io::questions::Question;
use crate::io::schemas::beam_schema;
use crate::model::batch::{PackedBatch, Sequence};
use crate::model::cross_encoder::{CrossEncoder, ModelFiles};
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::pipeline::files::ToBatch;
use crate::pipeline::SchedulerConfig;
use crate::strategy::beam::{truncate_inputs, BeamResult, BeamSearch, HopMode, MAX_LEN};
use crate::text::render::{beam_passage, beam_question, PassageStyle};
use crate::text::TextTokenizer;

/// How many hops a question's chain has: a number, `from-data` or `auto` (on the
/// command line and as an option: a number or one of the two words).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(into = "HopsValue", try_from = "HopsValue")]
pub enum Hops {
    /// This many.
    Fixed(usize),
    /// The question file's `hops` (as the official evaluation does).
    FromData,
    /// The paper's τ rule, with `tau` and `max_hops`.
    Auto,
}

impl std::str::FromStr for Hops {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "from-data" => Ok(Hops::FromData),
            "auto" => Ok(Hops::Auto),
            n => match n.parse::<usize>() {
                Ok(h) if h >= 1 => Ok(Hops::Fixed(h)),
                _ => Err(format!(
                    "`{s}`: expected a hop count ≥ 1, `from-data` or `auto`"
                )),
            },
        }
    }
}

impl std::fmt::Display for Hops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hops::Fixed(n) => write!(f, "{n}"),
            Hops::FromData => f.write_str("from-data"),
            Hops::Auto => f.write_str("auto"),
        }
    }
}

/// [`Hops`] as an option's value: a number or a word.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum HopsValue {
    Count(usize),
    Word(String),
}

impl From<Hops> for HopsValue {
    fn from(h: Hops) -> Self {
        match h {
            Hops::Fixed(n) => HopsValue::Count(n),
            word => HopsValue::Word(word.to_string()),
        }
    }
}

impl TryFrom<HopsValue> for Hops {
    type Error = String;
    fn try_from(v: HopsValue) -> Result<Self, String> {
        match v {
            HopsValue::Count(n) => n.to_string().parse(),
            HopsValue::Word(w) => w.parse(),
        }
    }
}

/// What to load and how to search: the flags of `hopscore beam` and the options of
/// Python's `hopscore.BeamRetriever`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct BeamConfig {
    /// Beam Retrieval checkpoint directory (config.json + safetensors with the
    /// `hop_classifier_layer` and `hop_n_classifier_layer` heads).
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_MODEL",
        value_parser = crate::options::values::model_path))]
    pub model: PathBuf,
    /// tokenizer.json (or its directory) when the model directory has none.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_TOKENIZER",
        value_parser = crate::options::values::model_path))]
    pub tokenizer: Option<PathBuf>,
    /// Beams kept per hop (the official models were trained with 1 or 2).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = BeamConfig::defaults().beam_size,
        value_parser = crate::options::values::positive_usize))]
    pub beam_size: usize,
    /// Hop count: a number, `from-data` (the question file's `hops`, as the official
    /// evaluation does), or `auto` (the paper's τ rule, with --tau and --max-hops).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = BeamConfig::defaults().hops,
        value_parser = str::parse::<Hops>))]
    pub hops: Hops,
    /// `--hops auto`: continue while the best score of a hop is at least this.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = BeamConfig::defaults().tau,
        allow_hyphen_values = true, value_parser = crate::options::values::finite_f32))]
    pub tau: f32,
    /// `--hops auto`: most hops searched (truncation budgets use this count).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = BeamConfig::defaults().max_hops,
        value_parser = crate::options::values::positive_usize))]
    pub max_hops: usize,
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub scheduler: SchedulerConfig,
}

impl BeamConfig {
    /// The defaults (the command line's) for `model`.
    pub fn new(model: PathBuf) -> Self {
        Self {
            model,
            ..Self::defaults()
        }
    }
}

impl Options for BeamConfig {
    /// Every option at the command line's default; the paths empty.
    fn defaults() -> Self {
        Self {
            model: PathBuf::new(),
            tokenizer: None,
            beam_size: 2,
            hops: Hops::FromData,
            tau: -1.0,
            max_hops: 4,
            scheduler: SchedulerConfig::default(),
        }
    }

    fn check(&self) -> Result<()> {
        options::at_least_one("beam_size", self.beam_size)?;
        options::at_least_one("max_hops", self.max_hops)?;
        options::finite("tau", self.tau, false)?;
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

/// One question's search.
pub type BeamTask = QuestionTask<BeamSearch>;

/// A finished question.
pub type Chain = Searched<BeamResult>;

/// A loaded Beam Retrieval model with its tokenizer and search settings.
pub struct BeamScorer<B: Backend> {
    be: B,
    model: CrossEncoder<B>,
    tok: Arc<TextTokenizer>,
    config: BeamConfig,
    metadata: Vec<(String, String)>,
}

/// The beam job on backend `B`.
pub type BeamJob<B> = QuestionJob<BeamScorer<B>>;

/// Loads the checkpoint and tokenizer of `config` on `be`.
pub fn job<B: Backend>(config: BeamConfig, be: B) -> Result<BeamJob<B>> {
    config.check()?;
    let files = ModelFiles::open(&config.model)?;
    let names: Vec<&str> = files.heads().iter().map(|h| h.name).collect();
    if !(names.contains(&"hop1") && names.contains(&"hop_n")) {
        bail!(
            "{} is not a Beam Retrieval checkpoint: it needs the hop_classifier_layer and \
             hop_n_classifier_layer heads (found: {})",
            config.model.display(),
            names.join(", ")
        );
    }
    let weights_paths = files.weights_paths();
    let model = CrossEncoder::load(&be, files, Some(&["hop1", "hop_n"]))?;
    debug_assert_eq!(model.heads[0].spec.name, "hop1");
    let tok_path = TextTokenizer::locate(&config.model, config.tokenizer.as_deref())?;
    let tok = Arc::new(TextTokenizer::from_file(&tok_path, None)?);
    let metadata = run_metadata(
        &be,
        &config.model,
        &weights_paths,
        &options::record(
            &config,
            &[
                ("strategy", "beam".into()),
                ("tokenizer_sha256", file_sha256(&tok_path)?),
                ("device", be.name()),
            ],
        )?,
    )?;
    let scheduler = config.scheduler;
    Ok(QuestionJob::new(
        BeamScorer {
            be,
            model,
            tok,
            config,
            metadata,
        },
        scheduler,
    ))
}

impl<B: Backend> QuestionScorer for BeamScorer<B> {
    type Task = BeamTask;
    type Row = Chain;

    fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    fn schema(&self) -> SchemaRef {
        beam_schema()
    }

    fn prepare(&self) -> Prepare<BeamTask> {
        let tok = self.tok.clone();
        let c = &self.config;
        let (beam_size, hops, tau, max_hops) = (c.beam_size, c.hops, c.tau, c.max_hops);
        Arc::new(move |q| prepare(q, &tok, beam_size, hops, tau, max_hops))
    }

    fn finish(output: Chain) -> Result<Chain, (String, String)> {
        let r = &output.result;
        let scores = r.hop_scores.iter().chain(r.hop1_logits.iter().flatten());
        match crate::strategy::non_finite(scores.chain(r.beams.iter().flat_map(|b| &b.hop_scores)))
        {
            Some(why) => Err((output.id, why)),
            None => Ok(output),
        }
    }

    fn to_batch(&self) -> ToBatch<Chain> {
        Arc::new(chain_batch)
    }

    fn score(&mut self, seqs: &[Sequence], heads: &[usize]) -> Result<Vec<Vec<f32>>> {
        let out = self
            .model
            .forward(&self.be, &PackedBatch::pack(seqs), false)?;
        Ok(heads
            .iter()
            .enumerate()
            .map(|(k, &h)| out.logits[h].data[2 * k..2 * k + 2].to_vec())
            .collect())
    }
}

/// Renders and tokenises one question (docs/spec.md §1), or says why it cannot be searched.
fn prepare(
    q: &Question,
    tok: &TextTokenizer,
    beam_size: usize,
    hops: Hops,
    tau: f32,
    max_hops: usize,
) -> Result<BeamTask, String> {
    let mode = match hops {
        Hops::Fixed(h) => HopMode::Fixed(h),
        Hops::Auto => HopMode::Auto { tau, max_hops },
        Hops::FromData => match q.hop_count() {
            0 => {
                let why = match q.hops_issue() {
                    Some(issue) => format!("its `hops` is unusable ({issue})"),
                    None => "no `hops`".to_string(),
                };
                return Err(format!(
                    "no hop count in the data ({why}, no supporting passages): pass --hops N"
                ));
            }
            h => HopMode::Fixed(h),
        },
    };
    let style = PassageStyle::for_dataset(q.dataset.as_str());
    let question = tok
        .encode_plain(beam_question(&q.question))
        .map_err(|e| format!("question: {e:#}"))?;
    let passages = q
        .passages
        .par_iter()
        .map(|p| {
            // Only the prefix the truncation below can keep (at most MAX_LEN ids) is
            // tokenised: memory does not grow with a passage's length.
            let text = beam_passage(style, &p.title, &p.text);
            crate::text::leading_ids(|t| tok.encode_plain(t), &text, MAX_LEN)
        })
        .collect::<Result<Vec<_>>>()
        .map_err(|e| format!("passage: {e:#}"))?;
    let (question, passages) = truncate_inputs(question, passages);
    Ok(BeamTask {
        id: q.id.clone(),
        titles: q.passages.iter().map(|p| p.title.clone()).collect(),
        search: BeamSearch::new(question, passages, beam_size, mode),
    })
}

/// One record batch of output rows.
fn chain_batch(rows: &[Chain]) -> Result<RecordBatch> {
    let i32_list = |v: &[usize]| Int32Array::from_iter_values(v.iter().map(|&x| x as i32));
    let mut chain = ListBuilder::new(Int32Builder::new());
    let mut titles = ListBuilder::new(StringBuilder::new());
    let mut hop_scores = ListBuilder::new(Float32Builder::new());
    let mut hop1 = ListBuilder::new(ListBuilder::new(Float32Builder::new()));
    let mut beams = ScoredChainsBuilder::default();
    for r in rows {
        let res = &r.result;
        chain
            .values()
            .append_slice(&i32_list(&res.chain).values()[..]);
        chain.append(true);
        for &j in &res.chain {
            titles.values().append_value(&r.titles[j]);
        }
        titles.append(true);
        hop_scores.values().append_slice(&res.hop_scores);
        hop_scores.append(true);
        for l in &res.hop1_logits {
            hop1.values().values().append_slice(l);
            hop1.values().append(true);
        }
        hop1.append(true);
        for b in &res.beams {
            beams.push(&b.chain, b.score());
        }
        beams.end_row();
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.id.as_str()),
        )),
        Arc::new(chain.finish()),
        Arc::new(titles.finish()),
        Arc::new(Float32Array::from_iter(
            rows.iter().map(|r| r.result.hop_scores.last().copied()),
        )),
        Arc::new(hop_scores.finish()),
        Arc::new(beams.finish()),
        Arc::new(hop1.finish()),
    ];
    RecordBatch::try_new(beam_schema(), columns).context("building the output batch")
}

impl crate::jobs::JobKind for BeamConfig {
    const NAME: &'static str = "beam";
    const ABOUT: &'static str = "Beam Retrieval over a question file: chains, scores and features";
    const REQUIRED: &'static [&'static str] = &["model"];
    const ROW: &'static str = "question";
    type Device = crate::jobs::DeviceConfig;
    type Summary = crate::pipeline::files::RunSummary;
    type Files = crate::pipeline::files::FileRun;
}

impl crate::jobs::FileJobKind for BeamConfig {
    type Job<B: Backend + 'static> = BeamJob<B>;

    fn job<B: Backend + 'static>(self, be: B) -> Result<BeamJob<B>> {
        job(self, be)
    }

    fn summary<B: Backend + 'static>(_job: &BeamJob<B>, run: Self::Summary) -> Self::Summary {
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_parse_from_a_count_or_a_word() {
        let parse = |s: &str| s.parse::<Hops>();
        assert_eq!(parse("3"), Ok(Hops::Fixed(3)));
        assert_eq!(parse("from-data"), Ok(Hops::FromData));
        assert_eq!(parse("auto"), Ok(Hops::Auto));
        assert!(parse("0").is_err() && parse("two").is_err());
    }
}
