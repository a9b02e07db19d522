//! Whole models on both backends from the same rounded weights: the DeBERTa fixtures
//! (hidden states and every head), the cross-encoder rerankers (BERT, XLM-R,
//! ModernBERT) and the Qwen3 LLM rerankers, the BERT embedder, the decoders (GPT-2,
//! Llama-GQA, Qwen2/3; log-probs with and without shared prefixes) and T5.

use super::hopper::widened_checkpoint;
use super::*;
use std::path::{Path, PathBuf};

use hopscore::backend::cpu::CpuBackend;
use hopscore::backend::cuda::{CudaBackend, DType};
use hopscore::backend::Backend;
use hopscore::model::batch::PackedBatch;
use hopscore::model::config::EncoderFamily;
use hopscore::model::cross_encoder::{CrossEncoder, ModelFiles};
use hopscore::model::decoder::{
    DecoderForCausalLM, DecoderSource, ScoredSequence, MIN_SHARED_PREFIX,
};
use hopscore::model::language_model::load_language_model;
use hopscore::tensor::HostTensor;
use hopscore::text::causal_tokenizer::CausalTokenizer;

/// A copy of checkpoint `src` (its files; the weights, `model.safetensors` or its
/// shards, with every float tensor rounded to `dtype` and stored as f32), so that the
/// CPU reference holds the weights the GPU holds and the comparison measures the
/// kernels' rounding only. f32 uses `src` itself.
pub(crate) fn rounded_checkpoint(src: &Path, dst: &Path, dtype: DType) -> PathBuf {
    if dtype == DType::F32 {
        return src.to_path_buf();
    }
    for e in std::fs::read_dir(src).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap();
        // The weights: `model.safetensors` or the shards of an index (a fixture's
        // other files, goldens included, are copied as they are).
        let weights = name
            .to_str()
            .is_some_and(|n| n.starts_with("model") && n.ends_with(".safetensors"));
        if weights {
            round_file(&path, &dst.join(name), dtype);
        } else {
            std::fs::copy(&path, dst.join(name)).unwrap();
        }
    }
    dst.to_path_buf()
}

/// One safetensors file with every tensor rounded to `dtype` (stored as f32).
fn round_file(src: &Path, dst: &Path, dtype: DType) {
    use safetensors::{Dtype, SafeTensors};
    let bytes = std::fs::read(src).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let tensors = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let values: Vec<f32> = match view.dtype() {
                Dtype::F32 => DType::F32.decode(view.data()),
                Dtype::BF16 => DType::Bf16.decode(view.data()),
                Dtype::F16 => DType::F16.decode(view.data()),
                other => panic!("{name}: unexpected dtype {other:?}"),
            };
            (name, view.shape().to_vec(), values)
        })
        .collect();
    write_rounded(tensors, dst, dtype);
}

/// Writes `(name, shape, values)` tensors to safetensors file `dst` as f32, each value
/// rounded to `dtype` first.
pub(crate) fn write_rounded(
    tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
    dst: &Path,
    dtype: DType,
) {
    use safetensors::{tensor::TensorView, Dtype};
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(name, shape, values)| {
            let rounded = dtype.decode(&dtype.encode(&values));
            (name, shape, DType::F32.encode(&rounded))
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, shape, data)| {
            let view = TensorView::new(Dtype::F32, shape.clone(), data).unwrap();
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, dst).unwrap();
}

/// Prints the whole-model line and asserts the bound.
pub(crate) fn check_model(what: &str, dtype: DType, err: f32, tol: f32) {
    let ok = err <= tol;
    eprintln!(
        "{:<5} {dtype:?} {what}: rel err {err:.2e}",
        if ok { "ok" } else { "FAIL" }
    );
    assert!(ok, "{what} {dtype:?}: rel err {err:e} > {tol:e}");
}

/// A whole DeBERTa fixture model on both backends: hidden states on real tokens and
/// every head's logits; returns the largest relative error.
fn deberta_err(fixture: &str, dtype: DType) -> Option<f32> {
    deberta_err_on(&common::gpu(dtype)?, fixture, dtype)
}

fn deberta_err_on(gpu: &CudaBackend, fixture: &str, dtype: DType) -> Option<f32> {
    let fixture_dir = common::fixture(&format!("deberta/{fixture}"));
    let case = common::golden_sequences(&common::read_golden(
        &fixture_dir.join("golden.safetensors"),
    ));
    let tmp = tempfile::tempdir().unwrap();
    let dir = rounded_checkpoint(&fixture_dir, tmp.path(), dtype);
    Some(deberta_checkpoint_err(
        gpu,
        fixture,
        &dir,
        &PackedBatch::pack(&case.seqs),
    ))
}

