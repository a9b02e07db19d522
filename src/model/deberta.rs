//! DeBERTa-v2/v3 encoder (docs/spec.md §0), a port of HF transformers'
//! `models/deberta_v2/modeling_deberta_v2.py` (`DebertaV2Embeddings`,
//! `DisentangledSelfAttention`, `DebertaV2Layer`, `DebertaV2Encoder`,
//! `DebertaV2Model`), inference only (dropout is the identity).
//!
//! Differences in form, not in numbers: sequences are packed without padding, and the
//! position projections `PK = key_proj(LN(rel))`, `PQ = query_proj(LN(rel))` (they
//! depend only on weights) are computed once at load instead of in every forward.

use anyhow::{bail, Context, Result};

use super::batch::{graph_key, PackedBatch, StagedBatch};
use super::config::{DebertaConfig, RelativeConfig};
use super::layers::{LayerNorm, Linear};
use super::weights::Weights;
use crate::backend::{AttentionShape, Backend, Input, RelAttention};
use crate::tensor::HostTensor;

/// Word (+ absolute position) (+ token type) embeddings → [embed_proj] → LN → × mask.
pub struct DebertaV2Embeddings<B: Backend> {
    word: B::Tensor,
    position: Option<B::Tensor>,
    token_type: Option<B::Tensor>,
    embed_proj: Option<Linear<B>>,
    norm: LayerNorm<B>,
    vocab_size: usize,
    max_positions: usize,
    type_vocab_size: usize,
}

impl<B: Backend> DebertaV2Embeddings<B> {
    pub fn load(be: &B, w: &Weights, c: &DebertaConfig) -> Result<Self> {
        let e = c.embedding_size;
        let position = c
            .position_biased_input
            .then(|| position_table(w, c))
            .transpose()?;
        let token_type = (c.type_vocab_size > 0)
            .then(|| w.get("token_type_embeddings.weight", &[c.type_vocab_size, e]))
            .transpose()?;
        let upload = |t: Option<HostTensor>| t.map(|t| be.upload(&t)).transpose();
        Ok(Self {
            word: be.upload(&w.get("word_embeddings.weight", &[c.vocab_size, e])?)?,
            position: upload(position)?,
            token_type: upload(token_type)?,
            embed_proj: (e != c.hidden_size)
                .then(|| Linear::load(be, &w.pp("embed_proj"), e, c.hidden_size, false))
                .transpose()?,
            norm: LayerNorm::load(be, &w.pp("LayerNorm"), c.hidden_size, c.layer_norm_eps)?,
            vocab_size: c.vocab_size,
            max_positions: c.max_position_embeddings,
            type_vocab_size: c.type_vocab_size,
        })
    }

    pub fn forward(&self, be: &B, batch: &StagedBatch<'_>) -> Result<B::Tensor> {
        if let Some(&bad) = batch.ids.iter().find(|&&i| i as usize >= self.vocab_size) {
            bail!(
                "token id {bad} is outside the vocabulary ({} entries): tokenizer and model differ",
                self.vocab_size
            );
        }
        let mut lookups = vec![(&self.word, batch.ids_input())];
        if let Some(p) = &self.position {
            if batch.layout.max_len() > self.max_positions {
                bail!(
                    "a sequence has {} tokens; this model has absolute positions up to {}",
                    batch.layout.max_len(),
                    self.max_positions
                );
            }
            lookups.push((p, batch.positions_input()));
        }
        if let Some(t) = &self.token_type {
            if let Some(&bad) = batch
                .type_ids
                .iter()
                .find(|&&t| t as usize >= self.type_vocab_size)
            {
                bail!(
                    "token type {bad} >= type_vocab_size {}",
                    self.type_vocab_size
                );
            }
            lookups.push((t, batch.type_ids_input()));
        }
        let mut x = be.embedding(&lookups)?;
        if let Some(p) = &self.embed_proj {
            x = p.forward(be, &x)?;
        }
        self.norm.forward(be, &mut x, None)?;
        be.scale_rows(&mut x, batch.mask_input())?;
        Ok(x)
    }
}

