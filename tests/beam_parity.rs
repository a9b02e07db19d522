//! Beam Retrieval search against a Python re-implementation of the official inference
//! loop (tools/goldens/make_beam_goldens.py, HF transformers) on a small random checkpoint
//! with the real DeBERTa-v3 vocabulary, over real HotpotQA and MuSiQue questions
//! (texts read from the slices in tests/fixtures/data): chains identical, scores within 1e-4.
//! With bf16 or int8 dense layers (`--cpu-gemm`) the same goldens measure the
//! accuracy cost: the score errors and the chains that change.

use crate::common;

use hopscore::backend::cpu::{CpuBackend, CpuGemm};
use hopscore::model::batch::PackedBatch;
use hopscore::model::cross_encoder::{CrossEncoder, ModelFiles};
use hopscore::strategy::beam::{truncate_inputs, BeamSearch, HopHead, HopMode};
use hopscore::text::render::{beam_passage, beam_question, PassageStyle};
use hopscore::text::TextTokenizer;
use serde_json::Value;

const TOL: f32 = 1e-4;

fn as_usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

/// What a run over the goldens found: the largest score or logit error, and the
/// labels of the questions whose chain or beams differ from the reference.
#[derive(Debug, Default)]
struct Outcome {
    worst: f32,
    changed: Vec<String>,
    per_dataset: std::collections::HashMap<String, usize>,
}

impl Outcome {
    fn close(&mut self, a: f32, b: f64) {
        self.worst = self.worst.max((a - b as f32).abs());
    }
}

/// (question, passages as (title, text)) of a sample-file record.
fn texts(dataset: &str, rec: &Value) -> (String, Vec<(String, String)>) {
    let q = rec["question"].as_str().unwrap().to_string();
    let passages = if dataset == "musique" {
        rec["paragraphs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["title"].as_str().unwrap().into(),
                    p["paragraph_text"].as_str().unwrap().into(),
                )
            })
            .collect()
    } else {
        rec["context"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let sents: String = c[1]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap())
                    .collect();
                (c[0].as_str().unwrap().to_string(), sents)
            })
            .collect()
    };
    (q, passages)
}

#[test]
fn beam_search_matches_the_official_loop() {
    let Some(out) = run_goldens(&CpuBackend::F32) else {
        return;
    };
    assert!(out.changed.is_empty(), "chains differ: {:?}", out.changed);
    assert!(out.worst <= TOL, "max score error {:e}", out.worst);
    eprintln!(
        "beam parity: {:?} questions, chains identical, max score error {:e}",
        out.per_dataset, out.worst
    );
    assert!(out.per_dataset["hotpotqa"] >= 10 && out.per_dataset["musique"] >= 10);
}

