//! `hopscore eval`: the arguments of [`crate::metrics::eval`], the report as a table
//! (one run, or several side by side), and the recall plot ([`crate::metrics::plot`]).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;
use serde::Serialize;

use crate::io::paths::{check_outputs, Kind, Named};
use crate::metrics::eval::{keep_cutoffs, score_predictions, EvalReport, GoldSet, Scores};

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// Predictions: Parquet with `id` (string), `chain` (list of integers: passage
    /// indices into the question's `passages`, best first) and optionally `answer` (string)
    /// and `supporting_facts` (list<struct<title: string, sent_idx: int>>, as in the
    /// question file) for the official SP and joint scores. Or a question file of ranked
    /// pools (`hopscore retrieve`'s output): its hits, best first, matched to the gold
    /// question's passages by title and text (a hit outside the gold pool is never gold).
    /// Give it several times to compare runs in one table (a row per run).
    #[arg(long, required = true)]
    pub pred: Vec<PathBuf>,
    /// A name per `--pred`, in order (default: each file's name without `.parquet`).
    #[arg(long)]
    pub name: Vec<String>,
    /// Also draw Recall@k against k (1 … the largest `--k`), a line per run, one panel
    /// for all questions and one per hop count, into this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Gold question file written by `hopscore import`.
    #[arg(long)]
    pub gold: PathBuf,
    /// Cut-offs for Recall@k and AR@k, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,5,10", value_parser = crate::options::values::positive_usize)]
    pub k: Vec<usize>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The prediction column holding the chain (e.g. `best_path` of `hopscore lepus`).
    #[arg(long, default_value = "chain")]
    pub chain_column: String,
}

/// One prediction file's report.
#[derive(Debug, Clone, Serialize)]
pub struct EvalRun {
    pub name: String,
    pub pred: PathBuf,
    #[serde(flatten)]
    pub report: EvalReport,
}

impl EvalArgs {
    /// The run names: `--name`, else each file's name without `.parquet`.
    fn names(&self) -> Result<Vec<String>> {
        if !self.name.is_empty() && self.name.len() != self.pred.len() {
            bail!(
                "{} --name for {} --pred: give one name per prediction file, in order",
                self.name.len(),
                self.pred.len()
            );
        }
        if !self.name.is_empty() {
            return Ok(self.name.clone());
        }
        let names: Vec<String> = self.pred.iter().map(|p| run_name(p)).collect();
        // Two files of one name (`a/ranked.parquet`, `b/ranked.parquet`) are told
        // apart by their folders.
        let repeated = |n: &String| names.iter().filter(|m| *m == n).count() > 1;
        Ok(names
            .iter()
            .zip(&self.pred)
            .map(|(name, pred)| match (repeated(name), pred.parent()) {
                (true, Some(dir)) if !dir.as_os_str().is_empty() => {
                    dir.join(name).to_string_lossy().into_owned()
                }
                _ => name.clone(),
            })
            .collect())
    }

    /// Whether the report is the one-run table (one `--pred` and no `--name`).
    pub fn single(&self) -> bool {
        self.pred.len() == 1 && self.name.is_empty()
    }
}

fn run_name(pred: &Path) -> String {
    let file = pred
        .file_name()
        .unwrap_or(pred.as_os_str())
        .to_string_lossy();
    file.strip_suffix(".parquet").unwrap_or(&file).to_string()
}

/// The largest `--k`, and the largest with `--plot` (which scores every cut-off up to
/// it).
const MAX_K: usize = 100_000;
const MAX_PLOT_K: usize = 1_000;

