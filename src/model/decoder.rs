//! Causal LMs for LEPUS scoring (docs/spec.md §3) and LLM reranking: GPT-2 and the
//! Llama family (Llama, Mistral, Qwen2, Qwen3), one definition driven by
//! [`DecoderConfig`]. Ports of HF transformers' `models/gpt2/modeling_gpt2.py`
//! (`GPT2Attention`, `GPT2MLP`, `GPT2Block`, `GPT2LMHeadModel`) and
//! `models/llama/modeling_llama.py` (`LlamaRMSNorm`, `LlamaRotaryEmbedding`,
//! `LlamaAttention`, `LlamaMLP`, `LlamaDecoderLayer`, `LlamaForCausalLM`), with Qwen3's
//! `q_norm`/`k_norm` (`models/qwen3/modeling_qwen3.py`, `Qwen3Attention`: an RMSNorm of
//! each head before RoPE, lines 229–245 in transformers 5.23) and the
//! `*ForSequenceClassification` score head on the last token (`modeling_layers.py`,
//! `GenericForSequenceClassification`), inference only.
//!
//! Differences in form, not in numbers: sequences are packed without padding; q/k/v
//! are one fused projection (`[q | k | v]`, as GPT-2's `c_attn`), gate/up are one
//! fused projection; GPT-2's Conv1D weights (`[in, out]`) are transposed at load; the
//! LM head runs only on the rows that predict target tokens, through the
//! `question_loglik` op (running log-sum-exp over vocabulary chunks).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, ensure, Context, Result};

use super::batch::{graph_key, PackedBatch, Sequence, StagedBatch, EXTRA_IDS};
use super::decoder_config::{DecoderConfig, Family, ModelType};
use super::gguf::GgufFile;
use super::layers::{GateUp, Linear};
use super::prefix::PrefixPlan;
use super::weights::{GgufSource, WeightStore, Weights};
use crate::backend::{Backend, CausalShape, Gate, HeadNorm, Input, Prepared};

/// LayerNorm (GPT-2) or RMSNorm (Llama).
enum Norm<B: Backend> {
    Layer {
        weight: B::Tensor,
        bias: B::Tensor,
        eps: f32,
    },
    Rms {
        weight: B::Tensor,
        eps: f32,
    },
}

impl<B: Backend> Norm<B> {
    fn load(be: &B, w: &Weights, c: &DecoderConfig) -> Result<Self> {
        let h = c.hidden_size;
        Ok(match c.family {
            Family::Gpt2 => Norm::Layer {
                weight: be.upload(&w.get("weight", &[h])?)?,
                bias: be.upload(&w.get("bias", &[h])?)?,
                eps: c.norm_eps,
            },
            Family::Llama => Norm::Rms {
                weight: be.upload(&w.get("weight", &[h])?)?,
                eps: c.norm_eps,
            },
        })
    }

    /// The normalised copy of `x` (the residual stream is left as is).
    fn forward(&self, be: &B, x: &B::Tensor) -> Result<B::Tensor> {
        Ok(match self {
            Norm::Layer { weight, bias, eps } => {
                let mut y = be.copy(x)?;
                be.layer_norm(&mut y, None, weight, bias, *eps)?;
                y
            }
            Norm::Rms { weight, eps } => be.rms_norm(x, weight, *eps)?,
        })
    }
}

/// Self-attention (`GPT2Attention` / `LlamaAttention`): fused q/k/v projection,
/// RoPE for the Llama family, causal attention, output projection.
pub struct DecoderAttention<B: Backend> {
    qkv: Linear<B>,
    out: Linear<B>,
    /// Qwen3's `q_norm` and `k_norm` weights (`[head_dim]` each).
    qk_norm: Option<[B::Tensor; 2]>,
}

/// The MLP: GPT-2 `c_fc → gelu_new → c_proj`, or Llama `down(silu(gate)·up)`.
pub struct DecoderMlp<B: Backend> {
    up: MlpUp<B>,
    down: Linear<B>,
}

/// The MLP's first half.
enum MlpUp<B: Backend> {
    /// GPT-2's `c_fc`, then `gelu_new`.
    Gelu(Linear<B>),
    /// Llama's `silu(gate_proj) · up_proj`.
    Gated(GateUp<B>),
}

