//! The cross-encoder families (src/model/bert.rs, src/model/roberta.rs, their heads in
//! src/model/heads.rs) against HF transformers in float64 and sentence-transformers'
//! `CrossEncoder.predict` (goldens of tools/goldens/make_reranker_goldens.py): random
//! `BertForSequenceClassification`, `BertForTokenClassification`,
//! `XLMRobertaForSequenceClassification`, `RobertaForSequenceClassification`,
//! `ModernBertForSequenceClassification` (mean and cls pooling, a sliding-window
//! layer) and `ModernBertForTokenClassification` checkpoints over 60 real HotpotQA
//! (question, passage) pairs, and the pair ids of
//! HF's fast tokenizers (the repository's WordPiece and XLM-R Unigram, and
//! all-MiniLM-L6-v2's real one) on the same texts.

use crate::common;

use std::path::PathBuf;

use hopscore::backend::cpu::CpuBackend;
use hopscore::model::batch::PackedBatch;
use hopscore::model::cross_encoder::{CrossEncoder, ModelFiles, ScoreActivation};
use hopscore::model::heads::{select, Pooling};
use hopscore::text::TextTokenizer;

/// The pairs of the goldens: (question, title + " " + text) of every passage of the
/// slice's first six questions, in order.
pub fn golden_pairs() -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for r in common::data_records("hotpotqa").iter().take(6) {
        let q = r["question"].as_str().unwrap();
        for p in r["context"].as_array().unwrap() {
            let title = p[0].as_str().unwrap();
            let text: String = p[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            pairs.push((q.to_string(), format!("{title} {text}").trim().to_string()));
        }
    }
    pairs
}

fn rerank_fixture(rel: &str) -> PathBuf {
    common::fixture(&format!("rerank/{rel}"))
}

/// `tokenizer`'s pairs of [`golden_pairs`] at 128 tokens equal the golden's ids (and
/// segment ids when `types`).
fn assert_pair_ids(tokenizer: &std::path::Path, golden: &std::path::Path, types: bool) {
    let tok = TextTokenizer::from_file(tokenizer, Some(128)).unwrap();
    let want = common::concatenated_sequences(&common::read_golden(golden));
    let pairs = golden_pairs();
    assert_eq!(pairs.len(), want.len());
    for (k, ((q, d), want)) in pairs.iter().zip(&want).enumerate() {
        let got = tok.encode_pair(q, Some(d)).unwrap();
        assert_eq!(
            got.ids, want.ids,
            "pair {k}: ids differ from HF's tokenizer"
        );
        if types {
            assert_eq!(got.type_ids, want.type_ids, "pair {k}: segment ids");
        }
    }
}

#[test]
fn pair_ids_match_hf_fast_tokenizers() {
    let wordpiece = rerank_fixture("wordpiece/tokenizer.json");
    let unigram = rerank_fixture("unigram/tokenizer.json");
    assert_pair_ids(
        &wordpiece,
        &rerank_fixture("bert_seqcls/golden.safetensors"),
        true,
    );
    // XLM-R's tokenizer gives the model no segment ids (the golden's are zeros).
    assert_pair_ids(
        &unigram,
        &rerank_fixture("xlmr_seqcls/golden.safetensors"),
        false,
    );
    if let Some(minilm) = common::MINILM.require() {
        let tokenizer = minilm.parent().unwrap().join("tokenizer.json");
        assert_pair_ids(
            &tokenizer,
            &rerank_fixture("minilm_pairs.safetensors"),
            true,
        );
    }
}

/// max |got − want| / max |want| of a checkpoint's logits over the golden pairs (CPU,
/// f32, one packed batch), and the logits; with `second_segment_types`, each pair's
/// tokens after its first half are of type 1 (what a RoBERTa model must ignore).
fn relative_error_of(name: &str, second_segment_types: bool) -> (f64, Vec<f32>) {
    let dir = rerank_fixture(name);
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let files = ModelFiles::open(&dir).unwrap();
    let specs = files.heads();
    let head = select(&specs, None)
        .or_else(|_| select(&specs, Some("token")))
        .unwrap()
        .clone();
    let be = CpuBackend::F32;
    let model = CrossEncoder::load(&be, files, Some(&[head.name])).unwrap();
    let mut seqs = common::concatenated_sequences(&g);
    if second_segment_types {
        for s in &mut seqs {
            let half = s.ids.len() / 2;
            s.type_ids[half..].iter_mut().for_each(|t| *t = 1);
        }
    }
    let out = model
        .forward(&be, &PackedBatch::pack(&seqs), false)
        .unwrap();
    let got = &out.logits[0];
    let want = &g["logits"].f64;
    assert_eq!(got.data.len(), want.len(), "{name}: logits shape");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let err = got
        .data
        .iter()
        .zip(want)
        .fold(0f64, |m, (a, b)| m.max((f64::from(*a) - b).abs()));
    (err / scale, got.data.clone())
}

