//! The op cases of the parity table, one unit each: a struct holding the shape, whose
//! [`Case::run`] draws the inputs from the seed and runs the op on either backend (the
//! CPU's output is the reference), with the bound and the rows that must be zero where
//! they are not the table's defaults. [`Row`] is what the table holds and times.

use std::fmt::Debug;

use super::{attention_layout, causal_layout, encoder_layout, tolerance, Inputs};
use hopscore::backend::cpu::CpuBackend;
use hopscore::backend::cuda::tensor_core_check::TensorCorePath;
use hopscore::backend::cuda::{CudaBackend, DType};
use hopscore::backend::{
    AddNorm, AttentionShape, Backend, BucketBias, CausalShape, Dense, Gated, HeadNorm, Input,
    PoolerAct, RelAttention, SeqLayout, SeqPooling, T5AttentionShape,
};
use hopscore::model::config::RelativeConfig;
use hopscore::model::deberta::relative_index;
use hopscore::model::t5::relative_position_bucket;
use hopscore::tensor::HostTensor;

/// An op at one shape, run the same way on both backends.
pub trait Case: Debug {
    /// Runs the op on `be` with inputs drawn from `inp`; the output values.
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32>;
    /// The query rows that must come out exactly zero (attention's masked rows): the
    /// layout `run` draws from the same inputs, and the row width.
    fn masked_rows(&self, _inp: &mut Inputs) -> Option<(SeqLayout, usize)> {
        None
    }
}

/// A row of the table, as `ops::check_ops` runs and times it: the reference, the
/// device's output (both from the inputs of `seed`), the bound.
pub trait Row: Debug {
    fn reference(&self, seed: u64, dtype: DType) -> Vec<f32>;
    fn on_device(&self, gpu: &CudaBackend, seed: u64, dtype: DType) -> Vec<f32>;
    /// The bound on max |device − reference| / max |reference|.
    fn tolerance(&self, dtype: DType) -> f32 {
        tolerance(dtype)
    }
    /// [`Case::masked_rows`] of the inputs of `seed`.
    fn masked_rows(&self, _seed: u64, _dtype: DType) -> Option<(SeqLayout, usize)> {
        None
    }
}

/// A case's reference is the CPU backend's output (the executable specification).
impl<C: Case> Row for C {
    fn reference(&self, seed: u64, dtype: DType) -> Vec<f32> {
        self.run(&CpuBackend::F32, &mut Inputs::new(seed, dtype))
    }
    fn on_device(&self, gpu: &CudaBackend, seed: u64, dtype: DType) -> Vec<f32> {
        self.run(gpu, &mut Inputs::new(seed, dtype))
    }
    fn masked_rows(&self, seed: u64, dtype: DType) -> Option<(SeqLayout, usize)> {
        Case::masked_rows(self, &mut Inputs::new(seed, dtype))
    }
}

/// A table row of `case`.
pub fn row(case: impl Row + 'static) -> Box<dyn Row> {
    Box::new(case)
}

fn up<B: Backend>(be: &B, t: &HostTensor) -> B::Tensor {
    be.upload(t).unwrap()
}

fn down<B: Backend>(be: &B, t: &B::Tensor) -> HostTensor {
    be.download(t).unwrap()
}

/// The operands of a `[n, k] · [out, k]ᵀ` product on `be`: x, w and the bias when
/// `bias` (drawn either way, so that both forms see the same x and w).
fn linear_operands<B: Backend>(
    be: &B,
    inp: &mut Inputs,
    [n, k, out]: [usize; 3],
    bias: bool,
) -> (B::Tensor, B::Tensor, Option<B::Tensor>) {
    let (x, w, b) = (
        inp.matrix(n, k, 1.0),
        inp.matrix(out, k, 0.2),
        inp.matrix(1, out, 1.0),
    );
    (up(be, &x), up(be, &w), bias.then(|| up(be, &b)))
}

/// Position terms of a disentangled-attention case: a bucket table with c2p / p2c.
#[derive(Debug, Clone, Copy)]
pub struct Rel {
    buckets: usize,
    max_relative_positions: usize,
    c2p: bool,
    p2c: bool,
}

