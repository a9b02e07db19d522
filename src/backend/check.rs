//! Argument checks shared by every backend: an op validates shapes here before it
//! touches data, so the CPU and CUDA backends fail alike with the same message.

use super::{
    AddNorm, AttentionShape, CausalShape, ClsHead, Dense, HeadNorm, Input, OpError, OpResult,
    SeqLayout, SeqPooling,
};

/// A matrix shape `[rows, cols]`.
pub trait Dims {
    fn dims(&self) -> (usize, usize);
    fn numel(&self) -> usize {
        let (r, c) = self.dims();
        r * c
    }
}

fn fail<T>(op: &'static str, msg: String) -> OpResult<T> {
    Err(OpError::Shape { op, msg })
}

/// `(rows, cols)` of a 1-D or 2-D host shape.
pub fn matrix_shape(shape: &[usize]) -> OpResult<(usize, usize)> {
    match shape {
        [n] => Ok((1, *n)),
        [r, c] => Ok((*r, *c)),
        other => fail("upload", format!("expected 1-D or 2-D, got {other:?}")),
    }
}

pub fn linear(x: &impl Dims, w: &impl Dims, bias: Option<&impl Dims>) -> OpResult<()> {
    let ((xr, xc), (wr, wc)) = (x.dims(), w.dims());
    if xc != wc {
        return fail("linear", format!("x is [{xr}, {xc}] but w is [{wr}, {wc}]"));
    }
    if let Some(b) = bias.filter(|b| b.numel() != wr) {
        return fail(
            "linear",
            format!("bias has {} values for {wr} outputs", b.numel()),
        );
    }
    Ok(())
}

/// [`linear`] with `w` of `parts` stacked blocks.
pub fn linear_split(
    x: &impl Dims,
    w: &impl Dims,
    bias: Option<&impl Dims>,
    parts: usize,
) -> OpResult<()> {
    let wr = w.dims().0;
    if parts == 0 || !wr.is_multiple_of(parts) {
        return fail(
            "linear_split",
            format!("{wr} weight rows do not split into {parts} equal parts"),
        );
    }
    linear(x, w, bias)
}

/// [`linear`] of `input` added into `x`.
pub fn linear_add(
    x: &impl Dims,
    input: &impl Dims,
    w: &impl Dims,
    bias: Option<&impl Dims>,
) -> OpResult<()> {
    linear(input, w, bias)?;
    let ((xr, xc), (n, out)) = (x.dims(), (input.dims().0, w.dims().0));
    if (xr, xc) != (n, out) {
        return fail(
            "linear_add",
            format!("x is [{xr}, {xc}] but the product is [{n}, {out}]"),
        );
    }
    Ok(())
}

/// [`linear`], then [`layer_norm`] of the product with `norm`'s residual.
pub fn linear_add_norm<T: Dims>(
    x: &T,
    w: &T,
    bias: Option<&T>,
    norm: &AddNorm<'_, T>,
) -> OpResult<()> {
    linear(x, w, bias)?;
    let ((rows, _), (out, _)) = (x.dims(), w.dims());
    let (rr, rc) = norm.residual.dims();
    if (rr, rc) != (rows, out) {
        return fail(
            "linear_add_norm",
            format!("the residual is [{rr}, {rc}] but the product is [{rows}, {out}]"),
        );
    }
    if norm.weight.numel() != out || norm.bias.numel() != out {
        return fail("linear_add_norm", format!("affine size != {out} columns"));
    }
    Ok(())
}

pub fn layer_norm(
    x: &impl Dims,
    residual: Option<&impl Dims>,
    weight: &impl Dims,
    bias: &impl Dims,
) -> OpResult<()> {
    if residual.is_some_and(|r| r.dims() != x.dims()) {
        return fail("layer_norm", "residual shape differs from x".into());
    }
    let cols = x.dims().1;
    if weight.numel() != cols || bias.numel() != cols {
        return fail("layer_norm", format!("affine size != {cols} columns"));
    }
    Ok(())
}