/// Runs `hopscore eval`: reads the gold file once, scores every `--pred`, and draws
/// `--plot` (see [`crate::metrics::eval::score_predictions`]).
pub fn run(args: &EvalArgs) -> Result<Vec<EvalRun>> {
    let names = args.names()?;
    for &k in &args.k {
        crate::options::at_most("k", k, MAX_K, "a cut-off past any pool")?;
        if args.plot.is_some() {
            crate::options::at_most(
                "k",
                k,
                MAX_PLOT_K,
                "with --plot every cut-off up to it is drawn",
            )?;
        }
    }
    if let Some(plot) = &args.plot {
        crate::metrics::plot::check_plot_path(plot)?;
        crate::metrics::plot::check_run_count(args.pred.len())?;
        let mut inputs = vec![Named::new("--gold", &args.gold)];
        inputs.extend(args.pred.iter().map(|p| Named::new("--pred", p)));
        check_outputs(&inputs, &[(Named::new("--plot", plot), Kind::File)])?;
    }
    let gold = GoldSet::read(&args.gold)?;
    // With a plot, one pass at every cut-off up to the largest serves the curves and,
    // cut down to `--k`, the table.
    let k_max = args.k.iter().copied().max().unwrap_or(1);
    let ks: Vec<usize> = match &args.plot {
        Some(_) => (1..=k_max).collect(),
        None => args.k.clone(),
    };
    let mut runs = names
        .iter()
        .zip(&args.pred)
        .map(|(name, pred)| {
            Ok(EvalRun {
                name: name.clone(),
                pred: pred.clone(),
                report: score_predictions(&gold, pred, &ks, &args.chain_column)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if let Some(plot) = &args.plot {
        let curves: Vec<(String, EvalReport)> = runs
            .iter()
            .map(|r| (r.name.clone(), r.report.clone()))
            .collect();
        crate::metrics::plot::write_recall_plot(plot, &curves)?;
        for run in &mut runs {
            keep_cutoffs(&mut run.report, &args.k);
        }
    }
    Ok(runs)
}

/// The report as a text table (one row for all questions, one per hop count).
pub fn table(r: &EvalReport) -> String {
    let mut out = format!(
        "gold questions: {} ({} bad rows skipped); prediction rows: {}\n",
        r.gold_questions, r.gold_bad_rows.count, r.prediction_rows
    );
    out += &problems(r, "");
    out += &columns(r, None);
    for (group, s) in groups(r) {
        out += &row(r, None, &group, s);
    }
    out + LEGEND
}

/// Several runs in one table: per group (all questions, then each hop count), a row
/// per run.
pub fn comparison_table(runs: &[EvalRun]) -> String {
    let Some(first) = runs.first() else {
        return String::new();
    };
    let width = runs.iter().map(|r| r.name.len()).max().unwrap_or(3).max(3) + 2;
    let mut out = format!(
        "gold questions: {} ({} bad rows skipped)\n",
        first.report.gold_questions, first.report.gold_bad_rows.count
    );
    for run in runs {
        out += &format!(
            "{}: {} prediction rows ({})\n",
            run.name,
            run.report.prediction_rows,
            run.pred.display()
        );
        out += &problems(&run.report, &format!("{}: ", run.name));
    }
    out += &columns(&first.report, Some(width));
    let mut hops: Vec<usize> = runs
        .iter()
        .flat_map(|r| r.report.by_hops.keys().copied())
        .collect();
    hops.sort_unstable();
    hops.dedup();
    let names = std::iter::once(None).chain(hops.into_iter().map(Some));
    for hop in names {
        for run in runs {
            let r = &run.report;
            let s = match hop {
                None => Some(&r.overall),
                Some(h) => r.by_hops.get(&h),
            };
            if let Some(s) = s {
                let group = hop.map_or("all".to_string(), |h| h.to_string());
                out += &row(r, Some((&run.name, width)), &group, s);
            }
        }
    }
    out + LEGEND
}

const LEGEND: &str = "EM/F1: retrieval over the first `hops` passages of the chain (order-free); \
                      R@k: every gold passage in the top k; AR@k: the answer in one of the top k\n";

/// The input problems of a report, each line after `prefix`.
fn problems(r: &EvalReport, prefix: &str) -> String {
    let mut out = String::new();
    for (name, p) in [
        ("missing predictions (scored 0)", &r.missing),
        ("invalid predictions (scored 0)", &r.invalid),
        ("unknown ids (ignored)", &r.unknown),
        ("repeated ids (first kept)", &r.repeated),
        ("bad gold rows", &r.gold_bad_rows),
    ] {
        if p.count > 0 {
            out += &format!(
                "{prefix}{name}: {}, e.g. {}\n",
                p.count,
                p.examples.join("; ")
            );
        }
    }
    out
}

/// Optional score pairs: (header, values of a group); shown when the overall row has them.
fn optional(s: &Scores) -> [(&'static str, Option<f64>, Option<f64>); 3] {
    [
        ("ans", s.answer_em, s.answer_f1),
        ("sp", s.sp_em, s.sp_f1),
        ("joint", s.joint_em, s.joint_f1),
    ]
}

/// (group name, scores): all questions, then each hop count.
fn groups(r: &EvalReport) -> impl Iterator<Item = (String, &Scores)> {
    std::iter::once(("all".to_string(), &r.overall))
        .chain(r.by_hops.iter().map(|(h, s)| (h.to_string(), s)))
}

/// The header line; `run`: the width of a leading run-name column.
fn columns(r: &EvalReport, run: Option<usize>) -> String {
    let mut header = run.map_or(String::new(), |w| format!("{:<w$}", "run"));
    header += &format!("{:<6}{:>9}{:>8}{:>8}", "hops", "questions", "EM", "F1");
    for k in &r.k {
        header += &format!("{:>8}", format!("R@{k}"));
    }
    for k in &r.k {
        header += &format!("{:>8}", format!("AR@{k}"));
    }
    for (name, em, _) in optional(&r.overall) {
        if em.is_some() {
            header += &format!("{:>10}{:>10}", format!("{name} EM"), format!("{name} F1"));
        }
    }
    header + "\n"
}

/// One table row; `run`: the run's name and the width of its column.
fn row(r: &EvalReport, run: Option<(&str, usize)>, group: &str, s: &Scores) -> String {
    let mut out = run.map_or(String::new(), |(name, w)| format!("{name:<w$}"));
    out += &format!(
        "{group:<6}{:>9}{:>8.4}{:>8.4}",
        s.questions, s.retrieval_em, s.retrieval_f1
    );
    for v in s.recall_at_k.values().chain(s.answer_recall_at_k.values()) {
        out += &format!("{v:>8.4}");
    }
    for ((_, shown, _), (_, em, f1)) in optional(&r.overall).iter().zip(optional(s)) {
        match (shown, em, f1) {
            (Some(_), Some(em), Some(f1)) => out += &format!("{em:>10.4}{f1:>10.4}"),
            (Some(_), _, _) => out += &format!("{:>10}{:>10}", "-", "-"),
            _ => {}
        }
    }
    out + "\n"
}
