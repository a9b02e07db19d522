//! The op set the models are written against, and the packed batch layout.
//!
//! Every op has a CPU twin in `cpu/<op>.rs` (the executable specification) and, for
//! the CUDA backend, a kernel in `kernels/<op>.cu` (or a cuBLAS call for GEMMs).
//! Activations are 2-D row-major matrices `[rows, cols]`; sequences are packed
//! without padding and delimited by `cu_seqlens` (varlen layout).

pub mod check;
pub mod cpu;
// build.rs hashes each kernel entry's machine code with it; here for its tests.
#[cfg(test)]
mod cubin;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod dtype;
pub mod fatbin;
pub mod gpu_kernels;
pub mod kernels;
pub mod provenance;
pub mod selftest;

use crate::tensor::HostTensor;

/// Op failures (shape mismatches, device errors).
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("op `{op}`: {msg}")]
    Shape { op: &'static str, msg: String },
    #[error("device error in `{op}`: {msg}")]
    Device { op: &'static str, msg: String },
}

pub type OpResult<T> = Result<T, OpError>;

/// Sequences packed back to back: `cu_seqlens[s]..cu_seqlens[s + 1]` are the rows of
/// sequence `s`. `mask[t]` is the attention mask of token `t` (1 or 0): a token with
/// mask 0 is neither attended to nor attends (HF `M[i,j] = m_i·m_j`).
#[derive(Debug, Clone, PartialEq)]
pub struct SeqLayout {
    pub cu_seqlens: Vec<usize>,
    pub mask: Vec<f32>,
}

impl SeqLayout {
    pub fn num_seqs(&self) -> usize {
        self.cu_seqlens.len() - 1
    }
    pub fn num_tokens(&self) -> usize {
        *self.cu_seqlens.last().unwrap_or(&0)
    }
    pub fn max_len(&self) -> usize {
        self.cu_seqlens
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }
    pub fn shape(&self) -> BatchShape {
        BatchShape {
            tokens: self.num_tokens(),
            seqs: self.num_seqs(),
            max_len: self.max_len(),
        }
    }
    /// Appends padding sequences (mask 0) up to exactly `to` (a
    /// [`Backend::graph_bucket`] of this shape): first one of `to.max_len` tokens if no
    /// sequence is that long, then the other padding tokens in sequences of at most that
    /// length, then empty sequences. Returns their lengths, in order.
    pub fn pad_to(&mut self, to: BatchShape) -> Vec<usize> {
        let mut added = Vec::new();
        let mut push = |l: &mut SeqLayout, n: usize| {
            l.mask.extend(std::iter::repeat_n(0.0, n));
            l.cu_seqlens.push(l.num_tokens() + n);
            added.push(n);
        };
        if self.max_len() < to.max_len {
            push(self, to.max_len);
        }
        while self.num_tokens() < to.tokens {
            let n = (to.tokens - self.num_tokens()).min(to.max_len);
            push(self, n);
        }
        while self.num_seqs() < to.seqs {
            push(self, 0);
        }
        debug_assert_eq!(self.shape(), to);
        added
    }
    /// Row of each sequence's first token (its [CLS]).
    pub fn first_rows(&self) -> Vec<usize> {
        self.cu_seqlens[..self.num_seqs()].to_vec()
    }
    /// `cu_seqlens` as the kernels read it.
    pub fn cu_seqlens_u32(&self) -> Vec<u32> {
        self.cu_seqlens.iter().map(|&c| c as u32).collect()
    }
}

/// The host inputs that the ops of one forward pass read, for
/// [`Backend::prepare_batch`]: layouts, token ids and other row indices (positions,
/// gathered rows, targets), and DeBERTa's relative-position index.
#[derive(Default)]
pub struct BatchInputs<'a> {
    pub layouts: Vec<&'a SeqLayout>,
    pub ids: Vec<&'a [u32]>,
    /// `RelAttention::index` of every layer (with the first layout's `max_len`).
    pub rel_index: Option<&'a [u32]>,
}

