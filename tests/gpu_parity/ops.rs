//! The op table (cf. llama.cpp's test-backend-ops): every row in f32, bf16 and f16 on
//! the device against the CPU backend, the older kernels `--gpu-kernels proven` keeps,
//! the shapes the kernels refuse, and the host path's timers and GEMM cache.

use super::cases::*;
use super::{
    attention_layout, common, layout, max_abs, rel_err, Inputs, ATTENTION_LENS, LONG_LENS,
};
use hopscore::backend::cuda::tensor_core_check::TensorCorePath;
use hopscore::backend::cuda::{CudaBackend, DType};
use hopscore::backend::gpu_kernels::Op as KernelOp;
use hopscore::backend::{AttentionShape, Backend, CausalShape, Gate, Gated};
use hopscore::tensor::HostTensor;

fn encoder_ops() -> Vec<Box<dyn Row>> {
    vec![
        row(Linear {
            n: 37,
            k: 64,
            out: 96,
            bias: true,
        }),
        row(Linear {
            n: 5,
            k: 130,
            out: 7,
            bias: false,
        }),
        row(Gelu {
            rows: 13,
            cols: 300,
        }),
        row(LayerNorm {
            rows: 9,
            cols: 768,
            residual: true,
        }),
        row(LayerNorm {
            rows: 4,
            cols: 100,
            residual: false,
        }),
        row(Embedding {
            tokens: 29,
            cols: 48,
            tables: 1,
        }),
        row(Embedding {
            tokens: 29,
            cols: 48,
            tables: 3,
        }),
        row(ScaleRows { rows: 11, cols: 70 }),
        row(GatherRows { rows: 12, cols: 33 }),
        row(ClsHead {
            lens: &[1, 7, 20],
            cols: 300,
            mean: true,
            pooler: None,
            tanh: false,
            labels: 4,
            bias: true,
        }),
        row(Add { rows: 7, cols: 129 }),
        row(CopyRows { rows: 3, cols: 65 }),
    ]
}

