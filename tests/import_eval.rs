//! `hopscore import` on the real-data slices of tests/fixtures/data (exact counts), bad
//! records on hand-written files, and `hopscore eval` end to end with hand-computed
//! scores.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use hopscore::io::importer::{import, ImportOptions, ImportSummary};
use hopscore::io::parquet_io::{create_writer, string_column, ParquetInput};
use hopscore::io::questions::{to_batch, Dataset, Question, QuestionReader, SupportingFact};
use hopscore::metrics::eval::{evaluate, EvalReport};

fn import_files(dataset: Dataset, files: &[PathBuf], out: &Path) -> ImportSummary {
    import(&ImportOptions {
        dataset,
        files: files.to_vec(),
        output: out.to_path_buf(),
        quarantine: None,
        row_group_rows: 128,
    })
    .unwrap()
}

/// A real-data slice imported into a temporary folder.
struct Imported {
    dir: tempfile::TempDir,
    out: PathBuf,
    /// (records, questions, passages, quarantined, with issues)
    counts: (u64, u64, u64, u64, u64),
    questions: Vec<Question>,
}

/// Imports the slice `name` of tests/fixtures/data (see `common::data_file`).
fn import_slice(dataset: Dataset, name: &str) -> Imported {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{name}.parquet"));
    let s = import_files(dataset, &[common::data_file(name)], &out);
    let counts = (
        s.records,
        s.questions,
        s.passages,
        s.quarantined,
        s.with_issues,
    );
    let questions = read_questions(&out);
    Imported {
        dir,
        out,
        counts,
        questions,
    }
}

fn read_questions(path: &Path) -> Vec<Question> {
    QuestionReader::open(path, 100)
        .unwrap()
        .map(|r| r.unwrap().unwrap_or_else(|bad| panic!("bad row {bad:?}")))
        .collect()
}

fn hops_histogram(qs: &[Question]) -> Vec<(u32, usize)> {
    let mut h = std::collections::BTreeMap::new();
    for q in qs {
        *h.entry(q.hops.unwrap()).or_insert(0) += 1;
    }
    h.into_iter().collect()
}

/// Writes a prediction file: `(id, chain, answer)` rows.
fn write_pred(path: &Path, rows: &[(&str, Vec<i32>, Option<&str>)]) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new(
            "chain",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        ),
        Field::new("answer", DataType::Utf8, true),
    ]));
    let mut chains = ListBuilder::new(Int32Builder::new());
    for (_, c, _) in rows {
        chains.values().append_slice(c);
        chains.append(true);
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(chains.finish()),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.2))),
    ];
    let mut w = create_writer(path, schema.clone(), &[]).unwrap();
    w.write(&RecordBatch::try_new(schema, cols).unwrap())
        .unwrap();
    w.close().unwrap();
}