/// Where [`Backend::prepare_batch`] put one host input on the device: input `index`
/// of staged batch `batch` (or of the constants, see [`Backend::keep_constant`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub batch: u64,
    pub index: u32,
}

/// An op's host input and, where the backend staged it, its [`Slot`]: the op reads
/// the staged copy instead of uploading `host` (direct op calls pass `host.into()`).
#[derive(Debug)]
pub struct Input<'a, T: ?Sized> {
    pub host: &'a T,
    pub slot: Option<Slot>,
}

impl<T: ?Sized> Clone for Input<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for Input<'_, T> {}

impl<'a, T: ?Sized> From<&'a T> for Input<'a, T> {
    fn from(host: &'a T) -> Self {
        Self { host, slot: None }
    }
}

impl<T: ?Sized> std::ops::Deref for Input<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.host
    }
}

/// The slots of the inputs one [`Backend::prepare_batch`] call staged, in the order of
/// its [`BatchInputs`]; a model forward carries it to the ops (empty on the CPU).
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// `cu_seqlens` of each layout; its mask is the next slot.
    pub layouts: Vec<Slot>,
    pub ids: Vec<Slot>,
    pub rel_index: Option<Slot>,
}

impl Prepared {
    /// Layout `i` of the batch, `layout` on the host.
    pub fn layout<'a>(&self, i: usize, layout: &'a SeqLayout) -> Input<'a, SeqLayout> {
        Input {
            host: layout,
            slot: self.layouts.get(i).copied(),
        }
    }

    /// The mask of layout `i`.
    pub fn mask<'a>(&self, i: usize, layout: &'a SeqLayout) -> Input<'a, [f32]> {
        Input {
            host: &layout.mask,
            slot: self.layouts.get(i).map(|s| Slot {
                index: s.index + 1,
                ..*s
            }),
        }
    }

    /// Id list `i` of the batch (`[u32]`, or `[usize]` row indices staged as u32).
    pub fn ids<'a, T: ?Sized>(&self, i: usize, host: &'a T) -> Input<'a, T> {
        Input {
            host,
            slot: self.ids.get(i).copied(),
        }
    }

    /// The relative-position index.
    pub fn rel_index<'a>(&self, index: &'a [u32]) -> Input<'a, [u32]> {
        Input {
            host: index,
            slot: self.rel_index,
        }
    }
}

/// The size of a packed batch: tokens, sequences and the longest sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchShape {
    pub tokens: usize,
    pub seqs: usize,
    pub max_len: usize,
}

/// A model forward for [`Backend::run_forward`]: the ops after staging, given the slots.
pub type Forward<'f, T> = dyn FnMut(&Prepared) -> anyhow::Result<T> + 'f;

/// Relative-position inputs of the disentangled attention for one layer.
pub struct RelAttention<'a, T> {
    /// `PK = key_proj(rel)` (or `pos_key_proj`), `[2·span, heads·d]`; `None` without c2p.
    pub pos_key: Option<&'a T>,
    /// `PQ = query_proj(rel)` (or `pos_query_proj`), `[2·span, heads·d]`; `None` without p2c.
    pub pos_query: Option<&'a T>,
    /// `index[r + max_len − 1] = clamp(bucket(r) + span, 0, 2·span − 1)` for
    /// `r = i − j ∈ [−(max_len−1), max_len−1]`; non-decreasing in `r`.
    pub index: Input<'a, [u32]>,
}

/// Attention geometry shared by all layers.
#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    pub heads: usize,
    pub head_size: usize,
    /// Scores are multiplied by this (`1 / sqrt(d · scale_factor)`).
    pub score_scale: f32,
}

/// Geometry of causal (decoder) attention over a fused `[q | k | v]` projection.
#[derive(Debug, Clone, Copy)]
pub struct CausalShape {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (`heads` is a multiple; fewer means grouped-query attention).
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Scores are multiplied by this (`1 / sqrt(head_dim)`).
    pub scale: f32,
}