/// The accuracy cost of the low-precision dense layers on the same goldens (the figures
/// of docs/parity.md): `(gemm, largest score error allowed, chains that change)`. The
/// kernels equal their scalar twins bit for bit, so these counts hold on any CPU that
/// runs them. A random model's hop logits lie close together, so chains flip more
/// easily than a trained model's would.
#[test]
fn beam_search_with_bf16_and_int8_dense_layers() {
    let mut failures = Vec::new();
    for (gemm, bound, changes) in [
        (CpuGemm::Bf16, 0.1, 2),
        (CpuGemm::Int8, 0.15, 7),
        (CpuGemm::Q8, 0.15, 7),
    ] {
        let be = CpuBackend::new(gemm);
        if be.gemm() != gemm {
            eprintln!("skipped {gemm:?}: this CPU lacks its instructions");
            continue;
        }
        let Some(out) = run_goldens(&be) else {
            return;
        };
        eprintln!(
            "beam {gemm:?}: max score error {:.3e}, chains changed {:?}",
            out.worst, out.changed
        );
        failures.extend(
            (out.worst > bound || out.changed.len() != changes)
                .then(|| format!("{gemm:?}: {:e}, {:?}", out.worst, out.changed)),
        );
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Beam search over every golden question on `be`; `None` without the tokenizer.
fn run_goldens(be: &CpuBackend) -> Option<Outcome> {
    let golden: Value = common::fixture_json("beam/goldens.json");
    let tok = common::DEBERTA_V3_TOKENIZER.require()?;
    let data = common::hotpot_and_musique_records();
    let tok = TextTokenizer::from_file(&tok, None).unwrap();
    let dir = common::fixture("beam/model");
    let model = CrossEncoder::load(
        be,
        ModelFiles::open(&dir).unwrap(),
        Some(&["hop1", "hop_n"]),
    )
    .unwrap();
    assert_eq!(model.heads[0].spec.name, "hop1");

    let cases = golden["questions"].as_array().unwrap();
    assert!(cases.len() >= 20);
    let mut out = Outcome::default();
    for case in cases {
        let ds = case["dataset"].as_str().unwrap();
        let index = case["index"].as_u64().unwrap() as usize;
        let rec = common::find_record(&data[ds], case["id"].as_str().unwrap())
            .expect("every golden question is in the data slice");
        let label = format!("{ds} #{index} B={}", case["beam_size"]);
        let (question, passages) = texts(ds, rec);
        let style = PassageStyle::for_dataset(ds);
        let q_ids = tok.encode_plain(beam_question(&question)).unwrap();
        let p_ids: Vec<Vec<u32>> = passages
            .iter()
            .map(|(t, x)| tok.encode_plain(&beam_passage(style, t, x)).unwrap())
            .collect();
        let (q_ids, p_ids) = truncate_inputs(q_ids, p_ids);
        let want_q: Vec<u32> = as_usizes(&case["question_ids"])
            .into_iter()
            .map(|x| x as u32)
            .collect();
        assert_eq!(q_ids, want_q, "{label}: question ids");
        let lens: Vec<usize> = p_ids.iter().map(Vec::len).collect();
        assert_eq!(
            lens,
            as_usizes(&case["passage_lens"]),
            "{label}: passage lengths"
        );

        let hops = case["hops"].as_u64().unwrap() as usize;
        let mut search = BeamSearch::new(
            q_ids,
            p_ids,
            case["beam_size"].as_u64().unwrap() as usize,
            HopMode::Fixed(hops),
        );
        while search.result().is_none() {
            let head = match search.head() {
                HopHead::Hop1 => 0,
                HopHead::HopN => 1,
            };
            let seqs: Vec<_> = search.hypotheses().collect();
            let forward = model.forward(be, &PackedBatch::pack(&seqs), false).unwrap();
            let logits: Vec<[f32; 2]> = forward.logits[head]
                .data
                .chunks(2)
                .map(|c| [c[0], c[1]])
                .collect();
            search.feed(&logits);
        }
        let r = search.result().unwrap();
        *out.per_dataset.entry(ds.to_string()).or_insert(0) += 1;
        let Some(score) = case["chain_score"].as_f64() else {
            // n ≤ hops: every passage is returned unscored (the reference lists that
            // chain as one beam with a null score; hopscore reports no beams).
            assert_eq!(r.chain, as_usizes(&case["chain"]), "{label}: chain");
            assert!(
                r.hop_scores.is_empty() && r.beams.is_empty() && r.hop1_logits.is_empty(),
                "{label}"
            );
            continue;
        };
        let beams = case["beams"].as_array().unwrap();
        let same = r.chain == as_usizes(&case["chain"])
            && r.beams.len() == beams.len()
            && r.beams
                .iter()
                .zip(beams)
                .all(|(b, w)| b.chain == as_usizes(&w["chain"]));
        if !same {
            out.changed.push(label);
            continue;
        }
        out.close(*r.hop_scores.last().unwrap(), score);
        for (b, want) in r.beams.iter().zip(beams) {
            out.close(b.score(), want["score"].as_f64().unwrap());
        }
        let hop1 = case["hop1_logits"].as_array().unwrap();
        assert_eq!(r.hop1_logits.len(), hop1.len(), "{label}: hop-1 logits");
        for (ours, want) in r.hop1_logits.iter().zip(hop1) {
            for k in 0..2 {
                out.close(ours[k], want[k].as_f64().unwrap());
            }
        }
    }
    Some(out)
}