/// The DeBERTa checkpoint in `dir` (weights already rounded to the GPU's dtype) on both
/// backends over `batch`: the largest relative error of the hidden states on real
/// tokens and of every head's logits.
pub(crate) fn deberta_checkpoint_err(
    gpu: &CudaBackend,
    what: &str,
    dir: &Path,
    batch: &PackedBatch,
) -> f32 {
    // The path without graphs (graph replay equals it: `deberta_graphs_*`).
    gpu.set_cuda_graphs(false);
    let cpu_model =
        CrossEncoder::load(&CpuBackend::F32, ModelFiles::open(dir).unwrap(), None).unwrap();
    let want = cpu_model.forward(&CpuBackend::F32, batch, true).unwrap();
    let gpu_model = CrossEncoder::load(gpu, ModelFiles::open(dir).unwrap(), None).unwrap();
    check_encoder_counts(what, gpu, &gpu_model, batch);
    check_head_counts(what, gpu, &gpu_model, batch);
    let got = gpu_model.forward(gpu, batch, true).unwrap();
    let real: Vec<bool> = batch.layout.mask.iter().map(|&m| m == 1.0).collect();
    let keep = |h: &HostTensor| -> Vec<f32> {
        let w = h.shape[1];
        h.data
            .chunks_exact(w)
            .zip(&real)
            .filter(|(_, &r)| r)
            .flat_map(|(row, _)| row.iter().copied())
            .collect()
    };
    let (gh, wh) = (got.hidden.unwrap(), want.hidden.unwrap());
    let mut err = rel_err(&keep(&gh), &keep(&wh));
    eprintln!("  {what} hidden: rel err {err:.2e}");
    for (g, w) in got.logits.iter().zip(&want.logits) {
        let e = if g.shape[0] == real.len() {
            rel_err(&keep(g), &keep(w))
        } else {
            rel_err(&g.data, &w.data)
        };
        eprintln!("  {what} logits {:?}: rel err {e:.2e}", g.shape);
        err = err.max(e);
    }
    err
}

/// The host path of one encoder forward: its inputs in one upload, at most 8 launches
/// per layer (fused QKV GEMM, attention, 3 GEMMs with bias epilogues, GELU, 2
/// LayerNorms) plus the embedding, its LayerNorm, the mask and an `embed_proj`. A
/// ModernBERT layer (pre-LN) is at most 10 (2 copies and LayerNorms, the QKV GEMM, 2
/// RoPE, attention, the output GEMM, `Wi`, the gate, `Wo`; layer 0 has no first norm).
fn check_encoder_counts(
    fixture: &str,
    gpu: &CudaBackend,
    model: &CrossEncoder<CudaBackend>,
    batch: &PackedBatch,
) {
    let before = gpu.counts().unwrap();
    model.encoder.forward_staged(gpu, batch).unwrap();
    let c = gpu.counts().unwrap().since(&before);
    let layers = model.config.num_layers as u64;
    eprintln!("  {fixture}: {c:?} over {layers} layers");
    assert_eq!(c.uploads, 1, "{fixture}: {c:?}");
    let (per_layer, copies) = match model.config.family {
        EncoderFamily::ModernBert => (10, 2 * layers - 1),
        _ => (8, 0),
    };
    assert!(
        c.launches + c.gemms <= per_layer * layers + 4,
        "{fixture}: {c:?}"
    );
    assert_eq!(
        (c.downloads, c.device_copies),
        (0, copies),
        "{fixture}: {c:?}"
    );
}

