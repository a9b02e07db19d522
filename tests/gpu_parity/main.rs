//! GPU vs CPU parity (feature `cuda`): ONE table of op cases (cf. llama.cpp's
//! test-backend-ops; [`cases`]: one struct a case, run by the same code on the CUDA
//! backend and on the CPU backend, the executable specification, with the same fresh
//! seeded inputs; [`ops`]: the table in each dtype), then whole models ([`models`]:
//! DeBERTa fixtures, the BERT / XLM-R / ModernBERT rerankers, the BERT embedder, the
//! decoders and T5) on both backends, the Hopper-only paths ([`hopper`]: wgmma, TMA,
//! v5 attention, the CUTLASS GEMMs) and the host path's CUDA graphs and batch
//! invariance ([`graphs`]).
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
//! machine. One binary (`--test gpu_parity`), as the GPU kit ships it.

#![cfg(feature = "cuda")]

#[path = "../common/mod.rs"]
mod common;

mod cases;
mod graphs;
mod hopper;
mod models;
mod ops;

use hopscore::backend::cuda::DType;
use hopscore::backend::SeqLayout;
// The per-op bound (and whole decoders'), relative to max |reference|: the self-test's,
// which holds a job's kernels to the same bounds.
use hopscore::backend::selftest::tolerance;
use hopscore::tensor::HostTensor;

/// Whether `gpu` is the CPU emulator of the driver (tools/cuda_emu), where a whole
/// bf16 model forward takes seconds: the slowest model tests take fewer fixtures there.
fn on_emulator(gpu: &hopscore::backend::cuda::CudaBackend) -> bool {
    hopscore::backend::Backend::name(gpu).contains("emulator")
}

/// `max |a − b| / max |b|` (the self-test's [`selftest::rel_err`]); a non-finite output
/// element (a NaN-poisoned element left unwritten) gives infinity.
///
/// [`selftest::rel_err`]: hopscore::backend::selftest::rel_err
fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "output sizes differ");
    hopscore::backend::selftest::rel_err(got, want)
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
