//! The EfficientRAG loop against a Python re-implementation of the official one
//! (tools/goldens/make_efficientrag_goldens.py, HF transformers) on small random Labeler and
//! Filter checkpoints with the real DeBERTa-v3 vocabulary, over real HotpotQA and
//! MuSiQue questions (texts read from the slices in tests/fixtures/data): retrieved chunks, tags,
//! kept texts and queries identical (compared through sha256 prefixes: the goldens
//! hold no dataset text), tag logits within 1e-4.

use crate::common;

use std::sync::Arc;

use hopscore::backend::cpu::CpuBackend;
use hopscore::jobs::label::{Models, TagPooling};
use hopscore::pipeline::Strategy;
use hopscore::retrieve::chunks::{ChunkSource, PoolChunks};
use hopscore::strategy::efficientrag::{EfficientRag, LoopConfig};
use hopscore::text::render::efficientrag_chunk;
use hopscore::text::TextTokenizer;
use serde_json::Value;
use sha2::{Digest, Sha256};

const TOL: f32 = 1e-4;

fn sha(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// The official corpus chunks of a sample-file record.
fn chunks(dataset: &str, rec: &Value) -> Vec<String> {
    if dataset == "musique" {
        rec["paragraphs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                efficientrag_chunk(
                    p["title"].as_str().unwrap(),
                    p["paragraph_text"].as_str().unwrap(),
                    None,
                )
            })
            .collect()
    } else {
        rec["context"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let sentences = strings(&c[1]);
                efficientrag_chunk(c[0].as_str().unwrap(), "", Some(&sentences))
            })
            .collect()
    }
}

#[test]
fn the_loop_matches_the_official_one() {
    let golden: Value = common::fixture_json("efficientrag/goldens.json");
    let Some(tok) = common::DEBERTA_V3_TOKENIZER.require() else {
        return;
    };
    let data = common::hotpot_and_musique_records();
    let tok = Arc::new(TextTokenizer::from_file(&tok, None).unwrap());
    let be = CpuBackend::F32;
    let load = |pooling| {
        Models::load(
            &be,
            &common::fixture("efficientrag/labeler"),
            &common::fixture("efficientrag/filter"),
            pooling,
        )
        .unwrap()
    };
    let (cls, mean) = (load(TagPooling::Cls), load(TagPooling::Mean));

    let cases = golden["questions"].as_array().unwrap();
    let (mut questions, mut iterations, mut worst) = (0, 0, 0f32);
    let mut lengths = std::collections::BTreeSet::new();
    for case in cases {
        let ds = case["dataset"].as_str().unwrap();
        let index = case["index"].as_u64().unwrap() as usize;
        let rec = common::find_record(&data[ds], case["id"].as_str().unwrap())
            .expect("every golden question is in the data slice");
        let models = if case["pooling"] == "mean" {
            &mean
        } else {
            &cls
        };
        let label = format!("{ds} #{index} ({})", case["pooling"]);
        let source: Arc<dyn ChunkSource> = Arc::new(PoolChunks::new(chunks(ds, rec)));
        let config = LoopConfig {
            max_iter: 4,
            top_k: 10,
            n_tags: models.n_tags(),
        };
        let mut search = EfficientRag::new(
            rec["question"].as_str().unwrap(),
            source,
            tok.clone(),
            config,
        );
        loop {
            let reqs = search.requests();
            if reqs.is_empty() {
                break;
            }
            let (seqs, heads): (Vec<_>, Vec<_>) = reqs.into_iter().unzip();
            search.feed(models.score(&be, &seqs, &heads).unwrap());
        }
        let r = search.take_output().unwrap().unwrap();
        let want = case["iterations"].as_array().unwrap();
        assert_eq!(r.iterations.len(), want.len(), "{label}: iteration count");
        for (k, (it, w)) in r.iterations.iter().zip(want).enumerate() {
            let at = format!("{label} iteration {k}");
            assert_eq!(sha(&it.query), w["query_sha"], "{at}: query");
            let retrieved: Vec<usize> = w["retrieved"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(it.retrieved, retrieved, "{at}: retrieved chunks");
            let tags: Vec<&str> = it.tags.iter().map(|t| t.as_str()).collect();
            assert_eq!(tags, strings(&w["tags"]), "{at}: tags");
            for (ours, theirs) in it
                .tag_logits
                .iter()
                .zip(w["tag_logits"].as_array().unwrap())
            {
                for (a, b) in ours.iter().zip(theirs.as_array().unwrap()) {
                    let err = (a - b.as_f64().unwrap() as f32).abs();
                    assert!(err <= TOL, "{at}: tag logit {a} vs {b}");
                    worst = worst.max(err);
                }
            }
            let kept: Vec<String> = it.kept_text.iter().map(|t| sha(t)).collect();
            assert_eq!(kept, strings(&w["kept_sha"]), "{at}: kept texts");
            let next = it.next_query.as_deref().map(sha);
            assert_eq!(
                next.as_deref(),
                w["next_query_sha"].as_str(),
                "{at}: next query"
            );
            iterations += 1;
        }
        let kept: Vec<usize> = case["kept"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(r.kept, kept, "{label}: kept passages");
        lengths.insert(r.iterations.len());
        questions += 1;
    }
    eprintln!(
        "efficientrag parity: {questions} questions, {iterations} iterations identical \
         (loop lengths {lengths:?}), max tag-logit error {worst:e}"
    );
    assert!(questions >= 20);
    assert_eq!(
        lengths.len(),
        4,
        "loops of 1–4 iterations are all exercised"
    );
}