/// Head sizes 32, 40, 64 and 128, with and without c2p / p2c (each alone at head size
/// 64, v5's), both bucket tables; a sequence of over 1,024 tokens.
pub(crate) fn attention_ops() -> Vec<DisentangledAttention> {
    let da = |heads, d, rel| DisentangledAttention {
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
        DisentangledAttention {
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
fn decoder_ops(dtype: DType) -> Vec<Box<dyn Row>> {
    let t5 = |heads, d, lens, kv_lens, causal, bias| {
        row(T5Attention {
            heads,
            d,
            lens,
            kv_lens,
            causal,
            bias,
        })
    };
    let causal = |heads, kv_heads, d, lens, extra_masked| {
        row(CausalAttention {
            heads,
            kv_heads,
            d,
            lens,
            extra_masked,
            first_query: &[],
        })
    };
    let mut ops = vec![
        row(RmsNorm { rows: 37, cols: 96 }),
        row(RmsNorm { rows: 5, cols: 300 }),
        row(RmsNorm { rows: 1, cols: 7 }),
        row(GeluNew { rows: 53, cols: 70 }),
        row(GatedAct {
            rows: 29,
            inter: 90,
            gated: Gated {
                gate: Gate::Silu,
                block: 90,
            },
        }),
        row(GatedAct {
            rows: 29,
            inter: 90,
            gated: Gated {
                gate: Gate::GeluNew,
                block: 90,
            },
        }),
        row(GatedAct {
            rows: 29,
            inter: 90,
            gated: Gated {
                gate: Gate::Gelu,
                block: 90,
            },
        }),
        row(GatedAct {
            rows: 9,
            inter: 128,
            gated: Gated {
                gate: Gate::Gelu,
                block: 64,
            },
        }),
        row(Relu { rows: 31, cols: 70 }),
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
        row(Rope {
            head_dim: 16,
            offset: 0,
            theta: 10_000.0,
            qk_norm: false,
        }),
        row(Rope {
            head_dim: 64,
            offset: 0,
            theta: 500_000.0,
            qk_norm: false,
        }),
        row(Rope {
            head_dim: 8,
            offset: 3000,
            theta: 1e6,
            qk_norm: false,
        }),
        // Qwen3's per-head norm: its head size (128: two pairs a lane), a head of 16
        // (lanes 8–31 idle) and one of 96 (a second pair for lanes 0–15).
        row(Rope {
            head_dim: 128,
            offset: 0,
            theta: 1e6,
            qk_norm: true,
        }),
        row(Rope {
            head_dim: 16,
            offset: 5,
            theta: 10_000.0,
            qk_norm: true,
        }),
        row(Rope {
            head_dim: 96,
            offset: 0,
            theta: 1e6,
            qk_norm: true,
        }),
        // Half a head past one warp's 32 lanes: lanes 0–15 take a second pair.
        row(Rope {
            head_dim: 96,
            offset: 7,
            theta: 10_000.0,
            qk_norm: false,
        }),
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
    ops.extend(temperatures.iter().map(|&temperature| {
        row(QuestionLoglik {
            tokens: 50,
            cols: 80,
            vocab: 4_500,
            temperature,
        })
    }));
    ops.push(row(QuestionLoglik {
        tokens: 20,
        cols: 70,
        vocab: 4_200,
        temperature: 1.0,
    }));
    ops
}

/// Each tensor-core wrapper (bf16/f16 tables): mma alone (fragments read lane by lane),
/// ldmatrix x2 / x4 with and without .trans, cp.async staging with zero-filled k
/// padding; partial warps (m = 33, 40, 48) and k = 24, 40 (padded to 32, 64).
fn tensor_core_ops() -> Vec<Box<dyn Row>> {
    let tc = |m, n, k, cp_async, ldmatrix, b_kn, x4| {
        row(TensorCore {
            m,
            n,
            k,
            path: TensorCorePath {
                cp_async,
                ldmatrix,
                b_kn,
                x4,
            },
        })
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
fn fused_gemm_ops() -> Vec<Box<dyn Row>> {
    vec![
        row(LinearSplit {
            n: 37,
            k: 64,
            out: 48,
            parts: 3,
            bias: true,
        }),
        row(LinearSplit {
            n: 5,
            k: 40,
            out: 7,
            parts: 2,
            bias: false,
        }),
        // The CUTLASS kernel on a Hopper GPU: rows and columns past one 128 × 128
        // tile, then one partial tile; then the unfused path (no bias; a width of 20).
        row(LinearGelu {
            n: 150,
            k: 72,
            out: 264,
            bias: true,
        }),
        row(LinearGelu {
            n: 29,
            k: 64,
            out: 72,
            bias: true,
        }),
        row(LinearGelu {
            n: 29,
            k: 64,
            out: 72,
            bias: false,
        }),
        row(LinearGelu {
            n: 5,
            k: 24,
            out: 20,
            bias: true,
        }),
        row(LinearGeluNew {
            n: 29,
            k: 64,
            out: 70,
            bias: true,
        }),
        row(LinearGeluNew {
            n: 3,
            k: 24,
            out: 16,
            bias: false,
        }),
        row(LinearAdd {
            n: 29,
            k: 64,
            out: 40,
            bias: true,
        }),
        row(LinearAdd {
            n: 3,
            k: 24,
            out: 16,
            bias: false,
        }),
    ]
}

/// The classification heads (appended last): Beam Retrieval's hop heads (the [CLS] row,
/// no pooler), EfficientRAG's tagger (pooler + GELU, 3 tags) over 19 sequences (three
/// blocks of 8), the mean-pooled tagger at a width that is not a multiple of 8, a BERT /
/// XLM-R reranker's head (pooler + tanh, one label, a pooler wider than one chunk), and
/// token heads (2 labels; 5 labels at 70 columns).
fn head_ops() -> Vec<Box<dyn Row>> {
    let cls = |lens, cols, mean, pooler, labels, bias| {
        row(ClsHead {
            lens,
            cols,
            mean,
            pooler,
            tanh: false,
            labels,
            bias,
        })
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
        row(ClsHead {
            lens: &[5, 1, 12, 3, 9, 2, 7, 4, 6, 11],
            cols: 96,
            mean: false,
            pooler: Some(200),
            tanh: true,
            labels: 1,
            bias: true,
        }),
        row(TokenHead {
            tokens: 37,
            cols: 64,
            labels: 2,
            bias: true,
        }),
        row(TokenHead {
            tokens: 9,
            cols: 70,
            labels: 5,
            bias: false,
        }),
    ]
}

/// The 16-byte vector paths of the elementwise kernels in every dtype (sizes that are
/// multiples of 8; the earlier rows at 300, 129, 90, 70 and 33 columns take the
/// element-by-element paths in bf16/f16).
fn vector_ops() -> Vec<Box<dyn Row>> {
    vec![
        row(Gelu {
            rows: 16,
            cols: 256,
        }),
        row(Add { rows: 8, cols: 136 }),
        row(GatedAct {
            rows: 9,
            inter: 64,
            gated: Gated {
                gate: Gate::GeluNew,
                block: 64,
            },
        }),
        row(GatherRows { rows: 12, cols: 64 }),
        row(RmsNorm { rows: 5, cols: 576 }),
        row(GeluNew { rows: 8, cols: 64 }),
    ]
}

/// The warp-per-row norms (`layer_norm_rows<NV>`, `rms_norm_rows<NV>`; appended last):
/// each entry of 2, 4 and 8 vectors per lane in some dtype (bf16/f16 rows of 256, 384,
/// 576, 1024 and 2048 columns take 2, 2, 4, 4 and 8; f32 rows of 1024 take 8 and of 2048
/// the block-per-row kernel), a last block of partial rows (19, 33), with and without
/// the residual, and 4096 columns (the block-per-row kernel in every dtype).
fn norm_ops() -> Vec<Box<dyn Row>> {
    let ln = |rows, cols, residual| {
        row(LayerNorm {
            rows,
            cols,
            residual,
        })
    };
    vec![
        ln(19, 1024, true),
        ln(3, 2048, false),
        ln(33, 256, true),
        ln(2, 4096, true),
        row(RmsNorm {
            rows: 17,
            cols: 2048,
        }),
        row(RmsNorm {
            rows: 33,
            cols: 384,
        }),
        row(RmsNorm {
            rows: 11,
            cols: 576,
        }),
        row(RmsNorm {
            rows: 2,
            cols: 4096,
        }),
    ]
}

/// The table for `dtype`. f16 runs the same (v3) disentangled-attention kernel
/// template as bf16, and the emulator converts f16 in software (~25× slower than
/// bf16), so f16 keeps two of its cases (d = 64 with v3 buckets, d = 40).
fn table(dtype: DType) -> Vec<Box<dyn Row>> {
    let f16_kept = [0, 6];
    let attention = attention_ops()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| dtype != DType::F16 || f16_kept.contains(i))
        .map(|(_, case)| row(case));
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
fn first_query_ops() -> Vec<Box<dyn Row>> {
    vec![
        row(CausalAttention {
            heads: 9,
            kv_heads: 3,
            d: 64,
            lens: &[200, 70, 130, 9],
            extra_masked: None,
            first_query: &[128, 64, 100, 0],
        }),
        row(CausalAttention {
            heads: 2,
            kv_heads: 2,
            d: 12,
            lens: &[40, 9],
            extra_masked: None,
            first_query: &[33, 0],
        }),
    ]
}

/// Output projections with the LayerNorm after them (appended last). On a Hopper GPU
/// the CUTLASS kernel takes rows of 1,024 and 768 with a bias: a full 128-row tile and
/// a partial one, and a partial one alone; then the unfused paths (no bias; another
/// width).
fn add_norm_ops() -> Vec<Box<dyn Row>> {
    let op = |n, k, out, bias| row(LinearAddNorm { n, k, out, bias });
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
fn gated_ops() -> Vec<Box<dyn Row>> {
    let gated = |gate, block| Gated { gate, block };
    let linear = |n, k, inter, gated, bias| {
        row(LinearGated {
            n,
            k,
            inter,
            gated,
            bias,
        })
    };
    vec![
        row(GatedAct {
            rows: 29,
            inter: 90,
            gated: gated(Gate::Silu, 30),
        }),
        row(GatedAct {
            rows: 7,
            inter: 128,
            gated: gated(Gate::Silu, 64),
        }),
        linear(150, 72, 192, gated(Gate::Silu, 64), false),
        linear(29, 64, 128, gated(Gate::GeluNew, 64), false),
        linear(29, 64, 128, gated(Gate::Silu, 64), true),
        linear(5, 24, 96, gated(Gate::Silu, 32), false),
        linear(5, 24, 40, gated(Gate::GeluNew, 40), false),
    ]
}

fn check_table(rows: &[Box<dyn Row>], dtype: DType) {
    if let Some(gpu) = common::gpu(dtype) {
        check_ops(&gpu, rows, dtype);
    }
}

/// Every row of `rows` on `gpu` against its reference, within its bound; each row's
/// line gives its error and the seconds the device took.
pub(crate) fn check_ops(gpu: &CudaBackend, rows: &[Box<dyn Row>], dtype: DType) {
    // HOPSCORE_PARITY_ONLY=attention,loglik: only the rows whose op name holds one of
    // the words (tools/gpu/run.sh narrows the slow racecheck run this way).
    let only: Vec<String> = std::env::var("HOPSCORE_PARITY_ONLY")
        .map(|v| v.split(',').map(str::to_lowercase).collect())
        .unwrap_or_default();
    let mut failed = Vec::new();
    for (i, op) in rows.iter().enumerate() {
        let seed = 1000 + i as u64;
        let name = format!("{op:?}").to_lowercase();
        if !only.is_empty() && !only.iter().any(|w| name.contains(w.as_str())) {
            continue;
        }
        let want = op.reference(seed, dtype);
        let started = std::time::Instant::now();
        let got = op.on_device(gpu, seed, dtype);
        let secs = started.elapsed().as_secs_f64();
        assert!(max_abs(&want) > 0.1, "{op:?}: degenerate reference");
        let mut err = rel_err(&got, &want);
        if let Some((lay, width)) = op.masked_rows(seed, dtype) {
            for (t, &m) in lay.mask.iter().enumerate() {
                if m == 0.0 && got[t * width..(t + 1) * width].iter().any(|&g| g != 0.0) {
                    eprintln!("  {op:?}: masked query row {t} not exactly zero");
                    err = f32::INFINITY;
                }
            }
        }
        let tol = op.tolerance(dtype);
        let ok = err <= tol;
        eprintln!(
            "{:<5} {dtype:?} {op:?}: rel err {err:.2e} ({secs:.2} s)",
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
    // The rows of those ops, by their names (`Rope { .., qk_norm: false }`: v1 has no
    // per-head norm).
    let older: Vec<Box<dyn Row>> = table(dtype)
        .into_iter()
        .filter(|op| {
            let name = format!("{op:?}");
            let rope = name.starts_with("Rope ") && name.contains("qk_norm: false");
            rope || name.starts_with("LayerNorm ") || name.starts_with("RmsNorm ")
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
