//! Evaluation of a prediction file against a question file (`hopscore eval`).
//!
//! Per gold question: retrieval EM/F1 of the first `hops` distinct passages of the chain
//! (order-free), Recall@k, AR@k, answer EM/F1 when the predictions have an `answer`
//! column, and the official supporting-fact and joint scores when they have a
//! `supporting_facts` column; averaged over all questions and per hop count. A gold question without a
//! prediction (or with an unusable one) scores 0 everywhere and is reported. A
//! question file of ranked pools (`hopscore retrieve`'s output) is read as predictions
//! too: its hits are matched to the gold question's passages by title and text.
//!
//! The gold file is read once ([`GoldSet`]) for any number of prediction files
//! ([`score_predictions`]), which `hopscore eval` compares in one table.
//!
//! Denominators: retrieval EM/F1 and Recall@k count questions with at least one gold
//! passage; AR@k counts questions whose gold answer is a span (not yes/no/noanswer) and,
//! for HotpotQA, not of type `comparison` (as LEPUS does); answer EM/F1 count questions
//! with a gold answer; SP and joint count questions with gold supporting facts
//! (HotpotQA, 2Wiki).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use anyhow::{bail, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;
use arrow_schema::{DataType, Field};
use serde::Serialize;

use super::{
    answer_in_passage, answer_recall_at_k, best_answer_scores, is_closed_answer, joint,
    normalize_answer, recall_at_k, retrieval_scores, supporting_fact_scores,
};
use crate::io::parquet_io::{string_column, ParquetInput};
use crate::io::questions::{self, Dataset, Question, QuestionReader, SupportingFact};

/// Rows decoded at a time from either file.
const BATCH_ROWS: usize = 4096;
/// How many example ids the report lists for each kind of problem.
const EXAMPLES: usize = 5;

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
    /// Questions with gold supporting facts (denominator of SP and joint).
    pub sp_questions: u64,
    /// Present when the predictions have a `supporting_facts` column.
    pub sp_em: Option<f64>,
    pub sp_f1: Option<f64>,
    /// Present when the predictions have both `answer` and `supporting_facts`.
    pub joint_em: Option<f64>,
    pub joint_f1: Option<f64>,
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
    /// Per passage, a hash of its title and text, to read ranked pools
    /// (`hopscore retrieve`) without keeping the texts.
    passage_keys: Vec<u64>,
    facts: Option<Vec<SupportingFact>>,
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
        // A gold passage retrieval missed (`retrieve`'s output as gold) is gold no
        // chain can hold: an index past any pool.
        let missed = q.gold_not_retrieved().count();
        let mut supporting = q.supporting;
        supporting.extend((0..missed).map(|j| usize::MAX - j));
        Gold {
            passage_keys: q
                .passages
                .iter()
                .map(|p| passage_key(&p.title, &p.text))
                .collect(),
            hops: q
                .hops
                .filter(|&h| h >= 1)
                .map_or(supporting.len(), |h| h as usize),
            passages: q.passages.len(),
            supporting,
            id: q.id,
            answers,
            contains_answer,
            facts: q.supporting_facts,
        }
    }
}

/// A prediction row as read: the chain (`None` when it is null or holds a null), answer
/// and supporting facts.
struct Pred {
    chain: Option<Vec<i64>>,
    /// Whether each hit past the question's own passages (indices from
    /// `passages.len()` on, a ranked pool's hits outside the gold pool) holds the answer.
    outside_answer: Vec<bool>,
    answer: Option<String>,
    facts: Option<Vec<SupportingFact>>,
}

/// The optional columns the prediction file has.
#[derive(Clone, Copy)]
struct PredColumns {
    answer: bool,
    facts: bool,
}

/// What one question is scored on: the valid chain (`None` when missing or invalid),
/// the answer and the supporting facts.
#[derive(Clone, Copy)]
struct Scored<'a> {
    chain: Option<&'a [usize]>,
    /// Per chain index, whether that passage holds the answer (the gold pool's flags,
    /// then a ranked pool's hits outside it); `None` when AR does not apply.
    contains_answer: Option<&'a [bool]>,
    answer: Option<&'a str>,
    facts: Option<&'a [SupportingFact]>,
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
    sp_questions: u64,
    sp_em: f64,
    sp_f1: f64,
    joint_em: f64,
    joint_f1: f64,
}

