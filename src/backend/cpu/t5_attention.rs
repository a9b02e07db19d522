//! T5 attention over packed sequences: scores `q·kᵀ` (not scaled by 1/√d), plus a
//! per-head bias looked up by relative-position bucket, softmax over the keys, `·v`.
//! CPU twin of `kernels/t5_attention.cu`.
//!
//! Query row `i` of sequence `s` (of the query layout) attends to the keys `j` of
//! sequence `s` of the key layout whose mask is 1, and with `causal` only to `j ≤ i`.
//! With a bias, score `(i, j)` of head `h` gains `table[index[j − i + max_len − 1], h]`
//! (HF `T5Attention.compute_bias`); cross-attention has none. Query rows with mask 0
//! output zeros.
//!
//! Scores, softmax and the weighted sum are computed in f64 (one rounding, of the
//! output): T5's unscaled scores make the softmax sensitive to the last bits of a score,
//! and with f32 scores the LEPUS log-probabilities of the T5 goldens drift up to 1.9e-5
//! from float64 transformers (6e-6 in f64 here). Attention is a few percent of a T5
//! forward's work, so the cost is small.

use rayon::prelude::*;

use crate::backend::{SeqLayout, T5AttentionShape};

/// The bucket bias as the twin reads it: the `[num_buckets, heads]` table and the
/// bucket of each relative position.
pub struct Bias<'a> {
    pub table: &'a [f32],
    pub index: &'a [u32],
    /// The `max_len` the index was built for (`index.len() = 2·max_len − 1`).
    pub max_len: usize,
}

/// Context `[query tokens, heads·d]`.
pub fn t5_attention(
    (q, k, v): (&[f32], &[f32], &[f32]),
    bias: Option<&Bias<'_>>,
    shape: T5AttentionShape,
    q_layout: &SeqLayout,
    kv_layout: &SeqLayout,
) -> Vec<f32> {
    let (heads, d) = (shape.heads, shape.head_dim);
    let width = heads * d;
    let tasks: Vec<(usize, usize)> = (0..q_layout.num_seqs())
        .flat_map(|s| (0..heads).map(move |h| (s, h)))
        .collect();
    let parts: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(s, h)| {
            let qs = q_layout.cu_seqlens[s]..q_layout.cu_seqlens[s + 1];
            let ks = kv_layout.cu_seqlens[s]..kv_layout.cu_seqlens[s + 1];
            let (lq, lk) = (qs.len(), ks.len());
            // The head's rows as contiguous f64 `[len, d]`.
            let head = |x: &[f32], rows: &std::ops::Range<usize>| -> Vec<f64> {
                rows.clone()
                    .flat_map(|r| x[r * width + h * d..r * width + (h + 1) * d].iter())
                    .map(|&v| f64::from(v))
                    .collect()
            };
            let (q, k, v) = (head(q, &qs), head(k, &ks), head(v, &ks));
            let (qm, km) = (&q_layout.mask[qs], &kv_layout.mask[ks]);
            let mut scores = vec![0f64; lq * lk];
            // scores = q · kᵀ
            gemm_f64(&mut scores, (lq, lk, d), (&q, d, 1), (&k, 1, d));
            for (i, row) in scores.chunks_exact_mut(lk).enumerate() {
                let keys = if shape.causal { (i + 1).min(lk) } else { lk };
                if qm[i] == 0.0 {
                    row.fill(0.0);
                    continue;
                }
                let mut max = f64::NEG_INFINITY;
                for j in 0..keys {
                    if km[j] != 0.0 {
                        if let Some(b) = bias {
                            let bucket = b.index[j + b.max_len - 1 - i] as usize;
                            row[j] += f64::from(b.table[bucket * heads + h]);
                        }
                        max = max.max(row[j]);
                    }
                }
                let mut sum = 0f64;
                for j in 0..keys {
                    row[j] = if km[j] != 0.0 {
                        let e = (row[j] - max).exp();
                        sum += e;
                        e
                    } else {
                        0.0
                    };
                }
                // A row with no key to attend to outputs zeros.
                let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                row[..keys].iter_mut().for_each(|p| *p *= inv);
                row[keys..].fill(0.0);
            }
            let mut ctx = vec![0f64; lq * d];
            // ctx = p · v
            gemm_f64(&mut ctx, (lq, d, lk), (&scores, lk, 1), (&v, d, 1));
            ctx.into_iter().map(|x| x as f32).collect()
        })
        .collect();
    let mut out = vec![0f32; q_layout.num_tokens() * width];
    for (&(s, h), ctx) in tasks.iter().zip(&parts) {
        let start = q_layout.cu_seqlens[s];
        for (i, row) in ctx.chunks_exact(d).enumerate() {
            let o = (start + i) * width + h * d;
            out[o..o + d].copy_from_slice(row);
        }
    }
    out
}