fn relative_error(name: &str) -> (f64, Vec<f32>) {
    relative_error_of(name, false)
}

#[test]
fn roberta_models_read_every_token_as_type_zero() {
    for name in ["xlmr_seqcls", "xlmr_token", "roberta_seqcls"] {
        let (err, _) = relative_error_of(name, true);
        assert!(
            err <= 1e-5,
            "{name}: relative error {err:e} with segment ids of 1"
        );
    }
}

#[test]
fn cross_encoders_match_hf_float64() {
    for name in [
        "bert_seqcls",
        "bert_token",
        "xlmr_seqcls",
        "xlmr_token",
        "roberta_seqcls",
        "modernbert_seqcls",
        "modernbert_cls",
        "modernbert_token",
    ] {
        let (err, _) = relative_error(name);
        println!("{name}: max relative error {err:.2e}");
        assert!(err <= 1e-5, "{name}: relative error {err:e}");
    }
}

#[test]
fn one_label_scores_match_sentence_transformers_predict() {
    for name in ["bert_seqcls", "xlmr_seqcls", "modernbert_seqcls"] {
        let dir = rerank_fixture(name);
        let act = ScoreActivation::of_model(&dir.join("config.json"), 1).unwrap();
        assert_eq!(act, ScoreActivation::Sigmoid, "{name}: the default");
        let (_, logits) = relative_error(name);
        let g = common::read_golden(&dir.join("golden.safetensors"));
        let want = &g["st_scores"].f32;
        for (k, (l, w)) in logits.iter().zip(want).enumerate() {
            let got = act.apply(*l);
            assert!((got - w).abs() <= 1e-5, "{name} pair {k}: {got} vs {w}");
        }
    }
}

#[test]
fn heads_are_found_by_family() {
    let heads = |name: &str| {
        let files = ModelFiles::open(&rerank_fixture(name)).unwrap();
        files
            .heads()
            .iter()
            .map(|h| (h.name, h.tensor, h.pooler, h.num_labels))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        heads("bert_seqcls"),
        [("sequence", "classifier", "bert.pooler.dense", 1)]
    );
    assert_eq!(heads("bert_token")[0].0, "token");
    assert_eq!(
        heads("xlmr_seqcls"),
        [("sequence", "classifier.out_proj", "classifier.dense", 1)]
    );
    assert_eq!(heads("roberta_seqcls")[0].3, 2);
    assert_eq!(
        heads("xlmr_token"),
        [("token", "classifier", "classifier.dense", 3)]
    );
    assert_eq!(
        heads("modernbert_seqcls"),
        [("sequence", "classifier", "head.dense", 1)]
    );
    assert_eq!(heads("modernbert_token")[0].0, "token");
    let pooling = |name: &str| ModelFiles::open(&rerank_fixture(name)).unwrap().heads()[0].pooling;
    assert_eq!(pooling("modernbert_seqcls"), Pooling::MeanPooler);
    assert_eq!(pooling("modernbert_cls"), Pooling::Pooler);
}

#[test]
fn an_unknown_model_type_or_activation_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(rerank_fixture("bert_seqcls/config.json")).unwrap(),
    )
    .unwrap();
    config["model_type"] = "funnel".into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let err = ModelFiles::open(dir).err().unwrap();
    assert!(format!("{err:#}").contains("model_type"), "{err:#}");
    config["model_type"] = "bert".into();
    config["sentence_transformers"] =
        serde_json::json!({"activation_fn": "torch.nn.modules.activation.Tanh"});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let err = ScoreActivation::of_model(&dir.join("config.json"), 1).unwrap_err();
    assert!(format!("{err:#}").contains("Tanh"), "{err:#}");
    config["sentence_transformers"] =
        serde_json::json!({"activation_fn": "torch.nn.modules.linear.Identity"});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    assert_eq!(
        ScoreActivation::of_model(&dir.join("config.json"), 1).unwrap(),
        ScoreActivation::Identity
    );
}
