//! Throughput on random weights of standard shapes — DeBERTa-v3 encoders and the
//! causal LMs LEPUS scores with — shared by `hopscore bench` and `benches/encoder.rs`.

pub mod loglik;

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use crate::backend::{Backend, DeviceCounts, KernelTime};
use crate::model::batch::{PackedBatch, Sequence};
use crate::model::config::{DebertaConfig, EncoderFamily, RelativeConfig, DEBERTA_PROJECTIONS};
use crate::model::cross_encoder::CrossEncoder;
use crate::model::decoder::{DecoderForCausalLM, ScoredSequence};
use crate::model::decoder_config::{DecoderConfig, Family};
use crate::model::weights::Weights;

/// Model shapes with published configs (random weights).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ModelShape {
    /// 4 layers, hidden 256 (quick checks).
    Small,
    /// microsoft/deberta-v3-base: 12 layers, hidden 768.
    DebertaV3Base,
    /// microsoft/deberta-v3-large: 24 layers, hidden 1024.
    DebertaV3Large,
    /// GPT-2 (124M): 12 layers, hidden 768; scores the last 32 tokens of each prompt.
    Gpt2,
    /// SmolLM2-135M: 30 layers, hidden 576, 9 heads over 3 KV heads; last 32 tokens.
    Smollm2,
}

/// Target tokens per prompt in the decoder benchmarks (a LEPUS question's length).
const DECODER_TARGETS: usize = 32;

impl ModelShape {
    /// The published config of a decoder shape (`None` for the encoders).
    pub fn decoder_config(self) -> Option<DecoderConfig> {
        let raw = match self {
            ModelShape::Gpt2 => serde_json::json!({
                "model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
                "n_head": 12, "n_positions": 1024, "layer_norm_epsilon": 1e-5
            }),
            ModelShape::Smollm2 => serde_json::json!({
                "model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
                "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                "intermediate_size": 1536, "max_position_embeddings": 8192,
                "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": true
            }),
            _ => return None,
        };
        let raw = serde_json::from_value(raw).expect("valid built-in config");
        Some(DecoderConfig::resolve(raw).expect("supported built-in config"))
    }

    /// The config of an encoder shape (`None` for the decoders).
    pub fn encoder_config(self) -> Option<DebertaConfig> {
        let (layers, hidden, heads) = match self {
            ModelShape::Small => (4, 256, 4),
            ModelShape::DebertaV3Base => (12, 768, 12),
            ModelShape::DebertaV3Large => (24, 1024, 16),
            ModelShape::Gpt2 | ModelShape::Smollm2 => return None,
        };
        Some(DebertaConfig {
            vocab_size: 128_100,
            hidden_size: hidden,
            embedding_size: hidden,
            num_layers: layers,
            num_heads: heads,
            head_size: hidden / heads,
            intermediate_size: 4 * hidden,
            max_position_embeddings: 512,
            type_vocab_size: 0,
            position_biased_input: false,
            layer_norm_eps: 1e-7,
            relative: Some(RelativeConfig {
                buckets: Some(256),
                max_relative_positions: 512,
                span: 256,
                c2p: true,
                p2c: true,
                share_att_key: true,
                norm_rel_ebd: true,
            }),
            scale_factor: 3,
            pooler_hidden_size: hidden,
            architectures: Vec::new(),
            tanh_gelu: false,
            projections: DEBERTA_PROJECTIONS,
            family: EncoderFamily::Deberta,
            position_offset: 0,
            token_types_from_input: true,
            modernbert: None,
        })
    }
}

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct BenchSpec {
    pub shape: ModelShape,
    pub seq_len: usize,
    pub batch: usize,
    pub warmup: usize,
    pub iters: usize,
    /// Size `n` of the `n³` GEMM that measures the device's peak (0: skip).
    pub peak_gemm: usize,
    /// Count the launches and copies of the profiled pass (devices only).
    pub profile: bool,
    /// Encoders: the FFN's GELU in its tanh form (`hidden_act: gelu_new`), on a GPU
    /// the up-projection GEMM's epilogue.
    pub tanh_gelu: bool,
}