/// One pre-norm block (`GPT2Block` / `LlamaDecoderLayer`).
pub struct DecoderLayer<B: Backend> {
    norm1: Norm<B>,
    attention: DecoderAttention<B>,
    norm2: Norm<B>,
    mlp: DecoderMlp<B>,
}

impl<B: Backend> DecoderLayer<B> {
    fn load(be: &B, w: &Weights, c: &DecoderConfig) -> Result<Self> {
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let (q, kv) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        Ok(match c.family {
            Family::Gpt2 => Self {
                norm1: Norm::load(be, &w.pp("ln_1"), c)?,
                attention: DecoderAttention {
                    qkv: Linear::load_conv1d(be, &w.pp("attn.c_attn"), h, 3 * h)?,
                    out: Linear::load_conv1d(be, &w.pp("attn.c_proj"), h, h)?,
                    qk_norm: None,
                },
                norm2: Norm::load(be, &w.pp("ln_2"), c)?,
                mlp: DecoderMlp {
                    up: MlpUp::Gelu(Linear::load_conv1d(be, &w.pp("mlp.c_fc"), h, i)?),
                    down: Linear::load_conv1d(be, &w.pp("mlp.c_proj"), i, h)?,
                },
            },
            Family::Llama => Self {
                norm1: Norm::load(be, &w.pp("input_layernorm"), c)?,
                attention: DecoderAttention {
                    qkv: Linear::load_fused(
                        be,
                        &w.pp("self_attn"),
                        &[("q_proj", q), ("k_proj", kv), ("v_proj", kv)],
                        h,
                        c.qkv_bias,
                    )?,
                    out: Linear::load_fused(be, &w.pp("self_attn"), &[("o_proj", h)], q, c.o_bias)?,
                    qk_norm: if c.qk_norm {
                        let norm = |name: &str| -> Result<B::Tensor> {
                            let w = w.pp("self_attn").pp(name);
                            Ok(be.upload(&w.get("weight", &[c.head_dim])?)?)
                        };
                        Some([norm("q_norm")?, norm("k_norm")?])
                    } else {
                        None
                    },
                },
                norm2: Norm::load(be, &w.pp("post_attention_layernorm"), c)?,
                mlp: DecoderMlp {
                    up: MlpUp::Gated(GateUp::load(
                        be,
                        &w.pp("mlp"),
                        ["gate_proj", "up_proj"],
                        Gate::Silu,
                        i,
                        h,
                        c.mlp_bias,
                    )?),
                    down: Linear::load_fused(be, &w.pp("mlp"), &[("down_proj", h)], i, c.mlp_bias)?,
                },
            },
        })
    }

    fn forward(&self, be: &B, x: &mut B::Tensor, ctx: &ForwardContext<'_>) -> Result<()> {
        let h = self.norm1.forward(be, x)?;
        let mut qkv = self.attention.qkv.forward(be, &h)?;
        drop(h);
        if let Some(inv_freq) = ctx.inv_freq {
            let norm = self.attention.qk_norm.as_ref().map(|[q, k]| HeadNorm {
                q_heads: ctx.shape.heads,
                q_weight: q,
                k_weight: k,
                eps: ctx.norm_eps,
            });
            be.rope(
                &mut qkv,
                ctx.shape.heads + ctx.shape.kv_heads,
                ctx.shape.head_dim,
                ctx.batch.positions_input(),
                inv_freq,
                norm,
            )?;
        }
        let attn = match ctx.prefix {
            None => be.causal_attention(&qkv, ctx.shape, ctx.batch.layout_input(), None)?,
            Some(plan) => {
                // Each member attends over its whole [prefix ; suffix] sequence; only
                // the first member's prefix rows are queries.
                let p = &ctx.batch.prepared;
                let whole = be.gather_rows(&qkv, p.ids(PREFIX_ROWS, &plan.attn_rows[..]))?;
                let attn = be.causal_attention(
                    &whole,
                    ctx.shape,
                    p.layout(1, &plan.attn_layout),
                    Some(p.ids(PREFIX_ROWS + 2, &plan.attn_first_query[..])),
                )?;
                be.gather_rows(&attn, p.ids(PREFIX_ROWS + 1, &plan.back_rows[..]))?
            }
        };
        drop(qkv);
        self.attention.out.forward_add(be, x, &attn)?;
        let h = self.norm2.forward(be, x)?;
        let act = match &self.mlp.up {
            MlpUp::Gelu(up) => be.linear_gelu_new(&h, &up.weight, up.bias.as_ref())?,
            MlpUp::Gated(up) => up.forward(be, &h)?,
        };
        self.mlp.down.forward_add(be, x, &act)?;
        Ok(())
    }
}