/// A prediction file with each question's `supporting` as the chain, its `answer` and
/// its `supporting_facts` (taken from the question-file columns).
fn write_pred_from_questions(path: &Path, qs: &[Question]) {
    let b = to_batch(qs).unwrap();
    let names = ["id", "supporting", "answer", "supporting_facts"];
    let cols: Vec<ArrayRef> = names
        .iter()
        .map(|n| b.column_by_name(n).unwrap().clone())
        .collect();
    let fields: Vec<Field> = names
        .iter()
        .map(|n| {
            let f = b.schema().field_with_name(n).unwrap().clone();
            if *n == "supporting" {
                f.with_name("chain")
            } else {
                f
            }
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let mut w = create_writer(path, schema.clone(), &[]).unwrap();
    w.write(&RecordBatch::try_new(schema, cols).unwrap())
        .unwrap();
    w.close().unwrap();
}

/// Predictions that are exactly the gold supporting passages of every question.
fn gold_chains(qs: &[Question]) -> Vec<(&str, Vec<i32>, Option<&str>)> {
    qs.iter()
        .map(|q| {
            let chain = q.supporting.iter().map(|&s| s as i32).collect();
            (q.id.as_str(), chain, q.answer.as_deref())
        })
        .collect()
}

// Expected totals were computed independently with python3, e.g. for HotpotQA:
//   python3 -c "import json,gzip; d=json.load(gzip.open('hotpot_dev_distractor_slice.json.gz'));
//     print(len(d), sum(len(q['context']) for q in d),
//           sum(sum(t in {s for s,_ in q['supporting_facts']} for t,_ in q['context']) for q in d))"
// (2Wiki the same; MuSiQue reads JSON lines and sums len(q['paragraphs']) and is_supporting).

#[test]
fn imports_the_hotpotqa_slice() {
    let imp = import_slice(Dataset::HotpotQa, "hotpotqa");
    // python3: 20 questions, 181 context paragraphs, 40 supporting paragraphs.
    assert_eq!(imp.counts, (20, 20, 181, 0, 0));
    let qs = &imp.questions;
    assert_eq!(qs.len(), 20);
    assert_eq!(qs.iter().map(|q| q.passages.len()).sum::<usize>(), 181);
    assert_eq!(qs.iter().map(|q| q.supporting.len()).sum::<usize>(), 40);
    assert_eq!(hops_histogram(qs), vec![(2, 20)]);
    // python3: min(len(q['context'])) == 2 (questions with fewer than 10 paragraphs are kept).
    assert_eq!(qs.iter().map(|q| q.passages.len()).min(), Some(2));
    // python3: 1 title contains "&amp;" (kept escaped, as the official SP gold has them).
    let escaped = qs
        .iter()
        .flat_map(|q| &q.passages)
        .filter(|p| p.title.contains("&amp;"))
        .count();
    assert_eq!(escaped, 1);
    // Text is the sentences joined without separator.
    for p in qs.iter().flat_map(|q| &q.passages) {
        assert_eq!(p.text, p.sentences.as_ref().unwrap().concat());
    }
}

#[test]
fn imports_the_2wiki_slice() {
    let imp = import_slice(Dataset::TwoWiki, "2wiki");
    // python3: 16 questions, 160 paragraphs, 36 supporting; one supporting fact
    // (Mario Bava, sentence 13 of 10) points past its passage.
    assert_eq!(imp.counts, (16, 16, 160, 0, 1));
    let qs = &imp.questions;
    assert_eq!(qs.iter().map(|q| q.passages.len()).sum::<usize>(), 160);
    assert_eq!(qs.iter().map(|q| q.supporting.len()).sum::<usize>(), 36);
    // python3: 2 questions of type bridge_comparison (4 hops), 14 others.
    assert_eq!(hops_histogram(qs), vec![(2, 14), (4, 2)]);
    let odd = qs.iter().find(|q| !q.issues.is_empty()).unwrap();
    assert_eq!(odd.id, "c049b0240bdd11eba7f7acde48001122");
    assert!(
        odd.issues[0].contains("(\"Mario Bava\", 13) points past the 10 sentences"),
        "{:?}",
        odd.issues
    );
    assert!(odd
        .supporting_facts
        .as_ref()
        .unwrap()
        .iter()
        .any(|f| f.sent_idx == 13));
}

#[test]
fn imports_the_musique_slice_and_gold_chains_score_one() {
    let imp = import_slice(Dataset::Musique, "musique");
    // python3: 20 questions, 400 paragraphs, 56 supporting.
    assert_eq!(imp.counts, (20, 20, 400, 0, 0));
    let (dir, out, qs) = (&imp.dir, &imp.out, &imp.questions);
    assert_eq!(qs.iter().map(|q| q.supporting.len()).sum::<usize>(), 56);
    // python3: id prefixes 2hop 10, 3hop1 3 + 3hop2 1, 4hop1 3 + 4hop3 3.
    assert_eq!(hops_histogram(qs), vec![(2, 10), (3, 4), (4, 6)]);
    assert!(qs.iter().all(|q| q.supporting.len() == q.hop_count()));

    let pred = dir.path().join("pred.parquet");
    write_pred(&pred, &gold_chains(qs));
    let r = evaluate(out, &pred, &[2, 5]).unwrap();
    assert_eq!((r.overall.retrieval_em, r.overall.retrieval_f1), (1.0, 1.0));
    // R@2 finds every gold passage only for the 10 two-hop questions.
    assert_eq!(r.overall.recall_at_k[&2], 0.5);
    assert_eq!(r.overall.recall_at_k[&5], 1.0);
    assert_eq!(r.by_hops[&3].recall_at_k[&2], 0.0);
    assert_eq!(
        (r.overall.answer_em, r.overall.answer_f1),
        (Some(1.0), Some(1.0))
    );
    assert_eq!(
        (r.missing.count, r.invalid.count, r.unknown.count),
        (0, 0, 0)
    );
}

#[test]
fn hotpotqa_gold_chains_score_one_and_missing_ids_score_zero() {
    let imp = import_slice(Dataset::HotpotQa, "hotpotqa");
    let (dir, out, qs) = (&imp.dir, &imp.out, &imp.questions);
    let pred = dir.path().join("pred.parquet");
    let mut rows = gold_chains(qs);
    for r in &mut rows {
        r.1.reverse(); // order-free
    }
    write_pred(&pred, &rows);
    let r = evaluate(out, &pred, &[2, 10]).unwrap();
    assert_eq!(
        (
            r.overall.questions,
            r.overall.retrieval_em,
            r.overall.retrieval_f1
        ),
        (20, 1.0, 1.0)
    );
    assert_eq!(r.overall.recall_at_k[&2], 1.0);
    assert_eq!((r.overall.sp_em, r.overall.joint_em), (None, None));

    // The gold supporting facts and answers as predictions: SP and joint are 1 too.
    write_pred_from_questions(&pred, qs);
    let r = evaluate(out, &pred, &[2]).unwrap();
    let o = &r.overall;
    assert_eq!(
        (o.sp_questions, o.sp_em, o.sp_f1),
        (20, Some(1.0), Some(1.0))
    );
    assert_eq!(
        (o.joint_em, o.joint_f1, o.answer_em),
        (Some(1.0), Some(1.0), Some(1.0))
    );

    // Drop every third prediction: 7 missing questions score 0.
    let kept: Vec<_> = rows
        .iter()
        .cloned()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, r)| r)
        .collect();
    write_pred(&pred, &kept);
    let r = evaluate(out, &pred, &[2]).unwrap();
    assert_eq!(r.missing.count, 7);
    assert!((r.overall.retrieval_em - 13.0 / 20.0).abs() < 1e-12);
    assert!((r.overall.answer_f1.unwrap() - 13.0 / 20.0).abs() < 1e-12);
}

