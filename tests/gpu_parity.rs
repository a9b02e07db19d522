//! GPU vs CPU parity (feature `cuda`): ONE table of op cases (cf. llama.cpp's
//! test-backend-ops) — encoder ops, DeBERTa's disentangled attention and the decoder
//! ops — each run by one generic `run` on the CUDA backend and on the CPU backend (the
//! executable specification) with the same fresh seeded inputs; then whole models
//! (DeBERTa fixtures, the BERT embedder, GPT-2 / Llama-GQA / Qwen2 decoders) on both backends.
//!
//! Every device buffer is filled with NaN bytes when handed out (`CudaBackend::
//! poisoned`), so an output element a kernel leaves unwritten fails (a non-finite
//! output counts as an infinite error). Errors are max |gpu − cpu| relative to the
//! largest reference magnitude: per op ≤ 1e-5 (f32), 1e-2 (bf16), 5e-3 (f16); whole
//! DeBERTa models ≤ 1e-5 (f32) and 2e-2 (bf16, see `BF16_MODEL_TOLERANCE`); whole
//! decoders at the per-op bounds. Inputs are rounded to the device dtype first (whole
//! models load the same rounded weights on both sides), so the figure measures the
//! kernels, not the input quantisation. Masked query rows of both attentions must be
//! exactly zero. Without a CUDA device every test prints "no GPU: skipped" (a failure
//! with `HOPSCORE_REQUIRE_GPU=1`); the CPU emulator of tools/cuda_emu runs them on any
//! machine.

#![cfg(feature = "cuda")]

mod common;

use std::path::{Path, PathBuf};

use hopscore::backend::cpu::CpuBackend;
use hopscore::backend::cuda::tensor_core_check::{TensorCorePath, TmaPath};
use hopscore::backend::cuda::{CudaBackend, DType, Version};
use hopscore::backend::gpu_kernels::Op as KernelOp;
use hopscore::backend::{
    AddNorm, AttentionShape, Backend, BatchInputs, BucketBias, CausalShape, ClsHead, Dense,
    DeviceCounts, Gate, Gated, HeadNorm, Input, PoolerAct, RelAttention, SeqLayout, SeqPooling,
    T5AttentionShape,
};
use hopscore::model::batch::{graph_key, PackedBatch, Sequence};
use hopscore::model::config::EncoderFamily;
use hopscore::model::config::{DebertaConfig, RelativeConfig};
use hopscore::model::cross_encoder::{CrossEncoder, ModelFiles};
use hopscore::model::deberta::relative_index;
use hopscore::model::decoder::{
    DecoderForCausalLM, DecoderSource, ScoredSequence, MIN_SHARED_PREFIX,
};
use hopscore::model::language_model::load_language_model;
use hopscore::model::t5::relative_position_bucket;
use hopscore::tensor::HostTensor;
use hopscore::text::causal_tokenizer::CausalTokenizer;

/// Per-op bound (and whole decoders'), relative to max |reference|.
fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-5,
        DType::Bf16 => 1e-2,
        DType::F16 => 5e-3,
    }
}

/// `max |a − b| / max |b|`; a non-finite output element (a NaN-poisoned element left
/// unwritten) gives infinity.
fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "output sizes differ");
    let scale = max_abs(want).max(1e-30);
    got.iter().zip(want).fold(0f32, |m, (a, b)| {
        let d = (a - b).abs();
        if !a.is_finite() || d.is_nan() {
            f32::INFINITY
        } else {
            m.max(d / scale)
        }
    })
}

fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |m, x| m.max(x.abs()))
}

/// Seeded inputs rounded to `dtype`, never exactly zero.
struct Inputs {
    rng: fastrand::Rng,
    dtype: DType,
}

impl Inputs {
    fn new(seed: u64, dtype: DType) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            dtype,
        }
    }
    /// Uniform in ±`scale`.
    fn matrix(&mut self, rows: usize, cols: usize, scale: f32) -> HostTensor {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| {
                let x = (self.rng.f32() * 2.0 - 1.0) * scale;
                if x == 0.0 {
                    scale * 0.5
                } else {
                    x
                }
            })
            .collect();
        HostTensor::new(vec![rows, cols], self.dtype.decode(&self.dtype.encode(&v)))
    }
    /// Standard-normal-ish (Irwin–Hall of 4, × 1.7), at least 1e-3 from zero.
    fn normal(&mut self, rows: usize, cols: usize) -> HostTensor {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| {
                let x = (0..4).map(|_| self.rng.f32()).sum::<f32>() - 2.0;
                x * 1.7 + if x >= 0.0 { 1e-3 } else { -1e-3 }
            })
            .collect();
        HostTensor::new(vec![rows, cols], self.dtype.decode(&self.dtype.encode(&v)))
    }
    fn ids(&mut self, n: usize, below: u32) -> Vec<u32> {
        (0..n).map(|_| self.rng.u32(0..below)).collect()
    }
}

/// Packed sequences of `lens`, token `t` (packed index) masked where `masked(t)`.
fn layout(lens: &[usize], masked: impl Fn(usize) -> bool) -> SeqLayout {
    let mut cu = vec![0];
    for l in lens {
        cu.push(cu.last().unwrap() + l);
    }
    let tokens = *cu.last().unwrap();
    SeqLayout {
        cu_seqlens: cu,
        mask: (0..tokens)
            .map(|t| if masked(t) { 0.0 } else { 1.0 })
            .collect(),
    }
}

/// Encoder layout: every 5th token of a sequence masked, never its first.
fn encoder_layout(lens: &[usize]) -> SeqLayout {
    let mut cu = vec![0];
    let mut mask = Vec::new();
    for &l in lens {
        cu.push(cu.last().unwrap() + l);
        mask.extend((0..l).map(|i| if i > 0 && i % 5 == 3 { 0.0 } else { 1.0 }));
    }
    SeqLayout {
        cu_seqlens: cu,
        mask,
    }
}

/// Sequence lengths of the disentangled-attention cases (tiles of 32 and 64 rows,
/// crossed and partial).
const ATTENTION_LENS: &[usize] = &[1, 7, 33, 70, 130];
/// A long sequence (17 tiles of 64, 35 of 32) packed with a short one.
const LONG_LENS: &[usize] = &[1_030, 5];

/// Disentangled-attention layout of `lens`, drawn first from the case's inputs: ~15%
/// of the tokens masked (never a sequence's first), plus a masked 9-token tail at the
/// end of the second-to-last sequence as padding would leave it.
fn attention_layout(inp: &mut Inputs, lens: &[usize]) -> SeqLayout {
    let mut lay = layout(lens, |_| false);
    for m in lay.mask.iter_mut() {
        *m = if inp.rng.f32() < 0.15 { 0.0 } else { 1.0 };
    }
    for &s in &lay.cu_seqlens[..lens.len()] {
        lay.mask[s] = 1.0;
    }
    let tail = lay.cu_seqlens[lens.len() - 1];
    lay.mask[tail - 9..tail].fill(0.0);
    lay
}

/// Causal-attention layout: tokens 3, 10, 17, … masked, plus `extra` (a whole
/// one-token sequence).
fn causal_layout(lens: &[usize], extra: Option<usize>) -> SeqLayout {
    layout(lens, |t| t % 7 == 3 || Some(t) == extra)
}

/// Position terms of a disentangled-attention case: a bucket table with c2p / p2c.
#[derive(Debug, Clone, Copy)]
struct Rel {
    buckets: usize,
    max_relative_positions: usize,
    c2p: bool,
    p2c: bool,
}

impl Rel {
    /// The model config of this table (shared position projections, normalised table).
    fn config(self) -> RelativeConfig {
        RelativeConfig {
            buckets: Some(self.buckets),
            max_relative_positions: self.max_relative_positions,
            span: self.buckets,
            c2p: self.c2p,
            p2c: self.p2c,
            share_att_key: true,
            norm_rel_ebd: true,
        }
    }
}

/// DeBERTa-v3's 256 log buckets.
const fn v3(c2p: bool, p2c: bool) -> Rel {
    Rel {
        buckets: 256,
        max_relative_positions: 512,
        c2p,
        p2c,
    }
}

/// A small 8-bucket table that saturates.
const fn small(c2p: bool, p2c: bool) -> Rel {
    Rel {
        buckets: 8,
        max_relative_positions: 16,
        c2p,
        p2c,
    }
}

/// One row of the parity table: an op and its shape.
#[derive(Debug, Clone, Copy)]
enum Op {
    // Encoder ops.
    Linear {
        n: usize,
        k: usize,
        out: usize,
        bias: bool,
    },
    /// `linear` on `parts` stacked weight blocks, one output per block (fused Q, K, V).
    LinearSplit {
        n: usize,
        k: usize,
        out: usize,
        parts: usize,
        bias: bool,
    },
    /// `x + linear(input)` (a residual branch; the GEMM's C operand on the GPU).
    LinearAdd {
        n: usize,
        k: usize,
        out: usize,
        bias: bool,
    },
    /// `gelu(linear)` with the erf GELU (DeBERTa's MLP; on a Hopper GPU, with a bias
    /// and widths that are multiples of 8, the CUTLASS kernel with both in its epilogue).
    LinearGelu {
        n: usize,
        k: usize,
        out: usize,
        bias: bool,
    },
    /// `gelu_new(linear)` (GPT-2's MLP; the cuBLASLt GELU epilogue on the GPU).
    LinearGeluNew {
        n: usize,
        k: usize,
        out: usize,
        bias: bool,
    },
    Gelu {
        rows: usize,
        cols: usize,
    },
    LayerNorm {
        rows: usize,
        cols: usize,
        residual: bool,
    },
    Embedding {
        tokens: usize,
        cols: usize,
        tables: usize,
    },
    ScaleRows {
        rows: usize,
        cols: usize,
    },
    GatherRows {
        rows: usize,
        cols: usize,
    },
    /// `cls_head` over sequences of `lens` (every 5th token masked): the first row or
    /// the masked mean, a pooler of that width (+ GELU, or tanh with `tanh`) or none,
    /// `labels` logits.
    ClsHead {
        lens: &'static [usize],
        cols: usize,
        mean: bool,
        pooler: Option<usize>,
        tanh: bool,
        labels: usize,
        bias: bool,
    },
    /// `token_head` over `tokens` rows: the logits (each backend's labels are checked
    /// against the argmax of its own logits).
    TokenHead {
        tokens: usize,
        cols: usize,
        labels: usize,
        bias: bool,
    },
    Add {
        rows: usize,
        cols: usize,
    },
    Copy {
        rows: usize,
        cols: usize,
    },
    /// Packed sequences of `lens`; `rel: None` is plain attention.
    DisentangledAttention {
        heads: usize,
        d: usize,
        rel: Option<Rel>,
        lens: &'static [usize],
    },
    // Decoder ops.
    RmsNorm {
        rows: usize,
        cols: usize,
    },
    GeluNew {
        rows: usize,
        cols: usize,
    },
    /// `act(gate) · up` of gate/up rows in `gated`'s blocks.
    GatedAct {
        rows: usize,
        inter: usize,
        gated: Gated,
    },
    /// `act(x · gateᵀ) · (x · upᵀ)` of a fused gate/up weight in `gated`'s blocks (on a
    /// Hopper GPU, in blocks of 64 and with no bias, the CUTLASS kernel with the gate in
    /// its epilogue).
    LinearGated {
        n: usize,
        k: usize,
        inter: usize,
        gated: Gated,
        bias: bool,
    },
    /// `LN(x · wᵀ + bias + residual)` (on a Hopper GPU, for rows of 1,024 and 768 with a bias,
    /// the CUTLASS kernel with the residual and the LayerNorm in its epilogue).
    LinearAddNorm {
        n: usize,
        k: usize,
        out: usize,
        bias: bool,
    },
    Relu {
        rows: usize,
        cols: usize,
    },
    /// T5 attention over `lens` (query rows) and `kv_lens` (keys; the query layout
    /// again for self-attention), `heads` of width `d`: with the bucket bias of
    /// `buckets` buckets up to `max_distance` (bidirectional unless causal), or none
    /// (cross-attention).
    T5Attention {
        heads: usize,
        d: usize,
        lens: &'static [usize],
        kv_lens: Option<&'static [usize]>,
        causal: bool,
        bias: Option<(usize, usize)>,
    },