/// What every layer of one forward pass shares.
struct ForwardContext<'a> {
    batch: &'a StagedBatch<'a>,
    /// Set when `batch` packs shared prefixes once (`batch` is then `plan.batch`).
    prefix: Option<&'a PrefixPlan>,
    shape: CausalShape,
    inv_freq: Option<Input<'a, [f32]>>,
    norm_eps: f32,
}

/// The id lists of a forward with shared prefixes: each member's rows of its whole
/// sequence, the rows back, then each member's first query row (its
/// [`PrefixPlan::attn_layout`] is layout 1).
const PREFIX_ROWS: usize = EXTRA_IDS;

/// Where a decoder's weights and tokenizer come from.
pub enum DecoderSource {
    /// HF directory: config.json + model.safetensors (+ tokenizer.json).
    Hf { dir: PathBuf, store: WeightStore },
    /// A single GGUF file (config and tokenizer in its metadata).
    Gguf(GgufFile),
}

impl DecoderSource {
    /// Opens `path`: a `.gguf` file, a directory holding exactly one `.gguf` and no
    /// `config.json`, or an HF directory.
    pub fn open(path: &Path) -> Result<Self> {
        let gguf = if path.is_file() && path.extension().is_some_and(|e| e == "gguf") {
            Some(path.to_path_buf())
        } else if path.is_dir() && !path.join("config.json").is_file() {
            let found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot list {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
                .collect();
            match found.as_slice() {
                [one] => Some(one.clone()),
                [] => bail!(
                    "{} has neither config.json nor a .gguf file (fetch SmolLM2 with \
                     tools/fetch_smollm2.sh)",
                    path.display()
                ),
                _ => bail!(
                    "{} holds several .gguf files: pass one with --model FILE.gguf",
                    path.display()
                ),
            }
        } else {
            None
        };
        Ok(match gguf {
            Some(p) => DecoderSource::Gguf(GgufFile::open(&p)?),
            None => DecoderSource::Hf {
                dir: path.to_path_buf(),
                store: WeightStore::open(path)?,
            },
        })
    }

    /// The files whose checksums identify the weights.
    pub fn weights_paths(&self) -> Vec<PathBuf> {
        match self {
            DecoderSource::Hf { store, .. } => store.paths().to_vec(),
            DecoderSource::Gguf(g) => vec![g.path().to_path_buf()],
        }
    }
}

/// A causal LM (`GPT2LMHeadModel` / `LlamaForCausalLM`).
pub struct DecoderForCausalLM<B: Backend> {
    pub config: DecoderConfig,
    embed_tokens: B::Tensor,
    /// GPT-2's learned positions `wpe`.
    embed_positions: Option<B::Tensor>,
    layers: Vec<DecoderLayer<B>>,
    final_norm: Norm<B>,
    /// `None` when tied to `embed_tokens`.
    lm_head: Option<B::Tensor>,
    /// A `*ForSequenceClassification` checkpoint's `score` `[labels, hidden]`, in
    /// place of the LM head.
    score: Option<B::Tensor>,
    /// RoPE's frequencies, kept on the device (`Backend::keep_constant`).
    inv_freq: Option<(Vec<f32>, Option<crate::backend::Slot>)>,
    /// Sequences of a batch sharing at least this many leading tokens run them once
    /// (see [`PrefixPlan`]); 0 turns the reuse off.
    pub min_shared_prefix: usize,
    /// Tokens scored so far, and how many of them ran through the layers.
    token_counts: [AtomicUsize; 2],
    /// What the backend caches this model's CUDA graphs under.
    graph_key: u64,
}

/// Default of [`DecoderForCausalLM::min_shared_prefix`]: below this the two gathers
/// per layer cost about what the shared rows save.
pub const MIN_SHARED_PREFIX: usize = 16;

impl<B: Backend> DecoderForCausalLM<B> {
    /// Loads the model from a source; returns it with the source's config.
    pub fn load(be: &B, source: DecoderSource) -> Result<Self> {
        let (config, weights) = match source {
            DecoderSource::Hf { dir, store } => {
                let config = DecoderConfig::from_file(&dir.join("config.json"))?;
                (config, Weights::new(store))
            }
            DecoderSource::Gguf(file) => {
                let config = DecoderConfig::from_gguf(&file)?;
                let permuted_qk = ModelType::named(&config.model_type)
                    .is_some_and(|t| t.gguf_permuted_qk)
                    .then_some((config.num_heads, config.num_kv_heads));
                (config, Weights::gguf(GgufSource { file, permuted_qk }))
            }
        };
        Self::from_weights(be, &weights, config)
    }