/// HotpotQA-format records: two good ones, six bad ones, one kept with an issue.
const HANDWRITTEN: &str = r#"[
 {"_id": "good1", "question": "Which band?", "answer": "The Beatles", "type": "bridge", "level": "easy",
  "context": [["P0", ["The Beatles were ", "a band."]], ["P1", ["Liverpool is a city."]], ["P2", ["Noise."]], ["P3", ["More noise."]]],
  "supporting_facts": [["P0", 0], ["P1", 0]]},
 {"_id": "noq", "answer": "x", "context": [["P0", ["a"]]], "supporting_facts": []},
 {"_id": "nopass", "question": "Q?", "answer": "x", "context": [], "supporting_facts": []},
 {"_id": "nulltext", "question": "Q?", "answer": "x", "context": [["P0", null]], "supporting_facts": []},
 {"_id": "wrongtype", "question": 42, "answer": "x", "context": [["P0", ["a"]]], "supporting_facts": []},
 {"_id": "badtitle", "question": "Q?", "answer": "x", "context": [["P0", ["a"]]], "supporting_facts": [["Nope", 0]]},
 {"_id": "badsent", "question": "Is it?", "answer": "yes", "type": "comparison",
  "context": [["A", ["One."]], ["B", ["Two."]], ["C", ["Three."]], ["D", ["Four."]]],
  "supporting_facts": [["A", 0], ["C", 5]]},
 {"_id": "good1", "question": "Repeat?", "answer": "x", "context": [["P0", ["a"]]], "supporting_facts": []},
 {"_id": "good2", "question": "Who founded it?", "answer": "John Lennon", "type": "bridge",
  "context": [["Q0", ["Noise."]], ["Q1", ["It was founded by John Lennon."]], ["Q2", ["Other."]], ["Q3", ["The band."]]],
  "supporting_facts": [["Q1", 0], ["Q3", 0]]}
]"#;

