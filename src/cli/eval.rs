//! `hopscore eval`: the arguments of [`crate::metrics::eval`] and the report as a table.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::metrics::eval::{evaluate_column, EvalReport, Scores};

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// Predictions: Parquet with `id` (string), `chain` (list of integers: passage
    /// indices into the question's `passages`, best first) and optionally `answer` (string)
    /// and `supporting_facts` (list<struct<title: string, sent_idx: int>>, as in the
    /// question file) for the official SP and joint scores.
    #[arg(long)]
    pub pred: PathBuf,
    /// Gold question file written by `hopscore import`.
    #[arg(long)]
    pub gold: PathBuf,
    /// Cut-offs for Recall@k and AR@k, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,5,10", value_parser = super::flags::positive_usize)]
    pub k: Vec<usize>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The prediction column holding the chain (e.g. `best_path` of `hopscore lepus`).
    #[arg(long, default_value = "chain")]
    pub chain_column: String,
}

/// Runs `hopscore eval` (see [`crate::metrics::eval::evaluate`]).
pub fn run(args: &EvalArgs) -> Result<EvalReport> {
    evaluate_column(&args.gold, &args.pred, &args.k, &args.chain_column)
}

/// The report as a text table (one row for all questions, one per hop count).
pub fn table(r: &EvalReport) -> String {
    let mut out = format!(
        "gold questions: {} ({} bad rows skipped); prediction rows: {}\n",
        r.gold_questions, r.gold_bad_rows.count, r.prediction_rows
    );
    for (name, p) in [
        ("missing predictions (scored 0)", &r.missing),
        ("invalid predictions (scored 0)", &r.invalid),
        ("unknown ids (ignored)", &r.unknown),
        ("repeated ids (first kept)", &r.repeated),
        ("bad gold rows", &r.gold_bad_rows),
    ] {
        if p.count > 0 {
            out += &format!("{name}: {}, e.g. {}\n", p.count, p.examples.join("; "));
        }
    }
    // Optional score pairs: (header, values of a group); shown when the overall row has them.
    let optional = |s: &Scores| {
        [
            ("ans", s.answer_em, s.answer_f1),
            ("sp", s.sp_em, s.sp_f1),
            ("joint", s.joint_em, s.joint_f1),
        ]
    };
    let mut header = format!("{:<6}{:>9}{:>8}{:>8}", "hops", "questions", "EM", "F1");
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
    out += &header;
    out.push('\n');
    let rows = std::iter::once(("all".to_string(), &r.overall))
        .chain(r.by_hops.iter().map(|(h, s)| (h.to_string(), s)));
    for (name, s) in rows {
        out += &format!(
            "{name:<6}{:>9}{:>8.4}{:>8.4}",
            s.questions, s.retrieval_em, s.retrieval_f1
        );
        for v in s.recall_at_k.values().chain(s.answer_recall_at_k.values()) {
            out += &format!("{v:>8.4}");
        }
        for (_, em, f1) in optional(s) {
            if let (Some(em), Some(f1)) = (em, f1) {
                out += &format!("{em:>10.4}{f1:>10.4}");
            }
        }
        out.push('\n');
    }
    out += "EM/F1: retrieval over the first `hops` passages of the chain (order-free); \
            R@k: every gold passage in the top k; AR@k: the answer in one of the top k\n";
    out
}
