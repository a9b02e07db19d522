//! `hopscore eval`: scores predicted passage chains (and answers) against a question file.
//!
//! Per gold question: retrieval EM/F1 of the first `hops` distinct passages of the chain
//! (order-free), Recall@k, AR@k, and answer EM/F1 when the predictions have an `answer`
//! column; averaged over all questions and per hop count. A gold question without a
//! prediction (or with an unusable one) scores 0 everywhere and is reported.
//!
//! Denominators: retrieval EM/F1 and Recall@k count questions with at least one gold
//! passage; AR@k counts questions whose gold answer is a span (not yes/no/noanswer) and,
//! for HotpotQA, not of type `comparison` (as LEPUS does); answer EM/F1 count questions
//! with a gold answer.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Field, Int64Type};
use clap::Args;
use serde::Serialize;

use crate::io::parquet_io::{string_column, ParquetInput};
use crate::io::questions::{Dataset, Question, QuestionReader};
use crate::metrics::{
    answer_in_passage, answer_recall_at_k, best_answer_scores, is_closed_answer, normalize_answer,
    recall_at_k, retrieval_scores,
};

/// Rows decoded at a time from either file.
const BATCH_ROWS: usize = 4096;
/// How many example ids the report lists for each kind of problem.
const EXAMPLES: usize = 5;

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// Predictions: Parquet with `id` (string), `chain` (list of integers: passage
    /// indices into the question's `passages`, best first) and optionally `answer` (string).
    #[arg(long)]
    pub pred: PathBuf,
    /// Gold question file written by `hopscore import`.
    #[arg(long)]
    pub gold: PathBuf,
    /// Cut-offs for Recall@k and AR@k, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2,5,10")]
    pub k: Vec<usize>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Averages over one group of questions (all, or one hop count).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Scores {
    pub questions: u64,
    /// Questions with at least one gold passage (denominator of the next four).
    pub retrieval_questions: u64,
    pub retrieval_em: f64,
    pub retrieval_f1: f64,
    /// k → Recall@k.
    pub recall_at_k: BTreeMap<usize, f64>,
    /// Questions with a span answer (denominator of AR@k).
    pub answer_recall_questions: u64,
    /// k → AR@k.
    pub answer_recall_at_k: BTreeMap<usize, f64>,
    /// Questions with a gold answer (denominator of answer EM/F1).
    pub answer_questions: u64,
    /// Present when the predictions have an `answer` column.
    pub answer_em: Option<f64>,
    pub answer_f1: Option<f64>,
}

/// Problems with the inputs, counted (with a few example ids) rather than fatal.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Problem {
    pub count: u64,
    pub examples: Vec<String>,
}

impl Problem {
    fn add(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(what());
        }
    }
}

/// The full `eval` result.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct EvalReport {
    pub gold_questions: u64,
    /// Gold rows that break a question-file invariant (skipped).
    pub gold_bad_rows: Problem,
    pub prediction_rows: u64,
    /// Gold questions with no prediction: scored 0.
    pub missing: Problem,
    /// Predictions whose chain is null or names a passage the question lacks: scored 0.
    pub invalid: Problem,
    /// Prediction ids not in the gold file (ignored).
    pub unknown: Problem,
    /// Prediction ids given more than once (the first is used).
    pub repeated: Problem,
    pub k: Vec<usize>,
    pub overall: Scores,
    /// Hop count → scores of the questions with that many hops.
    pub by_hops: BTreeMap<usize, Scores>,
}

/// What scoring needs from a gold question.
struct Gold {
    id: String,
    hops: usize,
    supporting: Vec<usize>,
    passages: usize,
    answers: Vec<String>,
    /// Per passage, whether it holds the answer; `None` when AR does not apply.
    contains_answer: Option<Vec<bool>>,
}

impl Gold {
    fn new(q: Question) -> Self {
        let answers: Vec<String> = q.answer.iter().chain(&q.answer_aliases).cloned().collect();
        let span = q
            .answer
            .as_deref()
            .map(normalize_answer)
            .is_some_and(|a| !a.is_empty() && !is_closed_answer(&a));
        let comparison =
            q.dataset == Dataset::HotpotQa && q.question_type.as_deref() == Some("comparison");
        let contains_answer = (span && !comparison).then(|| {
            q.passages
                .iter()
                .map(|p| answer_in_passage(&p.title, &p.text, answers.iter().map(String::as_str)))
                .collect()
        });
        Gold {
            hops: q.hop_count(),
            passages: q.passages.len(),
            supporting: q.supporting,
            id: q.id,
            answers,
            contains_answer,
        }
    }
}