impl Sums {
    /// Adds one question.
    fn add(&mut self, g: &Gold, p: Scored, ks: &[usize]) {
        let chain = p.chain.unwrap_or(&[]);
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
        if let Some(contains) = p.contains_answer {
            self.ar_questions += 1;
            for (sum, &k) in self.ar.iter_mut().zip(ks) {
                *sum += answer_recall_at_k(chain, contains, k);
            }
        }
        let answer =
            best_answer_scores(p.answer.unwrap_or(""), g.answers.iter().map(String::as_str));
        if let Some(a) = &answer {
            self.answers += 1;
            self.answer_em += a.em;
            self.answer_f1 += a.f1;
        }
        if let Some(gold_facts) = &g.facts {
            self.sp_questions += 1;
            let sp = supporting_fact_scores(pairs(p.facts.unwrap_or(&[])), pairs(gold_facts));
            self.sp_em += sp.em;
            self.sp_f1 += sp.f1;
            if let Some(a) = &answer {
                let j = joint(a, &sp);
                self.joint_em += j.em;
                self.joint_f1 += j.f1;
            }
        }
    }

    fn scores(&self, ks: &[usize], cols: PredColumns) -> Scores {
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
            answer_em: cols.answer.then(|| mean(self.answer_em, self.answers)),
            answer_f1: cols.answer.then(|| mean(self.answer_f1, self.answers)),
            sp_questions: self.sp_questions,
            sp_em: cols.facts.then(|| mean(self.sp_em, self.sp_questions)),
            sp_f1: cols.facts.then(|| mean(self.sp_f1, self.sp_questions)),
            joint_em: (cols.facts && cols.answer).then(|| mean(self.joint_em, self.sp_questions)),
            joint_f1: (cols.facts && cols.answer).then(|| mean(self.joint_f1, self.sp_questions)),
        }
    }
}

/// `(title, sentence index)` pairs of supporting facts, as the SP metric takes them.
fn pairs(facts: &[SupportingFact]) -> impl Iterator<Item = (&str, i32)> {
    facts.iter().map(|f| (f.title.as_str(), f.sent_idx))
}

/// Scores the predictions in `pred` against the question file `gold` at cut-offs `ks`.
pub fn evaluate(gold: &Path, pred: &Path, ks: &[usize]) -> Result<EvalReport> {
    evaluate_column(gold, pred, ks, "chain")
}

/// [`evaluate`] with the chains read from the prediction column `chain_column`.
pub fn evaluate_column(
    gold: &Path,
    pred: &Path,
    ks: &[usize],
    chain_column: &str,
) -> Result<EvalReport> {
    score_predictions(&GoldSet::read(gold)?, pred, ks, chain_column)
}

/// The gold questions of a question file, read once for any number of prediction
/// files ([`score_predictions`]).
pub struct GoldSet {
    golds: Vec<Gold>,
    /// Questions kept for scoring whose gold labels are unusable: skipped, reported.
    skipped: HashSet<String>,
    bad_rows: Problem,
}

impl GoldSet {
    /// The questions whose gold passages retrieval metrics score (R@k, EM, F1).
    pub fn retrieval_questions(&self) -> usize {
        self.golds
            .iter()
            .filter(|g| !g.supporting.is_empty())
            .count()
    }

    /// Reads the question file `gold`.
    pub fn read(gold: &Path) -> Result<Self> {
        let mut set = GoldSet {
            golds: Vec::new(),
            skipped: HashSet::new(),
            bad_rows: Problem::default(),
        };
        for (row, item) in (0u64..).zip(QuestionReader::open(gold, BATCH_ROWS)?) {
            match item? {
                Ok(q) if !q.gold_usable() => {
                    let why = q
                        .issues
                        .iter()
                        .find(|i| i.starts_with(questions::UNUSABLE_GOLD))
                        .cloned()
                        .or_else(|| q.gold_problems().into_iter().next())
                        .unwrap_or_default();
                    set.bad_rows
                        .add(|| format!("row {row} ({}): {why}; skipped", q.id));
                    set.skipped.insert(q.id);
                }
                Ok(q) => set.golds.push(Gold::new(q)),
                Err(bad) => set
                    .bad_rows
                    .add(|| format!("row {}: {}", bad.row, bad.reason)),
            }
        }
        Ok(set)
    }
}

