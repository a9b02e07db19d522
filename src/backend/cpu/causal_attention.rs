//! Causal (decoder) self-attention over packed sequences with grouped-query heads.
//! CPU twin of `kernels/causal_attention.cu`.
//!
//! Input is the fused projection `qkv: [tokens, (heads + 2·kv_heads)·d]` (queries, then
//! keys, then values, as GPT-2's `c_attn` and hopscore's fused Llama projection write
//! it). Query head `h` reads key/value head `h / (heads / kv_heads)` (HF
//! `repeat_kv`). For row `i` of a sequence, keys `j ≤ i` of the same sequence with
//! mask 1 take part; rows with mask 0 output zeros, and so do the rows before a
//! sequence's `first_query` (rows nobody reads: another member's copy of a shared prefix).

use rayon::prelude::*;

use super::exp::softmax_row;
use super::matmul::{matmul, MatRef};
use crate::backend::{CausalShape, SeqLayout};

/// Context `[tokens, heads·d]`; the rows of sequence `s` before `first_query[s]`
/// (default 0) are zeros.
pub fn causal_attention(
    qkv: &[f32],
    shape: CausalShape,
    layout: &SeqLayout,
    first_query: Option<&[u32]>,
) -> Vec<f32> {
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
        let first = first_query.map_or(0, |f| f[s] as usize);
        for (i, row) in ctx.chunks_exact(d).enumerate().skip(first) {
            let o = (start + i) * width + h * d;
            out[o..o + d].copy_from_slice(row);
        }
    }
    out
}

/// Context `[L, d]` of query head `h` in sequence `s` (every row: the matrix products'
/// bits depend on their row count, and a row's must not depend on `first_query`).
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
        let got = causal_attention(&qkv, shape, &layout, None);
        let want = naive(&qkv, heads, kv, d, &lens);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }

        // From each sequence's first query row on, the same bits; zeros before it.
        let first = [2u32, 0, 9];
        let part = causal_attention(&qkv, shape, &layout, Some(&first));
        let width = heads * d;
        for (s, &f) in first.iter().enumerate() {
            for t in layout.cu_seqlens[s]..layout.cu_seqlens[s + 1] {
                let row = t * width..(t + 1) * width;
                if t < layout.cu_seqlens[s] + f as usize {
                    assert!(part[row].iter().all(|&x| x == 0.0), "row {t}");
                } else {
                    assert_eq!(part[row.clone()], got[row], "row {t}");
                }
            }
        }
    }

    #[test]
    fn first_query_rows_are_checked() {
        use crate::backend::{Backend, Input};
        let shape = CausalShape {
            heads: 1,
            kv_heads: 1,
            head_dim: 2,
            scale: 1.0,
        };
        let layout = SeqLayout {
            cu_seqlens: vec![0, 3, 5],
            mask: vec![1.0; 5],
        };
        let be = super::super::CpuBackend::F32;
        let qkv = be
            .upload(&crate::tensor::HostTensor::new(vec![5, 6], vec![0.5; 30]))
            .unwrap();
        let run = |first: &[u32]| {
            be.causal_attention(&qkv, shape, (&layout).into(), Some(Input::from(first)))
        };
        let err = |first: &[u32]| run(first).unwrap_err().to_string();
        assert!(err(&[0]).contains("1 first query rows for 2 sequences"));
        assert!(err(&[3, 3]).contains("sequence 1: first query row 3 past its 2 tokens"));
        // Every row skipped is allowed: the whole output is zeros.
        let out = run(&[3, 2]).unwrap();
        assert!(out.data.iter().all(|&x| x == 0.0));
    }
}
