//! `hopscore embed` and `hopscore retrieve` end to end:
//!
//! - embed with all-MiniLM-L6-v2 (fetched by tools/fetch_minilm.sh): the 60 golden
//!   texts of tests/fixtures/bert/minilm as passage rows equal sentence-transformers'
//!   vectors (f32 ≤ 1e-5, float16 ≤ 1e-3), bad rows go to quarantine with their reason;
//! - parts, `--resume` and shards + merge give the bytes of a whole run;
//! - retrieve over the passages of the HotpotQA slice: dense top-k equal a brute-force
//!   inner product over the index, BM25 equals the BM25 index, hybrid their reciprocal
//!   rank fusion; gold passages carry over and the recall the run reports is the one
//!   its output gives.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, AsArray, FixedSizeListArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Float16Type, Float32Type, Schema};
use hopscore::backend::cpu::CpuBackend;
use hopscore::io::questions::{Question, QuestionReader};
use hopscore::jobs::embed::{embedder, EmbedConfig};
use hopscore::retrieve::dense::reciprocal_rank_fusion;
use hopscore::retrieve::Corpus;
use parquet::arrow::ArrowWriter;

/// A passage row: `(id, title, text)`, each may be null.
type Row = (Option<String>, Option<String>, Option<String>);

/// A passage file of `rows`.
fn write_passages(path: &Path, rows: &[Row]) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("title", DataType::Utf8, true),
        Field::new("text", DataType::Utf8, true),
    ]));
    let col =
        |f: fn(&Row) -> Option<String>| Arc::new(StringArray::from_iter(rows.iter().map(f))) as _;
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            col(|r| r.0.clone()),
            col(|r| r.1.clone()),
            col(|r| r.2.clone()),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// The golden texts as passage rows `t0`, `t1`, …: a question as text alone, a
/// passage as title and text.
fn golden_rows() -> Vec<Row> {
    common::minilm_golden_texts()
        .into_iter()
        .enumerate()
        .map(|(i, (title, body))| (Some(format!("t{i}")), title, Some(body)))
        .collect()
}

/// The `embedding` column as rows of f32.
fn vectors(batch: &RecordBatch) -> Vec<Vec<f32>> {
    let list: &FixedSizeListArray = batch
        .column_by_name("embedding")
        .unwrap()
        .as_fixed_size_list();
    let dim = list.value_length() as usize;
    let values: Vec<f32> = match list.values().data_type() {
        DataType::Float32 => list
            .values()
            .as_primitive::<Float32Type>()
            .values()
            .to_vec(),
        DataType::Float16 => list
            .values()
            .as_primitive::<Float16Type>()
            .values()
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        other => panic!("{other}"),
    };
    values.chunks(dim).map(<[f32]>::to_vec).collect()
}

fn ids(batch: &RecordBatch) -> Vec<String> {
    let c = batch.column_by_name("id").unwrap().as_string::<i32>();
    (0..c.len()).map(|i| c.value(i).to_string()).collect()
}

fn minilm_dir() -> Option<PathBuf> {
    Some(common::MINILM.require()?.parent().unwrap().to_path_buf())
}

fn embed(model: &Path, input: &Path, output: &Path, extra: &[&str]) -> std::process::Output {
    common::hopscore()
        .arg("embed")
        .arg("--model")
        .arg(model)
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn embed_matches_sentence_transformers_and_quarantines_bad_rows() {
    let Some(model) = minilm_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut rows = golden_rows();
    // Bad rows between the good ones: a null id, an empty text, a null text.
    rows.insert(3, (None, None, Some("no id".into())));
    rows.insert(
        10,
        (Some("empty".into()), Some("T".into()), Some("  ".into())),
    );
    rows.insert(20, (Some("null".into()), None, None));
    let input = tmp.path().join("passages.parquet");
    write_passages(&input, &rows);
    let g = common::read_golden(&common::fixture("bert/minilm/golden.safetensors"));
    let want: Vec<&[f32]> = g["embeddings"].f32.chunks(384).collect();

    for (name, extra, tol) in [("f32", &[][..], 1e-5), ("f16", &["--float16"][..], 1e-3)] {
        let output = tmp.path().join(format!("{name}.parquet"));
        let out = embed(&model, &input, &output, extra);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let batch = common::read_parquet(&output);
        let expected_ids: Vec<String> = (0..60).map(|i| format!("t{i}")).collect();
        assert_eq!(ids(&batch), expected_ids, "good rows in input order");
        let got = vectors(&batch);
        let worst = got
            .iter()
            .zip(&want)
            .flat_map(|(a, b)| a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()))
            .fold(0f32, f32::max);
        assert!(worst <= tol, "{name}: max |Δ| {worst}");
        let meta = common::key_values(&output);
        assert_eq!(meta["hopscore.pooling"], "mean");
        assert_eq!(meta["hopscore.normalize"], "true");
        assert_eq!(meta["hopscore.max_length"], "256");
        assert_eq!(meta["hopscore.embedding_dim"], "384");
    }
    let q = common::read_parquet(&tmp.path().join("f32.quarantine.parquet"));
    let reasons = q.column_by_name("reason").unwrap().as_string::<i32>();
    let reasons: Vec<&str> = (0..q.num_rows()).map(|i| reasons.value(i)).collect();
    assert_eq!(reasons, ["id is null", "text is empty", "text is null"]);
}

