//! The `#[repr(C)]` mirrors of the kernel parameter structs of `kernels/params.cuh`
//! (same fields in the same order, device pointers as u64), passed by value as the one
//! argument of their kernels; the size is asserted here and in the header.

use cudarc::driver::DeviceRepr;

use super::tensor_map::TmaMap;

/// `hopscore::DisentangledAttentionParams<T>` (v1 and v3 of disentangled attention).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DisentangledAttentionParams {
    /// Queries `[tokens, heads·head_size]`.
    pub q: u64,
    /// Keys `[tokens, heads·head_size]`.
    pub k: u64,
    /// Values `[tokens, heads·head_size]`.
    pub v: u64,
    /// Position keys PK `[index rows, heads·head_size]`, or 0 (no c2p).
    pub pos_key: u64,
    /// Position queries PQ `[index rows, heads·head_size]`, or 0 (no p2c).
    pub pos_query: u64,
    /// v1: the relative index (`index[r + rel_base]`); v3: the band table; or 0.
    pub rel_index: u64,
    /// `[sequences + 1]` u32 sequence starts.
    pub cu_seqlens: u64,
    /// `[tokens]` f32 attention mask.
    pub mask: u64,
    /// Context `[tokens, heads·head_size]`.
    pub out: u64,
    /// v1: index of offset 0 in `rel_index` (v3: 0).
    pub rel_base: u32,
    /// Attention heads.
    pub heads: u32,
    /// Head size.
    pub head_size: u32,
    /// Score scale.
    pub scale: f32,
}
const _: () = assert!(std::mem::size_of::<DisentangledAttentionParams>() == 88);

/// `hopscore::CausalAttentionParams<T>` (every version of causal attention).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CausalAttentionParams {
    /// Context `[tokens, heads·d]`.
    pub out: u64,
    /// Fused projection `[tokens, (heads + 2·kv_heads)·d]`.
    pub qkv: u64,
    /// `[sequences + 1]` u32 sequence starts.
    pub cu_seqlens: u64,
    /// `[tokens]` f32 attention mask.
    pub mask: u64,
    /// `[sequences]` u32 first query row of each sequence (the rows before it output
    /// zeros), or 0: every row.
    pub first_query: u64,
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (divides `heads`).
    pub kv_heads: u32,
    /// Head dimension.
    pub d: u32,
    /// Score scale.
    pub scale: f32,
}
const _: () = assert!(std::mem::size_of::<CausalAttentionParams>() == 56);

/// `hopscore::QuestionLoglikParams<T>` (the partial kernel of question log-likelihood).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QuestionLoglikParams {
    /// `[3][splits][n]` f32: max, sum of exp and target logit per split.
    pub part: u64,
    /// Hidden states `[tokens, cols]`.
    pub hidden: u64,
    /// `[n]` u32 rows of `hidden`.
    pub rows: u64,
    /// LM head `[vocab, cols]`.
    pub head: u64,
    /// `[n]` u32 target token ids.
    pub targets: u64,
    /// Requested rows.
    pub n: u32,
    /// Hidden size.
    pub cols: u32,
    /// LM head rows.
    pub vocab: u32,
    /// Vocabulary rows per split.
    pub split_width: u32,
    /// 1 / temperature.
    pub inv_t: f32,
    /// 0.
    pub pad: u32,
}
const _: () = assert!(std::mem::size_of::<QuestionLoglikParams>() == 64);

/// `hopscore::TensorCoreCheckParams<T>` (the tensor-core wrapper check).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TensorCoreCheckParams {
    /// `[m, n]` f32 result.
    pub c: u64,
    /// `[m, k]`.
    pub a: u64,
    /// `[n, k]`, or `[k, n]` with the `b_kn` mode bit.
    pub b: u64,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// The kernel's mode bits ([`super::tensor_core_check::TensorCorePath`]).
    pub mode: u32,
}
const _: () = assert!(std::mem::size_of::<TensorCoreCheckParams>() == 40);