/// Returns `(cols, tokens)` of the summed embedding.
pub fn embedding<T: Dims>(lookups: &[(&T, Input<'_, [u32]>)]) -> OpResult<(usize, usize)> {
    let Some((first, ids)) = lookups.first() else {
        return fail("embedding", "no tables".into());
    };
    let (cols, tokens) = (first.dims().1, ids.len());
    for (table, ids) in lookups {
        let (rows, c) = table.dims();
        if c != cols || ids.len() != tokens {
            return fail("embedding", "tables or id lists disagree in size".into());
        }
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= rows) {
            return fail(
                "embedding",
                format!("id {bad} is outside a table of {rows} rows"),
            );
        }
    }
    Ok((cols, tokens))
}

pub fn scale_rows(x: &impl Dims, scale: &[f32]) -> OpResult<()> {
    let rows = x.dims().0;
    if scale.len() != rows {
        return fail(
            "scale_rows",
            format!("{} scales for {rows} rows", scale.len()),
        );
    }
    Ok(())
}

pub fn disentangled_attention(
    qkv: [&impl Dims; 3],
    shape: AttentionShape,
    layout: &SeqLayout,
) -> OpResult<()> {
    let width = shape.heads * shape.head_size;
    let tokens = layout.num_tokens();
    for t in qkv {
        let (r, c) = t.dims();
        if (r, c) != (tokens, width) {
            return fail(
                "disentangled_attention",
                format!("q/k/v must be [{tokens}, {width}], got [{r}, {c}]"),
            );
        }
    }
    if layout.mask.len() != tokens {
        return fail("disentangled_attention", "mask length != tokens".into());
    }
    Ok(())
}

pub fn gather_rows(x: &impl Dims, rows: &[usize]) -> OpResult<()> {
    let n = x.dims().0;
    if let Some(bad) = rows.iter().find(|&&r| r >= n) {
        return fail("gather_rows", format!("row {bad} of {n}"));
    }
    Ok(())
}

/// `x` is the `[tokens, hidden]` of `layout`; returns `(sequences, labels)`.
pub fn cls_head<T: Dims>(
    x: &T,
    layout: &SeqLayout,
    head: &ClsHead<'_, T>,
) -> OpResult<(usize, usize)> {
    let (rows, cols) = x.dims();
    if rows != layout.num_tokens() || layout.mask.len() != rows {
        return fail(
            "cls_head",
            format!(
                "{rows} rows, {} tokens in the layout, {} mask values",
                layout.num_tokens(),
                layout.mask.len()
            ),
        );
    }
    if head.pooling == SeqPooling::First {
        if let Some(s) = layout.cu_seqlens.windows(2).position(|w| w[1] <= w[0]) {
            return fail(
                "cls_head",
                format!("sequence {s} is empty: it has no [CLS] row"),
            );
        }
    }
    let width = match head.pooler {
        Some(p) => dense("cls_head", "pooler", cols, p)?,
        None => cols,
    };
    Ok((
        layout.num_seqs(),
        dense("cls_head", "classifier", width, head.classifier)?,
    ))
}

/// Returns the labels of a token head over `x`.
pub fn token_head<T: Dims>(x: &T, classifier: Dense<'_, T>) -> OpResult<usize> {
    dense("token_head", "classifier", x.dims().1, classifier)
}

/// Outputs of dense layer `what` of `op` applied to rows of `input` values.
fn dense<T: Dims>(op: &'static str, what: &str, input: usize, d: Dense<'_, T>) -> OpResult<usize> {
    let (out, cols) = d.weight.dims();
    if cols != input {
        return fail(op, format!("the {what} takes {cols} inputs, given {input}"));
    }
    if let Some(b) = d.bias.filter(|b| b.numel() != out) {
        return fail(
            op,
            format!("the {what} bias has {} values for {out} outputs", b.numel()),
        );
    }
    if out == 0 {
        return fail(op, format!("the {what} has no outputs"));
    }
    Ok(out)
}

pub fn add(x: &impl Dims, y: &impl Dims) -> OpResult<()> {
    if x.dims() != y.dims() {
        let ((a, b), (c, d)) = (x.dims(), y.dims());
        return fail("add", format!("[{a}, {b}] + [{c}, {d}]"));
    }
    Ok(())
}

pub fn rms_norm(x: &impl Dims, weight: &impl Dims) -> OpResult<()> {
    let cols = x.dims().1;
    if weight.numel() != cols {
        return fail(
            "rms_norm",
            format!("{} weights for {cols} columns", weight.numel()),
        );
    }
    Ok(())
}

/// Returns the `inter` width of the output.
pub fn gated_act(x: &impl Dims, block: usize) -> OpResult<usize> {
    let cols = x.dims().1;
    if !cols.is_multiple_of(2) {
        return fail("gated_act", format!("{cols} columns is not [gate | up]"));
    }
    let inter = cols / 2;
    if block == 0 || !inter.is_multiple_of(block) {
        return fail(
            "gated_act",
            format!("{inter} outputs do not split into gate/up blocks of {block}"),
        );
    }
    Ok(inter)
}

pub fn rope<T: Dims>(
    x: &T,
    heads: usize,
    head_dim: usize,
    positions: &[u32],
    inv_freq: &[f32],
    norm: Option<HeadNorm<'_, T>>,
) -> OpResult<()> {
    let (rows, cols) = x.dims();
    if let Some(n) = norm {
        let weights = [n.q_weight.dims(), n.k_weight.dims()];
        if n.q_heads > heads
            || head_dim > MAX_NORMED_HEAD_DIM
            || weights.iter().any(|&(r, c)| r * c != head_dim)
        {
            return fail(
                "rope (q/k norm)",
                format!(
                    "{heads} heads of {head_dim} (at most {MAX_NORMED_HEAD_DIM}), {} of them \
                     q's, weights {weights:?}",
                    n.q_heads
                ),
            );
        }
    }
    if heads * head_dim > cols || positions.len() != rows || 2 * inv_freq.len() != head_dim {
        return fail(
            "rope",
            format!(
                "x [{rows}, {cols}], {heads} heads of {head_dim}, {} positions, {} frequencies",
                positions.len(),
                inv_freq.len()
            ),
        );
    }
    Ok(())
}

/// The largest head `rope` normalises (kernels/rope.cu's `kMaxPairs` pairs per lane).
pub const MAX_NORMED_HEAD_DIM: usize = 256;

pub fn causal_attention(
    qkv: &impl Dims,
    shape: CausalShape,
    layout: &SeqLayout,
    first_query: Option<&[u32]>,
) -> OpResult<()> {
    let width = (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
    let tokens = layout.num_tokens();
    let (r, c) = qkv.dims();
    if (r, c) != (tokens, width) {
        return fail(
            "causal_attention",
            format!("qkv must be [{tokens}, {width}], got [{r}, {c}]"),
        );
    }
    if shape.kv_heads == 0 || !shape.heads.is_multiple_of(shape.kv_heads) {
        return fail(
            "causal_attention",
            format!(
                "{} heads do not group over {} kv heads",
                shape.heads, shape.kv_heads
            ),
        );
    }
    if layout.mask.len() != tokens {
        return fail("causal_attention", "mask length != tokens".into());
    }
    if let Some(first) = first_query {
        if first.len() != layout.num_seqs() {
            return fail(
                "causal_attention",
                format!(
                    "{} first query rows for {} sequences",
                    first.len(),
                    layout.num_seqs()
                ),
            );
        }
        let lens = layout.cu_seqlens.windows(2).map(|w| w[1] - w[0]);
        if let Some((s, (f, len))) = first
            .iter()
            .zip(lens)
            .enumerate()
            .find(|(_, (&f, len))| f as usize > *len)
        {
            return fail(
                "causal_attention",
                format!("sequence {s}: first query row {f} past its {len} tokens"),
            );
        }
    }
    Ok(())
}

/// Checks [`crate::backend::Backend::t5_attention`]'s operands; returns the
/// `max_len` of its bias index.
pub fn t5_attention(
    (q, k, v): (&impl Dims, &impl Dims, &impl Dims),
    bias: Option<(&impl Dims, &[u32])>,
    shape: crate::backend::T5AttentionShape,
    q_layout: &SeqLayout,
    kv_layout: &SeqLayout,
) -> OpResult<usize> {
    let op = "t5_attention";
    let width = shape.heads * shape.head_dim;
    let (qt, kt) = (q_layout.num_tokens(), kv_layout.num_tokens());
    for (name, t, rows) in [
        ("q", q.dims(), qt),
        ("k", k.dims(), kt),
        ("v", v.dims(), kt),
    ] {
        if t != (rows, width) {
            return fail(op, format!("{name} must be [{rows}, {width}], got {t:?}"));
        }
    }
    if q_layout.num_seqs() != kv_layout.num_seqs() {
        return fail(
            op,
            "query and key layouts hold different numbers of sequences".into(),
        );
    }
    if q_layout.mask.len() != qt || kv_layout.mask.len() != kt {
        return fail(op, "mask length != tokens".into());
    }
    let max_len = q_layout.max_len().max(kv_layout.max_len());
    if let Some((table, index)) = bias {
        let (rows, cols) = table.dims();
        if cols != shape.heads {
            return fail(
                op,
                format!(
                    "the bias table has {cols} columns for {} heads",
                    shape.heads
                ),
            );
        }
        if index.len() != (2 * max_len).saturating_sub(1) {
            return fail(
                op,
                format!(
                    "the bucket index has {} entries, not 2·{max_len} − 1",
                    index.len()
                ),
            );
        }
        if let Some(b) = index.iter().find(|&&b| b as usize >= rows) {
            return fail(op, format!("bucket {b} is past the table's {rows} buckets"));
        }
    }
    Ok(max_len)
}

pub fn question_loglik(
    hidden: &impl Dims,
    rows: &[usize],
    lm_head: &impl Dims,
    targets: &[u32],
    temperature: f32,
) -> OpResult<()> {
    let ((hr, hc), (vocab, lc)) = (hidden.dims(), lm_head.dims());
    if lc != hc || rows.len() != targets.len() {
        return fail(
            "question_loglik",
            format!(
                "hidden [{hr}, {hc}], head [{vocab}, {lc}], {} rows, {} targets",
                rows.len(),
                targets.len()
            ),
        );
    }
    if let Some(bad) = targets.iter().find(|&&t| t as usize >= vocab) {
        return fail(
            "question_loglik",
            format!("target {bad} is outside the vocabulary of {vocab}"),
        );
    }
    if !(temperature > 0.0 && temperature.is_finite()) {
        return fail(
            "question_loglik",
            format!("temperature {temperature} must be positive"),
        );
    }
    gather_rows(hidden, rows)
}