/// Each head is one kernel (`cls_head` or `token_head`: the [CLS] gather or mean,
/// pooler, GELU and classifier, or the token logits and labels) and one download of
/// its f32 logits, with no upload (the sequence starts are the staged layout's). A
/// ModernBERT sequence head pools by `cls_head`, back up, then its prediction head and
/// classifier: 3 launches, 2 GEMMs, 1 upload, 2 downloads; its token head 2 launches
/// (GELU, LayerNorm) and `token_head`, 1 GEMM.
fn check_head_counts(
    fixture: &str,
    gpu: &CudaBackend,
    model: &CrossEncoder<CudaBackend>,
    batch: &PackedBatch,
) {
    let (hidden, staged) = model.encoder.forward_staged(gpu, batch).unwrap();
    for head in &model.heads {
        let before = gpu.counts().unwrap();
        head.forward(gpu, &hidden, &staged).unwrap();
        let c = gpu.counts().unwrap().since(&before);
        eprintln!("  {fixture} head {}: {c:?}", head.spec.name);
        let want = match (model.config.family, head.spec.per_sequence()) {
            (EncoderFamily::ModernBert, true) => (3, 2, 1, 2),
            (EncoderFamily::ModernBert, false) => (3, 1, 0, 1),
            _ => (1, 0, 0, 1),
        };
        assert_eq!(
            (c.launches, c.gemms, c.uploads, c.downloads),
            want,
            "{fixture} head {}: {c:?}",
            head.spec.name
        );
    }
}

pub(crate) const DEBERTA_MODELS: [&str; 7] = [
    "v3_seqcls",
    "v3_seqcls_gelu_tanh",
    "v3_norel",
    "v3_token_f16",
    "v2_seqcls_bf16",
    "beam_retrieval",
    "efficientrag_labeler",
];

/// Each of `models` through `err` in `dtype` within `tol` (none without a device);
/// each model's line gives the seconds both backends took.
fn check_models(models: &[&str], dtype: DType, tol: f32, err: impl Fn(&str, DType) -> Option<f32>) {
    for m in models {
        let started = std::time::Instant::now();
        let Some(e) = err(m, dtype) else {
            return;
        };
        let what = format!("{m} ({:.1} s)", started.elapsed().as_secs_f64());
        check_model(&what, dtype, e, tol);
    }
}

#[test]
fn deberta_models_f32() {
    check_models(
        &DEBERTA_MODELS,
        DType::F32,
        tolerance(DType::F32),
        deberta_err,
    );
}

/// Whole DeBERTa models in bf16 (weights rounded alike on both sides) carry every
/// op's activation rounding through the layers and into heads whose random-weight
/// logits are small sums of cancelling terms: measured 6e-3 to 1.8e-2, so the bound
/// is twice the per-op one.
pub(crate) const BF16_MODEL_TOLERANCE: f32 = 2e-2;

#[test]
fn deberta_models_bf16() {
    check_models(
        &DEBERTA_MODELS,
        DType::Bf16,
        BF16_MODEL_TOLERANCE,
        deberta_err,
    );
}

/// The random cross-encoders of tests/fixtures/rerank (BERT sequence and token heads,
/// XLM-R and RoBERTa with their offset positions and `classifier.dense` → tanh →
/// `out_proj` heads, ModernBERTs with a sliding-window layer, GeGLU and their
/// prediction heads) on both backends over the first 16 of their golden pairs (2,000
/// tokens: the emulator runs the kernels on the CPU; 4 for ModernBERT): hidden states and logits;
/// returns the largest relative error.
fn reranker_err(fixture: &str, dtype: DType) -> Option<f32> {
    let gpu = common::gpu(dtype)?;
    let fixture_dir = common::fixture(&format!("rerank/{fixture}"));
    let mut seqs = common::concatenated_sequences(&common::read_golden(
        &fixture_dir.join("golden.safetensors"),
    ));
    // ModernBERT's attention is the T5 op, slow on the emulator: 4 pairs (≈ 480
    // tokens, still past its ±8-token window).
    seqs.truncate(if fixture.starts_with("modernbert") {
        4
    } else {
        16
    });
    let tmp = tempfile::tempdir().unwrap();
    let dir = rounded_checkpoint(&fixture_dir, tmp.path(), dtype);
    Some(deberta_checkpoint_err(
        &gpu,
        fixture,
        &dir,
        &PackedBatch::pack(&seqs),
    ))
}

const RERANKER_MODELS: [&str; 7] = [
    "bert_seqcls",
    "bert_token",
    "xlmr_seqcls",
    "roberta_seqcls",
    "modernbert_seqcls",
    "modernbert_cls",
    "modernbert_token",
];

#[test]
fn reranker_models_f32() {
    check_models(
        &RERANKER_MODELS,
        DType::F32,
        tolerance(DType::F32),
        reranker_err,
    );
}

/// The rerankers in bf16: hidden states within 8.4e-3 – 8.9e-3 of the CPU's f32 (as
/// the DeBERTa models), the one-label logits of XLM-R's random `dense → tanh →
/// out_proj` head up to 2.4e-2 of their largest (measured on the emulator): the bound
/// is [`BF16_MODEL_TOLERANCE`] with that head's margin.
const BF16_RERANKER_TOLERANCE: f32 = 3e-2;

