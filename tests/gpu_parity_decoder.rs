//! GPU parity of the decoder ops (feature `cuda`): every CUDA kernel of the causal LMs
//! (`rms_norm`, `gelu_new`, `swiglu`, `rope`, `causal_attention`, `question_loglik`)
//! against its CPU twin, and whole tiny decoders (GPT-2, Llama with GQA, Qwen2)
//! `target_logprobs` CPU vs GPU.
//!
//! Inputs are fresh seeded random values (never zeros), rounded to the device dtype
//! before both backends see them, so that only the kernels' own arithmetic and output
//! rounding differ: max error ≤ 1e-5 (f32), 1e-2 (bf16) or 5e-3 (f16) relative to max
//! |reference|; whole models load the same rounded weights on both sides.
//! Buffers are poisoned with NaN, so an output element a kernel leaves unwritten fails.
//! Without a GPU (or the emulator, tools/cuda_emu) every test prints "no GPU: skipped"
//! (a failure with `HOPSCORE_REQUIRE_GPU=1`, as CI runs them on the emulator).

#![cfg(feature = "cuda")]

mod common;

use std::path::{Path, PathBuf};

use hopscore::backend::cpu::CpuBackend;
use hopscore::backend::cuda::DType;
use hopscore::backend::{Backend, CausalShape, SeqLayout};
use hopscore::model::decoder::{DecoderForCausalLM, DecoderSource, ScoredSequence};
use hopscore::model::weights::HostTensor;

const DTYPES: [DType; 3] = [DType::F32, DType::Bf16, DType::F16];

fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-5,
        DType::Bf16 => 1e-2,
        DType::F16 => 5e-3,
    }
}

/// `n` values uniform in ±`scale`, none zero, rounded to `dtype`.
fn random(rng: &mut fastrand::Rng, n: usize, scale: f32, dtype: DType) -> Vec<f32> {
    let v: Vec<f32> = (0..n)
        .map(|_| {
            let x = (rng.f32() * 2.0 - 1.0) * scale;
            if x == 0.0 {
                scale * 0.5
            } else {
                x
            }
        })
        .collect();
    dtype.decode(&dtype.encode(&v))
}

fn host(rows: usize, cols: usize, data: Vec<f32>) -> HostTensor {
    HostTensor::new(vec![rows, cols], data)
}

/// Max |got − want| relative to max |want|; asserts it is within the dtype's tolerance.
fn compare(what: &str, dtype: DType, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: output sizes");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    let mut err = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.is_finite(),
            "{what} {dtype:?}: element {i} is {g} (want {w})"
        );
        err = err.max((g - w).abs() / scale);
    }
    eprintln!("{what} {dtype:?}: max err {err:.3e} (relative to max |ref| {scale:.3})");
    assert!(
        err <= tolerance(dtype),
        "{what} {dtype:?}: max err {err:e} > {}",
        tolerance(dtype)
    );
    err
}

/// Packed layout of sequences of `lens`, with token `t` masked where `masked(t)`.
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

/// Positions restarting at `offset` in every sequence.
fn positions(lens: &[usize], offset: u32) -> Vec<u32> {
    lens.iter()
        .flat_map(|&l| (0..l as u32).map(move |p| p + offset))
        .collect()
}

#[test]
fn rms_norm_matches_cpu() {
    for dtype in DTYPES {
        let Some(be) = common::gpu(dtype) else { return };
        let mut rng = fastrand::Rng::with_seed(11);
        for (rows, cols) in [(37, 96), (5, 300), (1, 7)] {
            let x = host(rows, cols, random(&mut rng, rows * cols, 3.0, dtype));
            let w = HostTensor::new(vec![cols], random(&mut rng, cols, 1.5, dtype));
            let want = CpuBackend
                .rms_norm(
                    &CpuBackend.upload(&x).unwrap(),
                    &CpuBackend.upload(&w).unwrap(),
                    1e-5,
                )
                .unwrap();
            let got = be
                .rms_norm(&be.upload(&x).unwrap(), &be.upload(&w).unwrap(), 1e-5)
                .unwrap();
            let got = be.download(&got).unwrap();
            assert_eq!(got.shape, vec![rows, cols]);
            compare(
                &format!("rms_norm [{rows}, {cols}]"),
                dtype,
                &got.data,
                &want.data,
            );
        }
    }
}

