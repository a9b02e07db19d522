//! `hopscore label` end to end on real HotpotQA questions with the random EfficientRAG
//! fixtures: bad rows go to the quarantine file, the kept passages equal the Python
//! reference's (tests/fixtures/efficientrag/goldens.json), a run SIGKILLed at several
//! points and resumed writes the same bytes as an uninterrupted one, and `--corpus`
//! retrieves from one shared corpus (on a corpus made of one question's own passages it
//! repeats the pool run exactly).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, Int32Array, ListArray, RecordBatch, StringArray, StructArray};
use hopscore::io::questions::{Question, QuestionReader, QuestionWriter};
use parquet::arrow::ArrowWriter;

/// The first `n` HotpotQA questions of the slice (sample #0–#15 come first), imported;
/// `None` when the tokenizer is absent and skips are allowed.
fn questions(dir: &Path, n: usize) -> Option<Vec<Question>> {
    common::DEBERTA_V3_TOKENIZER.require()?;
    let src = common::data_file("hotpotqa");
    let all = dir.join("hotpot.parquet");
    let st = common::hopscore()
        .args(["import", "hotpotqa"])
        .arg(&src)
        .arg("-o")
        .arg(&all)
        .status()
        .unwrap();
    assert!(st.success(), "import failed");
    Some(
        QuestionReader::open(&all, 64)
            .unwrap()
            .take(n)
            .map(|r| r.unwrap().unwrap())
            .collect(),
    )
}

fn write_questions(path: &Path, qs: &[Question]) {
    let mut w = QuestionWriter::create(path, &[]).unwrap();
    w.write(qs).unwrap();
    w.finish().unwrap();
}

fn label(input: &Path, output: &Path, extra: &[&str]) -> Command {
    common::question_command(
        "label",
        &[
            ("--labeler", "efficientrag/labeler"),
            ("--filter", "efficientrag/filter"),
        ],
        input,
        output,
        extra,
    )
}

fn column<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .unwrap()
        .as_any()
        .downcast_ref::<T>()
        .unwrap()
}

/// Row `r` of a `list<utf8>` or `list<int32>` column, as strings.
fn list_at(col: &ListArray, r: usize) -> Vec<String> {
    let v: ArrayRef = col.value(r);
    if let Some(i) = v.as_any().downcast_ref::<Int32Array>() {
        i.values().iter().map(|x| x.to_string()).collect()
    } else {
        let s = v.as_any().downcast_ref::<StringArray>().unwrap();
        (0..s.len()).map(|k| s.value(k).to_string()).collect()
    }
}

/// Per row: per iteration (query, retrieved, tags, kept_text, next_query).
type Iterations = Vec<(
    String,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Option<String>,
)>;

fn iterations(b: &RecordBatch) -> Vec<Iterations> {
    let its = column::<ListArray>(b, "iterations");
    (0..b.num_rows())
        .map(|r| {
            let v = its.value(r);
            let s = v.as_any().downcast_ref::<StructArray>().unwrap();
            let col = |name: &str| s.column_by_name(name).unwrap().clone();
            let (query, next) = (col("query"), col("next_query"));
            let query = query.as_any().downcast_ref::<StringArray>().unwrap();
            let next = next.as_any().downcast_ref::<StringArray>().unwrap();
            let lists = |name: &str| {
                col(name)
                    .as_any()
                    .downcast_ref::<ListArray>()
                    .unwrap()
                    .clone()
            };
            let (ret, tags, kept) = (lists("retrieved"), lists("tags"), lists("kept_text"));
            (0..s.len())
                .map(|k| {
                    (
                        query.value(k).to_string(),
                        list_at(&ret, k),
                        list_at(&tags, k),
                        list_at(&kept, k),
                        (!next.is_null(k)).then(|| next.value(k).to_string()),
                    )
                })
                .collect()
        })
        .collect()
}