/// Parts committed and resumed, and shards merged, give a whole run's bytes (random
/// BERT of the fixtures, word tokenizer).
#[test]
fn embed_parts_resume_and_shards_keep_the_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = common::word_tokenizer(tmp.path());
    let rows: Vec<_> = (0..23)
        .map(|i| {
            let text = format!("w{} w{} w{}", i + 3, i * 7 % 90 + 3, i % 5 + 3);
            let title = (i % 3 == 0).then(|| format!("w{}", 900 + i));
            (Some(format!("p{i}")), title, (i != 11).then_some(text))
        })
        .collect();
    let input = tmp.path().join("passages.parquet");
    write_passages(&input, &rows);
    let model = common::fixture("bert/random_plain");
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec![
            "--tokenizer",
            tokenizer.to_str().unwrap(),
            "--max-batch-tokens",
            "40",
        ];
        args.extend_from_slice(extra);
        embed(
            &model,
            &input,
            &tmp.path().join(format!("{name}.parquet")),
            &args,
        )
    };
    assert!(run("whole", &[]).status.success());
    // The final merge fails (the quarantine path is under a file): the parts stay.
    let blocker = tmp.path().join("blocker");
    std::fs::write(&blocker, b"a file").unwrap();
    let q = blocker.join("q.parquet");
    let failed = run(
        "parts",
        &["--part-rows", "7", "--quarantine", q.to_str().unwrap()],
    );
    assert!(!failed.status.success());
    assert!(tmp
        .path()
        .join("parts.parquet.parts/manifest.json")
        .is_file());
    assert!(run("parts", &["--part-rows", "7", "--resume"])
        .status
        .success());
    common::assert_parts_equal_whole(tmp.path());

    for i in 0..3 {
        assert!(run(&format!("s{i}"), &["--shard", &format!("{i}/3")])
            .status
            .success());
    }
    common::assert_merged_shards_equal_whole(tmp.path(), 3);
    assert_eq!(
        common::read_parquet(&tmp.path().join("whole.parquet")).num_rows(),
        22
    );
}

fn read_questions(path: &Path) -> Vec<Question> {
    QuestionReader::open(path, 64)
        .unwrap()
        .map(|r| r.unwrap().unwrap())
        .collect()
}

/// `passage_ids` and `scores` of a retrieve run's scores file.
fn retrieval(path: &Path) -> Vec<(Vec<String>, Vec<f32>)> {
    let b = common::read_parquet(path);
    let pids = b.column_by_name("passage_ids").unwrap().as_list::<i32>();
    let scores = b.column_by_name("scores").unwrap().as_list::<i32>();
    (0..b.num_rows())
        .map(|r| {
            let p = pids.value(r);
            let p = p.as_string::<i32>();
            let s = scores.value(r);
            (
                (0..p.len()).map(|i| p.value(i).to_string()).collect(),
                s.as_primitive::<Float32Type>().values().to_vec(),
            )
        })
        .collect()
}

