//! Embedding lookups summed per token, and per-row scaling (the embedding mask).
//! CPU twin of `kernels/embedding.cu`.

use rayon::prelude::*;

/// A table `[vocab, cols]` and the row each token takes from it.
pub struct Lookup<'a> {
    pub table: &'a [f32],
    pub ids: &'a [u32],
}

/// `out[t] = Σ_k table_k[ids_k[t]]`; ids are bounds-checked by the caller.
pub fn embedding_sum(lookups: &[Lookup<'_>], cols: usize, tokens: usize) -> Vec<f32> {
    let mut out = vec![0f32; tokens * cols];
    out.par_chunks_mut(cols).enumerate().for_each(|(t, row)| {
        for l in lookups {
            let id = l.ids[t] as usize;
            row.iter_mut()
                .zip(&l.table[id * cols..(id + 1) * cols])
                .for_each(|(o, v)| *o += v);
        }
    });
    out
}

pub fn scale_rows(x: &mut [f32], cols: usize, scale: &[f32]) {
    x.par_chunks_mut(cols)
        .zip(scale.par_iter())
        .for_each(|(row, &s)| row.iter_mut().for_each(|v| *v *= s));
}
