//! GPU parity of `disentangled_attention` (kernels/disentangled_attention.cu) against
//! the CPU twin, on fresh random inputs: packed sequences of 1, 7, 33, 70 and 130
//! tokens with masked tokens, with and without c2p/p2c, DeBERTa-v3's 256 log buckets
//! and a small 8-bucket table that saturates. Outputs are poisoned (NaN) before the
//! run, so an element the kernel leaves unwritten fails. Without a CUDA device it
//! prints "no GPU: skipped" and passes.

#![cfg(feature = "cuda")]

use hopscore::backend::cpu::CpuBackend;
use hopscore::backend::cuda::{CudaBackend, DType};
use hopscore::backend::{AttentionShape, Backend, RelAttention, SeqLayout};
use hopscore::model::config::RelativeConfig;
use hopscore::model::deberta::relative_index;
use hopscore::model::weights::HostTensor;

const LENGTHS: [usize; 5] = [1, 7, 33, 70, 130];

/// Position terms of a case: none (plain attention) or a bucket table with c2p / p2c.
#[derive(Clone, Copy, Debug)]
struct Rel {
    buckets: usize,
    max_relative_positions: usize,
    c2p: bool,
    p2c: bool,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    heads: usize,
    d: usize,
    rel: Option<Rel>,
    seed: u64,
}

struct Inputs {
    q: HostTensor,
    k: HostTensor,
    v: HostTensor,
    pos_key: Option<HostTensor>,
    pos_query: Option<HostTensor>,
    index: Vec<u32>,
    layout: SeqLayout,
    shape: AttentionShape,
}

/// Standard-normal-ish values (never zero), rounded to `dtype` so that both backends
/// see the same numbers.
fn random(rng: &mut fastrand::Rng, shape: [usize; 2], dtype: DType) -> HostTensor {
    let n = shape[0] * shape[1];
    let data: Vec<f32> = (0..n)
        .map(|_| {
            let x = (0..4).map(|_| rng.f32()).sum::<f32>() - 2.0; // Irwin–Hall, var 1/3
            let x = x * 1.7 + if x >= 0.0 { 1e-3 } else { -1e-3 };
            dtype.decode(&dtype.encode(&[x]))[0]
        })
        .collect();
    HostTensor::new(shape.to_vec(), data)
}

fn inputs(case: &Case, dtype: DType) -> Inputs {
    let mut rng = fastrand::Rng::with_seed(case.seed);
    let mut cu_seqlens = vec![0];
    for len in LENGTHS {
        cu_seqlens.push(cu_seqlens.last().unwrap() + len);
    }
    let tokens = *cu_seqlens.last().unwrap();
    // ~15% of the tokens masked (never a sequence's first), plus a masked tail in the
    // 70-token sequence as padding would leave it.
    let mut mask: Vec<f32> = (0..tokens)
        .map(|_| if rng.f32() < 0.15 { 0.0 } else { 1.0 })
        .collect();
    for &s in &cu_seqlens[..LENGTHS.len()] {
        mask[s] = 1.0;
    }
    let tail = cu_seqlens[4];
    mask[tail - 9..tail].fill(0.0);
    let layout = SeqLayout { cu_seqlens, mask };

    let width = case.heads * case.d;
    let (mut pos_key, mut pos_query, mut index) = (None, None, Vec::new());
    if let Some(r) = case.rel {
        let rc = RelativeConfig {
            buckets: Some(r.buckets),
            max_relative_positions: r.max_relative_positions,
            span: r.buckets,
            c2p: r.c2p,
            p2c: r.p2c,
            share_att_key: true,
            norm_rel_ebd: true,
        };
        index = relative_index(&rc, layout.max_len());
        let rows = 2 * r.buckets;
        pos_key = r.c2p.then(|| random(&mut rng, [rows, width], dtype));
        pos_query = r.p2c.then(|| random(&mut rng, [rows, width], dtype));
    }
    Inputs {
        q: random(&mut rng, [tokens, width], dtype),
        k: random(&mut rng, [tokens, width], dtype),
        v: random(&mut rng, [tokens, width], dtype),
        pos_key,
        pos_query,
        index,
        layout,
        shape: AttentionShape {
            heads: case.heads,
            head_size: case.d,
            score_scale: 1.0 / ((case.d * 3) as f32).sqrt(),
        },
    }
}