#[test]
fn bad_records_are_quarantined_with_reasons_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("hand.json");
    std::fs::write(&input, HANDWRITTEN).unwrap();
    let out = dir.path().join("q.parquet");
    let s = import_files(Dataset::HotpotQa, &[input], &out);
    assert_eq!(
        (s.records, s.questions, s.quarantined, s.with_issues),
        (9, 4, 5, 2)
    );
    assert_eq!(s.quarantine_path, dir.path().join("q.quarantine.parquet"));

    let mut q = ParquetInput::open(&s.quarantine_path, 100).unwrap();
    let batch = q.next().unwrap().unwrap().batch;
    let ids = string_column(&batch, "id").unwrap();
    let reasons = string_column(&batch, "reason").unwrap();
    let got: Vec<(&str, &str)> = (0..batch.num_rows())
        .map(|i| (ids.value(i), reasons.value(i)))
        .collect();
    let expected = [
        ("noq", "record 1: `question` is missing"),
        ("nopass", "record 2: the question has no passages"),
        ("nulltext", "record 3: passage 0 (\"P0\") has null text"),
        (
            "wrongtype",
            "record 4: `question` is a number, expected a string",
        ),
        ("good1", "record 7: repeated id (first seen in "),
    ];
    assert_eq!(got.len(), expected.len());
    for ((id, reason), (want_id, want)) in got.iter().zip(expected) {
        assert_eq!(*id, want_id);
        assert!(reason.contains(want), "{reason:?} lacks {want:?}");
        assert!(
            reason.contains("hand.json"),
            "{reason:?} does not name the file"
        );
    }

    let qs = read_questions(&out);
    let ids: Vec<&str> = qs.iter().map(|q| q.id.as_str()).collect();
    // A gold title no passage has: kept (scoring does not read gold labels), noted.
    assert_eq!(ids, ["good1", "badtitle", "badsent", "good2"]);
    assert!(!qs[1].gold_usable());
    assert!(qs[1].issues[0].contains("supporting fact title \"Nope\" is not the title"));
    assert_eq!(qs[2].supporting, vec![0, 2]);
    assert!(qs[2].issues[0].contains("(\"C\", 5) points past the 1 sentences"));
}

#[test]
fn musique_lines_with_broken_json_are_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.jsonl");
    let good = r#"{"id": "2hop__1_2", "question": "Q?", "answer": "a", "answer_aliases": [], "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": "x", "is_supporting": true}, {"idx": 1, "title": "U", "paragraph_text": "y", "is_supporting": true}]}"#;
    std::fs::write(
        &input,
        format!(
            "{good}\n{{\"id\": \"broken\"\n\n{}\n",
            good.replace("2hop__1_2", "2hop__3_4")
        ),
    )
    .unwrap();
    let s = import_files(Dataset::Musique, &[input], &dir.path().join("m.parquet"));
    assert_eq!(
        (s.records, s.questions, s.passages, s.quarantined),
        (3, 2, 4, 1)
    );
}