#[test]
fn reranker_models_bf16() {
    check_models(
        &RERANKER_MODELS,
        DType::Bf16,
        BF16_RERANKER_TOLERANCE,
        reranker_err,
    );
}

/// The random Qwen3 rerankers of tests/fixtures/rerank on both backends over their
/// first 3 golden sequences (one question's pairs: the shared template and question run
/// once; ≈ 1,500 tokens): the label tokens' logits of the causal LM (its gathered
/// LM-head rows) and the classifier conversion's `score` logits at the last token;
/// returns the largest relative error.
fn llm_reranker_err(fixture: &str, dtype: DType) -> Option<f32> {
    let gpu = common::gpu(dtype)?;
    gpu.set_cuda_graphs(false);
    let g = common::read_golden(&common::fixture("rerank/qwen3_reranker/golden.safetensors"));
    let mut seqs = common::id_sequences(&g, "");
    seqs.truncate(3);
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = rounded_checkpoint(
        &common::fixture(&format!("rerank/{fixture}")),
        tmp.path(),
        dtype,
    );
    let tok = CausalTokenizer::from_dir(&common::fixture("rerank/bpe"), None).unwrap();
    let labels = ["no", "yes"].map(|t| tok.tokenizer.token_to_id(t).unwrap());
    fn last_logits<B: Backend>(be: &B, dir: &Path, labels: &[u32], seqs: &[&[u32]]) -> Vec<f32> {
        let model = DecoderForCausalLM::load(be, DecoderSource::open(dir).unwrap()).unwrap();
        let head = match model.score_head() {
            Some(h) => be.copy(h).unwrap(),
            None => model.label_head(be, labels).unwrap(),
        };
        model.last_token_logits(be, seqs, &head).unwrap().concat()
    }
    let want = last_logits(&CpuBackend::F32, &dir, &labels, &refs);
    let got = last_logits(&gpu, &dir, &labels, &refs);
    Some(rel_err(&got, &want))
}

const LLM_RERANKER_MODELS: [&str; 2] = ["qwen3_reranker", "qwen3_seqcls"];

#[test]
fn llm_reranker_models_f32() {
    check_models(
        &LLM_RERANKER_MODELS,
        DType::F32,
        tolerance(DType::F32),
        llm_reranker_err,
    );
}

#[test]
fn llm_reranker_models_bf16() {
    check_models(
        &LLM_RERANKER_MODELS,
        DType::Bf16,
        BF16_MODEL_TOLERANCE,
        llm_reranker_err,
    );
}

/// The random BERT of tests/fixtures/bert (Contriever layout: absolute positions, token
/// types, BERT's projection names) through the embedder on both backends: the last
/// hidden state and the mean-pooled, normalised embedding of each sequence.
fn check_bert(dtype: DType, tol: f32) {
    use hopscore::model::bert::{BertEmbedder, EmbeddingHead, Pooling};
    let Some(gpu) = common::gpu(dtype) else {
        return;
    };
    gpu.set_cuda_graphs(false);
    let fixture_dir = common::fixture("bert/random_plain");
    let case = common::golden_sequences(&common::read_golden(
        &fixture_dir.join("golden.safetensors"),
    ));
    let batch = PackedBatch::pack(&case.seqs);
    let tmp = tempfile::tempdir().unwrap();
    let dir = rounded_checkpoint(&fixture_dir, tmp.path(), dtype);
    let head = EmbeddingHead {
        pooling: Pooling::Mean,
        normalize: true,
        max_seq_length: None,
    };
    let cpu = BertEmbedder::load(&CpuBackend::F32, &dir, Some(head.clone())).unwrap();
    let dev = BertEmbedder::load(&gpu, &dir, Some(head)).unwrap();
    for (what, got, want) in [
        (
            "bert hidden",
            dev.last_hidden_state(&gpu, &batch).unwrap(),
            cpu.last_hidden_state(&CpuBackend::F32, &batch).unwrap(),
        ),
        (
            "bert embedding",
            dev.embed(&gpu, &batch).unwrap(),
            cpu.embed(&CpuBackend::F32, &batch).unwrap(),
        ),
    ] {
        check_model(what, dtype, rel_err(&got.data, &want.data), tol);
    }
}

#[test]
fn bert_models_f32() {
    check_bert(DType::F32, tolerance(DType::F32));
}

