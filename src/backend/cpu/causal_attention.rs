//! Causal (decoder) self-attention over packed sequences with grouped-query heads.
//! CPU twin of `kernels/causal_attention.cu`.
//!
//! Input is the fused projection `qkv: [tokens, (heads + 2·kv_heads)·d]` (queries, then
//! keys, then values, as GPT-2's `c_attn` and hopscore's fused Llama projection write
//! it). Query head `h` reads key/value head `h / (heads / kv_heads)` (HF
//! `repeat_kv`). For row `i` of a sequence, keys `j ≤ i` of the same sequence with
//! mask 1 take part; rows with mask 0 output zeros.

use rayon::prelude::*;

use super::exp::softmax_row;
use super::matmul::{matmul, MatRef};
use crate::backend::{CausalShape, SeqLayout};

/// Context `[tokens, heads·d]`.
pub fn causal_attention(qkv: &[f32], shape: CausalShape, layout: &SeqLayout) -> Vec<f32> {
    let CausalShape {
        heads, head_dim: d, ..
    } = shape;
    let width = heads * d;
    let tokens = layout.num_tokens();
    let tasks: Vec<(usize, usize)> = (0..layout.num_seqs())
        .flat_map(|s| (0..heads).map(move |h| (s, h)))
        .collect();
    let parts: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(s, h)| one_head(qkv, shape, layout, s, h))
        .collect();
    let mut out = vec![0f32; tokens * width];
    for (&(s, h), ctx) in tasks.iter().zip(&parts) {
        let start = layout.cu_seqlens[s];
        for (i, row) in ctx.chunks_exact(d).enumerate() {
            let o = (start + i) * width + h * d;
            out[o..o + d].copy_from_slice(row);
        }
    }
    out
}

/// Context `[L, d]` of query head `h` in sequence `s`.
fn one_head(qkv: &[f32], shape: CausalShape, layout: &SeqLayout, s: usize, h: usize) -> Vec<f32> {
    let CausalShape {
        heads,
        kv_heads,
        head_dim: d,
        scale,
    } = shape;
    let w = (heads + 2 * kv_heads) * d;
    let (start, end) = (layout.cu_seqlens[s], layout.cu_seqlens[s + 1]);
    let len = end - start;
    let g = h / (heads / kv_heads);
    let view = |col: usize| MatRef::rows(&qkv[start * w + col..], len, d, w);
    let q = view(h * d);
    let k = view((heads + g) * d);
    let v = view((heads + kv_heads + g) * d);
    let mask = &layout.mask[start..end];

    let mut scores = vec![0f32; len * len];
    matmul(&mut scores, len, q, k.t(), false, false);
    for (i, row) in scores.chunks_exact_mut(len).enumerate() {
        if mask[i] == 0.0 {
            row.fill(0.0);
            continue;
        }
        // Keys up to the query's own (unmasked) position.
        softmax_row(&mut row[..=i], &mask[..=i], scale);
        row[i + 1..].fill(0.0);
    }
    let mut ctx = vec![0f32; len * d];
    matmul(
        &mut ctx,
        d,
        MatRef::rows(&scores, len, len, len),
        v,
        false,
        false,
    );
    ctx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct per-row softmax reference with explicit head grouping.
    fn naive(qkv: &[f32], heads: usize, kv: usize, d: usize, lens: &[usize]) -> Vec<f32> {
        let w = (heads + 2 * kv) * d;
        let tokens: usize = lens.iter().sum();
        let mut out = vec![0f32; tokens * heads * d];
        let mut start = 0;
        for &len in lens {
            for h in 0..heads {
                let g = h / (heads / kv);
                for i in 0..len {
                    let qi = &qkv[(start + i) * w + h * d..][..d];
                    let s: Vec<f32> = (0..=i)
                        .map(|j| {
                            let kj = &qkv[(start + j) * w + (heads + g) * d..][..d];
                            qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() / (d as f32).sqrt()
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                    let z: f32 = s.iter().map(|x| (x - m).exp()).sum();
                    for (j, sj) in s.iter().enumerate() {
                        let p = (sj - m).exp() / z;
                        let vj = &qkv[(start + j) * w + (heads + kv + g) * d..][..d];
                        for c in 0..d {
                            out[(start + i) * heads * d + h * d + c] += p * vj[c];
                        }
                    }
                }
            }
            start += len;
        }
        out
    }

    #[test]
    fn matches_naive_gqa_over_ragged_sequences() {
        let (heads, kv, d) = (4, 2, 8);
        let lens = [5, 1, 9];
        let tokens: usize = lens.iter().sum();
        let w = (heads + 2 * kv) * d;
        let qkv: Vec<f32> = (0..tokens * w)
            .map(|i| ((i * 7919) % 113) as f32 / 56.0 - 1.0)
            .collect();
        let mut cu = vec![0];
        for l in lens {
            cu.push(cu.last().unwrap() + l);
        }
        let layout = SeqLayout {
            cu_seqlens: cu,
            mask: vec![1.0; tokens],
        };
        let shape = CausalShape {
            heads,
            kv_heads: kv,
            head_dim: d,
            scale: 1.0 / (d as f32).sqrt(),
        };
        let got = causal_attention(&qkv, shape, &layout);
        let want = naive(&qkv, heads, kv, d, &lens);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
