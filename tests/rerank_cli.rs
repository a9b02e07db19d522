//! `hopscore import` → `hopscore rerank` end to end on the HotpotQA slice: each pool
//! reordered by the scores sentence-transformers' `CrossEncoder.predict` gives (the
//! goldens of tools/goldens/make_reranker_goldens.py, random BERT, XLM-R and
//! ModernBERT checkpoints) or HF's P(yes) of a random Qwen3-Reranker-shaped model and its
//! sequence-classifier conversion (tools/goldens/make_qwen3_goldens.py), gold labels following their passages, `--top-k` noting the gold it
//! drops, the output read by `eval`, `lepus` and `beam` as a question file, and a run
//! SIGKILLed and resumed writing the bytes of an uninterrupted one.

use crate::common;
use crate::reranker_parity::golden_pairs;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use arrow_array::{Array, Float32Array, ListArray};
use hopscore::io::questions::{Question, QuestionReader, QuestionWriter};

fn import_hotpot(dir: &Path) -> PathBuf {
    let out = dir.join("hotpot.parquet");
    let st = common::hopscore()
        .args(["import", "hotpotqa"])
        .arg(common::data_file("hotpotqa"))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "import failed");
    out
}

/// `hopscore rerank` with the fixture checkpoint `model` and its tokenizer (a
/// cross-encoder's at 128 tokens, as its goldens).
fn rerank(model: &str, tokenizer: &str, input: &Path, output: &Path, extra: &[&str]) -> Command {
    let mut c = common::hopscore();
    c.arg("rerank")
        .arg("--model")
        .arg(common::fixture(&format!("rerank/{model}")))
        .arg("--tokenizer")
        .arg(common::fixture(&format!("rerank/{tokenizer}")));
    if !model.starts_with("qwen3") {
        c.args(["--max-length", "128"]);
    }
    c.arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(extra);
    c
}

fn questions(path: &Path) -> Vec<Question> {
    QuestionReader::open(path, 64)
        .unwrap()
        .map(|r| r.unwrap().unwrap())
        .collect()
}