#[test]
fn eval_scores_shuffled_and_partial_chains_as_hand_computed() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("hand.json");
    std::fs::write(&input, HANDWRITTEN).unwrap();
    let gold = dir.path().join("q.parquet");
    import_files(Dataset::HotpotQa, &[input], &gold);
    // Gold: good1 supporting {0, 1}, answer "The Beatles"; badsent {0, 2}, "yes",
    // comparison (no AR); good2 {1, 3}, "John Lennon".
    let pred = dir.path().join("pred.parquet");
    write_pred(
        &pred,
        &[
            // Shuffled but complete: EM 1, F1 1, R@2 1; AR@2 1 (P0 holds "The Beatles").
            ("good1", vec![1, 0, 3], Some("Beatles")),
            // One of two right in the first two: EM 0, P = R = F1 = 1/2; R@2 0, R@3 1;
            // AR@2 1 (Q1 holds "John Lennon"). Answer "Lennon": P 1, R 1/2, F1 2/3.
            ("good2", vec![1, 0, 3], Some("Lennon")),
            ("stranger", vec![0], None),
        ],
    );
    let r: EvalReport = evaluate(&gold, &pred, &[3, 2]).unwrap();
    // badsent has no prediction: scored 0.
    assert_eq!(
        (r.missing.count, r.missing.examples.clone()),
        (1, vec!["badsent".to_string()])
    );
    assert_eq!((r.unknown.count, r.prediction_rows), (1, 3));
    assert_eq!(r.k, vec![2, 3]);
    let o = &r.overall;
    assert_eq!(
        (
            o.questions,
            o.retrieval_questions,
            o.answer_recall_questions
        ),
        (3, 3, 2)
    );
    assert!((o.retrieval_em - 1.0 / 3.0).abs() < 1e-12);
    assert!((o.retrieval_f1 - 1.5 / 3.0).abs() < 1e-12);
    assert!((o.recall_at_k[&2] - 1.0 / 3.0).abs() < 1e-12);
    assert!((o.recall_at_k[&3] - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(o.answer_recall_at_k[&2], 1.0);
    assert!((o.answer_em.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    assert!((o.answer_f1.unwrap() - (1.0 + 2.0 / 3.0) / 3.0).abs() < 1e-12);
    assert_eq!(r.by_hops.keys().copied().collect::<Vec<_>>(), vec![2]);

    // A chain naming a passage the question lacks is invalid and scores 0.
    write_pred(&pred, &[("good1", vec![0, 9], None)]);
    let r = evaluate(&gold, &pred, &[2]).unwrap();
    assert_eq!(
        (r.invalid.count, r.missing.count, r.overall.retrieval_em),
        (1, 2, 0.0)
    );
    // The `answer` column is present but null: answers score 0 rather than vanish.
    assert_eq!(r.overall.answer_em, Some(0.0));
}

/// Runs `cmd`; panics with its stderr unless it succeeds.
fn run_ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn cli_import_and_eval_json() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("hand.json");
    std::fs::write(&input, HANDWRITTEN).unwrap();
    let gold = dir.path().join("q.parquet");
    let bin = env!("CARGO_BIN_EXE_hopscore");
    let st = run_ok(
        std::process::Command::new(bin)
            .args(["import", "hotpotqa"])
            .arg(&input)
            .arg("-o")
            .arg(&gold),
    );
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(
        stderr.contains("imported 4 questions") && stderr.contains("5 quarantined"),
        "{stderr}"
    );
    let pred = dir.path().join("pred.parquet");
    write_pred(
        &pred,
        &[
            ("good1", vec![0, 1], None),
            ("badsent", vec![2, 0], None),
            ("good2", vec![3, 1], None),
        ],
    );
    let st = run_ok(
        std::process::Command::new(bin)
            .args(["eval", "--json", "--k", "2", "--pred"])
            .arg(&pred)
            .arg("--gold")
            .arg(&gold),
    );
    let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(v["overall"]["retrieval_em"], 1.0);
    assert_eq!(v["overall"]["recall_at_k"]["2"], 1.0);
    assert_eq!(v["missing"]["count"], 0);

    // The table: a header with the cut-offs, then all questions and one row per hop count.
    write_pred(&pred, &[("good1", vec![0, 1], Some("the beatles"))]);
    let st = run_ok(
        std::process::Command::new(bin)
            .args(["eval", "--k", "2,3", "--pred"])
            .arg(&pred)
            .arg("--gold")
            .arg(&gold),
    );
    let table = String::from_utf8_lossy(&st.stdout);
    eprintln!("{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[1].starts_with("missing predictions (scored 0): 2, e.g. badsent; good2"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("bad gold rows: 1, e.g. row 1 (badtitle): unusable gold labels"),
        "{table}"
    );
    let header: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "hops",
            "questions",
            "EM",
            "F1",
            "R@2",
            "R@3",
            "AR@2",
            "AR@3",
            "ans",
            "EM",
            "ans",
            "F1"
        ]
    );
    let all: Vec<&str> = lines[4].split_whitespace().collect();
    assert_eq!(
        all,
        [
            "all", "3", "0.3333", "0.3333", "0.3333", "0.3333", "0.5000", "0.5000", "0.3333",
            "0.3333"
        ]
    );
    assert!(lines[5].starts_with("2 "), "{table}");
}

