//! The BERT embedder (src/model/bert.rs) against HF transformers and
//! sentence-transformers (goldens of tools/goldens/make_bert_goldens.py):
//!
//! - all-MiniLM-L6-v2 (real weights, fetched by tools/fetch_minilm.sh): the tokenizer's
//!   ids and the normalised mean-pooled embeddings of 60 real HotpotQA questions and
//!   passages (one truncated at 256 tokens), cosine ≥ 0.99999 and max |Δ| ≤ 1e-5;
//! - a random BertModel in the Contriever layout (bare keys, a pooler, no
//!   sentence-transformers files): last hidden state, mean and [CLS] pooling.
//! - a random ModernBERT bi-encoder in the sentence-transformers layout: the same 60
//!   texts (truncated at 128 tokens), to the same bounds.

use crate::common;

use std::path::{Path, PathBuf};

use hopscore::backend::cpu::CpuBackend;
use hopscore::model::batch::PackedBatch;
use hopscore::model::bert::{BertEmbedder, EmbeddingHead, Pooling};
use hopscore::text::TextTokenizer;
use serde_json::Value;

/// The 60 texts of the MiniLM golden as sentence-transformers read them.
fn minilm_texts() -> Vec<String> {
    common::minilm_golden_texts()
        .into_iter()
        .map(|(title, body)| title.map_or(body.clone(), |t| format!("{t} {body}")))
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The embeddings of the 60 golden texts by the sentence-transformers model in `dir`
/// against `SentenceTransformer.encode`'s (`golden`): the token ids first, then the
/// vectors (max |Δ| ≤ 1e-5, cosine ≥ 0.99999). `head` is what the model's files say.
fn check_sentence_transformers(name: &str, dir: &Path, golden: &str, head: EmbeddingHead) {
    let be = CpuBackend::F32;
    let model = BertEmbedder::load(&be, dir, None).unwrap();
    assert_eq!(model.head, head);
    let max_len = head.max_seq_length.unwrap();
    let tok = TextTokenizer::from_file(&dir.join("tokenizer.json"), Some(max_len)).unwrap();
    let g = common::read_golden(&common::fixture(golden));
    let texts = minilm_texts();
    assert_eq!(texts.len(), 60);
    let seqs: Vec<_> = texts
        .iter()
        .map(|t| tok.encode_pair(t, None).unwrap())
        .collect();
    let ids: Vec<i64> = seqs
        .iter()
        .flat_map(|s| s.ids.iter().map(|&i| i64::from(i)))
        .collect();
    let lens: Vec<i64> = seqs.iter().map(|s| s.ids.len() as i64).collect();
    assert_eq!(
        lens, g["lengths"].i64,
        "{name}: token counts differ from HF's tokenizer"
    );
    assert_eq!(
        ids, g["input_ids"].i64,
        "{name}: token ids differ from HF's tokenizer"
    );
    assert_eq!(
        lens.iter().max(),
        Some(&(max_len as i64)),
        "{name}: one text is truncated"
    );

    let emb = model.embed(&be, &PackedBatch::pack(&seqs)).unwrap();
    let want = &g["embeddings"];
    assert_eq!(emb.shape, want.shape);
    let h = emb.shape[1];
    let d = max_abs_diff(&emb.data, &want.f32);
    let worst = emb
        .data
        .chunks(h)
        .zip(want.f32.chunks(h))
        .map(|(a, b)| cosine(a, b))
        .fold(1.0, f64::min);
    eprintln!("{name}: max |Δ| {d:.2e}, min cosine {worst:.8}");
    assert!(d <= 1e-5, "{name}: max |Δ| {d}");
    assert!(worst >= 0.99999, "{name}: min cosine {worst}");
}

#[test]
fn minilm_embeddings_match_sentence_transformers() {
    let Some(weights) = common::MINILM.require() else {
        return;
    };
    let head = EmbeddingHead {
        pooling: Pooling::Mean,
        normalize: true,
        max_seq_length: Some(256),
    };
    let dir = weights.parent().unwrap();
    check_sentence_transformers("MiniLM", dir, "bert/minilm/golden.safetensors", head);
}

/// A ModernBERT bi-encoder (`ModernBertModel`, its final norm, mean pooling, Normalize;
/// one global and one sliding-window layer) against sentence-transformers.
#[test]
fn modernbert_embeddings_match_sentence_transformers() {
    let head = EmbeddingHead {
        pooling: Pooling::Mean,
        normalize: true,
        max_seq_length: Some(128),
    };
    let dir = common::fixture("bert/modernbert_st");
    let golden = "bert/modernbert_st/golden.safetensors";
    check_sentence_transformers("ModernBERT", &dir, golden, head);
}

fn random_plain() -> PathBuf {
    common::fixture("bert/random_plain")
}

fn golden_batch(
    dir: &Path,
) -> (
    std::collections::HashMap<String, common::Golden>,
    PackedBatch,
) {
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let case = common::golden_sequences(&g);
    let batch = PackedBatch::pack(&case.seqs);
    (g, batch)
}

#[test]
fn random_contriever_layout_matches_hf_bert() {
    let be = CpuBackend::F32;
    let dir = random_plain();
    let (g, batch) = golden_batch(&dir);
    // A plain HF directory: mean pooling without normalisation (Contriever).
    let model = BertEmbedder::load(&be, &dir, None).unwrap();
    assert_eq!(model.head.pooling, Pooling::Mean);
    assert!(!model.head.normalize);

    let hidden = model.last_hidden_state(&be, &batch).unwrap();
    let want = &g["last_hidden_state"];
    let (l, h) = (want.shape[1], want.shape[2]);
    let mut d = 0f32;
    for (s, w) in batch.layout.cu_seqlens.windows(2).enumerate() {
        let n = w[1] - w[0];
        let got = &hidden.data[w[0] * h..w[1] * h];
        d = d.max(max_abs_diff(got, &want.f32[s * l * h..(s * l + n) * h]));
    }
    assert!(d <= 1e-4, "last hidden state: max |Δ| {d}");

    let mean = model.embed(&be, &batch).unwrap();
    let d = max_abs_diff(&mean.data, &g["mean"].f32);
    assert!(d <= 1e-5, "mean pooling: max |Δ| {d}");

    let head = EmbeddingHead {
        pooling: Pooling::Cls,
        normalize: false,
        max_seq_length: None,
    };
    let cls = BertEmbedder::load(&be, &dir, Some(head)).unwrap();
    let d = max_abs_diff(&cls.embed(&be, &batch).unwrap().data, &g["cls"].f32);
    assert!(d <= 1e-4, "cls pooling: max |Δ| {d}");
}

#[test]
fn bad_configs_and_modules_name_the_field() {
    let be = CpuBackend::F32;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(random_plain().join(f), dir.join(f)).unwrap();
    }
    let load_error = |dir: &Path| match BertEmbedder::load(&be, dir, None) {
        Ok(_) => panic!("loaded"),
        Err(e) => format!("{e:#}"),
    };
    let config: Value = common::fixture_json("bert/random_plain/config.json");
    let mut edited = config.clone();
    edited["position_embedding_type"] = "relative_key".into();
    std::fs::write(dir.join("config.json"), edited.to_string()).unwrap();
    let e = load_error(dir);
    assert!(e.contains("position_embedding_type"), "{e}");

    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(
        dir.join("modules.json"),
        r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"}]"#,
    )
    .unwrap();
    std::fs::create_dir(dir.join("1_Pooling")).unwrap();
    std::fs::write(
        dir.join("1_Pooling/config.json"),
        r#"{"pooling_mode_mean_tokens": false, "pooling_mode_max_tokens": true}"#,
    )
    .unwrap();
    let e = load_error(dir);
    assert!(e.contains("pooling_mode_max_tokens"), "{e}");
    // sentence-transformers ≥ 6 names the mode.
    for (file, named) in [
        (r#"{"pooling_mode": "max"}"#, "`pooling_mode` \"max\""),
        (
            r#"{"pooling_mode": ["mean", "max"]}"#,
            "`pooling_mode` [\"mean\",\"max\"]",
        ),
        (
            r#"{"pooling_mode": "mean", "include_prompt": false}"#,
            "include_prompt: false",
        ),
    ] {
        std::fs::write(dir.join("1_Pooling/config.json"), file).unwrap();
        let e = load_error(dir);
        assert!(e.contains(named), "{e}");
    }
    std::fs::write(
        dir.join("1_Pooling/config.json"),
        r#"{"pooling_mode_cls_token": true}"#,
    )
    .unwrap();
    let e = load_error(dir);
    assert!(e.contains("sentence_transformers.models.Dense"), "{e}");
}