    /// Builds the model from HF-named weights.
    pub fn from_weights(be: &B, w: &Weights, c: DecoderConfig) -> Result<Self> {
        let (v, h) = (c.vocab_size, c.hidden_size);
        let (body, embed_name, pos_name, layers_name, norm_name) = match c.family {
            Family::Gpt2 => {
                // `transformer.` in GPT2LMHeadModel, bare in GPT2Model checkpoints.
                let body = if w.contains("transformer.wte.weight") {
                    w.pp("transformer")
                } else {
                    w.clone()
                };
                (body, "wte.weight", Some("wpe.weight"), "h", "ln_f")
            }
            Family::Llama => (w.pp("model"), "embed_tokens.weight", None, "layers", "norm"),
        };
        let embed = body.get(embed_name, &[v, h])?;
        let embed_positions = pos_name
            .map(|n| body.get(n, &[c.max_position_embeddings, h]))
            .transpose()?
            .map(|t| be.upload(&t))
            .transpose()?;
        let layers = (0..c.num_layers)
            .map(|i| {
                DecoderLayer::load(be, &body.pp(layers_name).pp(i), &c)
                    .with_context(|| format!("loading decoder layer {i}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let final_norm = Norm::load(be, &body.pp(norm_name), &c)?;
        // A config with fewer layers than the checkpoint is refused, naming the rest.
        let (layers_part, norm_part) = (format!("{layers_name}."), format!("{norm_name}."));
        body.refuse_unread(&[embed_name, &layers_part, &norm_part])?;
        let (lm_head, score) = match c.score_labels {
            Some(n) => (None, Some(be.upload(&w.get("score.weight", &[n, h])?)?)),
            None if c.tie_word_embeddings => (None, None),
            None => (Some(be.upload(&w.get("lm_head.weight", &[v, h])?)?), None),
        };
        let inv_freq = match c.rope {
            Some(r) => {
                let f = r.inv_freq(c.head_dim);
                let slot = be.keep_constant(&f)?;
                Some((f, slot))
            }
            None => None,
        };
        Ok(Self {
            embed_tokens: be.upload(&embed)?,
            embed_positions,
            layers,
            final_norm,
            lm_head,
            score,
            inv_freq,
            min_shared_prefix: MIN_SHARED_PREFIX,
            token_counts: Default::default(),
            graph_key: graph_key(),
            config: c,
        })
    }

    /// Final hidden states (before the final norm) of every packed token; `extra` are
    /// the row indices the caller reads afterwards, staged with the batch as the id
    /// lists from the returned index on. On a backend with CUDA graphs the layers run
    /// on the batch (and a prefix plan's virtual sequences) padded to their buckets, as
    /// a graph.
    fn body(
        &self,
        be: &B,
        batch: &PackedBatch,
        prefix: Option<&PrefixPlan>,
        extra: &[&[u32]],
    ) -> Result<(B::Tensor, Prepared, usize)> {
        let c = &self.config;
        let bucket = |shape| be.graph_bucket(shape, c.max_position_embeddings);
        let padded_plan = prefix.and_then(|p| p.padded(bucket));
        let prefix = padded_plan.as_ref().or(prefix);
        let padded = match prefix {
            None => bucket(batch.shape()).map(|to| batch.padded(to)),
            Some(_) => None,
        };
        let run = match prefix {
            Some(p) => &p.batch,
            None => padded.as_ref().unwrap_or(batch),
        };
        if self.embed_positions.is_some() {
            let len = run.positions.iter().max().map_or(0, |&p| p as usize + 1);
            ensure!(
                len <= c.max_position_embeddings,
                "a sequence has {len} tokens; this model has learned positions up to {} \
                 (n_positions)",
                c.max_position_embeddings
            );
        }
        let as_u32 = |rows: &[usize]| rows.iter().map(|&r| r as u32).collect::<Vec<_>>();
        let prefix_rows = prefix.map(|p| (as_u32(&p.attn_rows), as_u32(&p.back_rows)));
        let mut inputs = run.inputs();
        if let (Some(p), Some((attn, back))) = (prefix, &prefix_rows) {
            inputs.layouts.push(&p.attn_layout);
            inputs.ids.extend([
                attn.as_slice(),
                back.as_slice(),
                p.attn_first_query.as_slice(),
            ]);
        }
        let extra_at = inputs.ids.len();
        inputs.ids.extend(extra);
        let key = Some(self.graph_key);
        let (x, prepared) = be.run_forward(
            key,
            &inputs,
            extra_at,
            batch.num_tokens(),
            &mut |prepared| {
                let staged = StagedBatch {
                    batch: run,
                    prepared: prepared.clone(),
                };
                self.layers_forward(be, &staged, prefix)
            },
        )?;
        Ok((x, prepared, extra_at))
    }

    /// The embeddings and the layers over a staged batch.
    fn layers_forward(
        &self,
        be: &B,
        batch: &StagedBatch<'_>,
        prefix: Option<&PrefixPlan>,
    ) -> Result<B::Tensor> {
        let c = &self.config;
        let mut lookups = vec![(&self.embed_tokens, batch.ids_input())];
        if let Some(p) = &self.embed_positions {
            lookups.push((p, batch.positions_input()));
        }
        let mut x = be.embedding(&lookups).context(
            "token ids must be below the model's vocab_size (tokenizer and model differ?)",
        )?;
        let ctx = ForwardContext {
            batch,
            prefix,
            shape: CausalShape {
                heads: c.num_heads,
                kv_heads: c.num_kv_heads,
                head_dim: c.head_dim,
                scale: 1.0 / (c.head_dim as f32).sqrt(),
            },
            inv_freq: self.inv_freq.as_ref().map(|(f, slot)| Input {
                host: &f[..],
                slot: *slot,
            }),
            norm_eps: c.norm_eps,
        };
        for layer in &self.layers {
            layer.forward(be, &mut x, &ctx)?;
        }
        Ok(x)
    }

    /// `(tokens of the scored sequences, tokens that ran through the layers)` over
    /// every [`DecoderForCausalLM::target_logprobs`] call so far: the work that
    /// shared-prefix reuse saved.
    pub fn token_counts(&self) -> (usize, usize) {
        let [all, packed] = &self.token_counts;
        (all.load(Ordering::Relaxed), packed.load(Ordering::Relaxed))
    }

    /// Per-token log-probabilities of the target tokens of each sequence:
    /// `seqs[k].ids[target_start..]` given everything before them, with logits
    /// divided by `temperature` before the log-softmax. `target_start ≥ 1`.
    pub fn target_logprobs(
        &self,
        be: &B,
        seqs: &[ScoredSequence],
        temperature: f32,
    ) -> Result<Vec<Vec<f32>>> {
        ensure!(
            self.score.is_none(),
            "this checkpoint is a {} sequence classifier (a `score` head, no LM head): it \
             ranks with `hopscore rerank`, it cannot score tokens",
            self.config.model_type
        );
        for s in seqs {
            ensure!(
                (1..=s.ids.len()).contains(&s.target_start),
                "target_start {} must be in 1..={} (the first token has no context)",
                s.target_start,
                s.ids.len()
            );
        }
        let ids: Vec<&[u32]> = seqs.iter().map(|s| s.ids.as_slice()).collect();
        let mut picks = Vec::new();
        let mut targets = Vec::new();
        for (k, s) in seqs.iter().enumerate() {
            for t in s.target_start..s.ids.len() {
                picks.push((k, t - 1));
                targets.push(s.ids[t]);
            }
        }
        let all32: Vec<u32> = (0..picks.len() as u32).collect();
        let (normed, prepared, at) = self.final_rows(be, &ids, &picks, &[&all32, &targets])?;
        let all: Vec<usize> = (0..picks.len()).collect();
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        let logp = be.question_loglik(
            &normed,
            prepared.ids(at, &all[..]),
            head,
            prepared.ids(at + 1, &targets[..]),
            temperature,
        )?;
        let mut out = Vec::with_capacity(seqs.len());
        let mut k = 0;
        for s in seqs {
            let n = s.ids.len() - s.target_start;
            out.push(logp[k..k + n].to_vec());
            k += n;
        }
        Ok(out)
    }

    /// The rows of the LM head for `tokens` (`[tokens, hidden]`): the head of a
    /// label-token score ([`DecoderForCausalLM::last_token_logits`]), so that only
    /// those logits are computed.
    pub fn label_head(&self, be: &B, tokens: &[u32]) -> Result<B::Tensor> {
        ensure!(
            self.score.is_none(),
            "this checkpoint is a sequence classifier: it has no LM head to read token \
             logits from (leave the label tokens out)"
        );
        let v = self.config.vocab_size;
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= v) {
            bail!("label token id {t} is past the model's vocab_size {v}");
        }
        let rows: Vec<usize> = tokens.iter().map(|&t| t as usize).collect();
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        Ok(be.gather_rows(head, rows[..].into())?)
    }

    /// A `*ForSequenceClassification` checkpoint's score head `[labels, hidden]`.
    pub fn score_head(&self) -> Option<&B::Tensor> {
        self.score.as_ref()
    }

    /// The logits `head` (`[k, hidden]`: [`Self::label_head`] or [`Self::score_head`])
    /// gives at the last token of each sequence, `k` per sequence.
    pub fn last_token_logits(
        &self,
        be: &B,
        seqs: &[&[u32]],
        head: &B::Tensor,
    ) -> Result<Vec<Vec<f32>>> {
        if let Some(k) = seqs.iter().position(|s| s.is_empty()) {
            bail!("sequence {k} is empty: a last-token score needs a token");
        }
        let picks: Vec<(usize, usize)> = seqs
            .iter()
            .enumerate()
            .map(|(k, s)| (k, s.len() - 1))
            .collect();
        let (normed, _, _) = self.final_rows(be, seqs, &picks, &[])?;
        let logits = be.download(&be.linear(&normed, head, None)?)?;
        let k = logits.shape[1];
        Ok(logits
            .data
            .chunks_exact(k.max(1))
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// The final-normed hidden states of `picks` (`(sequence, token)`, in order) of a
    /// forward over `seqs` (their shared prefixes run once), with the prepared batch and
    /// the index from which `extra`, staged with it, are its id lists.
    fn final_rows(
        &self,
        be: &B,
        seqs: &[&[u32]],
        picks: &[(usize, usize)],
        extra: &[&[u32]],
    ) -> Result<(B::Tensor, Prepared, usize)> {
        let plan = match self.min_shared_prefix {
            0 => None,
            n => PrefixPlan::new(seqs, n),
        };
        // The packed row of token `t` of sequence `k`.
        let mut offsets = Vec::with_capacity(seqs.len());
        let mut offset = 0;
        for s in seqs {
            offsets.push(offset);
            offset += s.len();
        }
        let [all, packed] = &self.token_counts;
        all.fetch_add(offset, Ordering::Relaxed);
        packed.fetch_add(
            plan.as_ref().map_or(offset, PrefixPlan::packed_tokens),
            Ordering::Relaxed,
        );
        let rows: Vec<usize> = picks
            .iter()
            .map(|&(k, t)| match &plan {
                Some(p) => p.token_rows[k][t],
                None => offsets[k] + t,
            })
            .collect();
        let rows32: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        let mut lists = vec![rows32.as_slice()];
        lists.extend(extra);
        let (hidden, prepared, extra_at) = match &plan {
            Some(p) => self.body(be, &p.batch, Some(p), &lists)?,
            None => {
                let packed: Vec<Sequence> = seqs
                    .iter()
                    .map(|s| Sequence {
                        ids: s.to_vec(),
                        ..Default::default()
                    })
                    .collect();
                self.body(be, &PackedBatch::pack(&packed), None, &lists)?
            }
        };
        // The final norm is row-wise, so it runs on the gathered rows only.
        let picked = be.gather_rows(&hidden, prepared.ids(extra_at, &rows[..]))?;
        drop(hidden);
        let normed = self.final_norm.forward(be, &picked)?;
        Ok((normed, prepared, extra_at + 1))
    }
}

/// One sequence to score: prompt and target token ids concatenated; tokens from
/// `target_start` on are scored.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredSequence {
    pub ids: Vec<u32>,
    pub target_start: usize,
}

impl ScoredSequence {
    /// Number of scored tokens.
    pub fn n_targets(&self) -> usize {
        self.ids.len().saturating_sub(self.target_start)
    }
}