#[test]
fn eval_supporting_fact_and_joint_scores_as_hand_computed() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("hand.json");
    std::fs::write(&input, HANDWRITTEN).unwrap();
    let gold = dir.path().join("q.parquet");
    import_files(Dataset::HotpotQa, &[input], &gold);
    let mut qs = read_questions(&gold);
    // eval skips the question whose gold labels are unusable.
    qs.retain(|q| q.gold_usable());
    let fact = |t: &str, i| SupportingFact {
        title: t.into(),
        sent_idx: i,
    };
    // good1: gold facts {(P0,0), (P1,0)}; predicted {(P0,0), (P1,1), (P2,0)}: tp 1, fp 2,
    // fn 1 → SP P 1/3, R 1/2, F1 0.4. Answer "Beatles band" vs "The Beatles": P 1/2, R 1,
    // F1 2/3. Joint P 1/6, R 1/2 → F1 1/4.
    qs[0].supporting_facts = Some(vec![fact("P0", 0), fact("P1", 1), fact("P2", 0)]);
    qs[0].answer = Some("Beatles band".into());
    // badsent: exact facts (in another order) and answer → SP, joint EM 1. good2: no row.
    qs[1].supporting_facts.as_mut().unwrap().reverse();
    write_pred_from_questions(&dir.path().join("pred.parquet"), &qs[..2]);
    let r = evaluate(&gold, &dir.path().join("pred.parquet"), &[2]).unwrap();
    let o = &r.overall;
    let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-12;
    assert_eq!((o.sp_questions, r.missing.count), (3, 1));
    assert!(
        close(o.sp_em, 1.0 / 3.0) && close(o.sp_f1, 1.4 / 3.0),
        "{o:?}"
    );
    assert!(
        close(o.joint_em, 1.0 / 3.0) && close(o.joint_f1, 1.25 / 3.0),
        "{o:?}"
    );
    assert!(
        close(o.answer_em, 1.0 / 3.0) && close(o.answer_f1, (2.0 / 3.0 + 1.0) / 3.0),
        "{o:?}"
    );
}