impl Rel {
    /// The model config of this table (shared position projections, normalised table).
    pub fn config(self) -> RelativeConfig {
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
pub const fn v3(c2p: bool, p2c: bool) -> Rel {
    Rel {
        buckets: 256,
        max_relative_positions: 512,
        c2p,
        p2c,
    }
}

/// A small 8-bucket table that saturates.
pub const fn small(c2p: bool, p2c: bool) -> Rel {
    Rel {
        buckets: 8,
        max_relative_positions: 16,
        c2p,
        p2c,
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Linear {
    pub n: usize,
    pub k: usize,
    pub out: usize,
    pub bias: bool,
}

impl Case for Linear {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let Linear { n, k, out, bias } = *self;
        let (x, w, b) = linear_operands(be, inp, [n, k, out], bias);
        down(be, &be.linear(&x, &w, b.as_ref()).unwrap()).data
    }
}

/// `linear` on `parts` stacked weight blocks, one output per block (fused Q, K, V).
#[derive(Debug, Clone, Copy)]
pub struct LinearSplit {
    pub n: usize,
    pub k: usize,
    pub out: usize,
    pub parts: usize,
    pub bias: bool,
}

impl Case for LinearSplit {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let LinearSplit {
            n,
            k,
            out,
            parts,
            bias,
        } = *self;
        let (x, w, b) = (
            inp.matrix(n, k, 1.0),
            inp.matrix(parts * out, k, 0.2),
            inp.matrix(1, parts * out, 1.0),
        );
        let b = bias.then(|| up(be, &b));
        let ys = be
            .linear_split(&up(be, &x), &up(be, &w), b.as_ref(), parts)
            .unwrap();
        assert_eq!(ys.len(), parts);
        ys.iter().flat_map(|y| down(be, y).data).collect()
    }
}

/// `x + linear(input)` (a residual branch; the GEMM's C operand on the GPU).
#[derive(Debug, Clone, Copy)]
pub struct LinearAdd {
    pub n: usize,
    pub k: usize,
    pub out: usize,
    pub bias: bool,
}

impl Case for LinearAdd {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let LinearAdd { n, k, out, bias } = *self;
        let (x, w, b, r) = (
            inp.matrix(n, k, 1.0),
            inp.matrix(out, k, 0.2),
            inp.matrix(1, out, 1.0),
            inp.matrix(n, out, 2.0),
        );
        let b = bias.then(|| up(be, &b));
        let mut r = up(be, &r);
        be.linear_add(&mut r, &up(be, &x), &up(be, &w), b.as_ref())
            .unwrap();
        down(be, &r).data
    }
}

/// `gelu(linear)` with the erf GELU (DeBERTa's MLP; on a Hopper GPU, with a bias
/// and widths that are multiples of 8, the CUTLASS kernel with both in its epilogue).
#[derive(Debug, Clone, Copy)]
pub struct LinearGelu {
    pub n: usize,
    pub k: usize,
    pub out: usize,
    pub bias: bool,
}

impl Case for LinearGelu {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let LinearGelu { n, k, out, bias } = *self;
        let (x, w, b) = linear_operands(be, inp, [n, k, out], bias);
        down(be, &be.linear_gelu(&x, &w, b.as_ref()).unwrap()).data
    }
}

/// `gelu_new(linear)` (GPT-2's MLP; the cuBLASLt GELU epilogue on the GPU).
#[derive(Debug, Clone, Copy)]
pub struct LinearGeluNew {
    pub n: usize,
    pub k: usize,
    pub out: usize,
    pub bias: bool,
}