    /// Llama-style fused [q | k | v] with 4 + 2 + 2 heads over sequences of
    /// `ROPE_LENS`; q and k rotate, positions restart at `offset` in each sequence;
    /// `qk_norm`: each q and k head RMS-normalised first (Qwen3, `rope_qk_norm_*`).
    Rope {
        head_dim: usize,
        offset: u32,
        theta: f32,
        qk_norm: bool,
    },
    CausalAttention {
        heads: usize,
        kv_heads: usize,
        d: usize,
        lens: &'static [usize],
        /// A packed token masked besides 3, 10, 17, …
        extra_masked: Option<usize>,
        /// Each sequence's first query row (the rows before it zeros), or empty: all.
        first_query: &'static [u32],
    },
    /// 31 rows of 50 hidden states (27 random, first, last, a repeated one) against
    /// a `vocab` × `cols` head; the first targets hit 0, the last word and the
    /// 2,048-word split edges.
    QuestionLoglik {
        tokens: usize,
        cols: usize,
        vocab: usize,
        temperature: f32,
    },
    /// `a [m, k] · bᵀ` (or `· b` with `path.b_kn`) through the tensor-core wrappers of
    /// kernels/common.cuh (bf16/f16), against a plain product of the same inputs.
    TensorCore {
        m: usize,
        n: usize,
        k: usize,
        path: TensorCorePath,
    },
}

const ROPE_LENS: [usize; 4] = [1, 5, 17, 40];