/// `hopscore eval` over the HotpotQA slice with several `--pred`: the one table and the
/// JSON list give each run's single-run numbers; `--plot` draws a line per run in a
/// panel per hop count; a question file of ranked pools (`hopscore retrieve`'s output)
/// scores as the chains of its hits' gold indices, a hit outside the pool a non-gold
/// rank.
#[test]
fn eval_compares_runs_in_one_table_and_plots_them() {
    let imp = import_slice(Dataset::HotpotQa, "hotpotqa");
    let dir = imp.dir.path();
    let bin = env!("CARGO_BIN_EXE_hopscore");
    // Run a: the gold passages last; run b: the pool as imported.
    let last: Vec<(&str, Vec<i32>, Option<&str>)> = imp
        .questions
        .iter()
        .map(|q| {
            let n = q.passages.len() as i32;
            let mut chain: Vec<i32> = (0..n)
                .filter(|i| !q.supporting.contains(&(*i as usize)))
                .collect();
            chain.extend(q.supporting.iter().map(|&s| s as i32));
            (q.id.as_str(), chain, None)
        })
        .collect();
    let in_order: Vec<(&str, Vec<i32>, Option<&str>)> = imp
        .questions
        .iter()
        .map(|q| (q.id.as_str(), (0..q.passages.len() as i32).collect(), None))
        .collect();
    let (a, b) = (dir.join("a.parquet"), dir.join("b.parquet"));
    write_pred(&a, &last);
    write_pred(&b, &in_order);
    // Run c: ranked pools, each question's passages reversed with a passage of
    // another question at rank 2 (outside the pool: never gold).
    let mut pools = imp.questions.clone();
    let stranger = imp.questions[0].passages[0].clone();
    let mut reversed_chains = Vec::new();
    for (i, q) in pools.iter_mut().enumerate() {
        let n = q.passages.len();
        q.passages.reverse();
        let mut outsider = stranger.clone();
        outsider.title = format!("{} (elsewhere {i})", outsider.title);
        q.passages.insert(1, outsider);
        q.supporting = q
            .supporting
            .iter()
            .map(|&s| if n - 1 - s >= 1 { n - s } else { n - 1 - s })
            .collect();
        let mut chain: Vec<i32> = (0..n as i32).rev().collect();
        chain.insert(1, n as i32); // one index past the pool: a non-gold rank
        reversed_chains.push(chain);
    }
    let c = dir.join("c.parquet");
    let mut w = create_writer(&c, to_batch(&pools).unwrap().schema(), &[]).unwrap();
    w.write(&to_batch(&pools).unwrap()).unwrap();
    w.close().unwrap();

    let single = |pred: &Path| -> serde_json::Value {
        let out = run_ok(
            std::process::Command::new(bin)
                .args(["eval", "--json", "--k", "1,2,5,10", "--pred"])
                .arg(pred)
                .arg("--gold")
                .arg(&imp.out),
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (ja, jb, jc) = (single(&a), single(&b), single(&c));
    // Gold last: found only once the cut-off reaches every passage of the pool.
    let found_by = |k: usize| {
        let with_gold = imp.questions.iter().filter(|q| !q.supporting.is_empty());
        let hits = with_gold.clone().filter(|q| q.passages.len() <= k).count();
        hits as f64 / with_gold.count() as f64
    };
    for k in [1, 2, 5, 10] {
        let got = ja["overall"]["recall_at_k"][k.to_string()]
            .as_f64()
            .unwrap();
        assert!((got - found_by(k)).abs() < 1e-12, "R@{k} {got}");
    }

    // The ranked pools score as their chains would: a pool of n + 1 passages whose
    // hits are the gold pool reversed with a non-gold hit at rank 2.
    let mut expected = 0.0;
    let mut counted = 0.0;
    for (q, chain) in imp.questions.iter().zip(&reversed_chains) {
        if q.supporting.is_empty() {
            continue;
        }
        counted += 1.0;
        let top: Vec<usize> = chain.iter().take(5).map(|&i| i as usize).collect();
        if q.supporting.iter().all(|s| top.contains(s)) {
            expected += 1.0;
        }
    }
    let got = jc["overall"]["recall_at_k"]["5"].as_f64().unwrap();
    assert!(
        (got - expected / counted).abs() < 1e-12,
        "R@5 {got} vs {}",
        expected / counted
    );
    assert_eq!(jc["invalid"]["count"], 0);
    assert_eq!(jc["missing"]["count"], 0);

    let plot = dir.join("recall.svg");
    let many = |json: bool| {
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["eval", "--k", "1,2,5,10", "--gold"])
            .arg(&imp.out)
            .arg("--pred")
            .arg(&a)
            .arg("--pred")
            .arg(&b)
            .arg("--pred")
            .arg(&c)
            .args([
                "--name",
                "gold-last",
                "--name",
                "in-order",
                "--name",
                "pools",
            ]);
        if json {
            cmd.arg("--json");
        } else {
            cmd.arg("--plot").arg(&plot);
        }
        run_ok(&mut cmd).stdout
    };
    let list: serde_json::Value = serde_json::from_slice(&many(true)).unwrap();
    for (i, (name, one)) in [("gold-last", &ja), ("in-order", &jb), ("pools", &jc)]
        .iter()
        .enumerate()
    {
        assert_eq!(list[i]["name"], *name);
        for key in ["overall", "by_hops", "missing", "prediction_rows"] {
            assert_eq!(list[i][key], one[key], "{name}: {key}");
        }
    }
    let table = String::from_utf8(many(false)).unwrap();
    for (name, one) in [("gold-last", &ja), ("in-order", &jb), ("pools", &jc)] {
        let row: Vec<&str> = table
            .lines()
            .find(|l| {
                l.starts_with(&format!("{name} ")) && l.split_whitespace().nth(1) == Some("all")
            })
            .unwrap_or_else(|| panic!("{table}"))
            .split_whitespace()
            .collect();
        let o = &one["overall"];
        let want: Vec<String> = [
            o["retrieval_em"].as_f64(),
            o["retrieval_f1"].as_f64(),
            o["recall_at_k"]["1"].as_f64(),
            o["recall_at_k"]["2"].as_f64(),
            o["recall_at_k"]["5"].as_f64(),
            o["recall_at_k"]["10"].as_f64(),
        ]
        .iter()
        .map(|v| format!("{:.4}", v.unwrap()))
        .collect();
        assert_eq!(row[3..9], want[..], "{name}: {table}");
        assert_eq!(row[2], o["questions"].to_string());
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    let hops = ja["by_hops"].as_object().unwrap().len();
    let run_lines = svg
        .split("<polyline")
        .filter(|p| p.contains("stroke-width=\"2\""))
        .count();
    assert_eq!(
        run_lines,
        3 * 3 * (1 + hops),
        "a line and a legend mark (two strokes) per run and panel"
    );
    assert!(svg.contains("gold-last") && svg.contains("all questions"));
}
