//! Causal LMs against HF transformers goldens (tests/fixtures/decoder, written by
//! tools/goldens/make_decoder_goldens.py).
//!
//! Tiny random checkpoints (GPT-2; Llama with GQA, an untied head and llama3 RoPE
//! scaling; Qwen2 with q/k/v bias and a tied head): every per-token log-probability
//! within 1e-4 (f32), at temperature 1 and 1.4. The sequences of a case are scored in
//! one packed batch (HF ran them right-padded).

mod common;

use hopscore::backend::cpu::CpuBackend;
use hopscore::model::decoder::{DecoderForCausalLM, DecoderSource, ScoredSequence};

const TOL: f32 = 1e-4;

/// Largest error over all sequences of a case and both temperatures.
fn check_case(name: &str) -> f32 {
    let dir = common::fixture(&format!("decoder/{name}"));
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let be = CpuBackend;
    let model = DecoderForCausalLM::load(&be, DecoderSource::open(&dir).unwrap()).unwrap();
    let (ids, mask) = (&g["input_ids"], &g["attention_mask"]);
    let (b, l) = (ids.shape[0], ids.shape[1]);
    let seqs: Vec<ScoredSequence> = (0..b)
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
        .collect();
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

/// Scoring only a suffix of one sequence, alone, gives the values of the packed
/// full-sequence golden.
#[test]
fn target_suffix_and_packing_are_consistent() {
    let dir = common::fixture("decoder/llama_gqa_untied");
    let g = common::read_golden(&dir.join("golden.safetensors"));
    let be = CpuBackend;
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
        let be = CpuBackend;
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
