//! The self-test's cases: each op a [`Plan`](super::gpu_kernels::Plan) chooses an
//! implementation for, run on small seeded inputs through the [`Backend`] ops, so that
//! the same case runs on the device under test and on the CPU twin
//! ([`CpuBackend::F32`](super::cpu::CpuBackend)); [`check`] compares the two within the
//! parity table's bound for the dtype ([`tolerance`]). The shapes take each kernel's
//! main path (a row that fits the warp-per-row norms, the fused GEMMs' 768-wide rows
//! and gate blocks of 64). Running a case in a child process with a timeout, and what a
//! verdict changes, is `jobs::selftest`'s.

use super::dtype::DType;
use super::gpu_kernels::Op;
use super::{AddNorm, Backend, Gate, Gated, OpResult};
use crate::tensor::HostTensor;

/// `max |a − b| / max |b|` over the elements; a non-finite element of `got` (or a
/// length that differs) gives infinity.
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    if got.len() != want.len() {
        return f32::INFINITY;
    }
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    got.iter().zip(want).fold(0f32, |m, (a, b)| {
        let d = (a - b).abs();
        if !a.is_finite() || d.is_nan() {
            f32::INFINITY
        } else {
            m.max(d / scale)
        }
    })
}

/// The largest [`rel_err`] a kernel in `dtype` may have against its f32 CPU twin (the
/// bounds of the op table of tests/gpu_parity/ops.rs).
pub fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-5,
        DType::Bf16 => 1e-2,
        DType::F16 => 5e-3,
    }
}

/// Seeded inputs, rounded to the device dtype so that both backends see the same values.
struct Inputs {
    state: u64,
    dtype: DType,
}

impl Inputs {
    fn new(op: Op, dtype: DType) -> Self {
        Self {
            state: 0x9E37_79B9_7F4A_7C15 ^ (op as u64 + 1).wrapping_mul(0x1000_0000_01B3),
            dtype,
        }
    }