#[test]
fn gelu_new_matches_cpu() {
    for dtype in DTYPES {
        let Some(be) = common::gpu(dtype) else { return };
        let mut rng = fastrand::Rng::with_seed(12);
        let (rows, cols) = (53, 70);
        let x = host(rows, cols, random(&mut rng, rows * cols, 5.0, dtype));
        let mut want = CpuBackend.upload(&x).unwrap();
        CpuBackend.gelu_new(&mut want).unwrap();
        let mut got = be.upload(&x).unwrap();
        be.gelu_new(&mut got).unwrap();
        let got = be.download(&got).unwrap();
        compare("gelu_new", dtype, &got.data, &want.data);
    }
}

#[test]
fn swiglu_matches_cpu() {
    for dtype in DTYPES {
        let Some(be) = common::gpu(dtype) else { return };
        let mut rng = fastrand::Rng::with_seed(13);
        let (rows, inter) = (29, 90);
        let x = host(
            rows,
            2 * inter,
            random(&mut rng, rows * 2 * inter, 4.0, dtype),
        );
        let want = CpuBackend.swiglu(&CpuBackend.upload(&x).unwrap()).unwrap();
        let got = be.swiglu(&be.upload(&x).unwrap()).unwrap();
        let got = be.download(&got).unwrap();
        assert_eq!(got.shape, vec![rows, inter]);
        compare("swiglu", dtype, &got.data, &want.data);
    }
}

#[test]
fn rope_matches_cpu() {
    for dtype in DTYPES {
        let Some(be) = common::gpu(dtype) else { return };
        let mut rng = fastrand::Rng::with_seed(14);
        let lens = [1, 5, 17, 40];
        let tokens: usize = lens.iter().sum();
        // Llama-style fused [q | k | v] with 4 + 2 + 2 heads; q and k rotate.
        for (head_dim, offset, theta) in [(16, 0, 10_000f32), (64, 0, 500_000.0), (8, 3000, 1e6)] {
            let cols = 8 * head_dim;
            let half = head_dim / 2;
            let inv_freq: Vec<f32> = (0..half)
                .map(|i| 1.0 / theta.powf(2.0 * i as f32 / head_dim as f32))
                .collect();
            let pos = positions(&lens, offset);
            let x = host(tokens, cols, random(&mut rng, tokens * cols, 2.0, dtype));
            let mut want = CpuBackend.upload(&x).unwrap();
            CpuBackend
                .rope(&mut want, 6, head_dim, &pos, &inv_freq)
                .unwrap();
            let mut got = be.upload(&x).unwrap();
            be.rope(&mut got, 6, head_dim, &pos, &inv_freq).unwrap();
            let got = be.download(&got).unwrap();
            compare(
                &format!("rope d={head_dim} positions+{offset}"),
                dtype,
                &got.data,
                &want.data,
            );
        }
    }
}