#[test]
fn bad_rows_are_quarantined_and_resumed_runs_write_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(mut qs) = questions(tmp.path(), 16) else {
        return;
    };
    qs[3].question = "  ".into();
    qs[9].passages.clear();
    let input = tmp.path().join("q.parquet");
    write_questions(&input, &qs);
    let args = ["--part-rows", "3", "--max-active", "4"];

    let whole = tmp.path().join("whole.parquet");
    assert!(label(&input, &whole, &args).status().unwrap().success());
    let out = common::read_parquet(&whole);
    let ids = column::<StringArray>(&out, "id");
    let good: Vec<usize> = (0..16).filter(|&i| i != 3 && i != 9).collect();
    assert_eq!(out.num_rows(), good.len());
    let q = common::read_parquet(&tmp.path().join("whole.quarantine.parquet"));
    let rows = column::<arrow_array::UInt64Array>(&q, "row");
    assert_eq!(rows.values().to_vec(), [3, 9]);
    let reasons = column::<StringArray>(&q, "reason");
    assert!(
        reasons.value(0).contains("question is empty"),
        "{}",
        reasons.value(0)
    );
    assert!(
        reasons.value(1).contains("no passages"),
        "{}",
        reasons.value(1)
    );

    // Kept passages and loop lengths equal the reference's (HotpotQA #0–#15, CLS pooling).
    let golden: serde_json::Value = common::fixture_json("efficientrag/goldens.json");
    let kept = column::<ListArray>(&out, "kept");
    let its = iterations(&out);
    let mut checked = 0;
    for g in golden["questions"].as_array().unwrap() {
        let index = g["index"].as_u64().unwrap() as usize;
        let Some(r) = good.iter().position(|&i| i == index) else {
            continue;
        };
        if g["dataset"] != "hotpotqa" || g["pooling"] != "cls" {
            continue;
        }
        assert_eq!(ids.value(r), g["id"].as_str().unwrap());
        let want: Vec<String> = g["kept"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.to_string())
            .collect();
        assert_eq!(list_at(kept, r), want, "question {index}");
        assert_eq!(its[r].len(), g["iterations"].as_array().unwrap().len());
        checked += 1;
    }
    assert_eq!(checked, 14);

    // Killed at several points and resumed: the same bytes.
    let resumed = tmp.path().join("resumed.parquet");
    let parts = tmp.path().join("resumed.parquet.parts");
    let (mut kills, mut resumes_with_parts) = (0, 0);
    let mut delay_ms = 80u64;
    loop {
        let mut cmd = label(&input, &resumed, &args);
        if parts.exists() {
            cmd.arg("--resume");
            resumes_with_parts += usize::from(parts.join("manifest.json").is_file());
        }
        let mut child = cmd.stderr(std::process::Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success());
            break;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        delay_ms += 90;
    }
    assert!(
        kills >= 1 && resumes_with_parts >= 1,
        "{kills} kills, {resumes_with_parts} resumes"
    );
    common::assert_resumed_equals_whole(tmp.path());
}

/// A corpus file of the passages of `qs`: id `"{question id}-{j}"`, title, text =
/// the sentences joined with spaces (so a chunk reads as in the pool).
fn write_corpus(path: &Path, qs: &[Question]) -> Vec<String> {
    let (mut ids, mut titles, mut texts) = (Vec::new(), Vec::new(), Vec::new());
    for q in qs {
        for (j, p) in q.passages.iter().enumerate() {
            ids.push(format!("{}-{j}", q.id));
            titles.push(p.title.clone());
            texts.push(p.sentences.as_ref().unwrap().join(" "));
        }
    }
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(StringArray::from(ids.clone())) as ArrayRef),
        ("title", Arc::new(StringArray::from(titles)) as ArrayRef),
        ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
    ])
    .unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    ids
}

#[test]
fn corpus_mode_searches_one_shared_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(qs) = questions(tmp.path(), 6) else {
        return;
    };
    let run = |qs: &[Question], corpus: Option<&PathBuf>, name: &str| -> RecordBatch {
        let input = tmp.path().join(format!("{name}.questions.parquet"));
        write_questions(&input, qs);
        let out = tmp.path().join(format!("{name}.parquet"));
        let mut cmd = label(&input, &out, &[]);
        if let Some(c) = corpus {
            cmd.arg("--corpus").arg(c);
        }
        assert!(cmd.status().unwrap().success());
        common::read_parquet(&out)
    };

    // A corpus of question #0's own passages repeats the pool run exactly.
    let own = tmp.path().join("own.corpus.parquet");
    let own_ids = write_corpus(&own, &qs[..1]);
    let pool = iterations(&run(&qs[..1], None, "pool"))[0].clone();
    let corpus = iterations(&run(&qs[..1], Some(&own), "own"))[0].clone();
    assert_eq!(pool.len(), corpus.len());
    for (p, c) in pool.iter().zip(&corpus) {
        let mapped: Vec<String> =
            p.1.iter()
                .map(|j| own_ids[j.parse::<usize>().unwrap()].clone())
                .collect();
        assert_eq!(c.1, mapped);
        assert_eq!((&p.0, &p.2, &p.3, &p.4), (&c.0, &c.2, &c.3, &c.4));
    }

    // One corpus for six questions: ids come from it, and questions reach passages
    // that belong to other questions.
    let shared = tmp.path().join("shared.corpus.parquet");
    let ids = write_corpus(&shared, &qs);
    let out = run(&qs, Some(&shared), "shared");
    assert_eq!(out.num_rows(), 6);
    let mut foreign = 0;
    for (r, its) in iterations(&out).iter().enumerate() {
        for it in its {
            assert!(!it.1.is_empty());
            for id in &it.1 {
                assert!(ids.contains(id), "{id} is not a corpus id");
                foreign += usize::from(!id.starts_with(&qs[r].id));
            }
        }
    }
    assert!(
        foreign > 0,
        "every retrieval stayed in the question's own passages"
    );
}