#[test]
fn bert_models_bf16() {
    check_bert(DType::Bf16, BF16_MODEL_TOLERANCE);
}

#[test]
fn bert_models_f16() {
    check_bert(DType::F16, tolerance(DType::F16));
}

/// Ragged sequences of random ids (one without targets, a suffix-only one); the last three continue the 40-token one's first 30 tokens (as
/// LEPUS paths share a first passage), so shared-prefix reuse has work to do.
pub(crate) fn scored_sequences(vocab: usize) -> Vec<ScoredSequence> {
    let mut rng = fastrand::Rng::with_seed(17);
    let mut seqs: Vec<ScoredSequence> = [(1, 1), (5, 1), (17, 9), (40, 1)]
        .iter()
        .map(|&(len, target_start)| ScoredSequence {
            ids: (0..len).map(|_| rng.u32(0..vocab as u32)).collect(),
            target_start,
        })
        .collect();
    let shared = seqs[3].ids[..30].to_vec();
    for (tail, target_start) in [(6, 31), (1, 20), (12, 30)] {
        let mut ids = shared.clone();
        ids.extend((0..tail).map(|_| rng.u32(0..vocab as u32)));
        seqs.push(ScoredSequence { ids, target_start });
    }
    seqs
}

pub(crate) const DECODER_MODELS: [&str; 4] = [
    "gpt2",
    "llama_gqa_untied",
    "qwen2_bias_tied",
    "qwen3_qk_norm",
];

/// Every tiny decoder on both backends: `target_logprobs` of ragged packed sequences
/// at T = 1 and 1.4, within the per-op bound.
fn check_decoders(dtype: DType) {
    let Some(gpu) = common::gpu(dtype) else {
        return;
    };
    gpu.set_cuda_graphs(false);
    for name in DECODER_MODELS {
        let fixture = common::fixture(&format!("decoder/{name}"));
        let tmp = tempfile::tempdir().unwrap();
        let dir = rounded_checkpoint(&fixture, tmp.path(), dtype);
        let cpu =
            DecoderForCausalLM::load(&CpuBackend::F32, DecoderSource::open(&dir).unwrap()).unwrap();
        let mut model = DecoderForCausalLM::load(&gpu, DecoderSource::open(&dir).unwrap()).unwrap();
        let seqs = scored_sequences(cpu.config.vocab_size);
        // The CPU reference reuses shared prefixes (its scores equal the unshared ones
        // exactly, tests/decoder_parity.rs); the GPU runs with and without.
        for (t, min_shared) in [
            (1.0f32, MIN_SHARED_PREFIX),
            (1.4, MIN_SHARED_PREFIX),
            (1.4, 0),
        ] {
            let want = cpu.target_logprobs(&CpuBackend::F32, &seqs, t).unwrap();
            model.min_shared_prefix = min_shared;
            let before = gpu.counts().unwrap();
            let got = model.target_logprobs(&gpu, &seqs, t).unwrap();
            // Every host input of the pass in one upload, the log-probabilities back in one.
            let c = gpu.counts().unwrap().since(&before);
            assert_eq!((c.uploads, c.downloads), (1, 1), "{name}: {c:?}");
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.len(), w.len());
            }
            let err = rel_err(&got.concat(), &want.concat());
            check_model(
                &format!("{name} target_logprobs T={t} min_shared_prefix={min_shared}"),
                dtype,
                err,
                tolerance(dtype),
            );
        }
    }
}

#[test]
fn decoder_models_f32() {
    check_decoders(DType::F32);
}

#[test]
fn decoder_models_bf16() {
    check_decoders(DType::Bf16);
}

#[test]
fn decoder_models_f16() {
    check_decoders(DType::F16);
}