/// The activation of a gated MLP's gate ([`Backend::gated_act`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `silu(g) = g·σ(g)` (Llama's SwiGLU).
    Silu,
    /// GPT-2's tanh GELU (T5 v1.1's `gated-gelu`, which HF maps to `gelu_new`).
    GeluNew,
    /// The erf GELU (ModernBERT's GeGLU).
    Gelu,
}

/// A gated MLP's fused gate/up projection ([`Backend::gated_act`]): its gate, and how
/// its `2·inter` columns hold the two halves: `block` gate columns, then the `block` up
/// columns they pair with, and so on (`gate₀ up₀ gate₁ up₁ …`). With `block = inter`
/// it is the plain `[gate | up]`. The loader lays the fused weight's rows out this way
/// ([`Gated::source_rows`]) so that a device GEMM's 128-wide tile holds both halves of
/// 64 outputs and can write `act(gate) · up` from its epilogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gated {
    pub gate: Gate,
    pub block: usize,
}

impl Gated {
    /// The block every backend uses: half the fused GEMM's tile width.
    pub const BLOCK: usize = 64;

    /// [`Self::BLOCK`] where it divides `inter`, else the two halves.
    pub fn new(gate: Gate, inter: usize) -> Self {
        let block = if inter.is_multiple_of(Self::BLOCK) {
            Self::BLOCK
        } else {
            inter
        };
        Self { gate, block }
    }

    /// For each row of the fused weight, its row in `[gate; up]` (`2·inter` rows).
    pub fn source_rows(&self, inter: usize) -> Vec<usize> {
        let block = self.block.max(1);
        (0..2 * inter)
            .map(|r| {
                let (pair, offset) = (r / (2 * block), r % (2 * block));
                let half = offset / block;
                half * inter + pair * block + offset % block
            })
            .collect()
    }
}

/// Geometry of [`Backend::t5_attention`].
#[derive(Debug, Clone, Copy)]
pub struct T5AttentionShape {
    pub heads: usize,
    /// `d_kv`.
    pub head_dim: usize,
    /// Query `i` sees keys `j ≤ i` only (the decoder's self-attention).
    pub causal: bool,
}

/// T5's relative-position bias for one attention stack: a learned scalar per head and
/// bucket, looked up on the fly (no `[heads, L, L]` tensor).
pub struct BucketBias<'a, T> {
    /// `relative_attention_bias.weight`: `[num_buckets, heads]`.
    pub table: &'a T,
    /// `index[j − i + max_len − 1]`: the bucket of relative position `j − i` (key minus
    /// query), for `max_len` the longest sequence of the query and key layouts.
    pub index: Input<'a, [u32]>,
}

/// The residual and the LayerNorm after a post-LN layer's output projection
/// ([`Backend::linear_add_norm`]): `LN(y + residual)` with affine `weight`, `bias`.
#[derive(Debug)]
pub struct AddNorm<'a, T> {
    pub residual: &'a T,
    pub weight: &'a T,
    pub bias: &'a T,
    pub eps: f32,
}

/// Qwen3's RMSNorm of each q and k head over its `head_dim` before the rotation
/// (`q_norm`, `k_norm`): the first `q_heads` rotated heads are scaled by `q_weight`,
/// the others by `k_weight` (each `[head_dim]`).
#[derive(Debug)]
pub struct HeadNorm<'a, T> {
    pub q_heads: usize,
    pub q_weight: &'a T,
    pub k_weight: &'a T,
    pub eps: f32,
}

impl<T> Clone for HeadNorm<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for HeadNorm<'_, T> {}

/// A dense layer as the head ops read it: `weight: [out, in]`, `bias: [out]`.
#[derive(Debug)]
pub struct Dense<'a, T> {
    pub weight: &'a T,
    pub bias: Option<&'a T>,
}

impl<T> Clone for Dense<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Dense<'_, T> {}

/// The row a sequence classification head reads from each sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqPooling {
    /// The sequence's first row (its [CLS]).
    First,
    /// The mean of its rows whose mask is 1: `Σ m_t x_t / max(Σ m_t, 1)`.
    Mean,
}