/// Measured throughput (one JSON line with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub engine: &'static str,
    pub device: String,
    pub shape: ModelShape,
    pub seq_len: usize,
    pub batch: usize,
    pub iters: usize,
    pub threads: usize,
    pub seconds_per_batch: f64,
    pub tokens_per_s: f64,
    pub sequences_per_s: f64,
    /// Model FLOPs per second (GEMMs and attention products, multiply-add = 2).
    pub gflops: f64,
    /// Measured TFLOP/s of a large square GEMM in the same dtype (devices only).
    pub gemm_peak_tflops: Option<f64>,
    /// `gflops` as a share of `gemm_peak_tflops`.
    pub peak_share: Option<f64>,
    /// Device time per kernel over one extra profiled pass (devices only).
    pub kernels: Vec<KernelTime>,
    /// Transformer layers of the shape.
    pub layers: usize,
    /// Launches and copies of the profiled pass (`--profile`, devices only).
    pub per_forward: Option<DeviceCounts>,
}

/// FLOPs of one forward pass over `batch` sequences of `len` tokens.
pub fn encoder_flops(c: &DebertaConfig, len: usize, batch: usize) -> f64 {
    let (h, a, i) = (
        c.hidden_size as f64,
        c.all_head_size() as f64,
        c.intermediate_size as f64,
    );
    let l = len as f64;
    let linear = 2.0 * l * (3.0 * h * a + a * h + 2.0 * h * i);
    // QKᵀ and PV, plus c2p/p2c against the relative-position rows a sequence of this
    // length uses: min(2·span, 2L−1) (HF's 512 rows for deberta-v3 at L = 512).
    let rel = c.relative.as_ref().map_or(0.0, |r| {
        let terms = f64::from(u8::from(r.c2p) + u8::from(r.p2c));
        terms * (2.0 * r.span as f64).min(2.0 * l - 1.0)
    });
    let attention = 2.0 * a * l * (2.0 * l + rel);
    batch as f64 * c.num_layers as f64 * (linear + attention)
}

/// `batch` sequences of `len` pseudo-random ids in `[3, vocab)`, framed by ids 1 and 2.
fn random_ids(batch: usize, len: usize, vocab: usize) -> Vec<Vec<u32>> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..batch)
        .map(|_| {
            let mut ids: Vec<u32> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    3 + (state % (vocab as u64 - 3)) as u32
                })
                .collect();
            ids[0] = 1;
            ids[len - 1] = 2;
            ids
        })
        .collect()
}

/// FLOPs of scoring `batch` prompts of `len` tokens, `targets` of them each.
pub fn decoder_flops(c: &DecoderConfig, len: usize, batch: usize, targets: usize) -> f64 {
    let (h, q, i) = (
        c.hidden_size as f64,
        (c.num_heads * c.head_dim) as f64,
        c.intermediate_size as f64,
    );
    let kv = (c.num_kv_heads * c.head_dim) as f64;
    let l = len as f64;
    let mlp = match c.family {
        Family::Gpt2 => 2.0 * h * i,
        Family::Llama => 3.0 * h * i,
    };
    let linear = 2.0 * l * (h * (q + 2.0 * kv) + q * h + mlp);
    // Causal QKᵀ and PV: half of the L × L products.
    let attention = 2.0 * q * l * l;
    let head = 2.0 * targets as f64 * h * c.vocab_size as f64;
    batch as f64 * (c.num_layers as f64 * (linear + attention) + head)
}

pub fn run<B: Backend>(be: &B, spec: BenchSpec) -> Result<BenchResult> {
    if let Some(config) = spec.shape.decoder_config() {
        let mut model = DecoderForCausalLM::from_weights(be, &Weights::random(7), config.clone())?;
        // Random prompts share nothing; do not pay for looking.
        model.min_shared_prefix = 0;
        let targets = DECODER_TARGETS.min(spec.seq_len - 1);
        let seqs: Vec<ScoredSequence> = random_ids(spec.batch, spec.seq_len, config.vocab_size)
            .into_iter()
            .map(|ids| ScoredSequence {
                target_start: ids.len() - targets,
                ids,
            })
            .collect();
        let flops = decoder_flops(&config, spec.seq_len, spec.batch, targets);
        return measure(be, spec, flops, config.num_layers, || {
            model.target_logprobs(be, &seqs, 1.0).map(|_| ())
        });
    }
    let config = DebertaConfig {
        tanh_gelu: spec.tanh_gelu,
        ..spec
            .shape
            .encoder_config()
            .expect("every shape is an encoder or a decoder")
    };
    let model = CrossEncoder::from_weights(be, &Weights::random(7), config.clone(), Vec::new())?;
    let seqs: Vec<Sequence> = random_ids(spec.batch, spec.seq_len, config.vocab_size)
        .into_iter()
        .map(|ids| Sequence {
            ids,
            ..Default::default()
        })
        .collect();
    let batch = PackedBatch::pack(&seqs);
    let flops = encoder_flops(&config, spec.seq_len, spec.batch);
    measure(be, spec, flops, config.num_layers, || {
        model.forward(be, &batch, false).map(|_| ())
    })
}