/// `hopscore::DisentangledV5Params<T>` (disentangled attention v5: TMA tensor maps).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct DisentangledV5Params {
    /// Q, K, V `[tokens, heads·64]`, boxes of 64 columns × 64 rows.
    pub q_map: TmaMap,
    pub k_map: TmaMap,
    pub v_map: TmaMap,
    /// PK, PQ `[index rows, heads·64]`, boxes of 64 × 128 (read only with their flag).
    pub pk_map: TmaMap,
    pub pq_map: TmaMap,
    /// v3's band table, or 0 (no band).
    pub band_table: u64,
    /// `[sequences + 1]` u32 sequence starts.
    pub cu_seqlens: u64,
    /// `[tokens]` f32 attention mask.
    pub mask: u64,
    /// Context `[tokens, heads·64]`.
    pub out: u64,
    pub heads: u32,
    /// Key tiles of the longest sequence: the band table's diagonals are 2·this − 1.
    pub band_tiles: u32,
    /// c2p 1, p2c 2.
    pub flags: u32,
    /// Score scale.
    pub scale: f32,
    /// Zeros up to the 64-byte alignment.
    pub pad: [u32; 4],
}
const _: () = assert!(std::mem::size_of::<DisentangledV5Params>() == 704);

/// `hopscore::TmaCheckParams<T>` (the TMA / mbarrier / setmaxnreg wrapper check).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct TmaCheckParams {
    /// A `[a_rows, k]` in boxes of 64 columns × 128 rows, 128-byte swizzle.
    pub a_map: TmaMap,
    /// B `[n, k]` (boxes 64 × n) or, MN-major, `[k, n]` (boxes 64 × 64).
    pub b_map: TmaMap,
    /// `[128, n]` f32 result.
    pub c: u64,
    /// A itself.
    pub a: u64,
    pub a_rows: u32,
    pub n: u32,
    pub k: u32,
    /// The kernel's mode bits (MN-major B 1, A fragments from registers 2).
    pub mode: u32,
    /// Zeros up to the 64-byte alignment.
    pub pad: [u32; 8],
}
const _: () = assert!(std::mem::size_of::<TmaCheckParams>() == 320);

/// `hopscore::HeadParams<T>` (`cls_head` and `token_head`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HeadParams {
    /// `[rows, labels]` f32 logits (cls_head with a pooler: `[chunks][rows][labels]`
    /// partial logits).
    pub logits: u64,
    /// token_head: `[rows]` u32 labels; cls_head: 0.
    pub label: u64,
    /// `[tokens, hidden]`.
    pub hidden_states: u64,
    /// cls_head: `[rows + 1]` u32 sequence starts; token_head: 0.
    pub cu_seqlens: u64,
    /// cls_head: `[tokens]` f32 mask for the masked mean, or 0 for the first row.
    pub mask: u64,
    /// Pooler `[inner, hidden]`, or 0 (no pooler).
    pub pooler_w: u64,
    /// Pooler bias `[inner]`, or 0.
    pub pooler_b: u64,
    /// Classifier `[labels, inner]` (`[labels, hidden]` without a pooler).
    pub classifier_w: u64,
    /// Classifier bias `[labels]`, or 0.
    pub classifier_b: u64,
    /// Sequences (cls_head) or tokens (token_head).
    pub rows: u32,
    pub hidden: u32,
    /// Pooler outputs (without a pooler: `hidden`).
    pub inner: u32,
    pub labels: u32,
    /// cls_head: pooler outputs per block (the grid's y extent is the chunks); else 0.
    pub chunk: u32,
    /// 0.
    pub pad: u32,
}
const _: () = assert!(std::mem::size_of::<HeadParams>() == 96);

// SAFETY: plain `#[repr(C)]` data of u64/u32/f32 fields without padding (sizes asserted
// above against the C++ structs of kernels/params.cuh, which have the same layout).
unsafe impl DeviceRepr for DisentangledAttentionParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for CausalAttentionParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for QuestionLoglikParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for TensorCoreCheckParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for HeadParams {}
// SAFETY: as above (the tensor maps are the driver's 128 bytes each; `pad` fills the
// struct to its 64-byte alignment).
unsafe impl DeviceRepr for TmaCheckParams {}
// SAFETY: as above.
unsafe impl DeviceRepr for DisentangledV5Params {}
