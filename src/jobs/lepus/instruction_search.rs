//! The instruction-search job (`hopscore instruction-search`): the LEPUS paper's instruction search (mukhal/PromptRank
//! `run_instruction_search.py`): every candidate instruction of `--templates` is run
//! alone as a `hopscore lepus` over a development question file with gold passages,
//! and the candidates are ranked by Recall@k of their rankings, so that the best can
//! be passed to `hopscore lepus --templates`.
//!
//! Each candidate's run is an ordinary lepus output under `<output>.runs/`
//! (`instruction-007.parquet`, with its parts while it runs): an interrupted search
//! continues where it stopped, finished candidates whose settings and input contents
//! (development file, model, tokenizer, demonstrations: by SHA-256, as `--resume`
//! compares them) are unchanged are not run again, and a candidate interrupted under
//! other settings starts again. Every file the search writes (`--output`, the runs
//! directory, `<stem>.best.txt`) goes through the output guard first.

use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

use super::{LepusConfig, LepusScorer};
use crate::backend::Backend;
use crate::io::atomic::write_file;
use crate::io::fingerprint;
use crate::io::paths::{check_outputs, Kind, Named};
use crate::jobs::registry::{JobKind, Registered};
use crate::jobs::report::{Ending, Report};
use crate::jobs::DeviceConfig;
use crate::metrics::eval::{score_predictions, GoldSet};
use crate::model::hub::Need;
use crate::options::Options;
use crate::pipeline::files::FileRun;
use crate::strategy::lepus::instruction_templates;

/// The flags of `hopscore instruction-search`: the lepus settings of every run —
/// `--templates` is the file of candidate instructions (every one is tried, alone;
/// `--num-templates` does not apply), `--input` the development question file (with
/// gold passages), `--output` the ranking (JSON) — and the recall cut-offs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct InstructionSearchConfig {
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub lepus: LepusConfig,
    /// Recall cut-offs reported per candidate; the first ranks them, the next break
    /// ties.
    #[cfg_attr(feature = "cli", arg(long, value_delimiter = ',',
        default_values_t = InstructionSearchConfig::defaults().k,
        value_parser = crate::options::values::positive_usize))]
    pub k: Vec<usize>,
}

impl Options for InstructionSearchConfig {
    fn defaults() -> Self {
        Self {
            lepus: LepusConfig::defaults(),
            k: vec![2, 10],
        }
    }

    fn check(&self) -> Result<()> {
        ensure!(!self.k.is_empty(), "--k needs at least one cut-off");
        self.lepus.check()
    }

    fn model_paths(&mut self) -> Vec<(&mut std::path::PathBuf, Need)> {
        self.lepus.model_paths()
    }

    fn inputs(&self) -> Vec<Named> {
        self.lepus.inputs()
    }
}

impl JobKind for InstructionSearchConfig {
    const NAME: &'static str = "instruction-search";
    const ABOUT: &'static str = "Rank candidate LEPUS instructions by the Recall@k of their \
                                 rankings on a development question file (the paper's \
                                 instruction search)";
    const REQUIRED: &'static [&'static str] = <LepusConfig as JobKind>::REQUIRED;
    const ROW: &'static str = "question";
    type Device = DeviceConfig;
    type Files = FileRun;
    type Summary = SearchReport;
}

impl Registered for InstructionSearchConfig {
    /// A search runs whole lepus runs over a development file: it has no batch form.
    fn load<B: Backend + 'static>(self, _be: B) -> Result<Box<dyn crate::jobs::Job>> {
        bail!(
            "instruction-search runs over a development question file, not batches: run \
             `hopscore instruction-search --input DEV --templates CANDIDATES --output \
             RANKING.json`, then score batches with the best instruction (`lepus`)"
        )
    }

    fn run_files(self, device: &DeviceConfig, files: &FileRun) -> Result<SearchReport> {
        search(&self, device, files)
    }
}

/// One candidate's result.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// Position in the candidates file (0-based, blank and `#` lines skipped).
    pub index: usize,
    /// The template run (the instruction placed by `--instruction-position`).
    pub template: String,
    /// k → Recall@k over the questions with gold passages.
    pub recall_at_k: std::collections::BTreeMap<usize, f64>,
    pub questions: u64,
    /// The candidate's lepus output.
    pub output: PathBuf,
}

/// The search's result, best candidate first.
#[derive(Debug, Clone, Serialize)]
pub struct SearchReport {
    pub k: Vec<usize>,
    pub candidates: Vec<Candidate>,
    /// A one-line instruction file holding the best template (for `--templates`).
    pub best_file: PathBuf,
    /// Whether the search stopped at an interrupt (the ranking covers the finished
    /// candidates).
    pub interrupted: bool,
}

/// What a candidate was run with: a finished run is reused, an interrupted one
/// resumed, only when this is unchanged.
#[derive(Serialize)]
struct RunSettings<'a> {
    template: &'a str,
    config: LepusConfig,
    /// `--limit`: the development questions the candidate was ranked on.
    limit: Option<u64>,
    /// `hopscore.sha256.<flag>` of the development file and the other inputs.
    contents: &'a [(String, String)],
}

fn runs_dir(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".runs");
    PathBuf::from(name)
}