    /// Uniform in (−scale, scale), then `offset` added (weights around 1).
    fn matrix(&mut self, rows: usize, cols: usize, scale: f32, offset: f32) -> HostTensor {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| {
                self.state ^= self.state << 13;
                self.state ^= self.state >> 7;
                self.state ^= self.state << 17;
                ((self.state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale + offset
            })
            .collect();
        HostTensor::new(vec![rows, cols], self.dtype.decode(&self.dtype.encode(&v)))
    }
}

/// Rows of every case (tokens): more than one block of the row kernels, not a multiple
/// of any tile.
const ROWS: usize = 37;

/// Runs `op`'s case on `be` (inputs made for `dtype`) and returns its output.
pub fn run<B: Backend>(be: &B, op: Op, dtype: DType) -> OpResult<Vec<f32>> {
    let mut inp = Inputs::new(op, dtype);
    let up = |t: &HostTensor| be.upload(t);
    let out = match op {
        Op::LayerNorm => {
            let mut x = up(&inp.matrix(ROWS, 768, 2.0, 0.0))?;
            let residual = up(&inp.matrix(ROWS, 768, 1.0, 0.0))?;
            let (w, b) = (
                up(&inp.matrix(1, 768, 0.5, 1.0))?,
                up(&inp.matrix(1, 768, 0.2, 0.0))?,
            );
            be.layer_norm(&mut x, Some(&residual), &w, &b, 1e-7)?;
            x
        }
        Op::RmsNorm => {
            let x = up(&inp.matrix(ROWS, 576, 2.0, 0.0))?;
            let w = up(&inp.matrix(1, 576, 0.5, 1.0))?;
            be.rms_norm(&x, &w, 1e-5)?
        }
        Op::Rope => {
            // Llama-style [q | k | v] of 4 + 2 + 2 heads of 64; q and k rotate; two
            // sequences whose positions restart.
            let (head_dim, lens) = (64, [14usize, ROWS - 14]);
            let mut x = up(&inp.matrix(ROWS, 8 * head_dim, 2.0, 0.0))?;
            let inv_freq: Vec<f32> = (0..head_dim / 2)
                .map(|i| 1.0 / 10_000f32.powf(2.0 * i as f32 / head_dim as f32))
                .collect();
            let pos: Vec<u32> = lens.iter().flat_map(|&l| 0..l as u32).collect();
            be.rope(
                &mut x,
                6,
                head_dim,
                pos[..].into(),
                inv_freq[..].into(),
                None,
            )?;
            x
        }
        Op::GemmBiasGelu => {
            let x = up(&inp.matrix(ROWS, 256, 1.0, 0.0))?;
            let w = up(&inp.matrix(512, 256, 1.0 / 16.0, 0.0))?;
            let bias = up(&inp.matrix(1, 512, 0.5, 0.0))?;
            be.linear_gelu(&x, &w, Some(&bias))?
        }
        Op::GemmGated => {
            let x = up(&inp.matrix(ROWS, 128, 1.0, 0.0))?;
            let w = up(&inp.matrix(2 * 256, 128, 1.0 / 8.0, 0.0))?;
            be.linear_gated(&x, &w, None, Gated::new(Gate::Silu, 256))?
        }
        Op::GemmAddNorm => {
            // Both widths of the fused kernel (gemm_add_norm_1024, _768), one output.
            let mut out = Vec::new();
            for n in [1024, 768] {
                let x = up(&inp.matrix(ROWS, 256, 1.0, 0.0))?;
                let w = up(&inp.matrix(n, 256, 1.0 / 16.0, 0.0))?;
                let bias = up(&inp.matrix(1, n, 0.5, 0.0))?;
                let residual = up(&inp.matrix(ROWS, n, 1.0, 0.0))?;
                let (weight, norm_bias) = (
                    up(&inp.matrix(1, n, 0.5, 1.0))?,
                    up(&inp.matrix(1, n, 0.2, 0.0))?,
                );
                let norm = AddNorm {
                    residual: &residual,
                    weight: &weight,
                    bias: &norm_bias,
                    eps: 1e-7,
                };
                let y = be.linear_add_norm(&x, &w, Some(&bias), &norm)?;
                out.extend(be.download(&y)?.data);
            }
            return Ok(out);
        }
    };
    Ok(be.download(&out)?.data)
}

/// `op`'s case on `be` against the f32 CPU twin: the relative error, and whether it is
/// within [`tolerance`].
pub fn check<B: Backend>(be: &B, op: Op, dtype: DType) -> OpResult<(f32, bool)> {
    let want = run(&super::cpu::CpuBackend::F32, op, dtype)?;
    let got = run(be, op, dtype)?;
    let err = rel_err(&got, &want);
    Ok((err, err <= tolerance(dtype)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::{CpuBackend, CpuGemm};

    #[test]
    fn every_case_runs_on_the_cpu_and_a_perturbed_result_fails() {
        for op in Op::ALL {
            let want = run(&CpuBackend::F32, op, DType::Bf16).unwrap();
            assert!(
                want.iter().any(|v| v.abs() > 0.1),
                "{op:?}: degenerate case"
            );
            assert_eq!(rel_err(&want, &want), 0.0);
            // bf16 dense layers are a different arithmetic within the bf16 bound.
            let bf16 = run(&CpuBackend::new(CpuGemm::Bf16), op, DType::Bf16).unwrap();
            assert!(rel_err(&bf16, &want) <= tolerance(DType::Bf16), "{op:?}");
            let mut wrong = want.clone();
            wrong[want.len() / 2] += 0.05 * want.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(rel_err(&wrong, &want) > tolerance(DType::Bf16), "{op:?}");
            wrong[0] = f32::NAN;
            assert_eq!(rel_err(&wrong, &want), f32::INFINITY);
        }
    }
}