/// The activation after a head's pooler (on a GPU, the `cls_head` entry's:
/// `cls_head_*` or `cls_head_tanh_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolerAct {
    /// The exact (erf) GELU: HF `ContextPooler` (DeBERTa).
    Gelu,
    /// tanh: `BertPooler`, `RobertaClassificationHead`.
    Tanh,
}

/// A sequence classification head for [`Backend::cls_head`]: the pooled row, then
/// `act(pooler)` when there is a pooler, then the classifier.
#[derive(Debug)]
pub struct ClsHead<'a, T> {
    pub pooling: SeqPooling,
    pub pooler: Option<Dense<'a, T>>,
    /// What follows the pooler (unused without one).
    pub pooler_act: PoolerAct,
    pub classifier: Dense<'a, T>,
}

/// What [`Backend::token_head`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogits {
    /// `[tokens, labels]`, in f32 on every backend.
    pub logits: HostTensor,
    /// Per token, the label of its largest logit (ties to the lowest label, as
    /// `torch.argmax`; the argmax of the softmax).
    pub labels: Vec<u32>,
}

/// Device time of one kernel (or of the GEMMs) over a profiled pass.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelTime {
    pub kernel: String,
    pub calls: usize,
    pub ms: f64,
}

/// Device work queued by a backend (`hopscore bench --profile`): kernel launches,
/// GEMMs and copies, counted since the backend was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCounts {
    /// Kernel launches of the backend's own kernels.
    pub launches: u64,
    /// GEMM calls (each at least one library kernel launch).
    pub gemms: u64,
    /// Host-to-device copies and their bytes.
    pub uploads: u64,
    pub upload_bytes: u64,
    /// Device-to-host copies and their bytes.
    pub downloads: u64,
    pub download_bytes: u64,
    /// Device-to-device copies.
    pub device_copies: u64,
    /// CUDA graphs captured, and graph launches (the first run of a capture included).
    pub captures: u64,
    pub replays: u64,
    /// Kernel launches and GEMMs that ran inside graph launches (not in `launches`).
    pub graph_launches: u64,
    pub graph_gemms: u64,
}

impl DeviceCounts {
    /// The work queued between `earlier` and `self`.
    pub fn since(&self, earlier: &DeviceCounts) -> DeviceCounts {
        DeviceCounts {
            launches: self.launches - earlier.launches,
            gemms: self.gemms - earlier.gemms,
            uploads: self.uploads - earlier.uploads,
            upload_bytes: self.upload_bytes - earlier.upload_bytes,
            downloads: self.downloads - earlier.downloads,
            download_bytes: self.download_bytes - earlier.download_bytes,
            device_copies: self.device_copies - earlier.device_copies,
            captures: self.captures - earlier.captures,
            replays: self.replays - earlier.replays,
            graph_launches: self.graph_launches - earlier.graph_launches,
            graph_gemms: self.graph_gemms - earlier.graph_gemms,
        }
    }
}

/// The ops of the models. `Tensor` is a device matrix `[rows, cols]`.
pub trait Backend: Send + Sync {
    type Tensor: Send + Sync;