/// The absolute-position rows positions 0, 1, … read: `[max_position_embeddings, E]`
/// from row `position_offset` on (RoBERTa's first position is `padding_idx + 1`).
fn position_table(w: &Weights, c: &DebertaConfig) -> Result<HostTensor> {
    let (e, offset) = (c.embedding_size, c.position_offset);
    let rows = c.max_position_embeddings;
    let mut table = w.get("position_embeddings.weight", &[rows + offset, e])?;
    if offset > 0 {
        table = HostTensor::new(vec![rows, e], table.data.split_off(offset * e));
    }
    Ok(table)
}

/// The fused query/key/value projection and the precomputed position projections of
/// one layer.
pub struct DisentangledSelfAttention<B: Backend> {
    /// `[query_proj; key_proj; value_proj]`, `[3·heads·d, H]`: one GEMM per layer.
    qkv: Linear<B>,
    /// `[2·span, heads·d]`, present with c2p.
    pos_key: Option<B::Tensor>,
    /// `[2·span, heads·d]`, present with p2c.
    pos_query: Option<B::Tensor>,
}

impl<B: Backend> DisentangledSelfAttention<B> {
    fn load(be: &B, w: &Weights, c: &DebertaConfig, rel: Option<&B::Tensor>) -> Result<Self> {
        let (h, a) = (c.hidden_size, c.all_head_size());
        let [q, k, v] = c.projections;
        let qkv = Linear::load_fused(be, w, &[(q, a), (k, a), (v, a)], h, true)?;
        // PK = key_proj(rel) (or pos_key_proj), PQ = query_proj(rel) (or pos_query_proj).
        let project = |shared: &str, own: &str, rc: &RelativeConfig, rel: &B::Tensor| {
            let name = if rc.share_att_key { shared } else { own };
            Linear::load(be, &w.pp(name), h, a, true)?.forward(be, rel)
        };
        let (mut pos_key, mut pos_query) = (None, None);
        if let (Some(rc), Some(rel)) = (&c.relative, rel) {
            if rc.c2p {
                pos_key = Some(project("key_proj", "pos_key_proj", rc, rel)?);
            }
            if rc.p2c {
                pos_query = Some(project("query_proj", "pos_query_proj", rc, rel)?);
            }
        }
        Ok(Self {
            qkv,
            pos_key,
            pos_query,
        })
    }

    fn forward(
        &self,
        be: &B,
        x: &B::Tensor,
        index: Option<Input<'_, [u32]>>,
        shape: AttentionShape,
        batch: &StagedBatch<'_>,
    ) -> Result<B::Tensor> {
        let [q, k, v]: [B::Tensor; 3] = self
            .qkv
            .forward_split(be, x, 3)?
            .try_into()
            .map_err(|_| anyhow::anyhow!("the fused projection did not split into Q, K, V"))?;
        let rel = index.map(|index| RelAttention {
            pos_key: self.pos_key.as_ref(),
            pos_query: self.pos_query.as_ref(),
            index,
        });
        Ok(be.disentangled_attention(&q, &k, &v, rel.as_ref(), shape, batch.layout_input())?)
    }
}

/// Post-LN transformer layer: `x = LN(x + O·Attn(x))`, `x = LN(x + W2·gelu(W1·x))`.
pub struct DebertaV2Layer<B: Backend> {
    attention: DisentangledSelfAttention<B>,
    attention_output: Linear<B>,
    attention_norm: LayerNorm<B>,
    intermediate: Linear<B>,
    output: Linear<B>,
    output_norm: LayerNorm<B>,
    /// GELU's tanh form (HF `gelu_new`), as the up-projection GEMM's epilogue.
    tanh_gelu: bool,
}