/// The fused gate/up GEMM in a whole model: `llama_gqa_untied` with its MLP widened from
/// 96 to 128 (a multiple of the gate/up blocks of 64; the fixtures' widths are not, so
/// they run the halves layout and the unfused path) against the CPU, with the fused
/// kernel on and off. On a Hopper GPU in bf16/f16 the fused pass runs one GEMM a layer
/// fewer (the gate/up projection is the CUTLASS kernel); elsewhere both are the same path.
fn check_gated_blocks(dtype: DType) {
    let Some(gpu) = common::gpu(dtype) else {
        return;
    };
    gpu.set_cuda_graphs(false);
    let tmp = tempfile::tempdir().unwrap();
    let dir = widened_checkpoint(
        "decoder/llama_gqa_untied",
        tmp.path(),
        dtype,
        &[("intermediate_size", 128)],
    );
    let cpu =
        DecoderForCausalLM::load(&CpuBackend::F32, DecoderSource::open(&dir).unwrap()).unwrap();
    let model = DecoderForCausalLM::load(&gpu, DecoderSource::open(&dir).unwrap()).unwrap();
    let seqs = scored_sequences(cpu.config.vocab_size);
    let want = cpu.target_logprobs(&CpuBackend::F32, &seqs, 1.0).unwrap();
    let mut gemms = Vec::new();
    for fused in [true, false] {
        gpu.set_fused_gate(fused);
        let before = gpu.counts().unwrap();
        let got = model.target_logprobs(&gpu, &seqs, 1.0).unwrap();
        gemms.push(gpu.counts().unwrap().since(&before).gemms);
        let err = rel_err(&got.concat(), &want.concat());
        check_model(
            &format!("llama, inter 128, fused gate {fused}"),
            dtype,
            err,
            tolerance(dtype),
        );
    }
    gpu.set_fused_gate(true);
    let hopper = gpu.device().ctx.compute_capability().unwrap() == (9, 0);
    let fused_runs = cfg!(hopscore_cutlass) && hopper && dtype != DType::F32;
    // Fused: one GEMM fewer per layer and pass.
    let fewer = gemms[1] - gemms[0];
    let layers = cpu.config.num_layers as u64;
    let as_expected = match fused_runs {
        true => fewer > 0 && fewer % layers == 0,
        false => fewer == 0,
    };
    assert!(
        as_expected,
        "GEMMs with the fused gate on and off: {gemms:?}"
    );
}

#[test]
fn llama_gated_blocks_f32() {
    check_gated_blocks(DType::F32);
}

#[test]
fn llama_gated_blocks_bf16() {
    check_gated_blocks(DType::Bf16);
}

#[test]
fn llama_gated_blocks_f16() {
    check_gated_blocks(DType::F16);
}

/// The random T5 checkpoints (tests/fixtures/t5: v1.0 relu + tied, v1.1 gated-GELU +
/// untied, sharded) on both backends: `target_logprobs` of the 6 shortest golden LEPUS
/// prompts (114 to 264 encoder tokens; the emulator runs every thread of every block) at
/// T = 1 and 1.7, within the per-op bound, from one upload and one download per pass.
/// On the emulator f16 takes the 2 shortest (it converts f16 in software: the 6 took
/// 247 s there; its kernels are bf16's templates, which take all 6) and f32 the 3
/// shortest (its scalar kernels took 229 s for the 6).
fn check_t5(dtype: DType) {
    let Some(gpu) = common::gpu(dtype) else {
        return;
    };
    // One temperature a dtype (each pass is a whole model on the emulator, ≈ 35 s; the
    // temperature is the log-likelihood kernel's, which the decoders test at two).
    let t = if dtype == DType::Bf16 { 1.0 } else { 1.7 };
    for name in ["v1_0", "v1_1"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = rounded_checkpoint(&common::fixture(&format!("t5/{name}")), tmp.path(), dtype);
        let cpu = load_language_model(&CpuBackend::F32, &dir).unwrap();
        let model = load_language_model(&gpu, &dir).unwrap();
        let mut seqs: Vec<ScoredSequence> = common::t5_golden_sequences(name)
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        seqs.sort_by_key(|s| s.target_start);
        seqs.truncate(match dtype {
            DType::F16 if on_emulator(&gpu) => 2,
            DType::F32 if on_emulator(&gpu) => 3,
            _ => 6,
        });
        let want = cpu.target_logprobs(&CpuBackend::F32, &seqs, t).unwrap();
        let before = gpu.counts().unwrap();
        let got = model.target_logprobs(&gpu, &seqs, t).unwrap();
        let c = gpu.counts().unwrap().since(&before);
        assert_eq!((c.uploads, c.downloads), (1, 1), "{name}: {c:?}");
        let err = rel_err(&got.concat(), &want.concat());
        check_model(
            &format!("t5 {name} target_logprobs T={t}"),
            dtype,
            err,
            tolerance(dtype),
        );
    }
}

#[test]
fn t5_models_f32() {
    check_t5(DType::F32);
}

#[test]
fn t5_models_bf16() {
    check_t5(DType::Bf16);
}

#[test]
fn t5_models_f16() {
    check_t5(DType::F16);
}