/// `--retriever dense`: each iteration's query embedded by the bi-encoder (MiniLM),
/// the pool's or the corpus's chunks ranked by inner product. The first iteration's
/// query is the question, so its retrieval must equal a brute-force ranking of the
/// library's vectors; a corpus run takes the corpus's vectors from `--index`.
#[test]
fn dense_retrieval_ranks_by_the_bi_encoder() {
    use hopscore::backend::cpu::CpuBackend;
    use hopscore::jobs::embed::{embedder, EmbedConfig};
    use hopscore::retrieve::dense::top_k_inner_product;
    let tmp = tempfile::tempdir().unwrap();
    let Some(qs) = questions(tmp.path(), 3) else {
        return;
    };
    let Some(minilm) = common::MINILM.require() else {
        return;
    };
    let encoder = minilm.parent().unwrap().to_path_buf();
    let enc = embedder(EmbedConfig::new(encoder.clone()), CpuBackend::F32).unwrap();
    let input = tmp.path().join("q.parquet");
    write_questions(&input, &qs);
    let dense = [
        "--retriever",
        "dense",
        "--top-k",
        "3",
        "--encoder",
        encoder.to_str().unwrap(),
    ];

    let out = tmp.path().join("pool.parquet");
    assert!(label(&input, &out, &dense).status().unwrap().success());
    for (q, its) in qs.iter().zip(iterations(&common::read_parquet(&out))) {
        let vectors = enc.embed_passages(&q.passages).unwrap();
        let query = enc.embed_texts(&[&q.question]).unwrap();
        let want: Vec<String> = top_k_inner_product(&query, &vectors, 3)
            .into_iter()
            .map(|(doc, _)| doc.to_string())
            .collect();
        assert_eq!(its[0].0, q.question);
        assert_eq!(its[0].1, want, "{}", q.id);
    }

    // Over a corpus: vectors from the index that `embed` wrote of the same file.
    let corpus = tmp.path().join("corpus.parquet");
    let ids = write_corpus(&corpus, &qs);
    let index = tmp.path().join("index.parquet");
    let st = common::hopscore()
        .arg("embed")
        .arg("--model")
        .arg(&encoder)
        .arg("--input")
        .arg(&corpus)
        .arg("--output")
        .arg(&index)
        .status()
        .unwrap();
    assert!(st.success());
    let out = tmp.path().join("corpus-run.parquet");
    let mut cmd = label(&input, &out, &dense);
    cmd.arg("--corpus").arg(&corpus).arg("--index").arg(&index);
    assert!(cmd.status().unwrap().success());
    let b = common::read_parquet(&out);
    let index_batch = common::read_parquet(&index);
    let list = index_batch.column_by_name("embedding").unwrap();
    let list = list
        .as_any()
        .downcast_ref::<arrow_array::FixedSizeListArray>()
        .unwrap();
    let values = list
        .values()
        .as_any()
        .downcast_ref::<arrow_array::Float32Array>()
        .unwrap();
    for (q, its) in qs.iter().zip(iterations(&b)) {
        let query = enc.embed_texts(&[&q.question]).unwrap();
        let want: Vec<String> = top_k_inner_product(&query, values.values(), 3)
            .into_iter()
            .map(|(row, _)| ids[row].clone())
            .collect();
        assert_eq!(its[0].1, want, "{}", q.id);
    }

    // A corpus run without the index is refused with what to do.
    let mut cmd = label(&input, &tmp.path().join("no-index.parquet"), &dense);
    let o = cmd.arg("--corpus").arg(&corpus).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--index"));
}

/// Issue 40: `label --retriever dense --index X` without `--corpus` ignored the index
/// (the loop retrieves from each question's own passages). Refused before anything
/// loads, saying what the index needs.
#[test]
fn an_index_without_a_corpus_is_refused() {
    if common::DEBERTA_V3_TOKENIZER.require().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("index.parquet");
    std::fs::write(&index, b"never read").unwrap();
    let encoder = common::fixture("bert/random_plain");
    let out = label(
        &tmp.path().join("q.parquet"),
        &tmp.path().join("o.parquet"),
        &[
            "--retriever",
            "dense",
            "--encoder",
            encoder.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--index is the vectors of a --corpus"),
        "{err}"
    );
}