#[test]
fn causal_attention_matches_cpu() {
    for dtype in DTYPES {
        let Some(be) = common::gpu(dtype) else { return };
        let mut rng = fastrand::Rng::with_seed(15);
        // (heads, kv_heads, head_dim, lengths): MHA, GQA 2:1 and 4:1, tiles crossing
        // the 32-row blocks, a one-token sequence; tokens 3, 10, 17, … are masked
        // (including the whole second sequence of the last case).
        let cases: [(usize, usize, usize, &[usize]); 7] = [
            (4, 4, 16, &[1, 5, 17, 40]),
            (9, 3, 64, &[17, 40, 1, 5]), // SmolLM2-135M's geometry
            (9, 3, 64, &[200, 7]),       // a LEPUS-length prompt: 7 key tiles
            (4, 2, 64, &[1, 5, 17, 40]),
            (4, 1, 32, &[40, 1, 5, 17]),
            (2, 1, 128, &[70, 3]),
            (3, 1, 8, &[33, 1, 65]),
        ];
        for (heads, kv_heads, d, lens) in cases {
            let lay = layout(lens, |t| t % 7 == 3 || (lens == [33, 1, 65] && t == 33));
            let tokens = lay.num_tokens();
            let cols = (heads + 2 * kv_heads) * d;
            let qkv = host(tokens, cols, random(&mut rng, tokens * cols, 2.0, dtype));
            let shape = CausalShape {
                heads,
                kv_heads,
                head_dim: d,
                scale: 1.0 / (d as f32).sqrt(),
            };
            let want = CpuBackend
                .causal_attention(&CpuBackend.upload(&qkv).unwrap(), shape, &lay)
                .unwrap();
            let got = be
                .causal_attention(&be.upload(&qkv).unwrap(), shape, &lay)
                .unwrap();
            let got = be.download(&got).unwrap();
            assert_eq!(got.shape, vec![tokens, heads * d]);
            // Masked query rows are exactly zero.
            for (t, m) in lay.mask.iter().enumerate() {
                if *m == 0.0 {
                    let row = &got.data[t * heads * d..(t + 1) * heads * d];
                    assert!(row.iter().all(|&v| v == 0.0), "masked row {t} not zero");
                }
            }
            compare(
                &format!("causal_attention heads {heads}/{kv_heads} d={d} lens {lens:?}"),
                dtype,
                &got.data,
                &want.data,
            );
        }
    }
}

#[test]
fn causal_attention_rejects_head_dim_over_128() {
    let Some(be) = common::gpu(DType::F32) else {
        return;
    };
    let lay = layout(&[3], |_| false);
    let qkv = host(3, 3 * 256, vec![0.5; 3 * 3 * 256]);
    let shape = CausalShape {
        heads: 1,
        kv_heads: 1,
        head_dim: 256,
        scale: 0.0625,
    };
    let err = be
        .causal_attention(&be.upload(&qkv).unwrap(), shape, &lay)
        .err()
        .expect("head_dim 256 is refused");
    assert!(err.to_string().contains("head_dim 256"), "{err}");
}

#[test]
fn question_loglik_matches_cpu() {
    for dtype in DTYPES {
        let Some(be) = common::gpu(dtype) else { return };
        let mut rng = fastrand::Rng::with_seed(16);
        // 4,500 words: two full 2,048-word splits and a last one ending mid-chunk; 80
        // columns: one full and one partial 64-column slice.
        let (tokens, cols, vocab) = (50, 80, 4_500);
        let hidden = host(tokens, cols, random(&mut rng, tokens * cols, 2.0, dtype));
        let head = host(vocab, cols, random(&mut rng, vocab * cols, 0.5, dtype));
        let mut rows: Vec<usize> = (0..27).map(|_| rng.usize(0..tokens)).collect();
        rows.extend([0, tokens - 1, 7, 7]);
        let mut targets: Vec<u32> = rows.iter().map(|_| rng.u32(0..vocab as u32)).collect();
        targets[..6].copy_from_slice(&[0, vocab as u32 - 1, 2047, 2048, 4095, 4096]);
        let (ch, cw) = (
            CpuBackend.upload(&hidden).unwrap(),
            CpuBackend.upload(&head).unwrap(),
        );
        let (gh, gw) = (be.upload(&hidden).unwrap(), be.upload(&head).unwrap());
        // 31 rows: two 16-row tiles (f32) or one 32-row tile (bf16/f16, wmma; the
        // emulator runs every wmma tile product 32 times over, so one temperature).
        let temperatures: &[f32] = if dtype == DType::F32 {
            &[1.0, 1.4]
        } else {
            &[1.4]
        };
        for &temperature in temperatures {
            let want = CpuBackend
                .question_loglik(&ch, &rows, &cw, &targets, temperature)
                .unwrap();
            let got = be
                .question_loglik(&gh, &rows, &gw, &targets, temperature)
                .unwrap();
            compare(
                &format!("question_loglik T={temperature}"),
                dtype,
                &got,
                &want,
            );
        }
        assert!(be
            .question_loglik(&gh, &[], &gw, &[], 1.0)
            .unwrap()
            .is_empty());
    }
}

