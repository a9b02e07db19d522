//! Causal LMs against HF transformers goldens (tests/fixtures/decoder, written by
//! tools/goldens/make_decoder_goldens.py).
//!
//! Tiny random checkpoints (GPT-2; Llama with GQA, an untied head and llama3 RoPE
//! scaling; Qwen2 with q/k/v bias and a tied head; Qwen3 with q_norm/k_norm and a
//! head_dim apart from hidden / heads): every per-token log-probability
//! within 1e-4 (f32), at temperature 1 and 1.4. The sequences of a case are scored in
//! one packed batch (HF ran them right-padded).

use crate::common;

use std::collections::HashMap;

use hopscore::backend::cpu::CpuBackend;
use hopscore::model::decoder::{DecoderForCausalLM, DecoderSource, ScoredSequence};

const TOL: f32 = 1e-4;

/// The golden's right-padded rows as sequences scored from their second token on.
fn causal_sequences(g: &HashMap<String, common::Golden>) -> Vec<ScoredSequence> {
    let (ids, mask) = (&g["input_ids"], &g["attention_mask"]);
    let l = ids.shape[1];
    (0..ids.shape[0])
        .map(|r| {
            let n = mask.i64[r * l..(r + 1) * l]
                .iter()
                .filter(|&&m| m == 1)
                .count();
            ScoredSequence {
                ids: ids.i64[r * l..r * l + n]
                    .iter()
                    .map(|&x| x as u32)
                    .collect(),
                target_start: 1,
            }
        })
        .collect()
}

/// Largest error over all sequences of a case and both temperatures.
fn check_case(name: &str) -> f32 {
    let dir = common::fixture(&format!("decoder/{name}"));
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let be = CpuBackend::F32;
    let model = DecoderForCausalLM::load(&be, DecoderSource::open(&dir).unwrap()).unwrap();
    let seqs = causal_sequences(&g);
    let (b, l) = (seqs.len(), g["input_ids"].shape[1]);
    let mut worst = 0f32;
    for (key, t) in [("logprobs", 1.0f32), ("logprobs_t1.4", 1.4)] {
        let got = model.target_logprobs(&be, &seqs, t).unwrap();
        let gold = &g[key];
        assert_eq!(gold.shape, vec![b, l - 1]);
        for (r, (s, lp)) in seqs.iter().zip(&got).enumerate() {
            assert_eq!(
                lp.len(),
                s.ids.len() - 1,
                "{name}: one log-prob per target token"
            );
            for (i, v) in lp.iter().enumerate() {
                let want = gold.f32[r * (l - 1) + i];
                let err = (v - want).abs();
                assert!(
                    err <= TOL,
                    "{name} {key} seq {r} token {}: {v} vs HF {want}",
                    i + 1
                );
                worst = worst.max(err);
            }
        }
    }
    eprintln!("{name}: max abs error {worst:e}");
    worst
}

#[test]
fn gpt2_matches_transformers() {
    check_case("gpt2");
}

#[test]
fn llama_gqa_untied_llama3_rope_matches_transformers() {
    check_case("llama_gqa_untied");
}

#[test]
fn qwen2_bias_tied_matches_transformers() {
    check_case("qwen2_bias_tied");
}

#[test]
fn qwen3_qk_norm_matches_transformers() {
    check_case("qwen3_qk_norm");
}

