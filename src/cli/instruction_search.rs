//! `hopscore instruction-search`: the LEPUS paper's instruction search (mukhal/PromptRank
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
use clap::Args;
use serde::Serialize;

use super::job::JobArgs;
use crate::io::atomic::write_file;
use crate::io::fingerprint;
use crate::io::paths::{check_outputs, Kind, Named};
use crate::jobs::lepus::{LepusConfig, LepusScorer};
use crate::metrics::eval::{score_predictions, GoldSet};
use crate::options::Options;
use crate::strategy::lepus::instruction_templates;

#[derive(Debug, Clone, Args)]
pub struct InstructionSearchArgs {
    /// The lepus settings of every run: `--templates` is the file of candidate
    /// instructions (every one is tried, alone; `--num-templates` does not apply),
    /// `--input` the development question file (with gold passages), `--output` the
    /// ranking (JSON).
    #[command(flatten)]
    pub lepus: JobArgs<LepusConfig>,
    /// Recall cut-offs reported per candidate; the first ranks them, the next break
    /// ties.
    #[arg(long, value_delimiter = ',', default_value = "2,10", value_parser = crate::options::values::positive_usize)]
    pub k: Vec<usize>,
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

/// Runs the search.
pub fn run(args: &InstructionSearchArgs) -> Result<SearchReport> {
    // Hub ids resolved once: every candidate's run then takes the local snapshot.
    let mut args = args.clone();
    crate::options::resolve_models(args.lepus.config.model_paths())?;
    let args = &args;
    let lepus = &args.lepus;
    ensure!(
        lepus.config.scorer == LepusScorer::Lm,
        "instruction-search needs --scorer lm (BM25 reads no instruction)"
    );
    ensure!(!args.k.is_empty(), "--k needs at least one cut-off");
    ensure!(
        lepus.files.shard.is_none(),
        "instruction-search ranks candidates over the whole development file: --shard does \
         not apply (split the candidates file instead)"
    );
    let file = lepus
        .config
        .templates
        .as_deref()
        .context("--templates FILE: the candidate instructions, one per line")?;
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read --templates {}", file.display()))?;
    let templates = instruction_templates(&text, lepus.config.instruction_position);
    if templates.is_empty() {
        bail!("{} holds no instruction", file.display());
    }
    let runs = runs_dir(&lepus.files.output);
    let best_file = lepus.files.output.with_extension("best.txt");
    let mut inputs = vec![Named::new("--input", &lepus.files.input)];
    inputs.extend(lepus.config.inputs());
    check_outputs(
        &inputs,
        &[
            (Named::new("--output", &lepus.files.output), Kind::File),
            (Named::new("the runs directory", &runs), Kind::Dir),
            (
                Named::new("the best-instruction file", &best_file),
                Kind::File,
            ),
        ],
    )?;
    let gold = GoldSet::read(&lepus.files.input)?;
    ensure!(
        gold.retrieval_questions() > 0,
        "{} has no question with gold passages (`supporting`): instruction search ranks \
         the candidates by their recall of them; give a development file with gold labels",
        lepus.files.input.display()
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
        let mut one = lepus.clone();
        one.config.templates = Some(line);
        one.config.num_templates = 1;
        one.files.output = stem.with_extension("parquet");
        one.files.quarantine = None;
        let done = stem.with_extension("done.json");
        let started = stem.with_extension("started.json");
        let settings = serde_json::to_string(&RunSettings {
            template: &template.0,
            config: one.config.clone(),
            limit: one.files.limit,
            contents: &contents,
        })?;
        let same = |marker: &Path| std::fs::read_to_string(marker).is_ok_and(|d| d == settings);
        if !(one.files.output.is_file() && same(&done)) {
            eprintln!(
                "instruction {}/{}: {}",
                index + 1,
                templates.len(),
                template.0
            );
            let mut parts = one.files.output.as_os_str().to_owned();
            parts.push(".parts");
            let parts = PathBuf::from(parts);
            one.files.resume = parts.is_dir() && same(&started);
            if parts.is_dir() && !one.files.resume {
                // Interrupted under other settings or inputs: that candidate starts again.
                std::fs::remove_dir_all(&parts)
                    .with_context(|| format!("cannot remove {}", parts.display()))?;
            }
            write_file(&started, settings.as_bytes())?;
            let summary = super::job::run(one.clone())?;
            if summary.interrupted {
                interrupted = true;
                break;
            }
            write_file(&done, settings.as_bytes())?;
        }
        let report = score_predictions(&gold, &one.files.output, &args.k, "chain")?;
        candidates.push(Candidate {
            index,
            template: template.0.clone(),
            recall_at_k: report.overall.recall_at_k.clone(),
            questions: report.overall.retrieval_questions,
            output: one.files.output.clone(),
        });
    }
    let recalls = |c: &Candidate| -> Vec<f64> {
        args.k
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
        k: args.k.clone(),
        candidates,
        best_file,
        interrupted,
    };
    write_file(
        &lepus.files.output,
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

/// Runs `hopscore instruction-search`, prints its table and returns the exit code.
pub fn main(args: &InstructionSearchArgs) -> Result<i32> {
    let report = run(args)?;
    print!("{}", table(&report));
    Ok(super::exit::of_run(report.interrupted))
}
