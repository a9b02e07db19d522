//! LLM rerankers (src/model/decoder.rs's last-token heads, src/text/rerank_prompt.rs)
//! against HF transformers in float64 (goldens of tools/goldens/make_qwen3_goldens.py):
//! a random Qwen3 causal LM scored as the Qwen3-Reranker model card scores it (the
//! softmax over the `no` and `yes` logits at the last token), the same model converted
//! to `Qwen3ForSequenceClassification`, and the template's token ids, over 60 real
//! HotpotQA (question, passage) pairs.

use crate::common;

use std::path::{Path, PathBuf};

use hopscore::backend::cpu::CpuBackend;
use hopscore::model::decoder::{DecoderForCausalLM, DecoderSource};
use hopscore::text::causal_tokenizer::CausalTokenizer;
use hopscore::text::rerank_prompt::{RerankPrompt, RerankTemplate};

use crate::reranker_parity::golden_pairs;

/// The instruction of the golden's second set (its first 10 pairs).
const INSTRUCTION: &str = "Given a multi-hop question, find a passage that holds one of its facts";

fn fixture(rel: &str) -> PathBuf {
    common::fixture(&format!("rerank/{rel}"))
}

fn tokenizer() -> CausalTokenizer {
    CausalTokenizer::from_dir(&fixture("bpe"), None).unwrap()
}

fn load(dir: &Path) -> DecoderForCausalLM<CpuBackend> {
    DecoderForCausalLM::load(&CpuBackend::F32, DecoderSource::open(dir).unwrap()).unwrap()
}

/// The largest relative error of `got` against `want`.
fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).abs() / w.abs().max(1e-6))
        .fold(0.0, f64::max)
}

#[test]
fn template_ids_match_the_model_card_tokenisation() {
    let tok = tokenizer();
    let g = common::read_golden(&fixture("qwen3_reranker/golden.safetensors"));
    let pairs = golden_pairs();
    for (instruction, suffix, n) in [(None, "", 60), (Some(INSTRUCTION), "_instruction", 10)] {
        let prompt =
            RerankPrompt::new(&tok, RerankTemplate::Qwen3Reranker, instruction, 8192).unwrap();
        let want = common::id_sequences(&g, suffix);
        assert_eq!(want.len(), n);
        for (k, ((q, d), want)) in pairs.iter().zip(&want).enumerate() {
            assert_eq!(
                &prompt.encode(&tok, q, d).unwrap(),
                want,
                "pair {k}{suffix}"
            );
        }
    }
    // Truncation cuts the pair, never the template: the sequence ends with the suffix.
    let prompt = RerankPrompt::new(&tok, RerankTemplate::Qwen3Reranker, None, 120).unwrap();
    let (q, d) = &pairs[0];
    let short = prompt.encode(&tok, q, d).unwrap();
    let full = &common::id_sequences(&g, "")[0];
    assert!(full.len() > 120);
    assert_eq!(short.len(), 120);
    // The two end alike (the suffix), and before that `short` is `full`'s start.
    let tail = short
        .iter()
        .rev()
        .zip(full.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        tail >= 8,
        "the suffix survives truncation ({tail} ids alike)"
    );
    let cut = short.len() - tail;
    assert_eq!(short[..cut], full[..cut], "the pair is cut at its end");
    let err = RerankPrompt::new(&tok, RerankTemplate::Qwen3Reranker, None, 40)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("leaves no room for the pair"), "{err}");
}

#[test]
fn p_yes_matches_hf_float64() {
    let be = CpuBackend::F32;
    let tok = tokenizer();
    let dir = fixture("qwen3_reranker");
    let model = load(&dir);
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let ids: Vec<u32> = ["no", "yes"]
        .iter()
        .map(|t| tok.tokenizer.token_to_id(t).unwrap())
        .collect();
    let head = model.label_head(&be, &ids).unwrap();
    for suffix in ["", "_instruction"] {
        let seqs = common::id_sequences(&g, suffix);
        let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let logits = model.last_token_logits(&be, &refs, &head).unwrap();
        let p_yes: Vec<f32> = logits
            .iter()
            .map(|l| 1.0 / (1.0 + (l[0] - l[1]).exp()))
            .collect();
        let err = rel_err(&p_yes, &g[&format!("p_yes{suffix}")].f64);
        eprintln!("qwen3 reranker p_yes{suffix}: max rel err {err:e}");
        assert!(err <= 1e-5, "p_yes{suffix}: {err:e}");
    }
}

#[test]
fn sequence_classifier_logits_match_hf_float64() {
    let be = CpuBackend::F32;
    let dir = fixture("qwen3_seqcls");
    let model = load(&dir);
    assert_eq!(model.config.score_labels, Some(1));
    let seqs = common::id_sequences(
        &common::read_golden(&fixture("qwen3_reranker/golden.safetensors")),
        "",
    );
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let logits = model
        .last_token_logits(&be, &refs, model.score_head().unwrap())
        .unwrap();
    let got: Vec<f32> = logits.iter().map(|l| l[0]).collect();
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let err = rel_err(&got, &g["logits"].f64);
    eprintln!("qwen3 seq-cls logits: max rel err {err:e}");
    assert!(err <= 1e-5, "{err:e}");
    // A classifier has no LM head: token scoring is refused, naming what it is.
    let seq = hopscore::model::decoder::ScoredSequence {
        ids: seqs[0].clone(),
        target_start: 1,
    };
    let e = model
        .target_logprobs(&be, &[seq], 1.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("sequence classifier"), "{e}");
}

#[test]
fn shared_prefixes_do_not_change_the_scores() {
    // The pairs of one question share the template and the question: with prefix reuse
    // off, every logit is the same to f32 rounding of a different summation order.
    let be = CpuBackend::F32;
    let tok = tokenizer();
    let mut model = load(&fixture("qwen3_reranker"));
    let seqs = common::id_sequences(
        &common::read_golden(&fixture("qwen3_reranker/golden.safetensors")),
        "",
    );
    let refs: Vec<&[u32]> = seqs[..10].iter().map(Vec::as_slice).collect();
    let ids = [
        tok.tokenizer.token_to_id("no").unwrap(),
        tok.tokenizer.token_to_id("yes").unwrap(),
    ];
    let head = model.label_head(&be, &ids).unwrap();
    let shared = model.last_token_logits(&be, &refs, &head).unwrap();
    let (all, ran) = model.token_counts();
    assert!(
        ran < all,
        "the shared prefix ran once ({ran} of {all} tokens)"
    );
    model.min_shared_prefix = 0;
    let plain = model.last_token_logits(&be, &refs, &head).unwrap();
    for (a, b) in shared.iter().flatten().zip(plain.iter().flatten()) {
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
    }
}