/// Each row's `rerank_scores`.
fn scores(path: &Path) -> Vec<Vec<f32>> {
    let batch = common::read_parquet(path);
    let list = batch
        .column_by_name("rerank_scores")
        .unwrap()
        .as_any()
        .downcast_ref::<ListArray>()
        .unwrap()
        .clone();
    (0..list.len())
        .map(|r| {
            let v = list.value(r);
            v.as_any()
                .downcast_ref::<Float32Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect()
}

/// The golden scores of `model` per (question id, passage title): a cross-encoder's
/// `st_scores`; the Qwen3 reranker's `p_yes`, which its classifier conversion gives
/// too (the sigmoid of its logit).
fn golden_scores(model: &str, input: &[Question]) -> HashMap<(String, String), f32> {
    let golden = if model.starts_with("qwen3") {
        "qwen3_reranker"
    } else {
        model
    };
    let g = common::read_golden(&common::fixture(&format!(
        "rerank/{golden}/golden.safetensors"
    )));
    let st: Vec<f32> = match g.get("st_scores") {
        Some(t) => t.f32.clone(),
        None => g["p_yes"].f64.iter().map(|&p| p as f32).collect(),
    };
    let pairs = golden_pairs();
    let mut out = HashMap::new();
    let mut k = 0;
    for q in input.iter().take(6) {
        for p in &q.passages {
            assert_eq!(pairs[k].0, q.question);
            out.insert((q.id.clone(), p.title.clone()), st[k]);
            k += 1;
        }
    }
    assert_eq!(k, st.len());
    out
}

/// The first six questions of `output` hold the pools of `input` in the order of the
/// golden scores, which `rerank_scores` equal; their gold passages are the input's.
fn assert_reranked_as_golden(model: &str, input: &[Question], output: &Path) {
    let golden = golden_scores(model, input);
    let (got, got_scores) = (questions(output), scores(output));
    for (k, (q, before)) in got.iter().zip(input).take(6).enumerate() {
        assert_eq!(q.id, before.id);
        assert_eq!(q.passages.len(), before.passages.len());
        let s = &got_scores[k];
        assert!(s.windows(2).all(|w| w[0] >= w[1]), "{}: best first", q.id);
        for (p, score) in q.passages.iter().zip(s) {
            let want = golden[&(q.id.clone(), p.title.clone())];
            assert!(
                (score - want).abs() <= 1e-5,
                "{} {:?}: {score} vs {want}",
                q.id,
                p.title
            );
            assert!(
                before.passages.contains(p),
                "passages are moved, not changed"
            );
        }
        let gold = |q: &Question| {
            let mut t: Vec<String> = q
                .supporting
                .iter()
                .map(|&i| q.passages[i].title.clone())
                .collect();
            t.sort();
            t
        };
        assert_eq!(gold(q), gold(before), "{}: gold follows its passages", q.id);
    }
}

#[test]
fn rerank_orders_pools_by_the_cross_encoder_scores_and_feeds_the_next_stages() {
    let tmp = tempfile::tempdir().unwrap();
    let input = import_hotpot(tmp.path());
    let before = questions(&input);

    let bert = tmp.path().join("bert.parquet");
    common::assert_success(
        &rerank("bert_seqcls", "wordpiece", &input, &bert, &[])
            .output()
            .unwrap(),
    );
    assert_reranked_as_golden("bert_seqcls", &before, &bert);
    let meta = common::key_values(&bert);
    assert_eq!(meta["hopscore.score"], "sigmoid");
    assert_eq!(meta["hopscore.head"], "sequence");

    let xlmr = tmp.path().join("xlmr.parquet");
    common::assert_success(
        &rerank("xlmr_seqcls", "unigram", &input, &xlmr, &[])
            .output()
            .unwrap(),
    );
    assert_reranked_as_golden("xlmr_seqcls", &before, &xlmr);

    let modernbert = tmp.path().join("modernbert.parquet");
    common::assert_success(
        &rerank("modernbert_seqcls", "wordpiece", &input, &modernbert, &[])
            .output()
            .unwrap(),
    );
    assert_reranked_as_golden("modernbert_seqcls", &before, &modernbert);

    // --top-k 3: three passages each; a gold passage dropped is noted as not retrieved.
    let top = tmp.path().join("top3.parquet");
    common::assert_success(
        &rerank("bert_seqcls", "wordpiece", &input, &top, &["--top-k", "3"])
            .output()
            .unwrap(),
    );
    let (all, cut) = (questions(&bert), questions(&top));
    let mut dropped = 0;
    for (a, c) in all.iter().zip(&cut) {
        assert_eq!(c.passages, a.passages[..3.min(a.passages.len())]);
        let missed: Vec<&str> = c.gold_not_retrieved().collect();
        for &s in &a.supporting {
            let title = a.passages[s].title.as_str();
            assert_eq!(s >= 3, missed.contains(&title), "{}: {title}", a.id);
            dropped += usize::from(s >= 3);
        }
    }
    assert!(dropped > 0, "the random model drops some gold");

    // The output is a question file: eval scores it as a ranked pool, lepus and beam
    // read it.
    let eval = common::hopscore()
        .args(["eval", "--json", "--k", "2,3", "--pred"])
        .arg(&top)
        .arg("--gold")
        .arg(&input)
        .output()
        .unwrap();
    common::assert_success(&eval);
    let report: serde_json::Value = serde_json::from_slice(&eval.stdout).unwrap();
    // R@k: the share of questions whose every gold passage is in the reranked top k
    // (a dropped one counts as missed), counted from the output itself.
    let recall = |k: usize| {
        let hits = cut
            .iter()
            .filter(|q| q.gold_not_retrieved().next().is_none())
            .filter(|q| q.supporting.iter().all(|&s| s < k))
            .count();
        hits as f64 / cut.len() as f64
    };
    for k in [2, 3] {
        let got = report["overall"]["recall_at_k"][k.to_string()]
            .as_f64()
            .unwrap();
        assert!(
            (got - recall(k)).abs() < 1e-12,
            "R@{k}: eval {got}, counted {}",
            recall(k)
        );
    }
    let lepus = common::hopscore()
        .args(["lepus", "--scorer", "bm25", "--input"])
        .arg(&top)
        .arg("--output")
        .arg(tmp.path().join("lepus.parquet"))
        .output()
        .unwrap();
    common::assert_success(&lepus);
    if common::DEBERTA_V3_TOKENIZER.require().is_some() {
        let beam = common::question_command(
            "beam",
            &[("--model", "beam/model")],
            &bert,
            &tmp.path().join("beam.parquet"),
            &["--hops", "2"],
        )
        .output()
        .unwrap();
        common::assert_success(&beam);
    }
}

#[test]
fn llm_rerankers_order_pools_by_p_yes() {
    let tmp = tempfile::tempdir().unwrap();
    let input = import_hotpot(tmp.path());
    let before = questions(&input);
    for model in ["qwen3_reranker", "qwen3_seqcls"] {
        let out = tmp.path().join(format!("{model}.parquet"));
        common::assert_success(&rerank(model, "bpe", &input, &out, &[]).output().unwrap());
        assert_reranked_as_golden(model, &before, &out);
        let meta = common::key_values(&out);
        assert_eq!(meta["hopscore.template"], "qwen3-reranker");
        assert_eq!(
            meta["hopscore.instruction"],
            "Given a web search query, retrieve relevant passages that answer the query"
        );
        let (score, head) = match model {
            "qwen3_reranker" => ("softmax[1]", "hopscore.label_tokens"),
            _ => ("sigmoid", "hopscore.head"),
        };
        assert_eq!(meta["hopscore.score"], score);
        assert!(meta.contains_key(head), "{model}: {head}");
    }

    let inspect = common::hopscore()
        .args(["inspect", "--model"])
        .arg(common::fixture("rerank/qwen3_seqcls"))
        .output()
        .unwrap();
    common::assert_success(&inspect);
    let report = String::from_utf8_lossy(&inspect.stdout);
    for line in [
        "decoder    qwen3 (Llama family): 2 layers, hidden 32, 4 heads × 16 over 2 kv heads",
        "attention  RoPE θ = 1000000, no scaling, q/k RMSNorm per head",
        "head       score: 1 labels on the last token (rerank)",
    ] {
        assert!(report.contains(line), "{line:?} not in {report}");
    }

    // --instruction: the first question's pool as HF scored it under that instruction.
    let instruction = "Given a multi-hop question, find a passage that holds one of its facts";
    let out = tmp.path().join("instruction.parquet");
    let args = ["--instruction", instruction, "--limit", "1"];
    common::assert_success(
        &rerank("qwen3_reranker", "bpe", &input, &out, &args)
            .output()
            .unwrap(),
    );
    let g = common::read_golden(&common::fixture("rerank/qwen3_reranker/golden.safetensors"));
    let want = &g["p_yes_instruction"].f64;
    let (q, s) = (&questions(&out)[0], &scores(&out)[0]);
    assert_eq!(q.id, before[0].id);
    for (p, score) in q.passages.iter().zip(s) {
        let k = before[0].passages.iter().position(|b| b == p).unwrap();
        assert!(
            (*score as f64 - want[k]).abs() <= 1e-5,
            "{}: {score} vs {}",
            p.title,
            want[k]
        );
    }

    // Flags of the other kind of reranker are refused, naming them.
    for (model, tok, flag) in [
        ("bert_seqcls", "wordpiece", ["--instruction", "x"]),
        ("qwen3_seqcls", "bpe", ["--label-tokens", "no,yes"]),
        (
            "qwen3_reranker",
            "bpe",
            ["--label-tokens", "no,maybe-not-a-token"],
        ),
    ] {
        let o = rerank(model, tok, &input, &tmp.path().join("x.parquet"), &flag)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{model} {flag:?}");
        assert!(
            err.contains(flag[0]) || err.contains("label token"),
            "{model} {flag:?}: {err}"
        );
    }
}

#[test]
fn a_killed_and_resumed_rerank_writes_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let slice = import_hotpot(tmp.path());
    // The 20 questions COPIES times over, so that the kills land between parts.
    const COPIES: usize = 16;
    let qs = questions(&slice);
    let input = tmp.path().join("copies.parquet");
    let mut w = QuestionWriter::create(&input, &[]).unwrap();
    for k in 0..COPIES {
        let mut copy = qs.clone();
        for q in &mut copy {
            q.id = format!("{}~{k}", q.id);
        }
        w.write(&copy).unwrap();
    }
    w.finish().unwrap();
    let args = ["--part-rows", "16", "--threads", "1"];
    let run = |out: &Path| rerank("bert_seqcls", "wordpiece", &input, out, &args);
    let whole = tmp.path().join("whole.parquet");
    common::assert_success(&run(&whole).output().unwrap());

    let resumed = tmp.path().join("resumed.parquet");
    let parts = tmp.path().join("resumed.parquet.parts");
    let (mut kills, mut delay_ms) = (0, 120u64);
    while kills < 4 {
        let mut cmd = run(&resumed);
        if parts.exists() {
            cmd.arg("--resume");
        }
        let mut child = cmd.stderr(std::process::Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        if child.try_wait().unwrap().is_some() {
            break;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        delay_ms += 150;
    }
    let mut cmd = run(&resumed);
    if parts.exists() {
        cmd.arg("--resume");
    }
    common::assert_success(&cmd.output().unwrap());
    println!("{kills} kills landed");
    common::assert_resumed_equals_whole(tmp.path());
}
