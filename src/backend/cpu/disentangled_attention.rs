//! DeBERTa disentangled attention over packed sequences (docs/spec.md §0).
//! CPU twin of `kernels/disentangled_attention.cu`.
//!
//! For sequence `s` and head `h` (rows `i, j` of the sequence, `r = i − j`,
//! `x(r) = index[r]` the clamped bucket row of the relative table):
//!
//! ```text
//! score[i,j] = scale · ( Q_i·K_j  +  Q_i·PK[x(r)]  +  K_j·PQ[x(r)] )
//!                          c2c          c2p              p2c
//! ```
//!
//! Only the rows of PK/PQ that offsets within the sequence reach are multiplied
//! (`lo..=hi`), as two small GEMMs per (sequence, head); the c2p/p2c terms are then
//! gathered from them. Masked keys are excluded from the softmax (HF fills them with
//! `finfo.min`, which underflows to exactly 0 after `exp`); masked query rows output 0.

use rayon::prelude::*;

use super::exp::softmax_row;
use super::matmul::{matmul, MatRef};
use crate::backend::{AttentionShape, SeqLayout};

/// Inputs of one attention call; matrices are row-major with `heads·d` columns.
pub struct AttentionArgs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub pos_key: Option<&'a [f32]>,
    pub pos_query: Option<&'a [f32]>,
    /// Relative offset → table row; `None` for plain attention.
    pub index: Option<&'a [u32]>,
    pub shape: AttentionShape,
    pub layout: &'a SeqLayout,
}

pub fn disentangled_attention(a: &AttentionArgs<'_>) -> Vec<f32> {
    let AttentionShape {
        heads,
        head_size: d,
        ..
    } = a.shape;
    let width = heads * d;
    let tokens = a.layout.num_tokens();
    let tasks: Vec<(usize, usize)> = (0..a.layout.num_seqs())
        .flat_map(|s| (0..heads).map(move |h| (s, h)))
        .collect();
    let parts: Vec<Vec<f32>> = tasks.par_iter().map(|&(s, h)| one_head(a, s, h)).collect();
    // Each sequence's rows gather their heads' contexts, sequences in parallel.
    let mut out = vec![0f32; tokens * width];
    let mut rest = out.as_mut_slice();
    let mut per_seq = Vec::with_capacity(a.layout.num_seqs());
    for w in a.layout.cu_seqlens.windows(2) {
        let (mine, tail) = rest.split_at_mut((w[1] - w[0]) * width);
        per_seq.push(mine);
        rest = tail;
    }
    per_seq.into_par_iter().enumerate().for_each(|(s, rows)| {
        for (h, ctx) in parts[s * heads..(s + 1) * heads].iter().enumerate() {
            for (row, c) in rows.chunks_exact_mut(width).zip(ctx.chunks_exact(d)) {
                row[h * d..(h + 1) * d].copy_from_slice(c);
            }
        }
    });
    out
}

/// Context `[L, d]` of head `h` for sequence `s`.
fn one_head(a: &AttentionArgs<'_>, s: usize, h: usize) -> Vec<f32> {
    let d = a.shape.head_size;
    let width = a.shape.heads * d;
    let start = a.layout.cu_seqlens[s];
    let len = a.layout.cu_seqlens[s + 1] - start;
    let head_view = |m: &'_ [f32], row0: usize, rows: usize| -> Vec<f32> {
        // Contiguous copy of the head's columns: small, and lets gemm read unit strides.
        let mut out = Vec::with_capacity(rows * d);
        for r in row0..row0 + rows {
            out.extend_from_slice(&m[r * width + h * d..r * width + (h + 1) * d]);
        }
        out
    };
    let q = head_view(a.q, start, len);
    let k = head_view(a.k, start, len);
    let mut scores = vec![0f32; len * len];
    matmul(
        &mut scores,
        len,
        MatRef::rows(&q, len, d, d),
        MatRef::rows(&k, len, d, d).t(),
        false,
        false,
    );

    if let Some(index) = a.index {
        add_relative_terms(a, index, h, len, &q, &k, &mut scores);
    }

    let mask = &a.layout.mask[start..start + len];
    for (i, row) in scores.chunks_exact_mut(len).enumerate() {
        if mask[i] == 0.0 {
            row.fill(0.0);
            continue;
        }
        softmax_row(row, mask, a.shape.score_scale);
    }

    let v = head_view(a.v, start, len);
    let mut ctx = vec![0f32; len * d];
    matmul(
        &mut ctx,
        d,
        MatRef::rows(&scores, len, len, len),
        MatRef::rows(&v, len, d, d),
        false,
        false,
    );
    ctx
}

/// `row[j] += terms[j · stride + off[last − j]]`: one query row's c2p (`stride` 0 over
/// its band row) or p2c (`stride` the band width) terms.
#[multiversion::multiversion(targets = "simd")]
fn add_band_terms(row: &mut [f32], terms: &[f32], stride: usize, off: &[usize], last: usize) {
    for (j, sc) in row.iter_mut().enumerate() {
        *sc += terms[j * stride + off[last - j]];
    }
}

/// Adds the c2p and p2c terms of one (sequence, head) to the raw `scores [L, L]`.
fn add_relative_terms(
    a: &AttentionArgs<'_>,
    index: &[u32],
    h: usize,
    len: usize,
    q: &[f32],
    k: &[f32],
    scores: &mut [f32],
) {
    let d = a.shape.head_size;
    let width = a.shape.heads * d;
    let base = index.len().div_ceil(2) - 1; // index[base] is offset 0
    assert!(
        len <= base + 1,
        "relative index table covers sequences up to {} tokens, got {len}",
        base + 1
    );
    // Table rows reached by offsets −(L−1)..=L−1 (index is non-decreasing in r).
    let lo = index[base + 1 - len] as usize;
    let hi = index[base + len - 1] as usize;
    let nb = hi - lo + 1;
    // off[r + L − 1] = x(r) − lo.
    let off: Vec<usize> = index[base + 1 - len..base + len]
        .iter()
        .map(|&x| x as usize - lo)
        .collect();
    let band = |table: &[f32], from: &[f32]| -> Vec<f32> {
        let mut out = vec![0f32; len * nb];
        let view = MatRef {
            data: &table[lo * width + h * d..],
            rows: nb,
            cols: d,
            rs: width,
            cs: 1,
        };
        matmul(
            &mut out,
            nb,
            MatRef::rows(from, len, d, d),
            view.t(),
            false,
            false,
        );
        out
    };
    if let Some(pk) = a.pos_key {
        // c2p[i, j] = Q_i · PK[x(i − j)]
        let c2p = band(pk, q);
        for (i, row) in scores.chunks_exact_mut(len).enumerate() {
            add_band_terms(row, &c2p[i * nb..(i + 1) * nb], 0, &off, i + len - 1);
        }
    }
    if let Some(pq) = a.pos_query {
        // p2c[i, j] = K_j · PQ[x(i − j)]
        let p2c = band(pq, k);
        for (i, row) in scores.chunks_exact_mut(len).enumerate() {
            add_band_terms(row, &p2c, nb, &off, i + len - 1);
        }
    }
}
