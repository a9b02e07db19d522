//! The gate of a gated MLP: `act(gate) · up`, with `[gate | up]` side by side in one
//! row (the fused gate/up projection): SiLU for Llama (`LlamaMLP`), GPT-2's tanh GELU
//! for T5 v1.1 (`T5DenseGatedActDense` with `gated-gelu`). CPU twin of
//! `kernels/gated_act.cu`.

use rayon::prelude::*;

use super::exp::exp;
use super::gelu_new::gelu_new;
use crate::backend::Gate;

#[inline(always)]
fn silu(g: f32) -> f32 {
    g / (1.0 + exp(-g))
}

/// `out[t, i] = act(x[t, i]) · x[t, inter + i]` for rows of `2·inter` columns.
pub fn gated_act(x: &[f32], out: &mut [f32], inter: usize, gate: Gate) {
    out.par_chunks_mut(inter)
        .zip(x.par_chunks(2 * inter))
        .for_each(|(o, row)| {
            let (gate_half, up) = row.split_at(inter);
            match gate {
                Gate::Silu => silu_row(o, gate_half, up),
                Gate::GeluNew => o
                    .iter_mut()
                    .zip(gate_half)
                    .zip(up)
                    .for_each(|((o, g), u)| *o = gelu_new(*g) * u),
            }
        });
}

/// One row of `silu(gate) · up`, compiled for the widest vectors the CPU has.
#[multiversion::multiversion(targets = "simd")]
fn silu_row(out: &mut [f32], gate: &[f32], up: &[f32]) {
    for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
        *o = silu(*g) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_of_the_gate_times_up() {
        let x = [1.0f32, -2.0, 3.0, 0.5];
        let mut out = [0f32; 2];
        gated_act(&x, &mut out, 2, Gate::Silu);
        // silu(1) = 0.7310586, silu(−2) = −0.2384058 (f64 reference).
        assert!((out[0] - 0.731_058_6 * 3.0).abs() < 1e-6, "{}", out[0]);
        assert!((out[1] + 0.238_405_8 * 0.5).abs() < 1e-6, "{}", out[1]);
        gated_act(&x, &mut out, 2, Gate::GeluNew);
        // gelu_new(1) = 0.841192, gelu_new(−2) = −0.0454023 (f64 reference).
        assert!((out[0] - 0.841_192 * 3.0).abs() < 1e-5, "{}", out[0]);
        assert!((out[1] + 0.045_402_3 * 0.5).abs() < 1e-6, "{}", out[1]);
    }
}