fn run<B: Backend>(be: &B, x: &Inputs, with_rel: bool) -> Vec<f32> {
    let up = |t: &HostTensor| be.upload(t).expect("upload");
    let (q, k, v) = (up(&x.q), up(&x.k), up(&x.v));
    let pk = x.pos_key.as_ref().map(up);
    let pq = x.pos_query.as_ref().map(up);
    let rel = RelAttention {
        pos_key: pk.as_ref(),
        pos_query: pq.as_ref(),
        index: &x.index,
    };
    let out = be
        .disentangled_attention(&q, &k, &v, with_rel.then_some(&rel), x.shape, &x.layout)
        .expect("disentangled_attention");
    be.download(&out).expect("download").data
}

/// Runs `cases` on a poisoned `dtype` device; max |gpu − cpu| / max |cpu| ≤ `tol`.
fn parity(dtype: DType, tol: f32, cases: &[Case]) {
    let gpu = match CudaBackend::poisoned(0, dtype) {
        Ok(b) => b,
        Err(e) => {
            println!("no GPU: skipped ({e:#})");
            return;
        }
    };
    for case in cases {
        let x = inputs(case, dtype);
        let want = run(&CpuBackend, &x, case.rel.is_some());
        let got = run(&gpu, &x, case.rel.is_some());
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.1, "degenerate reference");
        let mut max_abs = 0f32;
        let mut worst = 0;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.is_finite(),
                "{dtype:?} {case:?}: element {i} is {g} (unwritten?)"
            );
            if (g - w).abs() > max_abs {
                max_abs = (g - w).abs();
                worst = i;
            }
        }
        // Masked query rows are exactly zero.
        let width = case.heads * case.d;
        for (t, &m) in x.layout.mask.iter().enumerate() {
            if m == 0.0 {
                assert!(got[t * width..(t + 1) * width].iter().all(|&g| g == 0.0));
            }
        }
        let rel = max_abs / scale;
        println!(
            "{dtype:?} heads={} d={} rel={:?}: max abs err {max_abs:.3e}, relative {rel:.3e} \
             (max |value| {scale:.3})",
            case.heads, case.d, case.rel
        );
        assert!(
            rel <= tol,
            "{dtype:?} {case:?}: element {worst}: gpu {} cpu {} (relative error {rel:.3e} > {tol:e})",
            got[worst],
            want[worst]
        );
    }
}

fn cases() -> Vec<Case> {
    let v3 = |c2p, p2c| Rel {
        buckets: 256,
        max_relative_positions: 512,
        c2p,
        p2c,
    };
    let small = |c2p, p2c| Rel {
        buckets: 8,
        max_relative_positions: 16,
        c2p,
        p2c,
    };
    vec![
        Case {
            heads: 2,
            d: 64,
            rel: Some(v3(true, true)),
            seed: 1,
        },
        Case {
            heads: 3,
            d: 32,
            rel: Some(small(true, true)),
            seed: 2,
        },
        Case {
            heads: 4,
            d: 32,
            rel: Some(v3(true, false)),
            seed: 3,
        },
        Case {
            heads: 2,
            d: 64,
            rel: Some(small(false, true)),
            seed: 4,
        },
        Case {
            heads: 3,
            d: 64,
            rel: None,
            seed: 5,
        },
    ]
}

#[test]
fn disentangled_attention_f32_matches_cpu() {
    parity(DType::F32, 1e-5, &cases());
}

#[test]
fn disentangled_attention_bf16_matches_cpu() {
    parity(DType::Bf16, 1e-2, &cases());
}

#[test]
fn disentangled_attention_f16_matches_cpu() {
    parity(DType::F16, 1e-2, &cases());
}

#[test]
fn disentangled_attention_rejects_unsupported_head_size() {
    let Ok(gpu) = CudaBackend::poisoned(0, DType::F32) else {
        println!("no GPU: skipped");
        return;
    };
    let case = Case {
        heads: 2,
        d: 12,
        rel: None,
        seed: 6,
    };
    let x = inputs(&case, DType::F32);
    let up = |t: &HostTensor| gpu.upload(t).expect("upload");
    let err = gpu
        .disentangled_attention(&up(&x.q), &up(&x.k), &up(&x.v), None, x.shape, &x.layout)
        .err()
        .expect("head size 12 must be rejected");
    assert!(err.to_string().contains("head size 12"), "{err}");
}