impl<B: Backend> DebertaV2Layer<B> {
    fn load(be: &B, w: &Weights, c: &DebertaConfig, rel: Option<&B::Tensor>) -> Result<Self> {
        let (h, a, i, eps) = (
            c.hidden_size,
            c.all_head_size(),
            c.intermediate_size,
            c.layer_norm_eps,
        );
        Ok(Self {
            attention: DisentangledSelfAttention::load(be, &w.pp("attention.self"), c, rel)?,
            attention_output: Linear::load(be, &w.pp("attention.output.dense"), a, h, true)?,
            attention_norm: LayerNorm::load(be, &w.pp("attention.output.LayerNorm"), h, eps)?,
            intermediate: Linear::load(be, &w.pp("intermediate.dense"), h, i, true)?,
            output: Linear::load(be, &w.pp("output.dense"), i, h, true)?,
            output_norm: LayerNorm::load(be, &w.pp("output.LayerNorm"), h, eps)?,
            tanh_gelu: c.tanh_gelu,
        })
    }

    fn forward(
        &self,
        be: &B,
        x: &B::Tensor,
        index: Option<Input<'_, [u32]>>,
        shape: AttentionShape,
        batch: &StagedBatch<'_>,
    ) -> Result<B::Tensor> {
        let ctx = self.attention.forward(be, x, index, shape, batch)?;
        let h = self
            .attention_norm
            .forward_linear(be, &self.attention_output, &ctx, x)?;
        let ffn = &self.intermediate;
        let inter = if self.tanh_gelu {
            be.linear_gelu_new(&h, &ffn.weight, ffn.bias.as_ref())?
        } else {
            be.linear_gelu(&h, &ffn.weight, ffn.bias.as_ref())?
        };
        self.output_norm
            .forward_linear(be, &self.output, &inter, &h)
    }
}

/// The DeBERTa-v2/v3 encoder: embeddings and layers → last hidden state `[tokens, H]`.
pub struct DebertaV2Model<B: Backend> {
    pub config: DebertaConfig,
    embeddings: DebertaV2Embeddings<B>,
    layers: Vec<DebertaV2Layer<B>>,
    shape: AttentionShape,
    /// What the backend caches this model's CUDA graphs under.
    graph_key: u64,
}