/// `dst[m, n] = a[m, k] · b[k, n]` (row-major `dst`), `a` and `b` given with their row
/// and column strides, in f64 on the calling thread.
fn gemm_f64(
    dst: &mut [f64],
    (m, n, k): (usize, usize, usize),
    (a, a_rs, a_cs): (&[f64], usize, usize),
    (b, b_rs, b_cs): (&[f64], usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(dst.len() >= m * n);
    assert!(k == 0 || (a.len() > last(m, k, a_rs, a_cs) && b.len() > last(k, n, b_rs, b_cs)));
    // SAFETY: the views' extents were checked above; `dst` is exclusively borrowed and
    // distinct from `a` and `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(lens: &[usize]) -> SeqLayout {
        let mut cu = vec![0];
        for l in lens {
            cu.push(cu.last().unwrap() + l);
        }
        SeqLayout {
            mask: vec![1.0; *cu.last().unwrap()],
            cu_seqlens: cu,
        }
    }

    /// Direct per-score reference in f64.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        bias: Option<&Bias<'_>>,
        heads: usize,
        d: usize,
        causal: bool,
        ql: &SeqLayout,
        kl: &SeqLayout,
    ) -> Vec<f32> {
        let w = heads * d;
        let mut out = vec![0f32; ql.num_tokens() * w];
        for s in 0..ql.num_seqs() {
            let (q0, lq) = (ql.cu_seqlens[s], ql.cu_seqlens[s + 1] - ql.cu_seqlens[s]);
            let (k0, lk) = (kl.cu_seqlens[s], kl.cu_seqlens[s + 1] - kl.cu_seqlens[s]);
            for h in 0..heads {
                for i in 0..lq {
                    let keys: Vec<usize> = (0..lk).filter(|&j| !causal || j <= i).collect();
                    let sc: Vec<f64> = keys
                        .iter()
                        .map(|&j| {
                            let dot: f64 = (0..d)
                                .map(|c| {
                                    f64::from(q[(q0 + i) * w + h * d + c])
                                        * f64::from(k[(k0 + j) * w + h * d + c])
                                })
                                .sum();
                            dot + bias.map_or(0.0, |b| {
                                let bucket = b.index[j + b.max_len - 1 - i] as usize;
                                f64::from(b.table[bucket * heads + h])
                            })
                        })
                        .collect();
                    let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = sc.iter().map(|s| (s - m).exp()).sum();
                    for c in 0..d {
                        let y: f64 = keys
                            .iter()
                            .zip(&sc)
                            .map(|(&j, s)| {
                                (s - m).exp() / z * f64::from(v[(k0 + j) * w + h * d + c])
                            })
                            .sum();
                        out[(q0 + i) * w + h * d + c] = y as f32;
                    }
                }
            }
        }
        out
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    #[test]
    fn matches_the_direct_sum_with_bias_masks_and_cross_layouts() {
        let (heads, d, buckets) = (3, 8, 6);
        let table = values(buckets * heads, 7);
        for (causal, ql, kl) in [
            (false, layout(&[5, 9]), layout(&[5, 9])),
            (true, layout(&[5, 9]), layout(&[5, 9])),
            (false, layout(&[4, 2]), layout(&[7, 11])),
        ] {
            let max_len = ql.max_len().max(kl.max_len());
            let index: Vec<u32> = (0..2 * max_len - 1).map(|r| (r % buckets) as u32).collect();
            let b = Bias {
                table: &table,
                index: &index,
                max_len,
            };
            let q = values(ql.num_tokens() * heads * d, 1);
            let k = values(kl.num_tokens() * heads * d, 2);
            let v = values(kl.num_tokens() * heads * d, 3);
            let shape = T5AttentionShape {
                heads,
                head_dim: d,
                causal,
            };
            for bias in [Some(&b), None] {
                let got = t5_attention((&q, &k, &v), bias, shape, &ql, &kl);
                let want = naive(&q, &k, &v, bias, heads, d, causal, &ql, &kl);
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(err < 1e-5, "causal {causal}: max err {err}");
            }
        }
    }

    #[test]
    fn masked_keys_are_skipped_and_masked_queries_are_zero() {
        let (heads, d) = (1, 2);
        let mut l = layout(&[3]);
        l.mask = vec![1.0, 0.0, 1.0];
        let q = vec![1.0, 0.0, 5.0, 5.0, 0.0, 1.0];
        let k = vec![1.0, 0.0, 9.0, 9.0, 0.0, 1.0];
        let v = vec![1.0, 2.0, 100.0, 100.0, 3.0, 4.0];
        let shape = T5AttentionShape {
            heads,
            head_dim: d,
            causal: false,
        };
        let out = t5_attention((&q, &k, &v), None, shape, &l, &l);
        assert_eq!(&out[2..4], &[0.0, 0.0]);
        // Row 0 sees keys 0 and 2 only: softmax([1, 0]).
        let p = 1.0 / (1.0 + (-1f32).exp());
        assert!((out[0] - (p * 1.0 + (1.0 - p) * 3.0)).abs() < 1e-6);
    }
}
