//! SmolLM2-135M-Instruct (llama architecture, GGUF Q4_1) against HF transformers
//! loading the same GGUF (tests/fixtures/decoder/smollm2_lepus, written by
//! tools/goldens/make_decoder_goldens.py): 24 LEPUS prompt/question pairs from HotpotQA dev.
//!
//! - scoring: every target-token log-probability within 1e-3 of HF's, all pairs in one
//!   packed batch (needs weights/smollm2/, fetched by tools/fetch_smollm2.sh);
//! - tokenizer: the tokenizer built from GGUF metadata gives HF's ids for the texts
//!   rebuilt from the HotpotQA slice of tests/fixtures/data (the 16 pairs it holds).

use crate::common;

use hopscore::backend::cpu::CpuBackend;
use hopscore::model::decoder::{DecoderForCausalLM, DecoderSource, ScoredSequence};
use hopscore::model::gguf::GgufFile;
use hopscore::text::causal_tokenizer;

const TOL: f32 = 1e-3;

struct GoldenPairs {
    seqs: Vec<ScoredSequence>,
    logprobs: Vec<f32>,
}

fn golden() -> GoldenPairs {
    let g = common::read_golden(&common::fixture("decoder/smollm2_lepus/golden.safetensors"));
    let ids = &g["ids"].i64;
    let mut seqs = Vec::new();
    let mut at = 0;
    for (&len, &ts) in g["lengths"].i64.iter().zip(&g["target_start"].i64) {
        let (len, ts) = (len as usize, ts as usize);
        seqs.push(ScoredSequence {
            ids: ids[at..at + len].iter().map(|&x| x as u32).collect(),
            target_start: ts,
        });
        at += len;
    }
    GoldenPairs {
        seqs,
        logprobs: g["target_logprobs"].f32.clone(),
    }
}

#[test]
fn smollm2_gguf_target_logprobs_match_transformers() {
    let Some(gguf) = common::SMOLLM2_GGUF.require() else {
        return;
    };
    let be = CpuBackend::F32;
    let model = DecoderForCausalLM::load(&be, DecoderSource::open(&gguf).unwrap()).unwrap();
    assert_eq!(
        (
            model.config.num_layers,
            model.config.num_heads,
            model.config.num_kv_heads
        ),
        (30, 9, 3)
    );
    assert!(model.config.tie_word_embeddings);
    let g = golden();
    assert!(g.seqs.len() >= 20);
    let got: Vec<f32> = model
        .target_logprobs(&be, &g.seqs, 1.0)
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(got.len(), g.logprobs.len());
    let mut worst = 0f32;
    for (i, (a, b)) in got.iter().zip(&g.logprobs).enumerate() {
        let err = (a - b).abs();
        assert!(err <= TOL, "target token {i}: {a} vs HF {b}");
        worst = worst.max(err);
    }
    eprintln!(
        "smollm2: {} pairs, {} target tokens, max abs error {worst:e}",
        g.seqs.len(),
        got.len()
    );
}

#[test]
fn smollm2_gguf_tokenizer_matches_transformers_on_hotpot_prompts() {
    let Some(gguf) = common::SMOLLM2_GGUF.require() else {
        return;
    };
    let (pairs, add_bos) = common::smollm2_lepus_pairs();
    let file = GgufFile::open(&gguf).unwrap();
    let tok = causal_tokenizer::from_gguf(&file).unwrap();
    assert_eq!(tok.add_bos, add_bos);
    let g = golden();
    for pair in &pairs {
        let (id, prompt, want) = (&pair.id, &pair.prompt, &g.seqs[pair.index]);
        let target = format!(" {}", pair.question);
        let enc = tok.encode_pair(prompt, &target).unwrap();
        assert_eq!(enc.ids, want.ids, "{id}: token ids differ from HF");
        assert_eq!(enc.target_start, want.target_start, "{id}: prompt length");
    }
}

#[test]
fn smollm2_gguf_metadata_and_truncation() {
    let Some(path) = common::SMOLLM2_GGUF.require() else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.tensors.len(), 272);
    assert_eq!(
        file.get("llama.rope.freq_base").unwrap().as_f64(),
        Some(100_000.0)
    );
    let types = file.type_summary();
    assert_eq!((types["Q4_1"], types["F32"], types["Q8_0"]), (210, 61, 1));
    // The same file cut short fails with an error naming a tensor, never a panic.
    let bytes = std::fs::read(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in [10usize, 5_000, bytes.len() / 2, bytes.len() - 1] {
        let p = dir.path().join("cut.gguf");
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let err = GgufFile::open(&p)
            .err()
            .expect("a truncated file must not open")
            .to_string();
        assert!(
            err.contains("not a valid GGUF file") && err.contains("truncated"),
            "cut at {cut}: {err}"
        );
    }
}

/// The Q4_1 projections and the Q8_0 embedding keep their blocks as stored (what
/// `--cpu-gemm q8` multiplies): 4-bit values with a scale and a min per 32 weights,
/// whose dequantisation is the f32 tensor the other modes use.
#[test]
fn smollm2_gguf_blocks_are_kept_as_stored() {
    let Some(path) = common::SMOLLM2_GGUF.require() else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    for (name, rows, cols, asymmetric, range) in [
        ("blk.0.attn_q.weight", 576, 576, true, 0..=15),
        ("blk.29.ffn_down.weight", 576, 1536, true, 0..=15),
        ("token_embd.weight", 49_152, 576, false, -127..=127),
    ] {
        let t = file.tensor(name).unwrap();
        let stored = t.stored.as_ref().expect(name);
        assert_eq!(
            (stored.rows, stored.cols, stored.block),
            (rows, cols, 32),
            "{name}"
        );
        assert_eq!(stored.min.is_some(), asymmetric, "{name}");
        assert!(stored.q.iter().all(|q| range.contains(q)), "{name}");
        assert_eq!(stored.dequantize(), t.data, "{name}");
    }
    assert!(file
        .tensor("blk.0.attn_norm.weight")
        .unwrap()
        .stored
        .is_none());
}