/// `hopscore bench-loglik --scores` writes every per-token log-probability (the
/// golden's, in the order of the pairs, however the token budget batches them) and
/// reports the mean of the per-pair means.
#[test]
fn bench_loglik_scores_file_holds_every_token() {
    use hopscore::bench::loglik::{run, LoglikBench};
    let dir = common::fixture("decoder/gpt2");
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let seqs = causal_sequences(&g);
    let l = g["input_ids"].shape[1];
    let tmp = tempfile::tempdir().unwrap();
    let pairs: Vec<_> = seqs
        .iter()
        .map(|s| serde_json::json!({"ids": s.ids, "target_start": s.target_start}))
        .collect();
    let pairs_path = tmp.path().join("pairs.json");
    std::fs::write(
        &pairs_path,
        serde_json::json!({ "pairs": pairs }).to_string(),
    )
    .unwrap();
    let scores_path = tmp.path().join("scores.json");
    let longest = seqs.iter().map(|s| s.ids.len()).max().unwrap();
    let r = run(
        &CpuBackend::F32,
        &LoglikBench {
            model: dir,
            pairs: pairs_path,
            max_batch_tokens: longest, // one or two sequences per forward
            temperature: 1.0,
            warmup: 0,
            iters: 1,
            scores: Some(scores_path.clone()),
        },
    )
    .unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&scores_path).unwrap()).unwrap();
    let got = file["logprobs"].as_array().unwrap();
    assert_eq!(got.len(), seqs.len());
    let mut means = Vec::new();
    for (r, (s, lp)) in seqs.iter().zip(got).enumerate() {
        let lp: Vec<f64> = lp
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(lp.len(), s.ids.len() - 1);
        for (i, v) in lp.iter().enumerate() {
            let want = g["logprobs"].f32[r * (l - 1) + i] as f64;
            assert!(
                (v - want).abs() <= TOL as f64,
                "seq {r} token {}: {v} vs HF {want}",
                i + 1
            );
        }
        means.push(lp.iter().sum::<f64>() / lp.len() as f64);
    }
    let mean = means.iter().sum::<f64>() / means.len() as f64;
    assert!(
        (r.mean_loglik - mean).abs() < 1e-9,
        "{} vs {mean}",
        r.mean_loglik
    );
    assert_eq!(r.pairs, seqs.len());
}

/// Scoring only a suffix of one sequence, alone, gives the values of the packed
/// full-sequence golden.
#[test]
fn target_suffix_and_packing_are_consistent() {
    let dir = common::fixture("decoder/llama_gqa_untied");
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let be = CpuBackend::F32;
    let model = DecoderForCausalLM::load(&be, DecoderSource::open(&dir).unwrap()).unwrap();
    let ids: Vec<u32> = g["input_ids"].i64[..23].iter().map(|&x| x as u32).collect();
    let alone = model
        .target_logprobs(
            &be,
            &[ScoredSequence {
                ids: ids.clone(),
                target_start: 15,
            }],
            1.0,
        )
        .unwrap();
    let gold = &g["logprobs"].f32[14..22];
    assert_eq!(alone[0].len(), 8);
    for (a, b) in alone[0].iter().zip(gold) {
        assert!((a - b).abs() <= TOL, "{a} vs {b}");
    }
}

/// Sequences that share prefixes (four continuations of two prompts, as LEPUS paths
/// share a first passage) score exactly as without prefix reuse, on GPT-2 (learned
/// positions) and Llama (RoPE); the reuse packs fewer tokens.
#[test]
fn shared_prefix_reuse_gives_the_unshared_scores() {
    for name in ["gpt2", "llama_gqa_untied"] {
        let dir = common::fixture(&format!("decoder/{name}"));
        let g = common::read_golden(&dir.join("golden.safetensors"));
        let be = CpuBackend::F32;
        let mut model = DecoderForCausalLM::load(&be, DecoderSource::open(&dir).unwrap()).unwrap();
        let ids: Vec<u32> = g["input_ids"].i64.iter().map(|&x| x as u32).collect();
        let (a, b) = (&ids[..20], &ids[3..23]);
        let seq = |prefix: &[u32], tail: &[u32], target_start| ScoredSequence {
            ids: prefix.iter().chain(tail).copied().collect(),
            target_start,
        };
        // Tails with distinct first tokens, so each group shares exactly its prompt.
        let seqs = [
            seq(a, &ids[5..9], 18),
            seq(b, &ids[9..12], 20),
            seq(a, &ids[12..18], 21),
            seq(a, &ids[1..2], 5),
            seq(b, &ids[14..19], 22),
        ];
        model.min_shared_prefix = 0;
        let plain = model.target_logprobs(&be, &seqs, 1.3).unwrap();
        model.min_shared_prefix = 8;
        let shared = model.target_logprobs(&be, &seqs, 1.3).unwrap();
        assert_eq!(plain, shared, "{name}: scores differ with prefix reuse");
        let lists: Vec<&[u32]> = seqs.iter().map(|s| s.ids.as_slice()).collect();
        let plan = hopscore::model::prefix::PrefixPlan::new(&lists, 8).expect("prefixes shared");
        let total: usize = seqs.iter().map(|s| s.ids.len()).sum();
        // Two more runs of a's 20 tokens and one more of b's are saved, at least.
        assert!(
            plan.packed_tokens() <= total - 3 * 20,
            "{name}: packed tokens"
        );
    }
}