/// Ragged sequences of random ids (one without targets, a suffix-only one).
fn scored_sequences(vocab: usize) -> Vec<ScoredSequence> {
    let mut rng = fastrand::Rng::with_seed(17);
    [(1, 1), (5, 1), (17, 9), (40, 1)]
        .iter()
        .map(|&(len, target_start)| ScoredSequence {
            ids: (0..len).map(|_| rng.u32(0..vocab as u32)).collect(),
            target_start,
        })
        .collect()
}

/// A copy of checkpoint `src` (config.json + model.safetensors) with every float
/// tensor rounded to `dtype` and stored as f32, so that the CPU reference holds the
/// weights the GPU holds and the comparison measures the kernels' rounding only.
fn rounded_checkpoint(src: &Path, dst: &Path, dtype: DType) -> PathBuf {
    use safetensors::{tensor::TensorView, Dtype, SafeTensors};
    std::fs::copy(src.join("config.json"), dst.join("config.json")).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let values: Vec<f32> = match view.dtype() {
                Dtype::F32 => DType::F32.decode(view.data()),
                Dtype::BF16 => DType::Bf16.decode(view.data()),
                Dtype::F16 => DType::F16.decode(view.data()),
                other => panic!("{name}: unexpected dtype {other:?}"),
            };
            let rounded = dtype.decode(&dtype.encode(&values));
            (name, view.shape().to_vec(), DType::F32.encode(&rounded))
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, shape, data)| {
            let view = TensorView::new(Dtype::F32, shape.clone(), data).unwrap();
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dst.join("model.safetensors")).unwrap();
    dst.to_path_buf()
}

/// A whole tiny decoder on both backends: `target_logprobs` of ragged packed
/// sequences at T = 1 and 1.4; for bf16/f16 the CPU model loads the same rounded
/// weights.
fn model_matches_cpu(name: &str) {
    let fixture = common::fixture(&format!("decoder/{name}"));
    for dtype in DTYPES {
        let Some(be) = common::gpu(dtype) else { return };
        let tmp = tempfile::tempdir().unwrap();
        let dir = match dtype {
            DType::F32 => fixture.clone(),
            _ => rounded_checkpoint(&fixture, tmp.path(), dtype),
        };
        let cpu =
            DecoderForCausalLM::load(&CpuBackend, DecoderSource::open(&dir).unwrap()).unwrap();
        let model = DecoderForCausalLM::load(&be, DecoderSource::open(&dir).unwrap()).unwrap();
        let seqs = scored_sequences(cpu.config.vocab_size);
        for t in [1.0f32, 1.4] {
            let want = cpu.target_logprobs(&CpuBackend, &seqs, t).unwrap();
            let got = model.target_logprobs(&be, &seqs, t).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.len(), w.len());
            }
            compare(
                &format!("{name} target_logprobs T={t}"),
                dtype,
                &got.concat(),
                &want.concat(),
            );
        }
    }
}

#[test]
fn gpt2_model_matches_cpu() {
    model_matches_cpu("gpt2");
}

#[test]
fn llama_gqa_model_matches_cpu() {
    model_matches_cpu("llama_gqa_untied");
}

#[test]
fn qwen2_model_matches_cpu() {
    model_matches_cpu("qwen2_bias_tied");
}
