//! `hopscore embed` and `hopscore retrieve` end to end:
//!
//! - embed with all-MiniLM-L6-v2 (fetched by tools/fetch_minilm.sh): the 60 golden
//!   texts of tests/fixtures/bert/minilm as passage rows equal sentence-transformers'
//!   vectors (f32 ≤ 1e-5, float16 ≤ 1e-3), bad rows go to quarantine with their reason;
//! - parts, `--resume` and shards + merge give the bytes of a whole run;
//! - retrieve over the passages of the HotpotQA slice: dense top-k equal a brute-force
//!   inner product over the index, BM25 equals the BM25 index, hybrid their reciprocal
//!   rank fusion; gold passages carry over and the recall the run reports is the one
//!   its output gives; the job for batches (`hopscore.Retrieve`) gives the output
//!   file's rows and the scores file's scores, and records every option.

use crate::common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float16Type, Float32Type};
use arrow_array::{Array, FixedSizeListArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use hopscore::backend::cpu::CpuBackend;
use hopscore::io::questions::{Question, QuestionReader};
use hopscore::jobs::embed::{embedder, EmbedConfig};
use hopscore::jobs::retrieve::{RetrieveConfig, Retriever};
use hopscore::jobs::{build, DeviceConfig, JobConfig, Stream};
use hopscore::options::Options;
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
        let config = RetrieveConfig {
            corpus: corpus.clone(),
            index: vec![index.clone()],
            encoder: Some(model.clone()),
            retriever: match retriever {
                "dense" => Retriever::Dense,
                "bm25" => Retriever::Bm25,
                _ => Retriever::Hybrid,
            },
            k,
            ..RetrieveConfig::defaults()
        };
        assert_batches_give_the_files(config, &questions, &output, &scores);
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
        assert_eq!(q_out.gold_not_retrieved().count(), gold.len() - found.len());
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

/// The retrieve job for batches over the question file `questions`: the rows of the
/// CLI's `output` and, as `retrieval_scores`, the scores of its scores file; its
/// metadata names every option of `config` and holds the file's entries for them.
fn assert_batches_give_the_files(
    config: RetrieveConfig,
    questions: &Path,
    output: &Path,
    scores: &[(Vec<String>, Vec<f32>)],
) {
    let options = common::option_names(&config);
    let mut job = Stream::new(build(JobConfig::new(config), &DeviceConfig::CPU).unwrap());
    let out = job.process(&common::read_parquet(questions)).unwrap();
    let file = common::read_parquet(output);
    assert_eq!(out.rows.num_columns(), file.num_columns() + 1);
    for (i, field) in file.schema().fields().iter().enumerate() {
        assert_eq!(
            out.rows.column(i).as_ref(),
            file.column(i).as_ref(),
            "{}",
            field.name()
        );
    }
    let got = out
        .rows
        .column_by_name("retrieval_scores")
        .unwrap()
        .as_list::<i32>();
    for (r, (_, want)) in scores.iter().enumerate() {
        let row = got.value(r);
        assert_eq!(row.as_primitive::<Float32Type>().values().to_vec(), *want);
    }
    let footer = common::key_values(output);
    let meta: std::collections::HashMap<_, _> = job.metadata().iter().cloned().collect();
    for option in options {
        let key = format!("hopscore.{option}");
        assert_eq!(meta.get(&key), footer.get(&key), "{key}");
        assert!(meta.contains_key(&key), "{key} is not in the metadata");
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

/// A corpus of `n` word rows (`c0`, `c1`, …) embedded by the random BERT fixture
/// with the word tokenizer, for the index checks of issue 40.
struct SmallIndex {
    tmp: tempfile::TempDir,
    tokenizer: PathBuf,
    corpus: PathBuf,
    questions: PathBuf,
}

impl SmallIndex {
    fn new(n: usize) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let tokenizer = common::word_tokenizer(tmp.path());
        let corpus = tmp.path().join("corpus.parquet");
        let rows: Vec<Row> = (0..n)
            .map(|i| {
                (
                    Some(format!("c{i}")),
                    None,
                    Some(format!("w{} w{}", i + 5, i + 40)),
                )
            })
            .collect();
        write_passages(&corpus, &rows);
        let questions = tmp.path().join("q.parquet");
        let q = common::bare_question("q0", "w5 w41");
        let mut w = hopscore::io::questions::QuestionWriter::create(&questions, &[]).unwrap();
        w.write(&[q]).unwrap();
        w.finish().unwrap();
        Self {
            tmp,
            tokenizer,
            corpus,
            questions,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Embeds `corpus` into `name` with `extra` flags.
    fn embed(&self, corpus: &Path, name: &str, extra: &[&str]) -> PathBuf {
        let out = self.path(name);
        let mut flags = vec!["--tokenizer", self.tokenizer.to_str().unwrap()];
        flags.extend_from_slice(extra);
        let done = embed(&common::fixture("bert/random_plain"), corpus, &out, &flags);
        common::assert_success(&done);
        out
    }

    /// `retrieve --retriever dense` over `index`; (success, stderr).
    fn retrieve(&self, index: &[&Path], extra: &[&str]) -> (bool, String) {
        let mut c = common::hopscore();
        c.args(["retrieve", "--retriever", "dense", "--k", "3"])
            .arg("--questions")
            .arg(&self.questions)
            .arg("--corpus")
            .arg(&self.corpus)
            .arg("--encoder")
            .arg(common::fixture("bert/random_plain"))
            .arg("--tokenizer")
            .arg(&self.tokenizer)
            .arg("--output")
            .arg(self.path("out.parquet"))
            .args(extra);
        for i in index {
            c.arg("--index").arg(i);
        }
        let out = c.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// Issue 40: the same index given twice, a copy of it beside it, one shard twice, or
/// an index with a repeated id put each passage twice in a pool (hybrid counted the
/// dense list twice; a printed R@10 reached 1.52). Each is refused, naming the files
/// or the id.
#[test]
fn retrieve_refuses_an_index_that_would_put_a_passage_twice_in_a_pool() {
    let s = SmallIndex::new(6);
    let index = s.embed(&s.corpus, "index.parquet", &[]);
    let (ok, err) = s.retrieve(&[&index], &[]);
    assert!(ok, "{err}");
    let (ok, err) = s.retrieve(&[&index, &index], &[]);
    assert!(!ok && err.contains("is given twice"), "{err}");
    let copy = s.path("copy.parquet");
    std::fs::copy(&index, &copy).unwrap();
    let (ok, err) = s.retrieve(&[&index, &copy], &[]);
    assert!(!ok && err.contains("both index the whole corpus"), "{err}");
    let s0 = s.embed(&s.corpus, "s0.parquet", &["--shard", "0/2"]);
    let s1 = s.embed(&s.corpus, "s1.parquet", &["--shard", "1/2"]);
    let (ok, err) = s.retrieve(&[&s0, &s1], &[]);
    assert!(ok, "both shards, once each: {err}");
    let merged = s.path("merged.parquet");
    let out = common::hopscore()
        .arg("merge")
        .args([&s0, &s1])
        .arg("-o")
        .arg(&merged)
        .output()
        .unwrap();
    common::assert_success(&out);
    let (ok, err) = s.retrieve(&[&merged], &[]);
    assert!(ok, "the merged shards are the whole corpus: {err}");
    let again = s.path("s0-again.parquet");
    std::fs::copy(&s0, &again).unwrap();
    let (ok, err) = s.retrieve(&[&s0, &s1, &again], &[]);
    assert!(!ok && err.contains("are both shard 0/2"), "{err}");
    // A repeated id: the index of a corpus holding one row twice.
    let repeated = s.path("repeated.parquet");
    write_passages(
        &repeated,
        &[
            (Some("c0".into()), None, Some("w5 w40".into())),
            (Some("c1".into()), None, Some("w6 w41".into())),
            (Some("c0".into()), None, Some("w5 w40".into())),
        ],
    );
    let dup = s.embed(&repeated, "dup.parquet", &[]);
    let mut c = common::hopscore();
    let out = c
        .args(["retrieve", "--retriever", "dense"])
        .arg("--questions")
        .arg(&s.questions)
        .arg("--corpus")
        .arg(&repeated)
        .arg("--index")
        .arg(&dup)
        .arg("--encoder")
        .arg(common::fixture("bert/random_plain"))
        .arg("--tokenizer")
        .arg(&s.tokenizer)
        .arg("--output")
        .arg(s.path("dup-out.parquet"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("index id `c0` is on two rows"), "{err}");
}

/// Issue 40: `retrieve` accepted an index made from another corpus, one covering half
/// of it, and one embedded with another pooling, all recorded in the index's
/// metadata: short pools, passages never retrieved, no warning. Refused (the
/// truncation length and a passage prefix the queries lack are warned of).
#[test]
fn retrieve_refuses_an_index_of_another_corpus_half_a_corpus_or_another_pooling() {
    let s = SmallIndex::new(6);
    let other = s.path("other.parquet");
    write_passages(&other, &[(Some("c0".into()), None, Some("w7 w8".into()))]);
    let foreign = s.embed(&other, "foreign.parquet", &[]);
    let (ok, err) = s.retrieve(&[&foreign], &[]);
    assert!(
        !ok && err.contains("was embedded from another file than --corpus"),
        "{err}"
    );
    let half = s.embed(&s.corpus, "half.parquet", &["--shard", "0/2"]);
    let (ok, err) = s.retrieve(&[&half], &[]);
    assert!(!ok && err.contains("shard 1/2 missing"), "{err}");
    let cls = s.embed(&s.corpus, "cls.parquet", &["--pooling", "cls"]);
    let (ok, err) = s.retrieve(&[&cls], &[]);
    assert!(
        !ok && err.contains("pooling cls") && err.contains("--pooling cls"),
        "{err}"
    );
    let (ok, err) = s.retrieve(&[&cls], &["--pooling", "cls"]);
    assert!(ok, "{err}");
    let prefixed = s.embed(
        &s.corpus,
        "prefixed.parquet",
        &["--prefix", "w9 ", "--max-length", "16"],
    );
    let (ok, err) = s.retrieve(&[&prefixed], &[]);
    assert!(ok, "{err}");
    assert!(err.contains("embedded with the prefix \"w9 \""), "{err}");
    assert!(err.contains("max_length 16"), "{err}");
}

/// Issue 40: index rows with a null id were skipped silently (their passages never
/// retrieved). Refused, naming the file and the row.
#[test]
fn an_index_row_with_a_null_id_is_refused() {
    let s = SmallIndex::new(3);
    let index = s.embed(&s.corpus, "index.parquet", &[]);
    let batch = common::read_parquet(&index);
    let ids: arrow_array::ArrayRef =
        Arc::new(StringArray::from(vec![Some("c0"), None, Some("c2")]));
    let mut columns = batch.columns().to_vec();
    columns[0] = ids;
    let schema = Arc::new(Schema::new(
        batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
    .as_ref()
    .clone()
    .with_metadata(batch.schema().metadata().clone());
    let batch = RecordBatch::try_new(Arc::new(schema), columns).unwrap();
    common::write_parquet(&index, &batch);
    // The rewrite changed no recorded key but the file: retrieve still takes it as an
    // index of this corpus.
    let (ok, err) = s.retrieve(&[&index], &[]);
    assert!(!ok, "{err}");
    assert!(err.contains("index.parquet: row 1: `id` is null"), "{err}");
}

/// Issue 40: `embed --max-length 1` was accepted (no room for text next to [CLS] and
/// [SEP]) and a long passage then failed the whole run. Refused at load.
#[test]
fn embed_refuses_a_max_length_with_no_room_for_text() {
    let s = SmallIndex::new(2);
    let flags = [
        "--tokenizer",
        s.tokenizer.to_str().unwrap(),
        "--max-length",
        "2",
    ];
    let out = embed(
        &common::fixture("bert/random_plain"),
        &s.corpus,
        &s.path("i.parquet"),
        &flags,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--max-length 2 leaves no room for text") && err.contains("at least 3"),
        "{err}"
    );
}