/// Runs `op` on `be` with inputs from `seed`; returns the output values.
fn run<B: Backend>(be: &B, op: &Op, seed: u64, dtype: DType) -> Vec<f32> {
    let mut inp = Inputs::new(seed, dtype);
    let up = |t: &HostTensor| be.upload(t).unwrap();
    let down = |t: &B::Tensor| be.download(t).unwrap();
    match *op {
        Op::Linear { n, k, out, bias } => {
            let (x, w, b) = (
                inp.matrix(n, k, 1.0),
                inp.matrix(out, k, 0.2),
                inp.matrix(1, out, 1.0),
            );
            let b = bias.then(|| up(&b));
            down(&be.linear(&up(&x), &up(&w), b.as_ref()).unwrap()).data
        }
        Op::LinearSplit {
            n,
            k,
            out,
            parts,
            bias,
        } => {
            let (x, w, b) = (
                inp.matrix(n, k, 1.0),
                inp.matrix(parts * out, k, 0.2),
                inp.matrix(1, parts * out, 1.0),
            );
            let b = bias.then(|| up(&b));
            let ys = be
                .linear_split(&up(&x), &up(&w), b.as_ref(), parts)
                .unwrap();
            assert_eq!(ys.len(), parts);
            ys.iter().flat_map(|y| down(y).data).collect()
        }
        Op::LinearAdd { n, k, out, bias } => {
            let (x, w, b, r) = (
                inp.matrix(n, k, 1.0),
                inp.matrix(out, k, 0.2),
                inp.matrix(1, out, 1.0),
                inp.matrix(n, out, 2.0),
            );
            let b = bias.then(|| up(&b));
            let mut r = up(&r);
            be.linear_add(&mut r, &up(&x), &up(&w), b.as_ref()).unwrap();
            down(&r).data
        }
        Op::LinearGelu { n, k, out, bias } | Op::LinearGeluNew { n, k, out, bias } => {
            let (x, w, b) = (
                inp.matrix(n, k, 1.0),
                inp.matrix(out, k, 0.2),
                inp.matrix(1, out, 1.0),
            );
            let (x, w, b) = (up(&x), up(&w), bias.then(|| up(&b)));
            let y = if let Op::LinearGelu { .. } = op {
                be.linear_gelu(&x, &w, b.as_ref())
            } else {
                be.linear_gelu_new(&x, &w, b.as_ref())
            };
            down(&y.unwrap()).data
        }
        Op::LinearGated {
            n,
            k,
            inter,
            gated,
            bias,
        } => {
            let (x, w, b) = (
                inp.matrix(n, k, 1.0),
                inp.matrix(2 * inter, k, 0.2),
                inp.matrix(1, 2 * inter, 1.0),
            );
            let b = bias.then(|| up(&b));
            let y = be.linear_gated(&up(&x), &up(&w), b.as_ref(), gated);
            let y = down(&y.unwrap());
            assert_eq!(y.shape, vec![n, inter]);
            y.data
        }
        Op::LinearAddNorm { n, k, out, bias } => {
            let (x, w, b) = (
                inp.matrix(n, k, 1.0),
                inp.matrix(out, k, 0.2),
                inp.matrix(1, out, 1.0),
            );
            let (r, g, beta) = (
                inp.matrix(n, out, 1.0),
                inp.matrix(1, out, 1.0),
                inp.matrix(1, out, 1.0),
            );
            let (r, g, beta) = (up(&r), up(&g), up(&beta));
            let norm = AddNorm {
                residual: &r,
                weight: &g,
                bias: &beta,
                eps: 1e-7,
            };
            let b = bias.then(|| up(&b));
            let y = be.linear_add_norm(&up(&x), &up(&w), b.as_ref(), &norm);
            down(&y.unwrap()).data
        }
        Op::Gelu { rows, cols } => {
            let mut x = up(&inp.matrix(rows, cols, 4.0));
            be.gelu(&mut x).unwrap();
            down(&x).data
        }
        Op::LayerNorm {
            rows,
            cols,
            residual,
        } => {
            let (x, r) = (inp.matrix(rows, cols, 3.0), inp.matrix(rows, cols, 1.0));
            let (w, b) = (inp.matrix(1, cols, 1.0), inp.matrix(1, cols, 1.0));
            let mut x = up(&x);
            let r = residual.then(|| up(&r));
            be.layer_norm(&mut x, r.as_ref(), &up(&w), &up(&b), 1e-7)
                .unwrap();
            down(&x).data
        }
        Op::Embedding {
            tokens,
            cols,
            tables,
        } => {
            let sizes = [50u32, 17, 2];
            let ts: Vec<B::Tensor> = sizes[..tables]
                .iter()
                .map(|&v| up(&inp.matrix(v as usize, cols, 1.0)))
                .collect();
            let ids: Vec<Vec<u32>> = sizes[..tables]
                .iter()
                .map(|&v| inp.ids(tokens, v))
                .collect();
            let lookups: Vec<(&B::Tensor, Input<'_, [u32]>)> = ts
                .iter()
                .zip(&ids)
                .map(|(t, i)| (t, i.as_slice().into()))
                .collect();
            down(&be.embedding(&lookups).unwrap()).data
        }
        Op::ScaleRows { rows, cols } => {
            let mut x = up(&inp.matrix(rows, cols, 1.0));
            let s: Vec<f32> = (0..rows).map(|r| (r % 3) as f32 * 0.5).collect();
            be.scale_rows(&mut x, s.as_slice().into()).unwrap();
            down(&x).data
        }
        Op::GatherRows { rows, cols } => {
            let x = up(&inp.matrix(rows, cols, 1.0));
            let pick: Vec<usize> = inp
                .ids(rows / 2 + 1, rows as u32)
                .iter()
                .map(|&r| r as usize)
                .collect();
            down(&be.gather_rows(&x, pick.as_slice().into()).unwrap()).data
        }
        Op::ClsHead {
            lens,
            cols,
            mean,
            pooler,
            tanh,
            labels,
            bias,
        } => {
            let l = encoder_layout(lens);
            let x = up(&inp.matrix(l.num_tokens(), cols, 1.0));
            let width = pooler.unwrap_or(cols);
            let mut dense = |out, input| {
                let (w, b) = (inp.matrix(out, input, 0.2), inp.matrix(1, out, 1.0));
                (up(&w), bias.then(|| up(&b)))
            };
            let p = pooler.map(|p| dense(p, cols));
            let c = dense(labels, width);
            let head = ClsHead {
                pooling: if mean {
                    SeqPooling::Mean
                } else {
                    SeqPooling::First
                },
                pooler: p.as_ref().map(|(w, b)| Dense {
                    weight: w,
                    bias: b.as_ref(),
                }),
                pooler_act: if tanh {
                    PoolerAct::Tanh
                } else {
                    PoolerAct::Gelu
                },
                classifier: Dense {
                    weight: &c.0,
                    bias: c.1.as_ref(),
                },
            };
            be.cls_head(&x, (&l).into(), &head).unwrap().data
        }
        Op::TokenHead {
            tokens,
            cols,
            labels,
            bias,
        } => {
            let (x, w, b) = (
                inp.matrix(tokens, cols, 1.0),
                inp.matrix(labels, cols, 0.2),
                inp.matrix(1, labels, 1.0),
            );
            let (w, b) = (up(&w), bias.then(|| up(&b)));
            let dense = Dense {
                weight: &w,
                bias: b.as_ref(),
            };
            let out = be.token_head(&up(&x), dense).unwrap();
            let argmax: Vec<u32> = out
                .logits
                .data
                .chunks_exact(labels)
                .map(|l| hopscore::tensor::argmax(l) as u32)
                .collect();
            assert_eq!(out.labels, argmax, "{op:?}: labels are not the argmax");
            out.logits.data
        }
        Op::Add { rows, cols } => {
            let (a, b) = (inp.matrix(rows, cols, 1.0), inp.matrix(rows, cols, 1.0));
            let mut a = up(&a);
            be.add(&mut a, &up(&b)).unwrap();
            down(&a).data
        }
        Op::Copy { rows, cols } => down(&be.copy(&up(&inp.matrix(rows, cols, 1.0))).unwrap()).data,
        Op::DisentangledAttention {
            heads,
            d,
            rel,
            lens,
        } => {
            let lay = attention_layout(&mut inp, lens);
            let tokens = lay.num_tokens();
            let width = heads * d;
            let (mut pos_key, mut pos_query, mut index) = (None, None, Vec::new());
            if let Some(r) = rel {
                index = relative_index(&r.config(), lay.max_len());
                pos_key = r.c2p.then(|| up(&inp.normal(2 * r.buckets, width)));
                pos_query = r.p2c.then(|| up(&inp.normal(2 * r.buckets, width)));
            }
            let (q, k, v) = (
                up(&inp.normal(tokens, width)),
                up(&inp.normal(tokens, width)),
                up(&inp.normal(tokens, width)),
            );
            let rel_terms = RelAttention {
                pos_key: pos_key.as_ref(),
                pos_query: pos_query.as_ref(),
                index: index.as_slice().into(),
            };
            let shape = AttentionShape {
                heads,
                head_size: d,
                score_scale: 1.0 / ((d * 3) as f32).sqrt(),
            };
            let out = be
                .disentangled_attention(&q, &k, &v, rel.map(|_| &rel_terms), shape, (&lay).into())
                .unwrap();
            let out = down(&out);
            assert_eq!(out.shape, vec![tokens, width]);
            out.data
        }
        Op::RmsNorm { rows, cols } => {
            let x = inp.matrix(rows, cols, 3.0);
            let w = inp.matrix(1, cols, 1.5);
            let w = HostTensor::new(vec![cols], w.data);
            let out = down(&be.rms_norm(&up(&x), &up(&w), 1e-5).unwrap());
            assert_eq!(out.shape, vec![rows, cols]);
            out.data
        }
        Op::GeluNew { rows, cols } => {
            let mut x = up(&inp.matrix(rows, cols, 5.0));
            be.gelu_new(&mut x).unwrap();
            down(&x).data
        }
        Op::GatedAct { rows, inter, gated } => {
            let x = inp.matrix(rows, 2 * inter, 4.0);
            let out = down(&be.gated_act(&up(&x), gated).unwrap());
            assert_eq!(out.shape, vec![rows, inter]);
            out.data
        }
        Op::Relu { rows, cols } => {
            let mut x = up(&inp.matrix(rows, cols, 3.0));
            be.relu(&mut x).unwrap();
            down(&x).data
        }
        Op::T5Attention {
            heads,
            d,
            lens,
            kv_lens,
            causal,
            bias,
        } => {
            let q_lay = causal_layout(lens, None);
            let kv_lay = kv_lens.map_or_else(|| q_lay.clone(), encoder_layout);
            let width = heads * d;
            let q = up(&inp.matrix(q_lay.num_tokens(), width, 1.0));
            let k = up(&inp.matrix(kv_lay.num_tokens(), width, 1.0));
            let v = up(&inp.matrix(kv_lay.num_tokens(), width, 2.0));
            let max_len = q_lay.max_len().max(kv_lay.max_len()) as i64;
            let tables = bias.map(|(buckets, distance)| {
                let table = up(&inp.matrix(buckets, heads, 3.0));
                let index: Vec<u32> = (1 - max_len..max_len)
                    .map(|r| relative_position_bucket(r, !causal, buckets, distance))
                    .collect();
                (table, index)
            });
            let bias = tables.as_ref().map(|(table, index)| BucketBias {
                table,
                index: index.as_slice().into(),
            });
            let shape = T5AttentionShape {
                heads,
                head_dim: d,
                causal,
            };
            let out = be
                .t5_attention(
                    &q,
                    &k,
                    &v,
                    bias.as_ref(),
                    shape,
                    (&q_lay).into(),
                    (&kv_lay).into(),
                )
                .unwrap();
            let out = down(&out);
            assert_eq!(out.shape, vec![q_lay.num_tokens(), width]);
            out.data
        }
        Op::Rope {
            head_dim,
            offset,
            theta,
            qk_norm,
        } => {
            let tokens: usize = ROPE_LENS.iter().sum();
            let cols = 8 * head_dim;
            let inv_freq: Vec<f32> = (0..head_dim / 2)
                .map(|i| 1.0 / theta.powf(2.0 * i as f32 / head_dim as f32))
                .collect();
            let pos: Vec<u32> = ROPE_LENS
                .iter()
                .flat_map(|&l| (0..l as u32).map(move |p| p + offset))
                .collect();
            let mut x = up(&inp.matrix(tokens, cols, 2.0));
            // Weights around 1 (as trained q_norm / k_norm are).
            let mut norm_weight = || {
                let mut w = inp.matrix(1, head_dim, 0.5);
                w.data.iter_mut().for_each(|v| *v += 1.0);
                up(&w)
            };
            let weights = qk_norm.then(|| [norm_weight(), norm_weight()]);
            let norm = weights.as_ref().map(|[q, k]| HeadNorm {
                q_heads: 4,
                q_weight: q,
                k_weight: k,
                eps: 1e-6,
            });
            be.rope(
                &mut x,
                6,
                head_dim,
                pos.as_slice().into(),
                inv_freq.as_slice().into(),
                norm,
            )
            .unwrap();
            down(&x).data
        }
        Op::CausalAttention {
            heads,
            kv_heads,
            d,
            lens,
            extra_masked,
            first_query,
        } => {
            let lay = causal_layout(lens, extra_masked);
            let tokens = lay.num_tokens();
            let cols = (heads + 2 * kv_heads) * d;
            let qkv = up(&inp.matrix(tokens, cols, 2.0));
            let shape = CausalShape {
                heads,
                kv_heads,
                head_dim: d,
                scale: 1.0 / (d as f32).sqrt(),
            };
            let first = (!first_query.is_empty()).then(|| Input::from(first_query));
            let out = down(
                &be.causal_attention(&qkv, shape, (&lay).into(), first)
                    .unwrap(),
            );
            assert_eq!(out.shape, vec![tokens, heads * d]);
            out.data
        }
        Op::QuestionLoglik {
            tokens,
            cols,
            vocab,
            temperature,
        } => {
            let hidden = up(&inp.matrix(tokens, cols, 2.0));
            let head = up(&inp.matrix(vocab, cols, 0.5));
            let mut rows: Vec<usize> = (0..27).map(|_| inp.rng.usize(0..tokens)).collect();
            rows.extend([0, tokens - 1, 7, 7]);
            let mut targets = inp.ids(rows.len(), vocab as u32);
            targets[..6].copy_from_slice(&[0, vocab as u32 - 1, 2047, 2048, 4095, 4096]);
            let out = be
                .question_loglik(
                    &hidden,
                    rows.as_slice().into(),
                    &head,
                    targets.as_slice().into(),
                    temperature,
                )
                .unwrap();
            assert_eq!(out.len(), rows.len());
            assert!(be
                .question_loglik(
                    &hidden,
                    [].as_slice().into(),
                    &head,
                    [].as_slice().into(),
                    temperature
                )
                .unwrap()
                .is_empty());
            out
        }
        Op::TensorCore { .. } => unreachable!("tensor-core cases run in `tensor_core_case`"),
    }
}

/// Random operands of a tensor-core check, A `[rows, k]` and B (`[k, n]` when `b_kn`,
/// else `[n, k]`), and their product C `[c_rows, n]` (products exact in f64, summed, then
/// rounded once; the rows of C past A's are zero, as a TMA load fills them).
fn check_product(
    inp: &mut Inputs,
    [rows, c_rows]: [usize; 2],
    k: usize,
    n: usize,
    b_kn: bool,
) -> (HostTensor, HostTensor, Vec<f32>) {
    let a = inp.matrix(rows, k, 2.0);
    let b = if b_kn {
        inp.matrix(k, n, 2.0)
    } else {
        inp.matrix(n, k, 2.0)
    };
    let b_at = |kk: usize, j: usize| {
        f64::from(if b_kn {
            b.data[kk * n + j]
        } else {
            b.data[j * k + kk]
        })
    };
    let c = (0..c_rows * n)
        .map(|e| {
            let (r, j) = (e / n, e % n);
            if r >= rows {
                return 0.0;
            }
            (0..k)
                .map(|kk| f64::from(a.data[r * k + kk]) * b_at(kk, j))
                .sum::<f64>() as f32
        })
        .collect();
    (a, b, c)
}

/// The operands of a tensor-core case (uniform in ±2, rounded to `dtype`, not
/// symmetric), its plain product in f64, and the device's result.
fn tensor_core_case(gpu: &CudaBackend, op: &Op, seed: u64, dtype: DType) -> (Vec<f32>, Vec<f32>) {
    let Op::TensorCore { m, n, k, path } = *op else {
        unreachable!("not a tensor-core case")
    };
    let mut inp = Inputs::new(seed, dtype);
    let (a, b, want) = check_product(&mut inp, [m, m], k, n, path.b_kn);
    let got = gpu
        .tensor_core_check(&gpu.upload(&a).unwrap(), &gpu.upload(&b).unwrap(), path)
        .unwrap();
    (want, got)
}

/// The layout and row width of an attention case, whose masked query rows must be
/// exactly zero.
fn masked_query_rows(op: &Op, seed: u64, dtype: DType) -> Option<(SeqLayout, usize)> {
    match *op {
        Op::DisentangledAttention { heads, d, lens, .. } => Some((
            attention_layout(&mut Inputs::new(seed, dtype), lens),
            heads * d,
        )),
        Op::CausalAttention {
            heads,
            d,
            lens,
            extra_masked,
            ..
        } => Some((causal_layout(lens, extra_masked), heads * d)),
        Op::T5Attention { heads, d, lens, .. } => Some((causal_layout(lens, None), heads * d)),
        _ => None,
    }
}

fn encoder_ops() -> Vec<Op> {
    vec![
        Op::Linear {
            n: 37,
            k: 64,
            out: 96,
            bias: true,
        },
        Op::Linear {
            n: 5,
            k: 130,
            out: 7,
            bias: false,
        },
        Op::Gelu {
            rows: 13,
            cols: 300,
        },
        Op::LayerNorm {
            rows: 9,
            cols: 768,
            residual: true,
        },
        Op::LayerNorm {
            rows: 4,
            cols: 100,
            residual: false,
        },
        Op::Embedding {
            tokens: 29,
            cols: 48,
            tables: 1,
        },
        Op::Embedding {
            tokens: 29,
            cols: 48,
            tables: 3,
        },
        Op::ScaleRows { rows: 11, cols: 70 },
        Op::GatherRows { rows: 12, cols: 33 },
        Op::ClsHead {
            lens: &[1, 7, 20],
            cols: 300,
            mean: true,
            pooler: None,
            tanh: false,
            labels: 4,
            bias: true,
        },
        Op::Add { rows: 7, cols: 129 },
        Op::Copy { rows: 3, cols: 65 },
    ]
}

/// Head sizes 32, 40, 64 and 128, with and without c2p / p2c (each alone at head size
/// 64, v5's), both bucket tables; a sequence of over 1,024 tokens.
fn attention_ops() -> Vec<Op> {
    let da = |heads, d, rel| Op::DisentangledAttention {
        heads,
        d,
        rel,
        lens: ATTENTION_LENS,
    };
    vec![
        da(2, 64, Some(v3(true, true))),
        da(3, 32, Some(small(true, true))),
        da(2, 64, Some(v3(true, false))),
        da(2, 64, Some(small(false, true))),
        da(3, 64, None),
        // Head size 128: over 48 KiB of shared memory (the launcher opts in).
        da(1, 128, Some(v3(true, true))),
        // A multiple of 8 but not of 16: the bf16/f16 kernel pads the columns to 64.
        da(2, 40, Some(small(true, true))),
        // 1,030 tokens: log buckets past ±128, 33 tile diagonals of 64.
        Op::DisentangledAttention {
            heads: 1,
            d: 64,
            rel: Some(v3(true, true)),
            lens: LONG_LENS,
        },
    ]
}

/// `question_loglik` temperatures: 31 rows are two 16-row tiles (f32) or one 32-row
/// tile (bf16/f16, mma.sync); 16-bit tables take one temperature (the emulator's
/// tensor-core model is slow), plus 70 columns (not a multiple of 8: the bf16/f16
/// kernel stages element by element instead of by cp.async).
fn decoder_ops(dtype: DType) -> Vec<Op> {
    let t5 = |heads, d, lens, kv_lens, causal, bias| Op::T5Attention {
        heads,
        d,
        lens,
        kv_lens,
        causal,
        bias,
    };
    let causal = |heads, kv_heads, d, lens, extra_masked| Op::CausalAttention {
        heads,
        kv_heads,
        d,
        lens,
        extra_masked,
        first_query: &[],
    };
    let mut ops = vec![
        Op::RmsNorm { rows: 37, cols: 96 },
        Op::RmsNorm { rows: 5, cols: 300 },
        Op::RmsNorm { rows: 1, cols: 7 },
        Op::GeluNew { rows: 53, cols: 70 },
        Op::GatedAct {
            rows: 29,
            inter: 90,
            gated: Gated {
                gate: Gate::Silu,
                block: 90,
            },
        },
        Op::GatedAct {
            rows: 29,
            inter: 90,
            gated: Gated {
                gate: Gate::GeluNew,
                block: 90,
            },
        },
        Op::GatedAct {
            rows: 29,
            inter: 90,
            gated: Gated {
                gate: Gate::Gelu,
                block: 90,
            },
        },
        Op::GatedAct {
            rows: 9,
            inter: 128,
            gated: Gated {
                gate: Gate::Gelu,
                block: 64,
            },
        },
        Op::Relu { rows: 31, cols: 70 },
        // T5: the encoder (bidirectional buckets), the decoder (causal) past the
        // largest distance and across the key tiles (v1: 32 keys; v3: 64, and 64-row
        // query tiles), cross-attention between layouts of other lengths, d_kv 64
        // (T5-large), 128 (T5-11B), 16 (v3 padded to 64) and 12 (v1 in every dtype).
        t5(4, 16, &[1, 5, 17, 40], None, false, Some((32, 128))),
        t5(4, 16, &[1, 5, 17, 40], None, true, Some((32, 128))),
        t5(2, 64, &[200, 7], None, false, Some((32, 128))),
        t5(2, 64, &[150, 1, 70], None, true, Some((32, 128))),
        t5(2, 128, &[70, 3], None, false, Some((8, 20))),
        t5(3, 12, &[70, 3, 33], None, true, Some((16, 40))),
        t5(2, 64, &[9, 1, 33], Some(&[130, 7, 40]), false, None),
        t5(16, 64, &[5, 12], Some(&[300, 64]), false, None),
        Op::Rope {
            head_dim: 16,
            offset: 0,
            theta: 10_000.0,
            qk_norm: false,
        },
        Op::Rope {
            head_dim: 64,
            offset: 0,
            theta: 500_000.0,
            qk_norm: false,
        },
        Op::Rope {
            head_dim: 8,
            offset: 3000,
            theta: 1e6,
            qk_norm: false,
        },
        // Qwen3's per-head norm: its head size (128: two pairs a lane), a head of 16
        // (lanes 8–31 idle) and one of 96 (a second pair for lanes 0–15).
        Op::Rope {
            head_dim: 128,
            offset: 0,
            theta: 1e6,
            qk_norm: true,
        },
        Op::Rope {
            head_dim: 16,
            offset: 5,
            theta: 10_000.0,
            qk_norm: true,
        },
        Op::Rope {
            head_dim: 96,
            offset: 0,
            theta: 1e6,
            qk_norm: true,
        },
        // Half a head past one warp's 32 lanes: lanes 0–15 take a second pair.
        Op::Rope {
            head_dim: 96,
            offset: 7,
            theta: 10_000.0,
            qk_norm: false,
        },
        // MHA, GQA 2:1, 3:1 and 4:1, tiles crossing the 32-row blocks, one-token
        // sequences.
        causal(4, 4, 16, &[1, 5, 17, 40], None),
        causal(9, 3, 64, &[17, 40, 1, 5], None), // SmolLM2-135M's geometry
        causal(9, 3, 64, &[200, 7], None),       // a LEPUS-length prompt: 7 key tiles
        // Last query tiles ending on each warp's boundary and one row past it (v3.1: a
        // warp with every row past the end skips its products; on the diagonal warp w
        // multiplies only keys 0..16w + 15).
        causal(9, 3, 64, &[16, 48, 113, 129, 97], None),
        causal(4, 2, 64, &[1, 5, 17, 40], None),
        causal(4, 1, 32, &[40, 1, 5, 17], None),
        causal(2, 1, 128, &[70, 3], None),
        causal(3, 1, 8, &[33, 1, 65], Some(33)), // the whole second sequence masked
        causal(2, 1, 64, &[1_030, 3], None),     // 17 query tiles of 64, 33 of 32
        causal(2, 2, 12, &[9, 33], None),        // not a multiple of 8: v1 for every dtype
    ];
    let temperatures: &[f32] = if dtype == DType::F32 {
        &[1.0, 1.4]
    } else {
        &[1.4]
    };
    // 4,500 words: two full 2,048-word splits and a last one ending mid-chunk; 80
    // columns: one full and one partial 64-column slice.
    ops.extend(temperatures.iter().map(|&temperature| Op::QuestionLoglik {
        tokens: 50,
        cols: 80,
        vocab: 4_500,
        temperature,
    }));
    ops.push(Op::QuestionLoglik {
        tokens: 20,
        cols: 70,
        vocab: 4_200,
        temperature: 1.0,
    });
    ops
}

/// Each tensor-core wrapper (bf16/f16 tables): mma alone (fragments read lane by lane),
/// ldmatrix x2 / x4 with and without .trans, cp.async staging with zero-filled k
/// padding; partial warps (m = 33, 40, 48) and k = 24, 40 (padded to 32, 64).
fn tensor_core_ops() -> Vec<Op> {
    let tc = |m, n, k, cp_async, ldmatrix, b_kn, x4| Op::TensorCore {
        m,
        n,
        k,
        path: TensorCorePath {
            cp_async,
            ldmatrix,
            b_kn,
            x4,
        },
    };
    vec![
        tc(64, 64, 64, false, false, false, false), // mma_16816
        tc(48, 32, 40, false, false, true, false),  // mma_16816, B [k][n]
        tc(64, 64, 64, false, true, false, false),  // ldmatrix_x4 (A), _x2 (B)
        tc(40, 48, 64, false, true, true, false),   // ldmatrix_x2_trans
        tc(64, 64, 40, false, true, false, true),   // ldmatrix_x4 (B)
        tc(64, 32, 64, false, true, true, true),    // ldmatrix_x4_trans
        tc(33, 16, 24, true, true, false, false),   // cp_async_16 / commit / wait<1>, <0>
        tc(64, 64, 64, true, true, true, true),     // cp.async with every ldmatrix form
    ]
}

/// The fused-GEMM ops of the host path (appended last, so that the other rows keep
/// their seeds): Q, K, V from one strided-batched GEMM, GPT-2's bias + tanh GELU in
/// the GEMM's epilogue, and a residual added as the GEMM's C operand.
fn fused_gemm_ops() -> Vec<Op> {
    vec![
        Op::LinearSplit {
            n: 37,
            k: 64,
            out: 48,
            parts: 3,
            bias: true,
        },
        Op::LinearSplit {
            n: 5,
            k: 40,
            out: 7,
            parts: 2,
            bias: false,
        },
        // The CUTLASS kernel on a Hopper GPU: rows and columns past one 128 × 128
        // tile, then one partial tile; then the unfused path (no bias; a width of 20).
        Op::LinearGelu {
            n: 150,
            k: 72,
            out: 264,
            bias: true,
        },
        Op::LinearGelu {
            n: 29,
            k: 64,
            out: 72,
            bias: true,
        },
        Op::LinearGelu {
            n: 29,
            k: 64,
            out: 72,
            bias: false,
        },
        Op::LinearGelu {
            n: 5,
            k: 24,
            out: 20,
            bias: true,
        },
        Op::LinearGeluNew {
            n: 29,
            k: 64,
            out: 70,
            bias: true,
        },
        Op::LinearGeluNew {
            n: 3,
            k: 24,
            out: 16,
            bias: false,
        },
        Op::LinearAdd {
            n: 29,
            k: 64,
            out: 40,
            bias: true,
        },
        Op::LinearAdd {
            n: 3,
            k: 24,
            out: 16,
            bias: false,
        },
    ]
}

/// The classification heads (appended last): Beam Retrieval's hop heads (the [CLS] row,
/// no pooler), EfficientRAG's tagger (pooler + GELU, 3 tags) over 19 sequences (three
/// blocks of 8), the mean-pooled tagger at a width that is not a multiple of 8, a BERT /
/// XLM-R reranker's head (pooler + tanh, one label, a pooler wider than one chunk), and
/// token heads (2 labels; 5 labels at 70 columns).
fn head_ops() -> Vec<Op> {
    let cls = |lens, cols, mean, pooler, labels, bias| Op::ClsHead {
        lens,
        cols,
        mean,
        pooler,
        tanh: false,
        labels,
        bias,
    };
    vec![
        cls(&[1, 7, 20], 64, false, None, 2, true),
        cls(
            &[3, 1, 5, 9, 2, 4, 6, 8, 1, 1, 2, 3, 5, 7, 9, 2, 3, 4, 5],
            96,
            false,
            Some(96),
            3,
            true,
        ),
        cls(&[1, 7, 20, 12], 70, true, Some(40), 2, false),
        Op::ClsHead {
            lens: &[5, 1, 12, 3, 9, 2, 7, 4, 6, 11],
            cols: 96,
            mean: false,
            pooler: Some(200),
            tanh: true,
            labels: 1,
            bias: true,
        },
        Op::TokenHead {
            tokens: 37,
            cols: 64,
            labels: 2,
            bias: true,
        },
        Op::TokenHead {
            tokens: 9,
            cols: 70,
            labels: 5,
            bias: false,
        },
    ]
}

/// The 16-byte vector paths of the elementwise kernels in every dtype (sizes that are
/// multiples of 8; the earlier rows at 300, 129, 90, 70 and 33 columns take the
/// element-by-element paths in bf16/f16).
fn vector_ops() -> Vec<Op> {
    vec![
        Op::Gelu {
            rows: 16,
            cols: 256,
        },
        Op::Add { rows: 8, cols: 136 },
        Op::GatedAct {
            rows: 9,
            inter: 64,
            gated: Gated {
                gate: Gate::GeluNew,
                block: 64,
            },
        },
        Op::GatherRows { rows: 12, cols: 64 },
        Op::RmsNorm { rows: 5, cols: 576 },
        Op::GeluNew { rows: 8, cols: 64 },
    ]
}

/// The warp-per-row norms (`layer_norm_rows<NV>`, `rms_norm_rows<NV>`; appended last):
/// each entry of 2, 4 and 8 vectors per lane in some dtype (bf16/f16 rows of 256, 384,
/// 576, 1024 and 2048 columns take 2, 2, 4, 4 and 8; f32 rows of 1024 take 8 and of 2048
/// the block-per-row kernel), a last block of partial rows (19, 33), with and without
/// the residual, and 4096 columns (the block-per-row kernel in every dtype).
fn norm_ops() -> Vec<Op> {
    let ln = |rows, cols, residual| Op::LayerNorm {
        rows,
        cols,
        residual,
    };
    vec![
        ln(19, 1024, true),
        ln(3, 2048, false),
        ln(33, 256, true),
        ln(2, 4096, true),
        Op::RmsNorm {
            rows: 17,
            cols: 2048,
        },
        Op::RmsNorm {
            rows: 33,
            cols: 384,
        },
        Op::RmsNorm {
            rows: 11,
            cols: 576,
        },
        Op::RmsNorm {
            rows: 2,
            cols: 4096,
        },
    ]
}

/// The table for `dtype`. f16 runs the same (v3) disentangled-attention kernel
/// template as bf16, and the emulator converts f16 in software (~25× slower than
/// bf16), so f16 keeps two of its cases (d = 64 with v3 buckets, d = 40).
fn table(dtype: DType) -> Vec<Op> {
    let attention = attention_ops();
    let attention = if dtype == DType::F16 {
        vec![attention[0], attention[6]]
    } else {
        attention
    };
    let mut ops = encoder_ops();
    if dtype != DType::F32 {
        ops.extend(tensor_core_ops());
    }
    ops.extend(attention);
    ops.extend(decoder_ops(dtype));
    ops.extend(fused_gemm_ops());
    ops.extend(head_ops());
    ops.extend(vector_ops());
    ops.extend(norm_ops());
    ops.extend(gated_ops());
    ops.extend(add_norm_ops());
    ops.extend(first_query_ops());
    ops
}

/// Causal attention over shared-prefix members (appended last): query tiles before a
/// sequence's first query row skipped (zeros), the warps of a tile before it idle, the
/// rows of a warp before it zeros; v3 (head size 64) and v1 (12).
fn first_query_ops() -> Vec<Op> {
    vec![
        Op::CausalAttention {
            heads: 9,
            kv_heads: 3,
            d: 64,
            lens: &[200, 70, 130, 9],
            extra_masked: None,
            first_query: &[128, 64, 100, 0],
        },
        Op::CausalAttention {
            heads: 2,
            kv_heads: 2,
            d: 12,
            lens: &[40, 9],
            extra_masked: None,
            first_query: &[33, 0],
        },
    ]
}

/// Output projections with the LayerNorm after them (appended last). On a Hopper GPU
/// the CUTLASS kernel takes rows of 1,024 and 768 with a bias: a full 128-row tile and
/// a partial one, and a partial one alone; then the unfused paths (no bias; another
/// width).
fn add_norm_ops() -> Vec<Op> {
    let op = |n, k, out, bias| Op::LinearAddNorm { n, k, out, bias };
    vec![
        op(150, 64, 1024, true),
        op(29, 48, 1024, false),
        op(7, 32, 256, true),
        op(40, 96, 768, true),
    ]
}

/// Gated MLPs in blocks (appended last): `gated_act` with blocks of 30 (element path)
/// and 64 (vectors), then the fused gate/up GEMM. On a Hopper GPU the CUTLASS kernel
/// takes blocks of 64 with no bias: rows past one 128-row tile and a partial one,
/// three column tiles (192 outputs); then the unfused paths (a bias; blocks of 32;
/// the halves layout).
fn gated_ops() -> Vec<Op> {
    let gated = |gate, block| Gated { gate, block };
    let linear = |n, k, inter, gated, bias| Op::LinearGated {
        n,
        k,
        inter,
        gated,
        bias,
    };
    vec![
        Op::GatedAct {
            rows: 29,
            inter: 90,
            gated: gated(Gate::Silu, 30),
        },
        Op::GatedAct {
            rows: 7,
            inter: 128,
            gated: gated(Gate::Silu, 64),
        },
        linear(150, 72, 192, gated(Gate::Silu, 64), false),
        linear(29, 64, 128, gated(Gate::GeluNew, 64), false),
        linear(29, 64, 128, gated(Gate::Silu, 64), true),
        linear(5, 24, 96, gated(Gate::Silu, 32), false),
        linear(5, 24, 40, gated(Gate::GeluNew, 40), false),
    ]
}

fn check_table(ops: &[Op], dtype: DType) {
    if let Some(gpu) = common::gpu(dtype) {
        check_ops(&gpu, ops, dtype);
    }
}

/// Every op of `ops` on `gpu` against the CPU twin, within `tolerance(dtype)`.
fn check_ops(gpu: &CudaBackend, ops: &[Op], dtype: DType) {
    let tol = tolerance(dtype);
    // HOPSCORE_PARITY_ONLY=attention,loglik: only the rows whose op name holds one of
    // the words (tools/gpu/run.sh narrows the slow racecheck run this way).
    let only: Vec<String> = std::env::var("HOPSCORE_PARITY_ONLY")
        .map(|v| v.split(',').map(str::to_lowercase).collect())
        .unwrap_or_default();
    let mut failed = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let seed = 1000 + i as u64;
        let name = format!("{op:?}").to_lowercase();
        if !only.is_empty() && !only.iter().any(|w| name.contains(w.as_str())) {
            continue;
        }
        // Tensor-core products: exact products summed in f32, so a layout slip (an
        // O(1) error) cannot hide under the 16-bit tolerance.
        let (want, got, tol) = if let Op::TensorCore { .. } = op {
            let (want, got) = tensor_core_case(gpu, op, seed, dtype);
            (want, got, 1e-5)
        } else {
            (
                run(&CpuBackend::F32, op, seed, dtype),
                run(gpu, op, seed, dtype),
                tol,
            )
        };
        assert!(max_abs(&want) > 0.1, "{op:?}: degenerate reference");
        let mut err = rel_err(&got, &want);
        if let Some((lay, width)) = masked_query_rows(op, seed, dtype) {
            for (t, &m) in lay.mask.iter().enumerate() {
                if m == 0.0 && got[t * width..(t + 1) * width].iter().any(|&g| g != 0.0) {
                    eprintln!("  {op:?}: masked query row {t} not exactly zero");
                    err = f32::INFINITY;
                }
            }
        }
        let ok = err <= tol;
        eprintln!(
            "{:<5} {dtype:?} {op:?}: rel err {err:.2e}",
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            failed.push(format!("{op:?}: {err:e} > {tol:e}"));
        }
    }
    assert!(failed.is_empty(), "{dtype:?} parity failures: {failed:#?}");
}