/// Scores the predictions in `pred` (chains in `chain_column`) against `gold` at
/// cut-offs `ks`.
pub fn score_predictions(
    gold: &GoldSet,
    pred: &Path,
    ks: &[usize],
    chain_column: &str,
) -> Result<EvalReport> {
    if ks.is_empty() || ks.contains(&0) {
        bail!("--k needs positive cut-offs, e.g. --k 2,5,10");
    }
    let mut ks = ks.to_vec();
    ks.sort_unstable();
    ks.dedup();
    let ks = ks.as_slice();
    let mut report = EvalReport {
        k: ks.to_vec(),
        gold_bad_rows: gold.bad_rows.clone(),
        ..EvalReport::default()
    };
    let (golds, skipped) = (&gold.golds, &gold.skipped);
    report.gold_questions = golds.len() as u64;
    let gold_ids: HashMap<&str, usize> = golds
        .iter()
        .enumerate()
        .map(|(i, g)| (g.id.as_str(), i))
        .collect();
    let (preds, cols) = if is_ranked_pool(pred, chain_column)? {
        let none = PredColumns {
            answer: false,
            facts: false,
        };
        (
            read_ranked_pools(pred, golds, &gold_ids, skipped, &mut report)?,
            none,
        )
    } else {
        read_predictions(pred, chain_column, &gold_ids, skipped, &mut report)?
    };

    let mut overall = Sums::default();
    let mut by_hops: BTreeMap<usize, Sums> = BTreeMap::new();
    for (g, p) in golds.iter().zip(&preds) {
        let chain = match p {
            None => {
                report.missing.add(|| g.id.clone());
                None
            }
            Some(Pred { chain: None, .. }) => {
                report
                    .invalid
                    .add(|| format!("{}: chain is null or holds a null index", g.id));
                None
            }
            Some(Pred {
                chain: Some(c),
                outside_answer,
                ..
            }) => {
                let limit = g.passages + outside_answer.len();
                match c.iter().find(|&&i| i < 0 || i as usize >= limit) {
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
        let outside = p.as_ref().map_or(&[][..], |p| p.outside_answer.as_slice());
        let contains_answer: Option<Cow<[bool]>> = g.contains_answer.as_deref().map(|c| {
            if outside.is_empty() {
                Cow::Borrowed(c)
            } else {
                Cow::Owned(c.iter().chain(outside).copied().collect())
            }
        });
        let scored = Scored {
            chain: chain.as_deref(),
            contains_answer: contains_answer.as_deref(),
            answer: p.as_ref().and_then(|p| p.answer.as_deref()),
            facts: p.as_ref().and_then(|p| p.facts.as_deref()),
        };
        overall.add(g, scored, ks);
        by_hops.entry(g.hops).or_default().add(g, scored, ks);
    }
    report.overall = overall.scores(ks, cols);
    report.by_hops = by_hops
        .into_iter()
        .map(|(h, s)| (h, s.scores(ks, cols)))
        .collect();
    Ok(report)
}

/// `report` with only the cut-offs `ks` (a subset of those it was scored at) in its
/// R@k and AR@k: one scoring pass serves a table at some cut-offs and a curve at all.
pub fn keep_cutoffs(report: &mut EvalReport, ks: &[usize]) {
    report.k.retain(|k| ks.contains(k));
    for s in std::iter::once(&mut report.overall).chain(report.by_hops.values_mut()) {
        s.recall_at_k.retain(|k, _| ks.contains(k));
        s.answer_recall_at_k.retain(|k, _| ks.contains(k));
    }
}

/// A passage's identity across files: a hash of its title and text (SipHash with
/// fixed keys, so equal within and across runs of this build).
fn passage_key(title: &str, text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (title, text).hash(&mut h);
    h.finish()
}

/// Whether `pred` is a question file of ranked pools (`hopscore retrieve`'s output: no
/// `chain_column`, a `passages` column) rather than chains into the gold pools.
fn is_ranked_pool(pred: &Path, chain_column: &str) -> Result<bool> {
    let input = ParquetInput::open(pred, 1)?;
    Ok(input.schema.field_with_name(chain_column).is_err()
        && input.schema.field_with_name("passages").is_ok())
}

/// Reads a question file of ranked pools as predictions: each hit, best first, is the
/// gold question's passage with the same title and text, or (a passage outside the
/// gold pool) an index past the pool that is never gold, its answer flag taken from
/// its own text.
fn read_ranked_pools(
    path: &Path,
    golds: &[Gold],
    gold_ids: &HashMap<&str, usize>,
    skipped: &HashSet<String>,
    report: &mut EvalReport,
) -> Result<Vec<Option<Pred>>> {
    let mut preds: Vec<Option<Pred>> = (0..gold_ids.len()).map(|_| None).collect();
    let reader = QuestionReader::open(path, BATCH_ROWS)
        .with_context(|| format!("reading the ranked pools of {}", path.display()))?;
    for (row, item) in (0u64..).zip(reader) {
        report.prediction_rows += 1;
        let q = match item? {
            Ok(q) => q,
            Err(bad) => {
                report
                    .invalid
                    .add(|| format!("prediction row {row}: {}", bad.reason));
                continue;
            }
        };
        let Some(&at) = gold_ids.get(q.id.as_str()) else {
            if !skipped.contains(&q.id) {
                report.unknown.add(|| q.id.clone());
            }
            continue;
        };
        if preds[at].is_some() {
            report.repeated.add(|| q.id.clone());
            continue;
        }
        let gold = &golds[at];
        let mut outside_answer = Vec::new();
        let chain = q
            .passages
            .iter()
            .map(|p| {
                let key = passage_key(&p.title, &p.text);
                let found = gold.passage_keys.iter().position(|&k| k == key);
                let index = found.unwrap_or_else(|| {
                    let answers = gold.answers.iter().map(String::as_str);
                    outside_answer.push(answer_in_passage(&p.title, &p.text, answers));
                    gold.passages + outside_answer.len() - 1
                });
                index as i64
            })
            .collect();
        preds[at] = Some(Pred {
            chain: Some(chain),
            outside_answer,
            answer: None,
            facts: None,
        });
    }
    Ok(preds)
}

/// Reads the prediction file into a vector aligned with the gold questions; returns
/// which optional columns it has.
fn read_predictions(
    path: &Path,
    chain_column: &str,
    gold_ids: &HashMap<&str, usize>,
    skipped: &HashSet<String>,
    report: &mut EvalReport,
) -> Result<(Vec<Option<Pred>>, PredColumns)> {
    let mut input = ParquetInput::open(path, BATCH_ROWS)?;
    input.check_column("id", &["string"], true)?;
    let chain_type = input
        .schema
        .field_with_name(chain_column)
        .map_err(|_| {
            anyhow::anyhow!(
                "{} has no column `{chain_column}` (list of passage indices, best first)",
                path.display()
            )
        })?
        .data_type()
        .clone();
    let int_list = matches!(&chain_type, DataType::List(f) | DataType::LargeList(f) if f.data_type().is_integer());
    if !int_list {
        bail!(
            "column `{chain_column}` of {} has type {chain_type}; expected a list of integers (passage indices)",
            path.display()
        );
    }
    let cols = PredColumns {
        answer: input.check_column("answer", &["string"], false)?,
        facts: questions::check_column_type(&input.schema, "supporting_facts")
            .with_context(|| format!("reading predictions from {}", path.display()))?,
    };
    let chain_as = DataType::List(std::sync::Arc::new(Field::new(
        "item",
        DataType::Int64,
        true,
    )));
    let mut preds: Vec<Option<Pred>> = (0..gold_ids.len()).map(|_| None).collect();
    for batch in input.by_ref() {
        let batch = batch.with_context(|| format!("reading {}", path.display()))?;
        for bad in &batch.bad {
            report.prediction_rows += 1;
            report
                .invalid
                .add(|| format!("prediction row {}: {}", bad.row, bad.reason));
        }
        let batch = batch.batch;
        let ids = string_column(&batch, "id")?;
        let chains = arrow_cast::cast(
            batch.column_by_name(chain_column).expect("checked"),
            &chain_as,
        )?;
        let chains = chains.as_list::<i32>();
        let answers = cols
            .answer
            .then(|| string_column(&batch, "answer"))
            .transpose()?;
        let facts = questions::supporting_facts_column(&batch)?;
        for r in 0..batch.num_rows() {
            report.prediction_rows += 1;
            if ids.is_null(r) {
                report.unknown.add(|| "(null id)".to_string());
                continue;
            }
            let id = ids.value(r);
            let Some(&g) = gold_ids.get(id) else {
                if !skipped.contains(id) {
                    report.unknown.add(|| id.to_string());
                }
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
            let facts = match facts.as_ref().map(|f| questions::supporting_facts_at(f, r)) {
                Some(Err(why)) => {
                    report.invalid.add(|| format!("{id}: {why}"));
                    None
                }
                Some(Ok(f)) => f,
                None => None,
            };
            preds[g] = Some(Pred {
                chain,
                outside_answer: Vec::new(),
                answer,
                facts,
            });
        }
    }
    Ok((preds, cols))
}
