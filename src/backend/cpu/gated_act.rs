//! The gate of a gated MLP: `act(gate) · up`, with gate and up side by side in one
//! row of the fused gate/up projection, in blocks as [`Gated`] lays them out: SiLU for
//! Llama (`LlamaMLP`), GPT-2's tanh GELU for T5 v1.1 (`T5DenseGatedActDense` with
//! `gated-gelu`), the erf GELU for ModernBERT (`ModernBertMLP`). CPU twin of
//! `kernels/gated_act.cu`.

use rayon::prelude::*;

use super::exp::exp;
use super::gelu::gelu_erf;
use super::gelu_new::gelu_new;
use crate::backend::{Gate, Gated};

#[inline(always)]
fn silu(g: f32) -> f32 {
    g / (1.0 + exp(-g))
}

/// `out[t, i] = act(gate[t, i]) · up[t, i]` for rows of `2·inter` columns, each
/// `gated.block` outputs' gate columns followed by their up columns.
pub fn gated_act(x: &[f32], out: &mut [f32], inter: usize, gated: Gated) {
    let block = gated.block;
    out.par_chunks_mut(inter)
        .zip(x.par_chunks(2 * inter))
        .for_each(|(o, row)| {
            for (o, pair) in o.chunks_mut(block).zip(row.chunks(2 * block)) {
                let (gate, up) = pair.split_at(block);
                match gated.gate {
                    Gate::Silu => silu_row(o, gate, up),
                    Gate::GeluNew => o
                        .iter_mut()
                        .zip(gate)
                        .zip(up)
                        .for_each(|((o, g), u)| *o = gelu_new(*g) * u),
                    Gate::Gelu => o
                        .iter_mut()
                        .zip(gate)
                        .zip(up)
                        .for_each(|((o, g), u)| *o = gelu_erf(*g) * u),
                }
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
        let halves = |gate| Gated { gate, block: 2 };
        gated_act(&x, &mut out, 2, halves(Gate::Silu));
        // silu(1) = 0.7310586, silu(−2) = −0.2384058 (f64 reference).
        assert!((out[0] - 0.731_058_6 * 3.0).abs() < 1e-6, "{}", out[0]);
        assert!((out[1] + 0.238_405_8 * 0.5).abs() < 1e-6, "{}", out[1]);
        gated_act(&x, &mut out, 2, halves(Gate::GeluNew));
        // gelu_new(1) = 0.841192, gelu_new(−2) = −0.0454023 (f64 reference).
        assert!((out[0] - 0.841_192 * 3.0).abs() < 1e-5, "{}", out[0]);
        assert!((out[1] + 0.045_402_3 * 0.5).abs() < 1e-6, "{}", out[1]);
    }

    #[test]
    fn blocks_pair_each_gate_with_its_up() {
        // inter = 4 in blocks of 2: [g0 g1 u0 u1 g2 g3 u2 u3].
        let x = [1.0f32, -2.0, 3.0, 0.5, 0.0, 1.0, 7.0, -4.0];
        let mut out = [0f32; 4];
        gated_act(
            &x,
            &mut out,
            4,
            Gated {
                gate: Gate::Silu,
                block: 2,
            },
        );
        let want = [
            0.731_058_6 * 3.0,
            -0.238_405_8 * 0.5,
            0.0,
            0.731_058_6 * -4.0,
        ];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-6, "{out:?} against {want:?}");
        }
    }

    #[test]
    fn source_rows_interleave_blocks_of_gate_and_up() {
        let g = Gated {
            gate: Gate::Silu,
            block: 2,
        };
        // [gate; up] rows 0..4 gate, 4..8 up.
        assert_eq!(g.source_rows(4), [0, 1, 4, 5, 2, 3, 6, 7]);
        assert_eq!(
            Gated::new(Gate::Silu, 4).source_rows(4),
            (0..8).collect::<Vec<_>>()
        );
        assert_eq!(Gated::new(Gate::Silu, 1536).block, Gated::BLOCK);
    }
}