#[test]
fn ops_f32() {
    check_table(&table(DType::F32), DType::F32);
}

#[test]
fn ops_bf16() {
    check_table(&table(DType::Bf16), DType::Bf16);
}

#[test]
fn ops_f16() {
    check_table(&table(DType::F16), DType::F16);
}

/// The table's RoPE and norm rows again through the implementations `--gpu-kernels
/// proven` keeps beside the newest: RoPE v1 (kernels/rope_v1.cu) and the block-per-row
/// norms everywhere.
fn check_older_kernels(dtype: DType) {
    let Some(gpu) = common::gpu(dtype) else {
        return;
    };
    gpu.force(KernelOp::Rope, "v1");
    gpu.force(KernelOp::LayerNorm, "block");
    gpu.force(KernelOp::RmsNorm, "block");
    let older: Vec<Op> = table(dtype)
        .into_iter()
        .filter(|op| match op {
            Op::Rope { qk_norm, .. } => !qk_norm,
            Op::LayerNorm { .. } | Op::RmsNorm { .. } => true,
            _ => false,
        })
        .collect();
    assert!(older.len() >= 8, "{} rows", older.len());
    check_ops(&gpu, &older, dtype);
}

#[test]
fn older_kernels_f32() {
    check_older_kernels(DType::F32);
}