/// A prediction row: the chain (or why it is unusable) and the answer.
struct Pred {
    chain: Option<Vec<i64>>,
    answer: Option<String>,
}

/// Sums for one group; turned into [`Scores`] at the end.
#[derive(Default)]
struct Sums {
    questions: u64,
    retrieval: u64,
    em: f64,
    f1: f64,
    recall: Vec<f64>,
    ar_questions: u64,
    ar: Vec<f64>,
    answers: u64,
    answer_em: f64,
    answer_f1: f64,
}

impl Sums {
    /// Adds one question; `chain` is `None` for a missing or invalid prediction.
    fn add(&mut self, g: &Gold, chain: Option<&[usize]>, answer: Option<&str>, ks: &[usize]) {
        let chain = chain.unwrap_or(&[]);
        self.questions += 1;
        self.recall.resize(ks.len(), 0.0);
        self.ar.resize(ks.len(), 0.0);
        if !g.supporting.is_empty() {
            self.retrieval += 1;
            let s = retrieval_scores(chain, &g.supporting, g.hops);
            self.em += s.em;
            self.f1 += s.f1;
            for (sum, &k) in self.recall.iter_mut().zip(ks) {
                *sum += recall_at_k(chain, &g.supporting, k);
            }
        }
        if let Some(contains) = &g.contains_answer {
            self.ar_questions += 1;
            for (sum, &k) in self.ar.iter_mut().zip(ks) {
                *sum += answer_recall_at_k(chain, contains, k);
            }
        }
        if !g.answers.is_empty() {
            self.answers += 1;
            if let Some(s) =
                best_answer_scores(answer.unwrap_or(""), g.answers.iter().map(String::as_str))
            {
                self.answer_em += s.em;
                self.answer_f1 += s.f1;
            }
        }
    }

    fn scores(&self, ks: &[usize], with_answers: bool) -> Scores {
        let mean = |sum: f64, n: u64| if n > 0 { sum / n as f64 } else { 0.0 };
        let per_k = |sums: &[f64], n: u64| {
            ks.iter()
                .zip(sums.iter().chain(std::iter::repeat(&0.0)))
                .map(|(&k, &s)| (k, mean(s, n)))
                .collect()
        };
        Scores {
            questions: self.questions,
            retrieval_questions: self.retrieval,
            retrieval_em: mean(self.em, self.retrieval),
            retrieval_f1: mean(self.f1, self.retrieval),
            recall_at_k: per_k(&self.recall, self.retrieval),
            answer_recall_questions: self.ar_questions,
            answer_recall_at_k: per_k(&self.ar, self.ar_questions),
            answer_questions: self.answers,
            answer_em: with_answers.then(|| mean(self.answer_em, self.answers)),
            answer_f1: with_answers.then(|| mean(self.answer_f1, self.answers)),
        }
    }
}

pub fn run(args: &EvalArgs) -> Result<EvalReport> {
    evaluate(&args.gold, &args.pred, &args.k)
}

/// Scores the predictions in `pred` against the question file `gold` at cut-offs `ks`.
pub fn evaluate(gold: &Path, pred: &Path, ks: &[usize]) -> Result<EvalReport> {
    if ks.is_empty() || ks.contains(&0) {
        bail!("--k needs positive cut-offs, e.g. --k 2,5,10");
    }
    let mut ks = ks.to_vec();
    ks.sort_unstable();
    ks.dedup();
    let ks = ks.as_slice();
    let mut report = EvalReport {
        k: ks.to_vec(),
        ..EvalReport::default()
    };
    let mut golds = Vec::new();
    for row in QuestionReader::open(gold, BATCH_ROWS)? {
        match row? {
            Ok(q) => golds.push(Gold::new(q)),
            Err(bad) => report
                .gold_bad_rows
                .add(|| format!("row {}: {}", bad.row, bad.reason)),
        }
    }
    report.gold_questions = golds.len() as u64;
    let gold_ids: HashMap<&str, usize> = golds
        .iter()
        .enumerate()
        .map(|(i, g)| (g.id.as_str(), i))
        .collect();
    let (preds, with_answers) = read_predictions(pred, &gold_ids, &mut report)?;

    let mut overall = Sums::default();
    let mut by_hops: BTreeMap<usize, Sums> = BTreeMap::new();
    for (g, p) in golds.iter().zip(&preds) {
        let chain = match p {
            None => {
                report.missing.add(|| g.id.clone());
                None
            }
            Some(Pred { chain: None, .. }) => {
                report.invalid.add(|| format!("{}: chain is null", g.id));
                None
            }
            Some(Pred { chain: Some(c), .. }) => {
                match c.iter().find(|&&i| i < 0 || i as usize >= g.passages) {
                    Some(bad) => {
                        report.invalid.add(|| {
                            format!("{}: passage {bad} (the question has {})", g.id, g.passages)
                        });
                        None
                    }
                    None => Some(c.iter().map(|&i| i as usize).collect::<Vec<_>>()),
                }
            }
        };
        let answer = p.as_ref().and_then(|p| p.answer.as_deref());
        overall.add(g, chain.as_deref(), answer, ks);
        by_hops
            .entry(g.hops)
            .or_default()
            .add(g, chain.as_deref(), answer, ks);
    }
    report.overall = overall.scores(ks, with_answers);
    report.by_hops = by_hops
        .into_iter()
        .map(|(h, s)| (h, s.scores(ks, with_answers)))
        .collect();
    Ok(report)
}