#[test]
fn retrieve_ranks_as_its_references_and_carries_gold() {
    let Some(model) = minilm_dir() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let questions = tmp.path().join("q.parquet");
    let status = common::hopscore()
        .args(["import", "hotpotqa"])
        .arg(common::data_file("hotpotqa"))
        .arg("--output")
        .arg(&questions)
        .status()
        .unwrap();
    assert!(status.success());
    let input = read_questions(&questions);
    // The pooled passages, id = title (unique in the slice).
    let mut seen = HashSet::new();
    let rows: Vec<_> = input
        .iter()
        .flat_map(|q| q.passages.iter())
        .filter(|p| seen.insert(p.title.clone()))
        .map(|p| {
            (
                Some(p.title.clone()),
                Some(p.title.clone()),
                Some(p.text.clone()),
            )
        })
        .collect();
    let corpus = tmp.path().join("corpus.parquet");
    write_passages(&corpus, &rows);
    let index = tmp.path().join("index.parquet");
    let out = embed(&model, &corpus, &index, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let k = 5;
    let run = |retriever: &str| {
        let output = tmp.path().join(format!("{retriever}.parquet"));
        let out = common::hopscore()
            .arg("retrieve")
            .args(["--retriever", retriever, "--k", &k.to_string()])
            .arg("--questions")
            .arg(&questions)
            .arg("--corpus")
            .arg(&corpus)
            .arg("--index")
            .arg(&index)
            .arg("--encoder")
            .arg(&model)
            .arg("--output")
            .arg(&output)
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{log}");
        let scores = retrieval(&tmp.path().join(format!("{retriever}.retrieval.parquet")));
        (read_questions(&output), scores, log)
    };

    // Dense: brute force over the index with the library's query vectors.
    let index_batch = common::read_parquet(&index);
    let (pids, pvecs) = (ids(&index_batch), vectors(&index_batch));
    let enc = embedder(EmbedConfig::new(model.clone()), CpuBackend::F32).unwrap();
    let seqs: Vec<_> = input
        .iter()
        .map(|q| enc.encode(&q.question).unwrap())
        .collect();
    let qvecs = enc.embed(&seqs).unwrap();
    let dense_rank = |qi: usize, depth: usize| -> Vec<(String, f32)> {
        let q = &qvecs[qi * 384..(qi + 1) * 384];
        let mut s: Vec<(usize, f32)> = pvecs
            .iter()
            .enumerate()
            .map(|(i, v)| (i, v.iter().zip(q).map(|(a, b)| a * b).sum()))
            .collect();
        s.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        s.into_iter()
            .take(depth)
            .map(|(i, x)| (pids[i].clone(), x))
            .collect()
    };
    let (dense, dense_scores, log) = run("dense");
    for (qi, (got_ids, got_scores)) in dense_scores.iter().enumerate() {
        let want = dense_rank(qi, k);
        let want_ids: Vec<String> = want.iter().map(|w| w.0.clone()).collect();
        assert_eq!(got_ids, &want_ids, "question {qi}");
        for (g, w) in got_scores.iter().zip(&want) {
            assert!(
                (g - w.1).abs() <= 1e-5,
                "question {qi}: score {g} vs {}",
                w.1
            );
        }
    }
    // Gold carried over by passage; recall as reported.
    let mut recall2 = 0.0;
    for (q_in, q_out) in input.iter().zip(&dense) {
        let gold: HashSet<&str> = q_in
            .supporting
            .iter()
            .map(|&i| q_in.passages[i].title.as_str())
            .collect();
        let found: Vec<usize> = (0..q_out.passages.len())
            .filter(|&i| gold.contains(q_out.passages[i].title.as_str()))
            .collect();
        assert_eq!(q_out.supporting, found, "{}", q_in.id);
        assert_eq!(
            q_out
                .issues
                .iter()
                .filter(|i| i.contains("was not retrieved"))
                .count(),
            gold.len() - found.len()
        );
        recall2 += found.iter().filter(|&&i| i < 2).count() as f64 / gold.len() as f64;
    }
    let reported = format!("R@2 {:.4}", recall2 / input.len() as f64);
    assert!(log.contains(&reported), "{reported} not in: {log}");

    // BM25: the index over the corpus.
    let lexical = Corpus::from_parquet(&corpus).unwrap();
    let bm25_rank = |q: &str, depth: usize| -> Vec<String> {
        lexical
            .index
            .search(q, depth)
            .into_iter()
            .map(|h| lexical.ids[h.doc].clone())
            .collect()
    };
    let (_, bm25_scores, _) = run("bm25");
    for (q, (got, _)) in input.iter().zip(&bm25_scores) {
        assert_eq!(got, &bm25_rank(&q.question, k), "{}", q.id);
    }
    // Hybrid: reciprocal rank fusion of both, 100 deep.
    let (_, hybrid_scores, _) = run("hybrid");
    for (qi, (q, (got, _))) in input.iter().zip(&hybrid_scores).enumerate() {
        let dense_ids = dense_rank(qi, 100).into_iter().map(|x| x.0).collect();
        let fused = reciprocal_rank_fusion(&[dense_ids, bm25_rank(&q.question, 100)], 60.0, k);
        let want: Vec<String> = fused.into_iter().map(|x| x.0).collect();
        assert_eq!(got, &want, "{}", q.id);
    }
}

/// An index embedded by one model and queried with another (here: the same weights
/// under an edited config.json) is refused before any question is read.
#[test]
fn retrieve_refuses_an_index_of_another_model() {
    let tmp = tempfile::tempdir().unwrap();
    let tokenizer = common::word_tokenizer(tmp.path());
    let corpus = tmp.path().join("corpus.parquet");
    write_passages(&corpus, &[(Some("a".into()), None, Some("w5 w6".into()))]);
    let index = tmp.path().join("index.parquet");
    let model = common::fixture("bert/random_plain");
    let tok = ["--tokenizer", tokenizer.to_str().unwrap()];
    let out = embed(&model, &corpus, &index, &tok);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(
        model.join("model.safetensors"),
        other.join("model.safetensors"),
    )
    .unwrap();
    let mut config = common::fixture_json("bert/random_plain/config.json");
    config["note"] = "a copy".into();
    std::fs::write(other.join("config.json"), config.to_string()).unwrap();
    let out = common::hopscore()
        .arg("retrieve")
        .arg("--questions")
        .arg(tmp.path().join("not-read.parquet"))
        .arg("--corpus")
        .arg(&corpus)
        .arg("--index")
        .arg(&index)
        .arg("--encoder")
        .arg(&other)
        .args(tok)
        .arg("--output")
        .arg(tmp.path().join("out.parquet"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("embedded with another model"), "{err}");
}
