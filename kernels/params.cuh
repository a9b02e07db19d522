// Parameter structs of the kernels with more than six arguments, passed by value (one
// kernel parameter each). Mirrored field for field by the `#[repr(C)]` structs in
// src/backend/cuda/params.rs (device pointers as u64); the size is asserted on both
// sides. T is the element type (float, __nv_bfloat16 or __half): the layout is the
// same for every T.
#pragma once
#include "geometry.cuh"

namespace hopscore {

// disentangled_attention_f32 (v1) and disentangled_attention_v3_d<D>_<T> (v3).
template <typename T> struct DisentangledAttentionParams {
  const T* q;                  // [tokens, heads·head_size]
  const T* k;                  // [tokens, heads·head_size]
  const T* v;                  // [tokens, heads·head_size]
  const T* pos_key;            // PK [index rows, heads·head_size] or null (no c2p)
  const T* pos_query;          // PQ [index rows, heads·head_size] or null (no p2c)
  const unsigned* rel_index;   // v1: index[r + rel_base]; v3: the band table; or null
  const unsigned* cu_seqlens;  // [sequences + 1] (the grid's z extent is the sequences)
  const float* mask;           // [tokens]: 1 attends, 0 is left out
  T* out;                      // [tokens, heads·head_size]
  unsigned rel_base;           // v1: index of offset 0 in rel_index (v3: 0)
  unsigned heads;
  unsigned head_size;
  float scale;                 // score scale
};
static_assert(sizeof(DisentangledAttentionParams<float>) == 88, "mirror of src/backend/cuda/params.rs");

// disentangled_attention_v5_<T> (sm_90a, head size 64): the inputs as TMA tensor maps.
template <typename T> struct DisentangledV5Params {
  TmaMap q_map, k_map, v_map;  // [tokens, heads·64], boxes of 64 columns × 64 rows
  TmaMap pk_map, pq_map;       // PK, PQ [index rows, heads·64], boxes 64 × 128 (unused without c2p / p2c)
  const unsigned* band_table;  // v3's band table (each diagonal's rows consecutive), or null
  const unsigned* cu_seqlens;  // [sequences + 1] (the grid's z extent is the sequences)
  const float* mask;           // [tokens]: 1 attends, 0 is left out
  T* out;                      // [tokens, heads·64]
  unsigned heads;
  unsigned band_tiles;         // ⌈longest sequence / 64⌉: the band table has 2·band_tiles − 1 diagonals
  unsigned flags;              // kC2p | kP2c
  float scale;                 // score scale
  unsigned pad[4];             // zeros up to the 64-byte alignment
};
static_assert(sizeof(DisentangledV5Params<float>) == 704, "mirror of src/backend/cuda/params.rs");

// causal_attention_<T>, causal_attention_fma_<T>, causal_attention_v3_d<D>_<T>.
template <typename T> struct CausalAttentionParams {
  T* out;                      // [tokens, heads·d]
  const T* qkv;                // [tokens, (heads + 2·kv_heads)·d]
  const unsigned* cu_seqlens;  // [sequences + 1]
  const float* mask;           // [tokens]
  const unsigned* first_query; // [sequences] or null: rows before it output zeros
  unsigned heads;              // query heads
  unsigned kv_heads;           // key/value heads (divides heads)
  unsigned d;                  // head_dim
  float scale;                 // score scale
};
static_assert(sizeof(CausalAttentionParams<float>) == 56, "mirror of src/backend/cuda/params.rs");

// question_loglik_<T> (the partial kernel; the merge takes four arguments).
template <typename T> struct QuestionLoglikParams {
  float* part;              // [3][splits][n]: max, sum of exp, target logit per split
  const T* hidden;          // [tokens, cols]
  const unsigned* rows;     // [n] rows of hidden
  const T* head;            // LM head [vocab, cols]
  const unsigned* targets;  // [n] target token ids
  unsigned n;               // requested rows
  unsigned cols;            // hidden size
  unsigned vocab;           // LM head rows
  unsigned split_width;     // vocabulary rows per split
  float inv_t;              // 1 / temperature
  unsigned pad;             // 0
};
static_assert(sizeof(QuestionLoglikParams<float>) == 64, "mirror of src/backend/cuda/params.rs");

// tensor_core_check_<T> (bf16/f16 only; the layout is the same for every T).
template <typename T> struct TensorCoreCheckParams {
  float* c;       // [m][n] f32 result
  const T* a;     // [m][k]
  const T* b;     // [n][k], or [k][n] with the kKN mode bit
  unsigned m;     // rows of a and c (≤ 64)
  unsigned n;     // columns of c (a multiple of 16 up to 64)
  unsigned k;     // inner size (a multiple of 8 up to 64)
  unsigned mode;  // kAsync | kLdmatrix | kKN | kX4 bits
};
static_assert(sizeof(TensorCoreCheckParams<float>) == 40, "mirror of src/backend/cuda/params.rs");

// tma_check_<T> (kernels/tma_check.cu): two tensor maps made by the launcher.
template <typename T> struct TmaCheckParams {
  TmaMap a_map;      // A [a_rows][k], boxes of 64 columns × 128 rows, 128-byte swizzle
  TmaMap b_map;      // B [n][k] (boxes 64 × n) or, kMnMajor, [k][n] (boxes 64 × 64)
  float* c;          // [128][n] f32 result
  const T* a;        // A itself (fragments read by each lane in the kRegisters mode)
  unsigned a_rows;   // rows of A (≤ 128; the rest read as zero)
  unsigned n;        // 64 or 128
  unsigned k;        // a multiple of 64 up to 256
  unsigned mode;     // kMnMajor | kRegisters bits
  unsigned pad[8];   // zeros up to the 64-byte alignment
};
static_assert(sizeof(TmaCheckParams<float>) == 320, "mirror of src/backend/cuda/params.rs");

// Rows (sequences or tokens) per block of cls_head and token_head.
constexpr unsigned kHeadRows = geometry::HEAD_ROWS;

// cls_head_<T> and token_head_<T>.
template <typename T> struct HeadParams {
  float* logits;               // [rows, labels] f32 (cls_head with a pooler: [chunks][rows][labels] partials)
  unsigned* label;             // token_head: [rows] argmax labels; cls_head: null
  const T* hidden_states;      // [tokens, hidden]
  const unsigned* cu_seqlens;  // cls_head: [rows + 1] sequence starts; token_head: null
  const float* mask;           // cls_head: [tokens] for the masked mean, null for the first row
  const T* pooler_w;           // cls_head: [inner, hidden] or null (no pooler)
  const T* pooler_b;           // [inner] or null
  const T* classifier_w;       // [labels, inner] (no pooler: [labels, hidden])
  const T* classifier_b;       // [labels] or null
  unsigned rows;               // sequences (cls_head) or tokens (token_head)
  unsigned hidden;             // hidden size
  unsigned inner;              // pooler outputs (no pooler: hidden)
  unsigned labels;             // classifier outputs
  unsigned chunk;              // cls_head: pooler outputs per block (grid y = chunks); else 0
  unsigned pad;                // 0
};
static_assert(sizeof(HeadParams<float>) == 96, "mirror of src/backend/cuda/params.rs");

}  // namespace hopscore