impl<B: Backend> DebertaV2Model<B> {
    /// Loads from an encoder-rooted [`Weights`] view (see [`Weights::encoder`]).
    pub fn load(be: &B, w: &Weights, config: &DebertaConfig) -> Result<Self> {
        let c = config;
        let embeddings = DebertaV2Embeddings::load(be, &w.pp("embeddings"), c)
            .context("loading the embeddings")?;
        let rel = match &c.relative {
            Some(rc) => Some(be.upload(&relative_table(w, c, rc)?)?),
            None => {
                // HF's DebertaV2Encoder makes `LayerNorm` from `norm_rel_ebd` alone and
                // uses it only with relative attention: present, and unused, in such
                // checkpoints.
                w.pp("encoder.LayerNorm")
                    .unused_by_design(&["weight", "bias"]);
                None
            }
        };
        let layers = (0..c.num_layers)
            .map(|i| {
                DebertaV2Layer::load(be, &w.pp(format!("encoder.layer.{i}")), c, rel.as_ref())
                    .with_context(|| format!("loading encoder layer {i}"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            config: c.clone(),
            embeddings,
            layers,
            shape: AttentionShape {
                heads: c.num_heads,
                head_size: c.head_size,
                score_scale: 1.0 / ((c.head_size as f32) * c.scale_factor as f32).sqrt(),
            },
            graph_key: graph_key(),
        })
    }

    /// Last hidden state `[tokens, H]` of a packed batch.
    pub fn forward(&self, be: &B, batch: &PackedBatch) -> Result<B::Tensor> {
        Ok(self.forward_staged(be, batch)?.0)
    }

    /// [`DebertaV2Model::forward`], and the batch as staged: the heads read its
    /// layout (the [CLS] row of a sequence is its first). On a backend with CUDA
    /// graphs the layers run on the batch padded to its bucket, as a graph.
    pub fn forward_staged<'a>(
        &self,
        be: &B,
        batch: &'a PackedBatch,
    ) -> Result<(B::Tensor, StagedBatch<'a>)> {
        // RoBERTa: every token is of type 0 (HF's `token_type_ids` default to zeros),
        // whatever types the tokenizer gave.
        let retyped = (!self.config.token_types_from_input
            && batch.type_ids.iter().any(|&t| t != 0))
        .then(|| PackedBatch {
            type_ids: vec![0; batch.type_ids.len()],
            ..batch.clone()
        });
        let typed = retyped.as_ref().unwrap_or(batch);
        let padded = be
            .graph_bucket(typed.shape(), self.config.max_position_embeddings)
            .map(|to| typed.padded(to));
        let run = padded.as_ref().unwrap_or(typed);
        let index = self
            .config
            .relative
            .as_ref()
            .map(|rc| relative_index(rc, run.layout.max_len()));
        // Everything the layers and the heads read from the host, in one upload.
        let mut inputs = run.inputs();
        inputs.rel_index = index.as_deref();
        let graph_ids = inputs.ids.len();
        let (x, prepared) = be.run_forward(
            Some(self.graph_key),
            &inputs,
            graph_ids,
            batch.num_tokens(),
            &mut |prepared| {
                let staged = StagedBatch {
                    batch: run,
                    prepared: prepared.clone(),
                };
                let index = index.as_deref().map(|i| prepared.rel_index(i));
                let mut x = self.embeddings.forward(be, &staged)?;
                for layer in &self.layers {
                    x = layer.forward(be, &x, index, self.shape, &staged)?;
                }
                Ok(x)
            },
        )?;
        Ok((x, StagedBatch { batch, prepared }))
    }
}

/// `LN(rel_embeddings.weight)` (or the raw table without `norm_rel_ebd`), `[2·span, H]`.
fn relative_table(w: &Weights, c: &DebertaConfig, rc: &RelativeConfig) -> Result<HostTensor> {
    let h = c.hidden_size;
    let mut rel = w.get("encoder.rel_embeddings.weight", &[2 * rc.span, h])?;
    if rc.norm_rel_ebd {
        let ln = w.pp("encoder.LayerNorm");
        let (g, b) = (ln.get_norm("weight", &[h])?, ln.get_norm("bias", &[h])?);
        crate::backend::cpu::layer_norm::layer_norm(
            &mut rel.data,
            None,
            h,
            &g.data,
            &b.data,
            c.layer_norm_eps,
        );
    }
    Ok(rel)
}

/// HF `make_log_bucket_position` for one offset, in f32 as torch computes it.
pub fn log_bucket(r: i64, buckets: usize, max_position: usize) -> i64 {
    let mid = (buckets / 2) as i64;
    if r.abs() <= mid {
        return r;
    }
    let abs = r.abs() as f32;
    let ratio = ((max_position - 1) as f64 / mid as f64) as f32;
    let log_pos = ((abs / mid as f32).ln() / ratio.ln() * (mid - 1) as f32).ceil() as i64 + mid;
    r.signum() * log_pos
}

/// `index[r + max_len − 1] = clamp(bucket(r) + span, 0, 2·span − 1)` for
/// `|r| < max_len`: the relative-table row of offset `r = i − j` (see [`RelAttention`]).
pub fn relative_index(rc: &RelativeConfig, max_len: usize) -> Vec<u32> {
    let n = max_len.max(1) as i64;
    let span = rc.span as i64;
    (-(n - 1)..n)
        .map(|r| {
            let b = match rc.buckets {
                Some(buckets) => log_bucket(r, buckets, rc.max_relative_positions),
                None => r,
            };
            (b + span).clamp(0, 2 * span - 1) as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::log_bucket;

    /// DeBERTa's log buckets rise by at most 1 per offset, so the band rows of a tile
    /// diagonal are consecutive rows of the relative tables: disentangled attention v5
    /// loads them as one box (it runs v3 for an index that is not so).
    #[test]
    fn log_buckets_rise_by_at_most_one_per_offset() {
        for (buckets, max_position) in [(256, 512), (128, 512), (256, 1024), (512, 2048), (8, 16)] {
            let b: Vec<i64> = (-4096..4096)
                .map(|r| log_bucket(r, buckets, max_position))
                .collect();
            assert!(
                b.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1),
                "buckets {buckets}, max positions {max_position}"
            );
        }
    }
}