/// Times `forward` (warm-up, timed passes, one profiled pass: kernel times, and with
/// `spec.profile` its launches and copies) and the GEMM peak.
fn measure<B: Backend>(
    be: &B,
    spec: BenchSpec,
    flops: f64,
    layers: usize,
    forward: impl Fn() -> Result<()>,
) -> Result<BenchResult> {
    for _ in 0..spec.warmup {
        forward()?;
    }
    be.synchronize()?;
    let t = Instant::now();
    for _ in 0..spec.iters {
        forward()?;
    }
    be.synchronize()?;
    let per_batch = t.elapsed().as_secs_f64() / spec.iters.max(1) as f64;
    // Counted over a forward as timed (with CUDA graphs: a replay); the profiled pass
    // times each kernel, so it runs without graphs.
    let before = be.counts();
    if spec.profile {
        forward()?;
    }
    let per_forward = match (spec.profile, be.counts(), before) {
        (true, Some(after), Some(before)) => Some(after.since(&before)),
        _ => None,
    };
    be.start_profile();
    forward()?;
    let kernels = be.finish_profile()?;
    let gemm_peak_tflops = match spec.peak_gemm {
        0 => None,
        n => be.gemm_tflops(n, 10)?,
    };
    let gflops = flops / per_batch / 1e9;
    Ok(BenchResult {
        engine: "hopscore",
        device: be.name(),
        shape: spec.shape,
        seq_len: spec.seq_len,
        batch: spec.batch,
        iters: spec.iters,
        threads: rayon::current_num_threads(),
        seconds_per_batch: per_batch,
        tokens_per_s: (spec.batch * spec.seq_len) as f64 / per_batch,
        sequences_per_s: spec.batch as f64 / per_batch,
        gflops,
        gemm_peak_tflops,
        peak_share: gemm_peak_tflops.map(|p| gflops / 1e3 / p),
        kernels,
        layers,
        per_forward,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GFLOP of one sequence, counted by hand from HF's DebertaV2 forward.
    fn per_seq_gflop(shape: ModelShape, len: usize) -> f64 {
        encoder_flops(&shape.encoder_config().unwrap(), len, 1) / 1e9
    }

    #[test]
    fn encoder_flops_count_the_position_rows_the_model_uses() {
        // v3-large, L = 512: per layer the linears 2·512·(4·1024² + 2·1024·4096) = 12.885e9,
        // QKᵀ + PV 2·1024·512·1024 = 1.074e9, c2p + p2c against HF's 2·256 = 512 rows
        // 2·1024·512·1024 = 1.074e9; × 24 layers = 360.8e9 (not 386e9 with 2L−1 rows).
        let large = per_seq_gflop(ModelShape::DebertaV3Large, 512);
        assert!((large - 360.777).abs() < 0.01, "{large}");
        // L = 128 uses 2L−1 = 255 rows (fewer than 512): per layer
        // 2·128·(4·768² + 2·768·3072) + 2·768·128·(256 + 2·255), × 12.
        let base = per_seq_gflop(ModelShape::DebertaV3Base, 128);
        let want = 12.0
            * (2.0 * 128.0 * (4.0 * 768.0f64.powi(2) + 2.0 * 768.0 * 3072.0)
                + 2.0 * 768.0 * 128.0 * (256.0 + 510.0))
            / 1e9;
        assert!((base - want).abs() < 1e-9, "{base} vs {want}");
    }
}
