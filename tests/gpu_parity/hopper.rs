//! The Hopper-only paths, on a device of compute capability 9.0 (the emulator poses as
//! one): the wgmma and TMA wrappers against plain products, the fused CUTLASS GEMMs
//! against their unfused paths, the v5 disentangled attention and the whole models
//! that take them.

use super::cases::{check_product, row, v3, Row};
use super::graphs::{assert_replay_matches, bits};
use super::models::{check_model, deberta_checkpoint_err, write_rounded, BF16_MODEL_TOLERANCE};
use super::ops::{attention_ops, check_ops};
use super::*;
use std::path::{Path, PathBuf};

use hopscore::backend::cuda::tensor_core_check::TmaPath;
use hopscore::backend::cuda::{CudaBackend, DType, Version};
#[cfg(hopscore_cutlass)]
use hopscore::backend::{AddNorm, Gate, Gated};
use hopscore::backend::{AttentionShape, Backend, RelAttention};
use hopscore::model::batch::{PackedBatch, Sequence};
use hopscore::model::config::DebertaConfig;
use hopscore::model::cross_encoder::{CrossEncoder, ModelFiles};
use hopscore::model::deberta::relative_index;
use hopscore::tensor::HostTensor;

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
    let ops: Vec<Box<dyn Row>> = attention_ops()
        .into_iter()
        .filter(|case| case.d == 64)
        .map(row)
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
pub(crate) fn widened_checkpoint(
    name: &str,
    dst: &Path,
    dtype: DType,
    fields: &[(&str, usize)],
) -> PathBuf {
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