/// Reads the prediction file into a vector aligned with the gold questions; returns
/// whether it has an `answer` column.
fn read_predictions(
    path: &Path,
    gold_ids: &HashMap<&str, usize>,
    report: &mut EvalReport,
) -> Result<(Vec<Option<Pred>>, bool)> {
    let mut input = ParquetInput::open(path, BATCH_ROWS)?;
    input.check_column("id", &["string"], true)?;
    let chain_type = input
        .schema
        .field_with_name("chain")
        .map_err(|_| {
            anyhow::anyhow!(
                "{} has no column `chain` (list of passage indices, best first)",
                path.display()
            )
        })?
        .data_type()
        .clone();
    let int_list = matches!(&chain_type, DataType::List(f) | DataType::LargeList(f) if f.data_type().is_integer());
    if !int_list {
        bail!(
            "column `chain` of {} has type {chain_type}; expected a list of integers (passage indices)",
            path.display()
        );
    }
    let with_answers = input.check_column("answer", &["string"], false)?;
    let chain_as = DataType::List(std::sync::Arc::new(Field::new(
        "item",
        DataType::Int64,
        true,
    )));
    let mut preds: Vec<Option<Pred>> = (0..gold_ids.len()).map(|_| None).collect();
    for batch in input.reader.by_ref() {
        let batch = batch.with_context(|| format!("reading {}", path.display()))?;
        let ids = string_column(&batch, "id")?;
        let chains =
            arrow::compute::cast(batch.column_by_name("chain").expect("checked"), &chain_as)?;
        let chains = chains.as_list::<i32>();
        let answers = with_answers
            .then(|| string_column(&batch, "answer"))
            .transpose()?;
        for r in 0..batch.num_rows() {
            report.prediction_rows += 1;
            if ids.is_null(r) {
                report.unknown.add(|| "(null id)".to_string());
                continue;
            }
            let id = ids.value(r);
            let Some(&g) = gold_ids.get(id) else {
                report.unknown.add(|| id.to_string());
                continue;
            };
            if preds[g].is_some() {
                report.repeated.add(|| id.to_string());
                continue;
            }
            let chain = (!chains.is_null(r))
                .then(|| {
                    let values = chains.value(r);
                    let values = values.as_primitive::<Int64Type>();
                    (values.null_count() == 0).then(|| values.values().to_vec())
                })
                .flatten();
            let answer = answers
                .as_ref()
                .filter(|a| !a.is_null(r))
                .map(|a| a.value(r).to_string());
            preds[g] = Some(Pred { chain, answer });
        }
    }
    Ok((preds, with_answers))
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
    let with_answers = r.overall.answer_em.is_some();
    let mut header = format!("{:<6}{:>9}{:>8}{:>8}", "hops", "questions", "EM", "F1");
    for k in &r.k {
        header += &format!("{:>8}", format!("R@{k}"));
    }
    for k in &r.k {
        header += &format!("{:>8}", format!("AR@{k}"));
    }
    if with_answers {
        header += &format!("{:>8}{:>8}", "ans EM", "ans F1");
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
        if let (Some(em), Some(f1)) = (s.answer_em, s.answer_f1) {
            out += &format!("{em:>8.4}{f1:>8.4}");
        }
        out.push('\n');
    }
    out
}
