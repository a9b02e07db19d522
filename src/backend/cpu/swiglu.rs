//! SwiGLU gate of the Llama MLP: `silu(gate) · up`, with `[gate | up]` side by side in
//! one row (the fused gate/up projection). CPU twin of `kernels/swiglu.cu`.

use rayon::prelude::*;

/// `out[t, i] = silu(x[t, i]) · x[t, inter + i]` for rows of `2·inter` columns.
pub fn swiglu(x: &[f32], out: &mut [f32], inter: usize) {
    out.par_chunks_mut(inter)
        .zip(x.par_chunks(2 * inter))
        .for_each(|(o, row)| {
            let (gate, up) = row.split_at(inter);
            for ((o, g), u) in o.iter_mut().zip(gate).zip(up) {
                *o = g / (1.0 + (-g).exp()) * u;
            }
        });
}

#[cfg(test)]
mod tests {
    #[test]
    fn silu_times_up() {
        let x = [1.0f32, -2.0, 3.0, 0.5];
        let mut out = [0f32; 2];
        super::swiglu(&x, &mut out, 2);
        let silu = |v: f32| v / (1.0 + (-v).exp());
        assert!((out[0] - silu(1.0) * 3.0).abs() < 1e-6);
        assert!((out[1] - silu(-2.0) * 0.5).abs() < 1e-6);
    }
}