    /// Short name for logs and output metadata (`cpu`, `cuda:0`).
    fn name(&self) -> String;
    /// The GPU implementations this backend chose ([`gpu_kernels::Plan::describe`]),
    /// for the run metadata's `hopscore.gpu_kernels`; `None` on the CPU.
    fn kernel_plan(&self) -> Option<String> {
        None
    }
    /// The element type activations and weights are held in (the CPU computes in f32).
    fn dtype(&self) -> dtype::DType {
        dtype::DType::F32
    }
    /// Waits until queued device work is done (timing; device faults surface here).
    fn synchronize(&self) -> OpResult<()> {
        Ok(())
    }
    /// Starts timing each kernel (devices with event timers; a no-op elsewhere).
    fn start_profile(&self) {}
    /// Stops timing; device time per kernel, largest first (empty without timers).
    fn finish_profile(&self) -> OpResult<Vec<KernelTime>> {
        Ok(Vec::new())
    }
    /// Uploads `inputs` for the ops of the forward pass that follows, in one copy
    /// (devices), and returns their slots, valid until the next call (ops given an
    /// [`Input`] without a slot upload it then). Empty on the CPU.
    fn prepare_batch(&self, _inputs: &BatchInputs<'_>) -> OpResult<Prepared> {
        Ok(Prepared::default())
    }
    /// The shape to pad a batch of `shape` to, so that one captured CUDA graph serves
    /// every batch of its bucket (sequences up to `max_len_limit` tokens); `None`: run
    /// the batch as it is (the CPU, graphs off).
    fn graph_bucket(&self, _shape: BatchShape, _max_len_limit: usize) -> Option<BatchShape> {
        None
    }
    /// Stages `inputs` ([`Backend::prepare_batch`]) and runs `forward` with their
    /// slots; returns the first `rows` rows of its output (the real tokens of a padded
    /// batch) and the slots. With CUDA graphs and a model `key`
    /// ([`crate::model::batch::graph_key`]), `forward` is captured once per key and
    /// input shape and replayed afterwards: the shape must then fix every launch (a
    /// batch padded to its [`Backend::graph_bucket`]), and `forward` may read only the
    /// layouts, the relative index and the first `graph_ids` id lists (the rest are
    /// for the ops after it).
    fn run_forward(
        &self,
        _key: Option<u64>,
        inputs: &BatchInputs<'_>,
        _graph_ids: usize,
        _rows: usize,
        forward: &mut Forward<'_, Self::Tensor>,
    ) -> anyhow::Result<(Self::Tensor, Prepared)> {
        let prepared = self.prepare_batch(inputs)?;
        Ok((forward(&prepared)?, prepared))
    }
    /// Uploads `values` now (at load) and keeps them on the device for the ops that
    /// read them (RoPE's `inv_freq`); `None` on the CPU.
    fn keep_constant(&self, _values: &[f32]) -> OpResult<Option<Slot>> {
        Ok(None)
    }
    /// Device work queued so far (`None` where nothing is queued: the CPU).
    fn counts(&self) -> Option<DeviceCounts> {
        None
    }
    /// Achieved TFLOP/s of an `n × n × n` GEMM in the device dtype: the measured peak
    /// that model throughput is compared against (`None` where not meaningful).
    fn gemm_tflops(&self, _n: usize, _iters: usize) -> OpResult<Option<f64>> {
        Ok(None)
    }
    /// Copies a host tensor (1-D or 2-D) to the device.
    fn upload(&self, t: &HostTensor) -> OpResult<Self::Tensor>;
    /// Copies a device matrix back as `[rows, cols]`.
    fn download(&self, t: &Self::Tensor) -> OpResult<HostTensor>;
    /// `x · wᵀ + bias` with `x: [n, in]`, `w: [out, in]`, `bias: [out]`.
    fn linear(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
    ) -> OpResult<Self::Tensor>;
    /// [`Backend::linear`] with `w` of `parts` stacked `[out, in]` blocks
    /// (`[parts·out, in]`, bias `[parts·out]`): one `[n, out]` tensor per block, from
    /// one GEMM on a device (Q, K and V of a fused projection).
    fn linear_split(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        parts: usize,
    ) -> OpResult<Vec<Self::Tensor>>;
    /// `gelu(x · wᵀ + bias)` with the erf GELU (DeBERTa's and BERT's MLP up-projection;
    /// on a Hopper device one kernel with both in the GEMM's epilogue, rounded once).
    fn linear_gelu(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
    ) -> OpResult<Self::Tensor> {
        linear_then(self, x, w, bias, Self::gelu)
    }
    /// `gelu_new(x · wᵀ + bias)` (GPT-2's MLP up-projection; on a device the GELU is
    /// the GEMM's epilogue).
    fn linear_gelu_new(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
    ) -> OpResult<Self::Tensor> {
        linear_then(self, x, w, bias, Self::gelu_new)
    }
    /// `act(gate) · up` of the fused gate/up projection `x · wᵀ + bias` (`w`'s rows laid
    /// out as `gated` says; on a Hopper device one kernel with the gate in the GEMM's
    /// epilogue, rounded once).
    fn linear_gated(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        gated: Gated,
    ) -> OpResult<Self::Tensor> {
        self.gated_act(&self.linear(x, w, bias)?, gated)
    }
    /// `x ← x + input · wᵀ + bias`: a residual branch's output projection (on a device
    /// `x` is the GEMM's C and D, so the sum is rounded once).
    fn linear_add(
        &self,
        x: &mut Self::Tensor,
        input: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
    ) -> OpResult<()> {
        let y = self.linear(input, w, bias)?;
        self.add(x, &y)
    }
    /// `LN(x · wᵀ + bias + norm.residual)`: a post-LN layer's output projection and the
    /// LayerNorm after it (on a Hopper device one kernel for rows of 1,024 and 768, the
    /// sum normalised in f32 before its one rounding).
    fn linear_add_norm(
        &self,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: Option<&Self::Tensor>,
        norm: &AddNorm<'_, Self::Tensor>,
    ) -> OpResult<Self::Tensor> {
        linear_then(self, x, w, bias, |be, y| add_norm(be, y, norm))
    }
    /// Exact (erf) GELU in place.
    fn gelu(&self, x: &mut Self::Tensor) -> OpResult<()>;
    /// `x ← LN(x + residual)` row-wise with affine `weight`, `bias`.
    fn layer_norm(
        &self,
        x: &mut Self::Tensor,
        residual: Option<&Self::Tensor>,
        weight: &Self::Tensor,
        bias: &Self::Tensor,
        eps: f32,
    ) -> OpResult<()>;
    /// `Σ_k table_k[ids_k[t]]` per token `t` (word + position + type embeddings).
    fn embedding(&self, lookups: &[(&Self::Tensor, Input<'_, [u32]>)]) -> OpResult<Self::Tensor>;
    /// Multiplies row `t` by `scale[t]` (the embedding mask).
    fn scale_rows(&self, x: &mut Self::Tensor, scale: Input<'_, [f32]>) -> OpResult<()>;
    /// DeBERTa disentangled attention (c2c + c2p + p2c) over packed sequences;
    /// `q, k, v: [tokens, heads·d]` → context `[tokens, heads·d]`. Rows with mask 0
    /// produce zeros. Without `rel` it is plain scaled dot-product attention.
    fn disentangled_attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        rel: Option<&RelAttention<'_, Self::Tensor>>,
        shape: AttentionShape,
        layout: Input<'_, SeqLayout>,
    ) -> OpResult<Self::Tensor>;
    /// Rows `rows` of `x` (the [CLS] gather of classification heads).
    fn gather_rows(&self, x: &Self::Tensor, rows: Input<'_, [usize]>) -> OpResult<Self::Tensor>;
    /// Logits `[sequences, labels]` (f32 on every backend) of a sequence classification
    /// head over the sequences of `layout` in `hidden` (one kernel on a device).
    fn cls_head(
        &self,
        hidden: &Self::Tensor,
        layout: Input<'_, SeqLayout>,
        head: &ClsHead<'_, Self::Tensor>,
    ) -> OpResult<HostTensor>;
    /// A token classification head: `hidden · wᵀ + b` for every row, and each row's
    /// label (one kernel on a device).
    fn token_head(
        &self,
        hidden: &Self::Tensor,
        classifier: Dense<'_, Self::Tensor>,
    ) -> OpResult<TokenLogits>;
    /// A copy of `x` (the residual stream before a pre-norm block).
    fn copy(&self, x: &Self::Tensor) -> OpResult<Self::Tensor>;
    /// `x ← x + y` (residual add).
    fn add(&self, x: &mut Self::Tensor, y: &Self::Tensor) -> OpResult<()>;
    /// RMSNorm of each row with per-column `weight` → a new tensor.
    fn rms_norm(&self, x: &Self::Tensor, weight: &Self::Tensor, eps: f32)
        -> OpResult<Self::Tensor>;
    /// GPT-2's tanh-approximated GELU in place.
    fn gelu_new(&self, x: &mut Self::Tensor) -> OpResult<()>;
    /// Rows of a fused gate/up projection (`2·inter` wide, laid out as `gated` says)
    /// → `act(gate) · up` (`inter` wide).
    fn gated_act(&self, x: &Self::Tensor, gated: Gated) -> OpResult<Self::Tensor>;
    /// `max(x, 0)` in place (T5 v1.0's MLP).
    fn relu(&self, x: &mut Self::Tensor) -> OpResult<()>;
    /// Rotary embedding (HF half-split form) of the first `heads` heads of each row,
    /// in place; row `t` is at position `positions[t]`, `inv_freq` has `head_dim / 2`
    /// entries. With `norm`, each head is RMS-normalised first (Qwen3).
    fn rope(
        &self,
        x: &mut Self::Tensor,
        heads: usize,
        head_dim: usize,
        positions: Input<'_, [u32]>,
        inv_freq: Input<'_, [f32]>,
        norm: Option<HeadNorm<'_, Self::Tensor>>,
    ) -> OpResult<()>;
    /// Causal self-attention over packed sequences; `qkv: [tokens, (heads + 2·kv_heads)·d]`
    /// → context `[tokens, heads·d]`. Rows with mask 0 produce zeros, and so do the
    /// rows of sequence `s` before `first_query[s]` (their keys still count): a shared
    /// prefix's rows in every member but the one read back, whose query tiles the CUDA
    /// kernels skip. The other rows' values do not depend on `first_query`.
    fn causal_attention(
        &self,
        qkv: &Self::Tensor,
        shape: CausalShape,
        layout: Input<'_, SeqLayout>,
        first_query: Option<Input<'_, [u32]>>,
    ) -> OpResult<Self::Tensor>;
    /// T5 attention over packed sequences ([`T5AttentionShape`]): query row `i` of
    /// sequence `s` of `q_layout` attends to the keys of sequence `s` of `kv_layout`
    /// with mask 1 (`j ≤ i` when causal), scores `q·kᵀ` unscaled plus the bucket bias;
    /// `q: [q tokens, heads·d]`, `k, v: [kv tokens, heads·d]` → `[q tokens, heads·d]`.
    /// Query rows with mask 0 produce zeros.
    #[allow(clippy::too_many_arguments)]
    fn t5_attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        bias: Option<&BucketBias<'_, Self::Tensor>>,
        shape: T5AttentionShape,
        q_layout: Input<'_, SeqLayout>,
        kv_layout: Input<'_, SeqLayout>,
    ) -> OpResult<Self::Tensor>;
    /// Log-probability of `targets[i]` under `softmax(hidden[rows[i]] · lm_headᵀ /
    /// temperature)`, without materialising the `[rows, vocab]` logits.
    fn question_loglik(
        &self,
        hidden: &Self::Tensor,
        rows: Input<'_, [usize]>,
        lm_head: &Self::Tensor,
        targets: Input<'_, [u32]>,
        temperature: f32,
    ) -> OpResult<Vec<f32>>;
}

/// `y ← LN(y + norm.residual)`: the unfused [`Backend::linear_add_norm`]'s second step.
pub(crate) fn add_norm<B: Backend + ?Sized>(
    be: &B,
    y: &mut B::Tensor,
    norm: &AddNorm<'_, B::Tensor>,
) -> OpResult<()> {
    be.layer_norm(y, Some(norm.residual), norm.weight, norm.bias, norm.eps)
}

/// `x · wᵀ + bias`, then `act` on it in place: the unfused form of the fused linear ops.
pub(crate) fn linear_then<B: Backend + ?Sized>(
    be: &B,
    x: &B::Tensor,
    w: &B::Tensor,
    bias: Option<&B::Tensor>,
    act: impl FnOnce(&B, &mut B::Tensor) -> OpResult<()>,
) -> OpResult<B::Tensor> {
    let mut y = be.linear(x, w, bias)?;
    act(be, &mut y)?;
    Ok(y)
}