#[test]
fn older_kernels_bf16() {
    check_older_kernels(DType::Bf16);
}

#[test]
fn older_kernels_f16() {
    check_older_kernels(DType::F16);
}

#[test]
fn disentangled_attention_rejects_head_size_12() {
    let Some(gpu) = common::gpu(DType::F32) else {
        return;
    };
    let mut inp = Inputs::new(6, DType::F32);
    let lay = attention_layout(&mut inp, ATTENTION_LENS);
    let tokens = lay.num_tokens();
    let up = |t: &HostTensor| gpu.upload(t).unwrap();
    let (q, k, v) = (
        up(&inp.normal(tokens, 24)),
        up(&inp.normal(tokens, 24)),
        up(&inp.normal(tokens, 24)),
    );
    let shape = AttentionShape {
        heads: 2,
        head_size: 12,
        score_scale: 1.0 / 6.0,
    };
    let err = gpu
        .disentangled_attention(&q, &k, &v, None, shape, (&lay).into())
        .err()
        .expect("head size 12 must be rejected");
    assert!(err.to_string().contains("head size 12"), "{err}");
}

#[test]
fn causal_attention_rejects_head_dim_over_128() {
    let Some(gpu) = common::gpu(DType::F32) else {
        return;
    };
    let lay = layout(&[3], |_| false);
    let qkv = HostTensor::new(vec![3, 3 * 256], vec![0.5; 3 * 3 * 256]);
    let shape = CausalShape {
        heads: 1,
        kv_heads: 1,
        head_dim: 256,
        scale: 0.0625,
    };
    let err = gpu
        .causal_attention(&gpu.upload(&qkv).unwrap(), shape, (&lay).into(), None)
        .err()
        .expect("head_dim 256 is refused");
    assert!(err.to_string().contains("head_dim 256"), "{err}");
}