/// Runs the search over `files` (the development file in, the ranking out) on
/// `device`; its hub ids are resolved ([`crate::jobs::run`]), so every candidate's run
/// takes the local snapshot.
fn search(
    config: &InstructionSearchConfig,
    device: &DeviceConfig,
    files: &FileRun,
) -> Result<SearchReport> {
    config.check()?;
    let lepus = &config.lepus;
    ensure!(
        lepus.scorer == LepusScorer::Lm,
        "instruction-search needs --scorer lm (BM25 reads no instruction)"
    );
    ensure!(
        files.shard.is_none(),
        "instruction-search ranks candidates over the whole development file: --shard does \
         not apply (split the candidates file instead)"
    );
    let file = lepus
        .templates
        .as_deref()
        .context("--templates FILE: the candidate instructions, one per line")?;
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read --templates {}", file.display()))?;
    let templates = instruction_templates(&text, lepus.instruction_position);
    if templates.is_empty() {
        bail!("{} holds no instruction", file.display());
    }
    let runs = runs_dir(&files.output);
    let best_file = files.output.with_extension("best.txt");
    let mut inputs = vec![Named::new("--input", &files.input)];
    inputs.extend(files.inputs.iter().cloned()); // the lepus config's: `jobs::run` set them
    check_outputs(
        &inputs,
        &[
            (Named::new("--output", &files.output), Kind::File),
            (Named::new("the runs directory", &runs), Kind::Dir),
            (
                Named::new("the best-instruction file", &best_file),
                Kind::File,
            ),
        ],
    )?;
    let gold = GoldSet::read(&files.input)?;
    ensure!(
        gold.retrieval_questions() > 0,
        "{} has no question with gold passages (`supporting`): instruction search ranks \
         the candidates by their recall of them; give a development file with gold labels",
        files.input.display()
    );
    let contents: Vec<(String, String)> = fingerprint::contents(
        &inputs
            .into_iter()
            .filter(|n| n.what != "--templates")
            .collect::<Vec<_>>(),
    )?;
    std::fs::create_dir_all(&runs).with_context(|| format!("cannot create {}", runs.display()))?;
    let mut candidates = Vec::new();
    let mut interrupted = false;
    for (index, template) in templates.iter().enumerate() {
        let stem = runs.join(format!("instruction-{index:03}"));
        let line = stem.with_extension("txt");
        write_file(&line, format!("{}\n", template.0).as_bytes())?;
        let one = LepusConfig {
            templates: Some(line),
            num_templates: 1,
            ..lepus.clone()
        };
        let mut one_files = FileRun {
            output: stem.with_extension("parquet"),
            quarantine: None,
            ..files.clone()
        };
        let done = stem.with_extension("done.json");
        let started = stem.with_extension("started.json");
        let settings = serde_json::to_string(&RunSettings {
            template: &template.0,
            config: one.clone(),
            limit: one_files.limit,
            contents: &contents,
        })?;
        let same = |marker: &Path| std::fs::read_to_string(marker).is_ok_and(|d| d == settings);
        if !(one_files.output.is_file() && same(&done)) {
            log::info!(
                "instruction {}/{}: {}",
                index + 1,
                templates.len(),
                template.0
            );
            let mut parts = one_files.output.as_os_str().to_owned();
            parts.push(".parts");
            let parts = PathBuf::from(parts);
            one_files.resume = parts.is_dir() && same(&started);
            if parts.is_dir() && !one_files.resume {
                // Interrupted under other settings or inputs: that candidate starts again.
                std::fs::remove_dir_all(&parts)
                    .with_context(|| format!("cannot remove {}", parts.display()))?;
            }
            write_file(&started, settings.as_bytes())?;
            let summary = crate::jobs::run(one, one_files.clone(), *device)?;
            if summary.interrupted {
                interrupted = true;
                break;
            }
            write_file(&done, settings.as_bytes())?;
        }
        let report = score_predictions(&gold, &one_files.output, &config.k, "chain")?;
        candidates.push(Candidate {
            index,
            template: template.0.clone(),
            recall_at_k: report.overall.recall_at_k.clone(),
            questions: report.overall.retrieval_questions,
            output: one_files.output,
        });
    }
    let recalls = |c: &Candidate| -> Vec<f64> {
        config
            .k
            .iter()
            .map(|k| c.recall_at_k.get(k).copied().unwrap_or(0.0))
            .collect()
    };
    candidates.sort_by(|a, b| {
        recalls(b)
            .partial_cmp(&recalls(a))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.index.cmp(&b.index))
    });
    if let Some(best) = candidates.first() {
        write_file(&best_file, format!("{}\n", best.template).as_bytes())?;
    }
    let report = SearchReport {
        k: config.k.clone(),
        candidates,
        best_file,
        interrupted,
    };
    write_file(
        &files.output,
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    Ok(report)
}

/// The ranking as a table, best first.
pub fn table(r: &SearchReport) -> String {
    let mut out = String::from("rank");
    for k in &r.k {
        out += &format!("  R@{k:<4}");
    }
    out += "  template\n";
    for (rank, c) in r.candidates.iter().enumerate() {
        out += &format!("{:>4}", rank + 1);
        for k in &r.k {
            out += &format!(
                "  {:>6.1}",
                100.0 * c.recall_at_k.get(k).copied().unwrap_or(0.0)
            );
        }
        out += &format!("  {}\n", c.template);
    }
    if let Some(best) = r.candidates.first() {
        out += &format!("best (in {}): {}\n", r.best_file.display(), best.template);
    }
    out
}

/// The table on stdout; 130 when the search was interrupted.
impl Report for SearchReport {
    fn report(&self, _row: &str) -> Ending {
        let e = Ending {
            stdout: table(self),
            ..Ending::default()
        };
        e.of_run(self.interrupted)
    }
}