impl Case for LinearGeluNew {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let LinearGeluNew { n, k, out, bias } = *self;
        let (x, w, b) = linear_operands(be, inp, [n, k, out], bias);
        down(be, &be.linear_gelu_new(&x, &w, b.as_ref()).unwrap()).data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Gelu {
    pub rows: usize,
    pub cols: usize,
}

impl Case for Gelu {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let Gelu { rows, cols } = *self;
        let mut x = up(be, &inp.matrix(rows, cols, 4.0));
        be.gelu(&mut x).unwrap();
        down(be, &x).data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct LayerNorm {
    pub rows: usize,
    pub cols: usize,
    pub residual: bool,
}

impl Case for LayerNorm {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let LayerNorm {
            rows,
            cols,
            residual,
        } = *self;
        let (x, r) = (inp.matrix(rows, cols, 3.0), inp.matrix(rows, cols, 1.0));
        let (w, b) = (inp.matrix(1, cols, 1.0), inp.matrix(1, cols, 1.0));
        let mut x = up(be, &x);
        let r = residual.then(|| up(be, &r));
        be.layer_norm(&mut x, r.as_ref(), &up(be, &w), &up(be, &b), 1e-7)
            .unwrap();
        down(be, &x).data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Embedding {
    pub tokens: usize,
    pub cols: usize,
    pub tables: usize,
}

impl Case for Embedding {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let Embedding {
            tokens,
            cols,
            tables,
        } = *self;
        let sizes = [50u32, 17, 2];
        let ts: Vec<B::Tensor> = sizes[..tables]
            .iter()
            .map(|&v| up(be, &inp.matrix(v as usize, cols, 1.0)))
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
        down(be, &be.embedding(&lookups).unwrap()).data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ScaleRows {
    pub rows: usize,
    pub cols: usize,
}

impl Case for ScaleRows {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let ScaleRows { rows, cols } = *self;
        let mut x = up(be, &inp.matrix(rows, cols, 1.0));
        let s: Vec<f32> = (0..rows).map(|r| (r % 3) as f32 * 0.5).collect();
        be.scale_rows(&mut x, s.as_slice().into()).unwrap();
        down(be, &x).data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct GatherRows {
    pub rows: usize,
    pub cols: usize,
}

impl Case for GatherRows {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let GatherRows { rows, cols } = *self;
        let x = up(be, &inp.matrix(rows, cols, 1.0));
        let pick: Vec<usize> = inp
            .ids(rows / 2 + 1, rows as u32)
            .iter()
            .map(|&r| r as usize)
            .collect();
        down(be, &be.gather_rows(&x, pick.as_slice().into()).unwrap()).data
    }
}

/// `cls_head` over sequences of `lens` (every 5th token masked): the first row or
/// the masked mean, a pooler of that width (+ GELU, or tanh with `tanh`) or none,
/// `labels` logits.
#[derive(Debug, Clone, Copy)]
pub struct ClsHead {
    pub lens: &'static [usize],
    pub cols: usize,
    pub mean: bool,
    pub pooler: Option<usize>,
    pub tanh: bool,
    pub labels: usize,
    pub bias: bool,
}

impl Case for ClsHead {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let ClsHead {
            lens,
            cols,
            mean,
            pooler,
            tanh,
            labels,
            bias,
        } = *self;
        let l = encoder_layout(lens);
        let x = up(be, &inp.matrix(l.num_tokens(), cols, 1.0));
        let width = pooler.unwrap_or(cols);
        let mut dense = |out, input| {
            let (w, b) = (inp.matrix(out, input, 0.2), inp.matrix(1, out, 1.0));
            (up(be, &w), bias.then(|| up(be, &b)))
        };
        let p = pooler.map(|p| dense(p, cols));
        let c = dense(labels, width);
        let head = hopscore::backend::ClsHead {
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
}

/// `token_head` over `tokens` rows: the logits (each backend's labels are checked
/// against the argmax of its own logits).
#[derive(Debug, Clone, Copy)]
pub struct TokenHead {
    pub tokens: usize,
    pub cols: usize,
    pub labels: usize,
    pub bias: bool,
}

impl Case for TokenHead {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let TokenHead {
            tokens,
            cols,
            labels,
            bias,
        } = *self;
        let (x, w, b) = (
            inp.matrix(tokens, cols, 1.0),
            inp.matrix(labels, cols, 0.2),
            inp.matrix(1, labels, 1.0),
        );
        let (w, b) = (up(be, &w), bias.then(|| up(be, &b)));
        let dense = Dense {
            weight: &w,
            bias: b.as_ref(),
        };
        let out = be.token_head(&up(be, &x), dense).unwrap();
        let argmax: Vec<u32> = out
            .logits
            .data
            .chunks_exact(labels)
            .map(|l| hopscore::tensor::argmax(l) as u32)
            .collect();
        assert_eq!(out.labels, argmax, "{self:?}: labels are not the argmax");
        out.logits.data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Add {
    pub rows: usize,
    pub cols: usize,
}

impl Case for Add {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let Add { rows, cols } = *self;
        let (a, b) = (inp.matrix(rows, cols, 1.0), inp.matrix(rows, cols, 1.0));
        let mut a = up(be, &a);
        be.add(&mut a, &up(be, &b)).unwrap();
        down(be, &a).data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct CopyRows {
    pub rows: usize,
    pub cols: usize,
}

impl Case for CopyRows {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let CopyRows { rows, cols } = *self;
        down(be, &be.copy(&up(be, &inp.matrix(rows, cols, 1.0))).unwrap()).data
    }
}

/// Packed sequences of `lens`; `rel: None` is plain attention.
#[derive(Debug, Clone, Copy)]
pub struct DisentangledAttention {
    pub heads: usize,
    pub d: usize,
    pub rel: Option<Rel>,
    pub lens: &'static [usize],
}

impl Case for DisentangledAttention {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let DisentangledAttention {
            heads,
            d,
            rel,
            lens,
        } = *self;
        let lay = attention_layout(inp, lens);
        let tokens = lay.num_tokens();
        let width = heads * d;
        let (mut pos_key, mut pos_query, mut index) = (None, None, Vec::new());
        if let Some(r) = rel {
            index = relative_index(&r.config(), lay.max_len());
            pos_key = r.c2p.then(|| up(be, &inp.normal(2 * r.buckets, width)));
            pos_query = r.p2c.then(|| up(be, &inp.normal(2 * r.buckets, width)));
        }
        let (q, k, v) = (
            up(be, &inp.normal(tokens, width)),
            up(be, &inp.normal(tokens, width)),
            up(be, &inp.normal(tokens, width)),
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
        let out = down(be, &out);
        assert_eq!(out.shape, vec![tokens, width]);
        out.data
    }
    fn masked_rows(&self, inp: &mut Inputs) -> Option<(SeqLayout, usize)> {
        Some((attention_layout(inp, self.lens), self.heads * self.d))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct RmsNorm {
    pub rows: usize,
    pub cols: usize,
}

impl Case for RmsNorm {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let RmsNorm { rows, cols } = *self;
        let x = inp.matrix(rows, cols, 3.0);
        let w = inp.matrix(1, cols, 1.5);
        let w = HostTensor::new(vec![cols], w.data);
        let out = down(be, &be.rms_norm(&up(be, &x), &up(be, &w), 1e-5).unwrap());
        assert_eq!(out.shape, vec![rows, cols]);
        out.data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct GeluNew {
    pub rows: usize,
    pub cols: usize,
}

impl Case for GeluNew {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let GeluNew { rows, cols } = *self;
        let mut x = up(be, &inp.matrix(rows, cols, 5.0));
        be.gelu_new(&mut x).unwrap();
        down(be, &x).data
    }
}

/// `act(gate) · up` of gate/up rows in `gated`'s blocks.
#[derive(Debug, Clone, Copy)]
pub struct GatedAct {
    pub rows: usize,
    pub inter: usize,
    pub gated: Gated,
}

impl Case for GatedAct {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let GatedAct { rows, inter, gated } = *self;
        let x = inp.matrix(rows, 2 * inter, 4.0);
        let out = down(be, &be.gated_act(&up(be, &x), gated).unwrap());
        assert_eq!(out.shape, vec![rows, inter]);
        out.data
    }
}

/// `act(x · gateᵀ) · (x · upᵀ)` of a fused gate/up weight in `gated`'s blocks (on a
/// Hopper GPU, in blocks of 64 and with no bias, the CUTLASS kernel with the gate in
/// its epilogue).
#[derive(Debug, Clone, Copy)]
pub struct LinearGated {
    pub n: usize,
    pub k: usize,
    pub inter: usize,
    pub gated: Gated,
    pub bias: bool,
}

impl Case for LinearGated {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let LinearGated {
            n,
            k,
            inter,
            gated,
            bias,
        } = *self;
        let (x, w, b) = (
            inp.matrix(n, k, 1.0),
            inp.matrix(2 * inter, k, 0.2),
            inp.matrix(1, 2 * inter, 1.0),
        );
        let b = bias.then(|| up(be, &b));
        let y = be.linear_gated(&up(be, &x), &up(be, &w), b.as_ref(), gated);
        let y = down(be, &y.unwrap());
        assert_eq!(y.shape, vec![n, inter]);
        y.data
    }
}

/// `LN(x · wᵀ + bias + residual)` (on a Hopper GPU, for rows of 1,024 and 768 with a bias,
/// the CUTLASS kernel with the residual and the LayerNorm in its epilogue).
#[derive(Debug, Clone, Copy)]
pub struct LinearAddNorm {
    pub n: usize,
    pub k: usize,
    pub out: usize,
    pub bias: bool,
}

impl Case for LinearAddNorm {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let LinearAddNorm { n, k, out, bias } = *self;
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
        let (r, g, beta) = (up(be, &r), up(be, &g), up(be, &beta));
        let norm = AddNorm {
            residual: &r,
            weight: &g,
            bias: &beta,
            eps: 1e-7,
        };
        let b = bias.then(|| up(be, &b));
        let y = be.linear_add_norm(&up(be, &x), &up(be, &w), b.as_ref(), &norm);
        down(be, &y.unwrap()).data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Relu {
    pub rows: usize,
    pub cols: usize,
}

impl Case for Relu {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let Relu { rows, cols } = *self;
        let mut x = up(be, &inp.matrix(rows, cols, 3.0));
        be.relu(&mut x).unwrap();
        down(be, &x).data
    }
}

/// T5 attention over `lens` (query rows) and `kv_lens` (keys; the query layout
/// again for self-attention), `heads` of width `d`: with the bucket bias of
/// `buckets` buckets up to `max_distance` (bidirectional unless causal), or none
/// (cross-attention).
#[derive(Debug, Clone, Copy)]
pub struct T5Attention {
    pub heads: usize,
    pub d: usize,
    pub lens: &'static [usize],
    pub kv_lens: Option<&'static [usize]>,
    pub causal: bool,
    pub bias: Option<(usize, usize)>,
}

impl Case for T5Attention {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let T5Attention {
            heads,
            d,
            lens,
            kv_lens,
            causal,
            bias,
        } = *self;
        let q_lay = causal_layout(lens, None);
        let kv_lay = kv_lens.map_or_else(|| q_lay.clone(), encoder_layout);
        let width = heads * d;
        let q = up(be, &inp.matrix(q_lay.num_tokens(), width, 1.0));
        let k = up(be, &inp.matrix(kv_lay.num_tokens(), width, 1.0));
        let v = up(be, &inp.matrix(kv_lay.num_tokens(), width, 2.0));
        let max_len = q_lay.max_len().max(kv_lay.max_len()) as i64;
        let tables = bias.map(|(buckets, distance)| {
            let table = up(be, &inp.matrix(buckets, heads, 3.0));
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
        let out = down(be, &out);
        assert_eq!(out.shape, vec![q_lay.num_tokens(), width]);
        out.data
    }
    fn masked_rows(&self, _inp: &mut Inputs) -> Option<(SeqLayout, usize)> {
        Some((causal_layout(self.lens, None), self.heads * self.d))
    }
}

/// The sequences of a RoPE case.
pub const ROPE_LENS: [usize; 4] = [1, 5, 17, 40];

/// Llama-style fused [q | k | v] with 4 + 2 + 2 heads over sequences of
/// `ROPE_LENS`; q and k rotate, positions restart at `offset` in each sequence;
/// `qk_norm`: each q and k head RMS-normalised first (Qwen3, `rope_qk_norm_*`).
#[derive(Debug, Clone, Copy)]
pub struct Rope {
    pub head_dim: usize,
    pub offset: u32,
    pub theta: f32,
    pub qk_norm: bool,
}

impl Case for Rope {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let Rope {
            head_dim,
            offset,
            theta,
            qk_norm,
        } = *self;
        let tokens: usize = ROPE_LENS.iter().sum();
        let cols = 8 * head_dim;
        let inv_freq: Vec<f32> = (0..head_dim / 2)
            .map(|i| 1.0 / theta.powf(2.0 * i as f32 / head_dim as f32))
            .collect();
        let pos: Vec<u32> = ROPE_LENS
            .iter()
            .flat_map(|&l| (0..l as u32).map(move |p| p + offset))
            .collect();
        let mut x = up(be, &inp.matrix(tokens, cols, 2.0));
        // Weights around 1 (as trained q_norm / k_norm are).
        let mut norm_weight = || {
            let mut w = inp.matrix(1, head_dim, 0.5);
            w.data.iter_mut().for_each(|v| *v += 1.0);
            up(be, &w)
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
        down(be, &x).data
    }
}

#[derive(Debug, Clone, Copy)]
pub struct CausalAttention {
    pub heads: usize,
    pub kv_heads: usize,
    pub d: usize,
    pub lens: &'static [usize],
    /// A packed token masked besides 3, 10, 17, …
    pub extra_masked: Option<usize>,
    /// Each sequence's first query row (the rows before it zeros), or empty: all.
    pub first_query: &'static [u32],
}

impl Case for CausalAttention {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let CausalAttention {
            heads,
            kv_heads,
            d,
            lens,
            extra_masked,
            first_query,
        } = *self;
        let lay = causal_layout(lens, extra_masked);
        let tokens = lay.num_tokens();
        let cols = (heads + 2 * kv_heads) * d;
        let qkv = up(be, &inp.matrix(tokens, cols, 2.0));
        let shape = CausalShape {
            heads,
            kv_heads,
            head_dim: d,
            scale: 1.0 / (d as f32).sqrt(),
        };
        let first = (!first_query.is_empty()).then(|| Input::from(first_query));
        let out = be.causal_attention(&qkv, shape, (&lay).into(), first);
        let out = down(be, &out.unwrap());
        assert_eq!(out.shape, vec![tokens, heads * d]);
        out.data
    }
    fn masked_rows(&self, _inp: &mut Inputs) -> Option<(SeqLayout, usize)> {
        Some((
            causal_layout(self.lens, self.extra_masked),
            self.heads * self.d,
        ))
    }
}

/// 31 rows of 50 hidden states (27 random, first, last, a repeated one) against
/// a `vocab` × `cols` head; the first targets hit 0, the last word and the
/// 2,048-word split edges.
#[derive(Debug, Clone, Copy)]
pub struct QuestionLoglik {
    pub tokens: usize,
    pub cols: usize,
    pub vocab: usize,
    pub temperature: f32,
}

impl Case for QuestionLoglik {
    fn run<B: Backend>(&self, be: &B, inp: &mut Inputs) -> Vec<f32> {
        let QuestionLoglik {
            tokens,
            cols,
            vocab,
            temperature,
        } = *self;
        let hidden = up(be, &inp.matrix(tokens, cols, 2.0));
        let head = up(be, &inp.matrix(vocab, cols, 0.5));
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
}

/// `a [m, k] · bᵀ` (or `· b` with `path.b_kn`) through the tensor-core wrappers of
/// kernels/common.cuh (bf16/f16), against a plain product of the same inputs.
#[derive(Debug, Clone, Copy)]
pub struct TensorCore {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub path: TensorCorePath,
}

/// A tensor-core row: the reference is the plain product in f64 (exact products, summed,
/// rounded once), so a layout slip (an O(1) error) cannot hide under the 16-bit bound.
impl Row for TensorCore {
    fn reference(&self, seed: u64, dtype: DType) -> Vec<f32> {
        self.operands(seed, dtype).2
    }
    fn on_device(&self, gpu: &CudaBackend, seed: u64, dtype: DType) -> Vec<f32> {
        let (a, b, _) = self.operands(seed, dtype);
        let (a, b) = (up(gpu, &a), up(gpu, &b));
        gpu.tensor_core_check(&a, &b, self.path).unwrap()
    }
    fn tolerance(&self, _dtype: DType) -> f32 {
        1e-5
    }
}

impl TensorCore {
    /// A `[m, k]`, B and their product (uniform in ±2, rounded to `dtype`).
    fn operands(&self, seed: u64, dtype: DType) -> (HostTensor, HostTensor, Vec<f32>) {
        let (m, n, k) = (self.m, self.n, self.k);
        check_product(&mut Inputs::new(seed, dtype), [m, m], k, n, self.path.b_kn)
    }
}

/// Random operands of a tensor-core check, A `[rows, k]` and B (`[k, n]` when `b_kn`,
/// else `[n, k]`), and their product C `[c_rows, n]` (products exact in f64, summed, then
/// rounded once; the rows of C past A's are zero, as a TMA load fills them).
pub fn check_product(
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