/// A copy of checkpoint `src` (its files; the weights, `model.safetensors` or its
/// shards, with every float tensor rounded to `dtype` and stored as f32), so that the
/// CPU reference holds the weights the GPU holds and the comparison measures the
/// kernels' rounding only. f32 uses `src` itself.
fn rounded_checkpoint(src: &Path, dst: &Path, dtype: DType) -> PathBuf {
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
fn write_rounded(tensors: Vec<(String, Vec<usize>, Vec<f32>)>, dst: &Path, dtype: DType) {
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
fn check_model(what: &str, dtype: DType, err: f32, tol: f32) {
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
fn deberta_checkpoint_err(gpu: &CudaBackend, what: &str, dir: &Path, batch: &PackedBatch) -> f32 {
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

const DEBERTA_MODELS: [&str; 7] = [
    "v3_seqcls",
    "v3_seqcls_gelu_tanh",
    "v3_norel",
    "v3_token_f16",
    "v2_seqcls_bf16",
    "beam_retrieval",
    "efficientrag_labeler",
];

/// Each of `models` through `err` in `dtype` within `tol` (none without a device).
fn check_models(models: &[&str], dtype: DType, tol: f32, err: impl Fn(&str, DType) -> Option<f32>) {
    for m in models {
        let Some(e) = err(m, dtype) else {
            return;
        };
        check_model(m, dtype, e, tol);
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
const BF16_MODEL_TOLERANCE: f32 = 2e-2;

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

/// A device running the Hopper (v5) disentangled attention: compute capability 9.0
/// (the emulator poses as one); `None` elsewhere, said on stderr.
fn hopper_gpu(dtype: DType, version: Version) -> Option<CudaBackend> {
    let gpu = common::gpu(dtype)?;
    match gpu.set_disentangled_version(version) {
        Ok(()) => Some(gpu),
        Err(e) => {
            eprintln!("{version:?} skipped: {e:#}");
            None
        }
    }
}

/// The wgmma wrappers (descriptors, core-matrix layouts, fragments) against a plain
/// product, exact products summed in f32 as the mma.sync cases: both forms v5 uses
/// (A and B K-major from shared memory; A from registers with B MN-major), N = 64, 128.
fn wgmma_cases(dtype: DType) {
    let Some(gpu) = hopper_gpu(dtype, Version::V5) else {
        return;
    };
    let cases = [
        (64, 64, false),
        (128, 32, false),
        (64, 48, true),
        (128, 64, true),
    ];
    for (i, &(n, k, regs)) in cases.iter().enumerate() {
        let mut inp = Inputs::new(500 + i as u64, dtype);
        let (a, b, want) = check_product(&mut inp, [64, 64], k, n, regs);
        let got = gpu
            .wgmma_check(&gpu.upload(&a).unwrap(), &gpu.upload(&b).unwrap(), regs)
            .unwrap();
        let err = rel_err(&got, &want);
        let what = format!(
            "{dtype:?} wgmma n {n} k {k} {}",
            if regs {
                "A in registers, B MN-major"
            } else {
                "A, B K-major"
            }
        );
        eprintln!(
            "{:<5} {what}: rel err {err:.2e}",
            if err <= 1e-5 { "ok" } else { "FAIL" }
        );
        assert!(err <= 1e-5, "{what}: rel err {err:e}");
    }
}

#[test]
fn wgmma_check_bf16() {
    wgmma_cases(DType::Bf16);
}

#[test]
fn wgmma_check_f16() {
    wgmma_cases(DType::F16);
}

/// The Hopper producer/consumer wrappers (TMA with the 128-byte swizzle, mbarrier phases
/// and byte counts, setmaxnreg, swizzled wgmma descriptors of both B majors, A from
/// shared memory or registers) against a plain product: K of 1 to 4 tiles through the
/// 2-stage ring (so a stage is reused and the phase parity flips), rows of A past its
/// end read as zero.
fn tma_cases(dtype: DType) {
    let Some(gpu) = hopper_gpu(dtype, Version::V5) else {
        return;
    };
    let cases = [
        // (n, k, a_rows, B MN-major, A in registers)
        (64, 64, 128, false, false),
        (128, 256, 128, false, false),
        (128, 192, 100, true, false),
        (64, 128, 128, true, false),
        (128, 256, 77, false, true),
        (128, 128, 128, true, true),
    ];
    for (i, &(n, k, a_rows, b_mn_major, a_in_registers)) in cases.iter().enumerate() {
        let mut inp = Inputs::new(600 + i as u64, dtype);
        let (a, b, want) = check_product(&mut inp, [a_rows, 128], k, n, b_mn_major);
        let path = TmaPath {
            b_mn_major,
            a_in_registers,
        };
        let got = gpu
            .tma_check(&gpu.upload(&a).unwrap(), &gpu.upload(&b).unwrap(), path)
            .unwrap();
        let err = rel_err(&got, &want);
        let what = format!("{dtype:?} TMA + wgmma n {n} k {k} a_rows {a_rows} {path:?}");
        eprintln!(
            "{:<5} {what}: rel err {err:.2e}",
            if err <= 1e-5 { "ok" } else { "FAIL" }
        );
        assert!(err <= 1e-5, "{what}: rel err {err:e}");
    }
}

#[test]
fn tma_check_bf16() {
    tma_cases(DType::Bf16);
}

#[test]
fn tma_check_f16() {
    tma_cases(DType::F16);
}

/// A fused CUTLASS GEMM against its unfused path on a Hopper GPU: `call` with `switch`
/// on is one kernel (no cuBLASLt GEMM, no activation pass), with it off the GEMM and
/// the pass, and the two agree within the dtype's tolerance.
#[cfg(hopscore_cutlass)]
fn fused_against_unfused(
    dtype: DType,
    name: &str,
    switch: fn(&CudaBackend, bool),
    call: impl Fn(&CudaBackend, &mut Inputs) -> hopscore::backend::cuda::CudaTensor,
) {
    let Some(gpu) = common::gpu(dtype) else {
        return;
    };
    let cc = gpu.device().ctx.compute_capability().unwrap();
    if cc != (9, 0) {
        eprintln!("{name} skipped: compute capability {cc:?}, not 9.0");
        return;
    }
    let run = |fused: bool| {
        switch(&gpu, fused);
        let mut inp = Inputs::new(7, dtype);
        let before = gpu.counts().unwrap();
        let y = call(&gpu, &mut inp);
        let c = gpu.counts().unwrap().since(&before);
        (gpu.download(&y).unwrap().data, (c.launches, c.gemms))
    };
    let (fused, fused_counts) = run(true);
    let (unfused, unfused_counts) = run(false);
    switch(&gpu, true);
    assert_eq!(fused_counts, (1, 0), "{dtype:?}: the fused path");
    assert_eq!(unfused_counts, (1, 1), "{dtype:?}: the unfused path");
    let err = rel_err(&fused, &unfused);
    eprintln!("{dtype:?} {name} against cuBLASLt + its pass: rel err {err:.2e}");
    assert!(err <= tolerance(dtype), "{dtype:?}: {err:e}");
}

/// The erf-GELU up-projection: `gemm_bias_gelu`.
#[cfg(hopscore_cutlass)]
fn gemm_bias_gelu_cases(dtype: DType) {
    fused_against_unfused(
        dtype,
        "gemm_bias_gelu",
        CudaBackend::set_fused_gelu,
        |gpu, inp| {
            let (x, w, b) = (
                gpu.upload(&inp.matrix(300, 128, 1.0)).unwrap(),
                gpu.upload(&inp.matrix(520, 128, 0.2)).unwrap(),
                gpu.upload(&inp.matrix(1, 520, 1.0)).unwrap(),
            );
            gpu.linear_gelu(&x, &w, Some(&b)).unwrap()
        },
    );
}

#[cfg(hopscore_cutlass)]
#[test]
fn gemm_bias_gelu_bf16() {
    gemm_bias_gelu_cases(DType::Bf16);
}

#[cfg(hopscore_cutlass)]
#[test]
fn gemm_bias_gelu_f16() {
    gemm_bias_gelu_cases(DType::F16);
}

/// SwiGLU's gate/up projection: `gemm_gated_silu` (300 rows, 5 tiles of 64 outputs).
#[cfg(hopscore_cutlass)]
fn gemm_gated_cases(dtype: DType) {
    fused_against_unfused(
        dtype,
        "gemm_gated_silu",
        CudaBackend::set_fused_gate,
        |gpu, inp| {
            let (x, w) = (
                gpu.upload(&inp.matrix(300, 128, 1.0)).unwrap(),
                gpu.upload(&inp.matrix(640, 128, 0.2)).unwrap(),
            );
            let gated = Gated::new(Gate::Silu, 320);
            gpu.linear_gated(&x, &w, None, gated).unwrap()
        },
    );
}

#[cfg(hopscore_cutlass)]
#[test]
fn gemm_gated_bf16() {
    gemm_gated_cases(DType::Bf16);
}

#[cfg(hopscore_cutlass)]
#[test]
fn gemm_gated_f16() {
    gemm_gated_cases(DType::F16);
}

/// A post-LN output projection and its LayerNorm: `gemm_add_norm_1024` and
/// `gemm_add_norm_768` (300 rows: two full 128-row tiles and a partial one, each one
/// cluster of 8 column tiles).
#[cfg(hopscore_cutlass)]
fn gemm_add_norm_cases(dtype: DType) {
    for width in [1024, 768] {
        fused_against_unfused(
            dtype,
            &format!("gemm_add_norm_{width}"),
            CudaBackend::set_fused_norm,
            |gpu, inp| {
                let mut up =
                    |rows, cols, scale| gpu.upload(&inp.matrix(rows, cols, scale)).unwrap();
                let (x, w, b) = (up(300, 256, 1.0), up(width, 256, 0.2), up(1, width, 1.0));
                let (r, g, beta) = (up(300, width, 1.0), up(1, width, 1.0), up(1, width, 1.0));
                let norm = AddNorm {
                    residual: &r,
                    weight: &g,
                    bias: &beta,
                    eps: 1e-7,
                };
                gpu.linear_add_norm(&x, &w, Some(&b), &norm).unwrap()
            },
        );
    }
}

#[cfg(hopscore_cutlass)]
#[test]
fn gemm_add_norm_bf16() {
    gemm_add_norm_cases(DType::Bf16);
}

#[cfg(hopscore_cutlass)]
#[test]
fn gemm_add_norm_f16() {
    gemm_add_norm_cases(DType::F16);
}

/// v5 against the CPU twin on the head-size-64 rows of the table (its only head size):
/// both bucket tables, ±c2p/p2c, no band, 1,030 tokens (33 tile diagonals, an odd
/// number of query tiles: one consumer of the last block idle).
fn disentangled_v5(dtype: DType) {
    let Some(gpu) = hopper_gpu(dtype, Version::V5) else {
        return;
    };
    let ops: Vec<Op> = attention_ops()
        .into_iter()
        .filter(|op| matches!(op, Op::DisentangledAttention { d: 64, .. }))
        .collect();
    check_ops(&gpu, &ops, dtype);
}

/// v5 loads whole 64-row tiles by TMA, so a sequence's last key tile holds rows of the
/// next one (or zeros past the tensor); their scores are masked, so a sequence scores the
/// same bits alone and before a neighbour of large values.
#[test]
fn disentangled_attention_v5_rows_do_not_see_their_neighbours() {
    let Some(gpu) = hopper_gpu(DType::Bf16, Version::V5) else {
        return;
    };
    let (heads, d, own, next) = (2, 64, 70, 130);
    let width = heads * d;
    let mut inp = Inputs::new(700, DType::Bf16);
    let rc = v3(true, true).config();
    let tables = [inp.normal(512, width), inp.normal(512, width)];
    let [pos_key, pos_query] = tables.map(|t| gpu.upload(&t).unwrap());
    let mine: Vec<HostTensor> = (0..3).map(|_| inp.normal(own, width)).collect();
    let loud: Vec<HostTensor> = (0..3)
        .map(|_| {
            let t = inp.normal(next, width);
            HostTensor::new(vec![next, width], t.data.iter().map(|x| 40.0 * x).collect())
        })
        .collect();
    let shape = AttentionShape {
        heads,
        head_size: d,
        score_scale: 1.0 / ((d * 3) as f32).sqrt(),
    };
    let run = |lens: &[usize], qkv: Vec<HostTensor>| {
        let lay = layout(lens, |_| false);
        let index = relative_index(&rc, lay.max_len());
        let rel = RelAttention {
            pos_key: Some(&pos_key),
            pos_query: Some(&pos_query),
            index: index.as_slice().into(),
        };
        let [q, k, v] = [0, 1, 2].map(|i| gpu.upload(&qkv[i]).unwrap());
        let out = gpu
            .disentangled_attention(&q, &k, &v, Some(&rel), shape, (&lay).into())
            .unwrap();
        gpu.download(&out).unwrap().data[..own * width].to_vec()
    };
    let alone = run(&[own], mine.clone());
    let packed: Vec<HostTensor> = mine
        .iter()
        .zip(&loud)
        .map(|(a, b)| HostTensor::new(vec![own + next, width], [&a.data[..], &b.data[..]].concat()))
        .collect();
    let beside = run(&[own, next], packed);
    assert!(alone.iter().all(|x| x.is_finite()));
    assert_eq!(
        bits(&alone),
        bits(&beside),
        "a neighbour changed the bits of v5's rows"
    );
}

#[test]
fn disentangled_attention_v5_bf16() {
    disentangled_v5(DType::Bf16);
}

#[test]
fn disentangled_attention_v5_f16() {
    disentangled_v5(DType::F16);
}

/// A DeBERTa-v3 checkpoint of head size 64, v5's (the fixtures' heads are 8 to 16 wide):
/// `v3_seqcls` widened ([`widened_checkpoint`]) to 128 hidden units in 2 heads and 256
/// intermediate ones. Rounded to `dtype`. The CPU backend, which the fixtures hold to HF,
/// is the reference.
fn deberta_head_size_64(dst: &Path, dtype: DType) -> PathBuf {
    widened_checkpoint(
        "deberta/v3_seqcls",
        dst,
        dtype,
        &[
            ("hidden_size", 128),
            ("pooler_hidden_size", 128),
            ("num_attention_heads", 2),
            ("intermediate_size", 256),
        ],
    )
}

/// The fixture `name` with the config fields of `fields` set; every tensor dimension
/// equal to a widened field's old value takes its new one (fields whose old values
/// coincide with another's dimension are not told apart: pick fixtures where they
/// differ). Each tensor is filled with values drawn (seeded) from the fixture's tensor of
/// the same name, so that norm weights stay near 1 and biases near 0; a projection's
/// weights are scaled by √(old fan-in / new), so that its outputs, and the attention
/// scores, keep the spread they have in the fixture (unscaled, DeBERTa's scores are 4× as
/// sharp and bf16's error 4× the fixtures'). Rounded to `dtype`, written into `dst`.
fn widened_checkpoint(name: &str, dst: &Path, dtype: DType, fields: &[(&str, usize)]) -> PathBuf {
    use safetensors::SafeTensors;
    let src = common::fixture(name);
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    let mut widths = Vec::new();
    for &(field, value) in fields {
        let old = config[field].as_u64().unwrap() as usize;
        if old != value && !field.starts_with("num_") {
            widths.push((old, value));
        }
        config[field] = value.into();
    }
    let widen = |n: usize| widths.iter().find(|w| w.0 == n).map_or(n, |w| w.1);
    std::fs::write(dst.join("config.json"), config.to_string()).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut rng = fastrand::Rng::with_seed(64);
    let mut named = st.tensors();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let tensors = named
        .into_iter()
        .map(|(name, view)| {
            let pool = DType::F32.decode(view.data());
            let shape: Vec<usize> = view.shape().iter().map(|&n| widen(n)).collect();
            let scale = match (view.shape(), name.contains("embed")) {
                ([_, fan_in], false) => (*fan_in as f32 / shape[1] as f32).sqrt(),
                _ => 1.0,
            };
            let values: Vec<f32> = (0..shape.iter().product())
                .map(|_| scale * pool[rng.usize(..pool.len())])
                .collect();
            (name, shape, values)
        })
        .collect();
    write_rounded(tensors, &dst.join("model.safetensors"), dtype);
    dst.to_path_buf()
}

/// v5 in a whole model: the head-size-64 DeBERTa ([`deberta_head_size_64`]) over ragged
/// sequences of 1 to 150 tokens (three query tiles: the linear buckets' diagonals and,
/// past 128 tokens, log buckets) on v5 and on v3, both within the model bound. The
/// emulator accumulates wgmma and mma.sync alike, so there the two give the same bits; a
/// GPU need not.
fn deberta_head_size_64_v5(dtype: DType) {
    let Some(v5) = hopper_gpu(dtype, Version::V5) else {
        return;
    };
    let v3 = common::gpu(dtype).unwrap();
    v3.set_disentangled_version(Version::V3).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = deberta_head_size_64(tmp.path(), dtype);
    let mut rng = fastrand::Rng::with_seed(5);
    let seqs: Vec<Sequence> = [1, 9, 70, 150]
        .iter()
        .map(|&len| Sequence {
            ids: (0..len).map(|_| rng.u32(1..1000)).collect(),
            type_ids: vec![0; len],
            mask: vec![1; len],
        })
        .collect();
    let batch = PackedBatch::pack(&seqs);
    // The model's call is one that v5 runs (not one it hands to v3).
    let config = DebertaConfig::from_file(&dir.join("config.json")).unwrap();
    let index = relative_index(config.relative.as_ref().unwrap(), batch.layout.max_len());
    assert_eq!(config.head_size, 64);
    assert_eq!(Version::V5.for_call(64, Some(&index)), Version::V5);
    let err5 = deberta_checkpoint_err(&v5, "head size 64 (v5)", &dir, &batch);
    let err3 = deberta_checkpoint_err(&v3, "head size 64 (v3)", &dir, &batch);
    // Measured on the emulator: bf16 5.8e-3, f16 7.1e-4 (both versions).
    let tol = match dtype {
        DType::Bf16 => BF16_MODEL_TOLERANCE,
        _ => tolerance(dtype),
    };
    check_model("head size 64 (v3)", dtype, err3, tol);
    check_model("head size 64 (v5)", dtype, err5, tol);
}

#[test]
fn deberta_model_head_size_64_v5_bf16() {
    deberta_head_size_64_v5(DType::Bf16);
}

#[test]
fn deberta_model_head_size_64_v5_f16() {
    deberta_head_size_64_v5(DType::F16);
}

/// The post-LN output projections as `gemm_add_norm_1024` in a whole model: DeBERTa
/// widened to rows of 1,024 (`v3_seqcls`: 16 heads of 64, intermediate 128; v3
/// attention) over ragged sequences, the fused kernel on and off, each within the
/// model bound of the CPU. On a Hopper GPU the fused forward runs two GEMMs a layer
/// fewer (attention-out and FFN-down); elsewhere both are one path. With CUDA graphs
/// the fused forward (its cluster launches captured) replays the same bits. bf16 only: f16
/// takes the same kernel, held to the CPU by the `LinearAddNorm` rows and
/// `gemm_add_norm_f16`.
#[test]
fn deberta_add_norm_bf16() {
    let dtype = DType::Bf16;
    let Some(gpu) = common::gpu(dtype) else {
        return;
    };
    gpu.set_disentangled_version(Version::V3).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = widened_checkpoint(
        "deberta/v3_seqcls",
        tmp.path(),
        dtype,
        &[
            ("hidden_size", 1024),
            ("pooler_hidden_size", 1024),
            ("num_attention_heads", 16),
            ("intermediate_size", 128),
        ],
    );
    let mut rng = fastrand::Rng::with_seed(9);
    let seqs: Vec<Sequence> = [1, 12, 40]
        .iter()
        .map(|&len| Sequence {
            ids: (0..len).map(|_| rng.u32(1..1000)).collect(),
            type_ids: vec![0; len],
            mask: vec![1; len],
        })
        .collect();
    let batch = PackedBatch::pack(&seqs);
    let model = CrossEncoder::load(&gpu, ModelFiles::open(&dir).unwrap(), None).unwrap();
    let mut gemms = Vec::new();
    for fused in [true, false] {
        gpu.set_fused_norm(fused);
        let what = format!("hidden 1024, fused norm {fused}");
        let err = deberta_checkpoint_err(&gpu, &what, &dir, &batch);
        check_model(&what, dtype, err, BF16_MODEL_TOLERANCE);
        let before = gpu.counts().unwrap();
        model.encoder.forward_staged(&gpu, &batch).unwrap();
        gemms.push(gpu.counts().unwrap().since(&before).gemms);
    }
    gpu.set_fused_norm(true);
    let hopper = gpu.device().ctx.compute_capability().unwrap() == (9, 0);
    let fused_runs = cfg!(hopscore_cutlass) && hopper;
    let layers = model.config.num_layers as u64;
    let fewer = if fused_runs { 2 * layers } else { 0 };
    assert_eq!(
        gemms[1] - gemms[0],
        fewer,
        "GEMMs with the fused norm on and off: {gemms:?}"
    );
    // The clustered launch inside a CUDA graph: the replay equals the plain forward.
    let plain = model.forward(&gpu, &batch, true).unwrap().hidden.unwrap();
    gpu.set_cuda_graphs(true);
    for _ in 0..2 {
        let replayed = model.forward(&gpu, &batch, true).unwrap().hidden.unwrap();
        assert_replay_matches("hidden 1024, fused norm", &replayed.data, &plain.data);
    }
    let c = gpu.counts().unwrap();
    assert!(c.captures >= 1 && c.replays >= 2, "{c:?}");
}

/// Ragged sequences of random ids (one without targets, a suffix-only one).
/// Ragged sequences; the last three continue the 40-token one's first 30 tokens (as
/// LEPUS paths share a first passage), so shared-prefix reuse has work to do.
fn scored_sequences(vocab: usize) -> Vec<ScoredSequence> {
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

const DECODER_MODELS: [&str; 4] = [
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
        seqs.truncate(6);
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

/// CUDA graphs: the backend with graphs and one without (same dtype, same model).
fn graph_pair(dtype: DType) -> Option<(CudaBackend, CudaBackend)> {
    let on = common::gpu(dtype)?;
    on.set_cuda_graphs(true);
    let off = common::gpu(dtype)?;
    off.set_cuda_graphs(false);
    Some((on, off))
}

/// Graph replay against no graph: bit for bit, on the emulator and on a GPU. (Before
/// the GEMM algorithm was pinned per GEMM, a GPU's cuBLASLt picked another algorithm
/// for the padded row count of a graph bucket: last-bit differences in f32 on an H200.)
fn assert_replay_matches(what: &str, got: &[f32], want: &[f32]) {
    assert!(
        bits(got) == bits(want),
        "{what}: graph replay differs from no graph (rel err {:e})",
        rel_err(got, want)
    );
}

/// The bit patterns of `v` (equal bits: equal values, NaN and −0 included).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Asserts one forward's counts with graphs: nothing but the staged inputs' one upload
/// and the copy of the real rows outside the graph, `captures` captures, one replay
/// of at most `max_launches` launches and GEMMs.
fn check_graph_counts(what: &str, c: &DeviceCounts, captures: u64, max_launches: u64) {
    eprintln!("  {what}: {c:?}");
    assert_eq!((c.captures, c.replays), (captures, 1), "{what}: {c:?}");
    assert_eq!((c.launches, c.gemms, c.uploads), (0, 0, 1), "{what}: {c:?}");
    assert_eq!((c.downloads, c.device_copies), (0, 1), "{what}: {c:?}");
    assert!(
        c.graph_launches + c.graph_gemms <= max_launches,
        "{what}: {c:?}"
    );
}

/// The golden batch of a DeBERTa fixture, and another of the same bucket: other token
/// ids, the longest sequence one token shorter.
fn two_batches(case: &common::GoldenCase, vocab: usize) -> [PackedBatch; 2] {
    let mut rng = fastrand::Rng::with_seed(5);
    let mut seqs = case.seqs.clone();
    let longest = (0..seqs.len()).max_by_key(|&i| seqs[i].ids.len()).unwrap();
    let s = &mut seqs[longest];
    s.ids.pop();
    s.type_ids.truncate(s.ids.len());
    s.mask.truncate(s.ids.len());
    for s in &mut seqs {
        for id in s.ids.iter_mut().skip(1) {
            *id = rng.u32(3..vocab as u32);
        }
    }
    [PackedBatch::pack(&case.seqs), PackedBatch::pack(&seqs)]
}

/// Each DeBERTa fixture with graphs equals it without, bit for bit, in its hidden
/// states and every head, over two batches of one bucket (a stale input of the first
/// batch would show in the second), and the graph is captured once and replayed. bf16
/// takes every fixture; f32 (the same capture and replay code, ≈ 23 s a fixture on the
/// emulator) the two head kinds: a sequence head and a token head.
fn deberta_graphs(dtype: DType) {
    let Some((on, off)) = graph_pair(dtype) else {
        return;
    };
    let fixtures: &[&str] = match dtype {
        DType::F32 => &["v3_seqcls", "v3_token_f16"],
        _ => &DEBERTA_MODELS,
    };
    for &fixture in fixtures {
        let fixture_dir = common::fixture(&format!("deberta/{fixture}"));
        let case = common::golden_sequences(&common::read_golden(
            &fixture_dir.join("golden.safetensors"),
        ));
        let tmp = tempfile::tempdir().unwrap();
        let dir = rounded_checkpoint(&fixture_dir, tmp.path(), dtype);
        let model_on = CrossEncoder::load(&on, ModelFiles::open(&dir).unwrap(), None).unwrap();
        let model_off = CrossEncoder::load(&off, ModelFiles::open(&dir).unwrap(), None).unwrap();
        let c = &model_on.config;
        let (layers, vocab) = (c.num_layers as u64, c.vocab_size);
        let batches = two_batches(&case, vocab);
        let limit = c.max_position_embeddings;
        let buckets = batches
            .each_ref()
            .map(|b| on.graph_bucket(b.shape(), limit));
        assert_eq!(buckets[0], buckets[1], "{fixture}: one bucket");
        let start = on.counts().unwrap();
        for (i, batch) in batches.iter().enumerate() {
            let before = on.counts().unwrap();
            model_on.encoder.forward_staged(&on, batch).unwrap();
            let counts = on.counts().unwrap().since(&before);
            let what = format!("{fixture} {dtype:?} batch {i}");
            check_graph_counts(&what, &counts, u64::from(i == 0), 8 * layers + 4);
            let got = model_on.forward(&on, batch, true).unwrap();
            let want = model_off.forward(&off, batch, true).unwrap();
            let (gh, wh) = (got.hidden.unwrap(), want.hidden.unwrap());
            assert_replay_matches(&what, &gh.data, &wh.data);
            assert_eq!(got.logits.len(), want.logits.len());
            for (g, w) in got.logits.iter().zip(&want.logits) {
                assert_eq!(g.shape, w.shape, "{what} logits");
                assert_replay_matches(&format!("{what} logits"), &g.data, &w.data);
            }
            eprintln!("ok    {what}: graph replay = no graph");
        }
        let c = on.counts().unwrap().since(&start);
        assert_eq!(c.captures, 1, "{fixture}: one capture for the bucket");
    }
}

#[test]
fn deberta_graphs_f32() {
    deberta_graphs(DType::F32);
}

#[test]
fn deberta_graphs_bf16() {
    deberta_graphs(DType::Bf16);
}

/// Every decoder's scoring with graphs equals it without (`assert_replay_matches`),
/// over two batches of one bucket; per call one upload and one download, the layers as
/// one replay, one capture. Without shared prefixes the second batch has other random
/// ids; with them (`min_shared_prefix` at its default: the sequences share 30 tokens,
/// the packed batch and the virtual sequences padded to buckets of their own) its ids
/// are shifted by one, so that the plan's shapes repeat and the graph replays.
fn decoder_graphs(dtype: DType, prefixes: bool) {
    let Some((on, off)) = graph_pair(dtype) else {
        return;
    };
    for name in DECODER_MODELS {
        let fixture = common::fixture(&format!("decoder/{name}"));
        let tmp = tempfile::tempdir().unwrap();
        let dir = rounded_checkpoint(&fixture, tmp.path(), dtype);
        let mut model_on =
            DecoderForCausalLM::load(&on, DecoderSource::open(&dir).unwrap()).unwrap();
        let mut model_off =
            DecoderForCausalLM::load(&off, DecoderSource::open(&dir).unwrap()).unwrap();
        if !prefixes {
            model_on.min_shared_prefix = 0;
            model_off.min_shared_prefix = 0;
        }
        let vocab = model_on.config.vocab_size as u32;
        let first = scored_sequences(vocab as usize);
        let mut rng = fastrand::Rng::with_seed(23);
        let mut second = first.clone();
        for s in &mut second {
            s.ids.iter_mut().for_each(|id| {
                *id = if prefixes {
                    (*id + 1) % vocab
                } else {
                    rng.u32(0..vocab)
                }
            });
        }
        let layers = model_on.config.num_layers as u64;
        let captures = on.counts().unwrap().captures;
        for (i, seqs) in [first, second].iter().enumerate() {
            let before = on.counts().unwrap();
            let got = model_on.target_logprobs(&on, seqs, 1.4).unwrap();
            let c = on.counts().unwrap().since(&before);
            let what = format!("{name} {dtype:?} prefixes {prefixes} batch {i}");
            eprintln!("  {what}: {c:?}");
            assert_eq!(
                (c.captures, c.replays),
                (u64::from(i == 0), 1),
                "{what}: {c:?}"
            );
            assert_eq!((c.uploads, c.downloads), (1, 1), "{what}: {c:?}");
            // After the graph: the copy of the real rows, the gather, the final norm
            // (GPT-2's LayerNorm on a copy) and the two log-likelihood kernels.
            assert!(c.launches <= 4 && c.device_copies <= 2, "{what}: {c:?}");
            // Per layer at most 12 launches, and 2 gathers more with prefixes.
            let per_layer = if prefixes { 14 } else { 12 };
            assert!(
                c.graph_launches + c.graph_gemms <= per_layer * layers + 2,
                "{what}: {c:?}"
            );
            let want = model_off.target_logprobs(&off, seqs, 1.4).unwrap();
            assert_eq!(got.len(), want.len(), "{what}");
            assert_replay_matches(&what, &got.concat(), &want.concat());
            eprintln!("ok    {what}: graph replay = no graph");
        }
        let c = on.counts().unwrap();
        assert_eq!(
            c.captures - captures,
            1,
            "{name}: one capture for the bucket"
        );
        if prefixes {
            let (all, packed) = model_on.token_counts();
            assert!(
                packed < all,
                "{name}: prefixes were shared ({packed} of {all})"
            );
        }
    }
}

#[test]
fn decoder_graphs_f32() {
    decoder_graphs(DType::F32, false);
}

#[test]
fn decoder_graphs_bf16() {
    decoder_graphs(DType::Bf16, false);
}

#[test]
fn decoder_prefix_graphs_f32() {
    decoder_graphs(DType::F32, true);
}

#[test]
fn decoder_prefix_graphs_bf16() {
    decoder_graphs(DType::Bf16, true);
}

/// An op that uploads its own input while a forward is captured (here: a mask given
/// without its slot) makes the capture fail as on a GPU (a pageable copy on a
/// capturing stream); that shape then runs without a graph, with the same result.
/// Given its slot, the same forward is captured once and replayed.
#[test]
fn graph_capture_refuses_host_uploads() {
    let Some((on, off)) = graph_pair(DType::F32) else {
        return;
    };
    let mut inp = Inputs::new(3, DType::F32);
    let x = inp.matrix(6, 5, 1.0);
    let layout = layout(&[4, 2], |t| t == 3);
    let inputs = BatchInputs {
        layouts: vec![&layout],
        ..Default::default()
    };
    let run = |be: &CudaBackend, key: u64, slotted: bool| {
        let x = be.upload(&x).unwrap();
        let (out, _) = be
            .run_forward(Some(key), &inputs, 0, 6, &mut |p| {
                let mut y = be.copy(&x)?;
                let mask = match slotted {
                    true => p.mask(0, &layout),
                    false => layout.mask.as_slice().into(),
                };
                be.scale_rows(&mut y, mask)?;
                Ok(y)
            })
            .unwrap();
        be.download(&out).unwrap().data
    };
    let want = run(&off, graph_key(), false);
    let (unslotted, slotted) = (graph_key(), graph_key());
    for (key, is_slotted, captures, replays) in [
        (unslotted, false, 0, 0),
        (unslotted, false, 0, 0),
        (slotted, true, 1, 1),
        (slotted, true, 0, 1),
    ] {
        let before = on.counts().unwrap();
        assert_eq!(run(&on, key, is_slotted), want);
        let c = on.counts().unwrap().since(&before);
        assert_eq!((c.captures, c.replays), (captures, replays), "{c:?}");
    }
}

/// `hopscore bench` on the device: the per-kernel split comes from CUDA events that
/// can be timed (a real driver refuses `cuEventElapsedTime` on events created without
/// timing, cudarc's default; the emulator does too since the first GPU run found it).
#[test]
fn bench_times_every_kernel_on_the_device() {
    use hopscore::bench::{BenchSpec, ModelShape};
    let Some(gpu) = common::gpu(DType::Bf16) else {
        return;
    };
    let spec = BenchSpec {
        shape: ModelShape::Small,
        seq_len: 16,
        batch: 2,
        warmup: 0,
        iters: 1,
        peak_gemm: 0,
        profile: true,
        tanh_gelu: false,
    };
    let r = hopscore::bench::run(&gpu, spec).expect("bench on the device");
    // 4 layers: one attention and four GEMMs (QKV, output, FFN in and out) each.
    let calls = |name: &str| {
        r.kernels
            .iter()
            .find(|k| k.kernel == name)
            .map(|k| (k.calls, k.ms))
    };
    let (attention, ms) = calls("disentangled_attention").expect("attention timed");
    assert_eq!(attention, 4, "{:?}", r.kernels);
    assert!(ms > 0.0, "{:?}", r.kernels);
    // On compute capability 9.0 the FFN-in GEMM is CUTLASS's, with the erf GELU.
    let hopper = gpu.device().ctx.compute_capability().unwrap() == (9, 0);
    let (cublaslt, cutlass) = if cfg!(hopscore_cutlass) && hopper {
        (12, Some(4))
    } else {
        (16, None)
    };
    assert_eq!(
        calls("gemm (cuBLASLt)").map(|c| c.0),
        Some(cublaslt),
        "{:?}",
        r.kernels
    );
    assert_eq!(
        calls("gemm_bias_gelu").map(|c| c.0),
        cutlass,
        "{:?}",
        r.kernels
    );
}

/// `bench-loglik` on the device reports the kernels of one extra pass: a T5 model with 2
/// encoder and 3 decoder blocks runs 8 attentions (2 + 3 self, 3 cross) and one
/// log-likelihood head per batch.
#[test]
fn bench_loglik_times_the_kernels_of_a_pass() {
    use hopscore::bench::loglik::{run, LoglikBench};
    let Some(gpu) = common::gpu(DType::F32) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let pairs = tmp.path().join("pairs.json");
    std::fs::write(
        &pairs,
        r#"{"pairs": [{"ids": [5, 6, 7, 8, 9, 10], "target_start": 3}, {"ids": [11, 12, 13, 14], "target_start": 2}]}"#,
    )
    .unwrap();
    let bench = LoglikBench {
        model: common::fixture("t5/v1_1"),
        pairs,
        max_batch_tokens: 8192,
        temperature: 1.0,
        warmup: 0,
        iters: 1,
        scores: None,
    };
    let r = run(&gpu, &bench).expect("bench-loglik on the device");
    let calls = |name: &str| r.kernels.iter().find(|k| k.kernel == name).map(|k| k.calls);
    assert_eq!(calls("t5_attention"), Some(8), "{:?}", r.kernels);
    assert_eq!(calls("question_loglik"), Some(1), "{:?}", r.kernels);
    assert_eq!((r.pairs, r.tokens, r.target_tokens), (2, 10, 5));
}

/// cuBLASLt's algorithm is asked for once per GEMM (dtype, sizes, parts, epilogue,
/// beta), not on every call: pinned (the default), once whatever the row count;
/// per row count with `set_batch_invariant(false)`.
#[test]
fn gemm_algorithm_is_asked_once_per_shape() {
    use std::sync::atomic::Ordering;
    let Some(gpu) = common::gpu(DType::Bf16) else {
        return;
    };
    let mut inp = Inputs::new(41, DType::Bf16);
    let (x, w) = (inp.matrix(9, 32, 1.0), inp.matrix(24, 32, 1.0));
    let (x, w) = (gpu.upload(&x).unwrap(), gpu.upload(&w).unwrap());
    let x2 = gpu.upload(&inp.matrix(10, 32, 1.0)).unwrap();
    let queries = || gpu.device().lt.queries.load(Ordering::Relaxed);
    let before = queries();
    for _ in 0..3 {
        gpu.linear(&x, &w, None).unwrap();
    }
    assert_eq!(queries() - before, 1, "one shape, three calls");
    gpu.linear(&x2, &w, None).unwrap();
    assert_eq!(
        queries() - before,
        1,
        "another row count, the pinned algorithm"
    );
    gpu.set_batch_invariant(false);
    gpu.linear(&x, &w, None).unwrap();
    gpu.linear(&x, &w, None).unwrap();
    assert_eq!(queries() - before, 2, "per row count: asked once");
    gpu.linear(&x2, &w, None).unwrap();
    assert_eq!(queries() - before, 3, "per row count: another row count");
}

/// Batches per fixed set in the invariance tests: each fixed sequence alone, all
/// together, and 3 with neighbours.
const ARRANGED: &str = "alone, together and among 1 and 7 neighbours";

/// Random sequences of 2 to 47 tokens (ids from 3), the neighbours of a batch.
fn neighbours(rng: &mut fastrand::Rng, vocab: usize, count: usize) -> Vec<Sequence> {
    (0..count)
        .map(|_| Sequence {
            ids: (0..rng.usize(2..48))
                .map(|_| rng.u32(3..vocab as u32))
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// A batch and, per fixed sequence in it, (its index among the fixed ones, its place
/// in the batch).
type Arrangement<S> = (Vec<S>, Vec<(usize, usize)>);

/// The fixed sequences `fixed` inside batches that change what surrounds them: each
/// alone, all together, and among 1 and 7 random neighbours (their order shuffled),
/// so that a batch's row count runs from one token to about 250.
fn arrangements<S: Clone>(
    fixed: &[S],
    mut neighbour: impl FnMut(&mut fastrand::Rng, usize) -> Vec<S>,
) -> Vec<Arrangement<S>> {
    let mut rng = fastrand::Rng::with_seed(38);
    let mut out: Vec<Arrangement<S>> = (0..fixed.len())
        .map(|i| (vec![fixed[i].clone()], vec![(i, 0)]))
        .collect();
    out.push((fixed.to_vec(), (0..fixed.len()).map(|i| (i, i)).collect()));
    for count in [1, 7] {
        let mut batch: Vec<Option<usize>> = (0..fixed.len()).map(Some).collect();
        batch.extend(std::iter::repeat_n(None, count));
        rng.shuffle(&mut batch);
        let mut others = neighbour(&mut rng, count).into_iter();
        let mut at = Vec::new();
        let seqs = batch
            .iter()
            .enumerate()
            .map(|(pos, slot)| match slot {
                Some(i) => {
                    at.push((*i, pos));
                    fixed[*i].clone()
                }
                None => others.next().unwrap(),
            })
            .collect();
        out.push((seqs, at));
    }
    out
}

/// Per sequence of `batch`, the bits of its rows of a DeBERTa forward: its hidden
/// states, then its row of every sequence head or its rows of every token head.
fn deberta_bits(
    be: &CudaBackend,
    model: &CrossEncoder<CudaBackend>,
    batch: &[Sequence],
) -> Vec<Vec<u32>> {
    let out = model.forward(be, &PackedBatch::pack(batch), true).unwrap();
    let tokens: usize = batch.iter().map(|s| s.ids.len()).sum();
    let mut out_bits = vec![Vec::new(); batch.len()];
    for t in std::iter::once(out.hidden.unwrap()).chain(out.logits) {
        let width = t.data.len() / t.shape[0];
        let mut row = 0;
        for (s, seq) in batch.iter().enumerate() {
            let rows = if t.shape[0] == tokens {
                seq.ids.len()
            } else {
                1
            };
            let values = &t.data[row * width..(row + rows) * width];
            out_bits[s].extend(bits(values));
            row += rows;
        }
    }
    out_bits
}

/// The bits of the fixed sequences in every arrangement: (index in `fixed`, bits).
type Rows = Vec<(usize, Vec<u32>)>;

/// What the rows of a run of the invariance tests must show.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// The reference's bits in every arrangement (the GEMM algorithm pinned).
    Same,
    /// Some rows differ: the emulator in f32 with the algorithm not pinned, whose
    /// cuBLASLt splits K for small batches as a GPU's does — the proof that the pin is
    /// what holds the bits. (In bf16 the last-bit differences mostly round away, as on
    /// the H200, whose bf16 graphs matched.)
    Differences,
    /// Only print how many differ (a GPU with the algorithm not pinned).
    Report,
}

impl Expect {
    /// What a run on `be` with the algorithm `pinned` or not must show; `None`: not
    /// worth running (bf16 on the emulator, not pinned).
    fn of(be: &CudaBackend, pinned: bool) -> Option<Self> {
        let emulator = be.name().contains("emulator");
        match (pinned, emulator, be.device().dtype) {
            (true, ..) => Some(Expect::Same),
            (false, false, _) => Some(Expect::Report),
            (false, true, DType::F32) => Some(Expect::Differences),
            (false, true, _) => None,
        }
    }
}

/// Checks the rows of the fixed sequences (`got`: index in `fixed`, bits) against the
/// reference `want` as `expect` says.
fn check_invariance(what: &str, got: &Rows, want: &[Vec<u32>], expect: Expect) {
    let differing = got.iter().filter(|(i, g)| *g != want[*i]).count();
    match expect {
        Expect::Same => {
            assert_eq!(differing, 0, "{what}: rows differ between batches");
            eprintln!("ok    {what}: {} rows in {ARRANGED}, same bits", got.len());
        }
        Expect::Differences => assert!(
            differing > 0,
            "{what}: without the pinned algorithm some batch should round differently"
        ),
        Expect::Report => {}
    }
    if expect != Expect::Same {
        eprintln!(
            "ok    {what}: not pinned, {differing} of {} rows differ",
            got.len()
        );
    }
}

/// Batch invariance (issue 38), DeBERTa: the EfficientRAG labeler fixture's golden
/// sequences give the same bits alone, together and among neighbours, graphs on or
/// off; on the emulator in f32, not pinning the GEMM algorithm breaks it.
fn deberta_batch_invariance(dtype: DType) {
    let Some((on, off)) = graph_pair(dtype) else {
        return;
    };
    // The labeler has a sequence head and a token head.
    let fixture_dir = common::fixture("deberta/efficientrag_labeler");
    let case = common::golden_sequences(&common::read_golden(
        &fixture_dir.join("golden.safetensors"),
    ));
    let tmp = tempfile::tempdir().unwrap();
    let dir = rounded_checkpoint(&fixture_dir, tmp.path(), dtype);
    let load = |be| CrossEncoder::load(be, ModelFiles::open(&dir).unwrap(), None).unwrap();
    let vocab = load(&off).config.vocab_size;
    let batches = arrangements(&case.seqs, |rng, n| neighbours(rng, vocab, n));
    let want = deberta_bits(&off, &load(&off), &case.seqs);
    // Pinned: graphs on and off; not pinned: graphs off.
    for (be, pinned) in [(&on, true), (&off, true), (&off, false)] {
        let Some(expect) = Expect::of(be, pinned) else {
            continue;
        };
        be.set_batch_invariant(pinned);
        let model = load(be);
        let got: Rows = batches
            .iter()
            .flat_map(|(batch, at)| {
                let mut bits = deberta_bits(be, &model, batch);
                at.iter()
                    .map(|&(i, pos)| (i, std::mem::take(&mut bits[pos])))
                    .collect::<Rows>()
            })
            .collect();
        let graphs = std::ptr::eq(be, &on);
        let what = format!("labeler {dtype:?} graphs {graphs} pinned {pinned}");
        check_invariance(&what, &got, &want, expect);
    }
}

#[test]
fn deberta_batch_invariance_f32() {
    deberta_batch_invariance(DType::F32);
}

#[test]
fn deberta_batch_invariance_bf16() {
    deberta_batch_invariance(DType::Bf16);
}

/// Batch invariance (issue 38), decoders: the scored sequences' log-probabilities are
/// the same bits alone, together (sharing prefixes) and among neighbours, with prefix
/// reuse on and off, graphs on and off.
fn decoder_batch_invariance(dtype: DType) {
    let Some((on, off)) = graph_pair(dtype) else {
        return;
    };
    // Qwen2 is Llama's path with q/k/v biases.
    for name in ["gpt2", "llama_gqa_untied"] {
        let fixture = common::fixture(&format!("decoder/{name}"));
        let tmp = tempfile::tempdir().unwrap();
        let dir = rounded_checkpoint(&fixture, tmp.path(), dtype);
        let load = |be, prefixes: bool| {
            let mut m = DecoderForCausalLM::load(be, DecoderSource::open(&dir).unwrap()).unwrap();
            if !prefixes {
                m.min_shared_prefix = 0;
            }
            m
        };
        let vocab = load(&off, true).config.vocab_size;
        let fixed = scored_sequences(vocab);
        let batches = arrangements(&fixed, |rng, n| {
            neighbours(rng, vocab, n)
                .into_iter()
                .map(|s| ScoredSequence {
                    target_start: s.ids.len() / 2,
                    ids: s.ids,
                })
                .collect()
        });
        let want: Vec<Vec<u32>> = load(&off, false)
            .target_logprobs(&off, &fixed, 1.4)
            .unwrap()
            .iter()
            .map(|v| bits(v))
            .collect();
        // Pinned: graphs on with prefix reuse, graphs off without (the reference's
        // settings, so its own arrangements are the check); not pinned: graphs off,
        // prefixes on.
        let runs = [(&on, true, true), (&off, false, true), (&off, true, false)];
        for (be, prefixes, pinned) in runs {
            let Some(expect) = Expect::of(be, pinned) else {
                continue;
            };
            be.set_batch_invariant(pinned);
            let model = load(be, prefixes);
            let got: Rows = batches
                .iter()
                .flat_map(|(batch, at)| {
                    let scores = model.target_logprobs(be, batch, 1.4).unwrap();
                    at.iter()
                        .map(|&(i, pos)| (i, bits(&scores[pos])))
                        .collect::<Rows>()
                })
                .collect();
            let graphs = std::ptr::eq(be, &on);
            let what =
                format!("{name} {dtype:?} graphs {graphs} prefixes {prefixes} pinned {pinned}");
            check_invariance(&what, &got, &want, expect);
        }
        on.set_batch_invariant(true);
        off.set_batch_invariant(true);
    }
}

#[test]
fn decoder_batch_invariance_f32() {
    decoder_batch_invariance(DType::F32);
}

#[test]
fn decoder_batch_invariance_bf16() {
    decoder_batch_invariance(DType::Bf16);
}
