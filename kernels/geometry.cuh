// Launch geometry of the kernels, written once: threads per block, tile sizes and the
// dynamic shared memory of each kernel. The kernels include this header; build.rs
// turns it into `crate::backend::kernels::geometry` for the launchers in
// src/backend/cuda/, and tools/sass_report.py evaluates it for its occupancy table.
//
// So that all three can read it, every definition is one line of one of two forms, with
// an expression of unsigned literals, names defined above, + - * / and parentheses:
//   constexpr unsigned NAME = EXPR;                                  (a constant)
//   constexpr unsigned name(unsigned a, unsigned b) { return EXPR; } (a formula)
// A flag argument is 0 or 1 and multiplies the part it switches on. Adding a kernel:
// define its NAME_THREADS (and its shared memory) here, use them in the kernel and its
// launcher, and name them in sass_report.py's GEOMETRY.
#pragma once

namespace hopscore::geometry {

// Threads per block.
constexpr unsigned ROW_THREADS = 256;        // row-wise and elementwise kernels
constexpr unsigned NORM_ROWS = 8;            // layer_norm_rows / rms_norm_rows: a warp per row
constexpr unsigned NORM_MAX_VECS = 8;        // ... and at most 8 16-byte vectors per lane
constexpr unsigned ROPE_ROWS = 8;            // rope: a warp per row
constexpr unsigned ROPE_V1_THREADS = 128;    // rope_v1: one block per row
constexpr unsigned ATTENTION_THREADS = 128;  // both attentions, v1 and v3: 4 warps
constexpr unsigned LOGLIK_THREADS = 256;     // question_loglik partial kernels
constexpr unsigned LOGLIK_MERGE_THREADS = 128;
constexpr unsigned TENSOR_CORE_CHECK_THREADS = 128;  // also wgmma_check: one warpgroup

// causal_attention v1 (f32, and head sizes off the tensor-core grid).
constexpr unsigned CAUSAL_V1_ROWS = 32;  // query rows per block
constexpr unsigned CAUSAL_V1_KEYS = 32;  // keys per tile
constexpr unsigned CAUSAL_V1_TPR = ATTENTION_THREADS / CAUSAL_V1_ROWS;  // threads per query row
constexpr unsigned ATTENTION_MAX_D = 128;  // largest head size of either attention
// Q tile and K-then-V tile [rows][d + 1], probabilities [rows][keys + 1], f32.
constexpr unsigned causal_v1_smem(unsigned d) { return 4 * ((CAUSAL_V1_ROWS + CAUSAL_V1_KEYS) * (d + 1) + CAUSAL_V1_ROWS * (CAUSAL_V1_KEYS + 1)); }

// t5_attention v1: one warp per query row (ATTENTION_THREADS / 32 rows per block), K
// and V tiles of T5_KEYS keys as f32.
constexpr unsigned T5_ROWS = ATTENTION_THREADS / 32;
constexpr unsigned T5_KEYS = 32;
constexpr unsigned t5_smem(unsigned d) { return 4 * 2 * T5_KEYS * d; }

// v3 attentions (flash_v3.cuh): 64 query rows per block (16 per warp), 64-key tiles,
// rows of the padded head size d (64 or 128) + 8 16-bit elements.
constexpr unsigned V3_ROWS = 64;
constexpr unsigned V3_KEYS = 64;
constexpr unsigned V3_PAD = 8;
constexpr unsigned v3_ld(unsigned d) { return d + V3_PAD; }
// Q [64][ld] and K, V [2 stages][2][64][ld], 16-bit.
constexpr unsigned causal_v3_smem(unsigned d) { return 2 * (V3_ROWS + 4 * V3_KEYS) * v3_ld(d); }
// t5_attention v3: causal v3's tiles, then the bucket bias of the 2·64 − 1 distances a
// (query tile, key tile) pair meets, f32, for 2 stages (the slot past them unused).
constexpr unsigned T5_V3_BIAS = 2 * V3_KEYS;
constexpr unsigned t5_v3_smem(unsigned d) { return causal_v3_smem(d) + 4 * 2 * T5_V3_BIAS; }

// disentangled_attention v1 (f32): 32-row query and key tiles; a (query tile, key tile)
// pair spans 2·32 − 1 offsets.
constexpr unsigned DA_V1_TILE = 32;
constexpr unsigned DA_V1_SCORES = 2048;  // band scores c2p [32][64] + p2c [64][32] (f32)
constexpr unsigned DA_V1_SLOTS = 64;     // offsets, slots and rows: 64 u32 each
// Q, K [32][d + 1], band rows (63 with a band, else 32) [.][d + 1], scores, 3 slot arrays.
constexpr unsigned disentangled_v1_smem(unsigned d, unsigned band) { return 4 * ((3 * DA_V1_TILE + band * (DA_V1_TILE - 1)) * (d + 1) + DA_V1_SCORES + 3 * DA_V1_SLOTS); }
// disentangled_attention v3: the band of a tile diagonal is 128 table rows; a warp
// multiplies 80 of them into an f32 scratch of rows 80 + 8 floats (88 ≡ 24 mod 32
// banks: the float2 stores of a half-warp, rows g·88 + 2t, hit 16 distinct bank pairs;
// at 84 two rows of a half-warp shared banks).
constexpr unsigned DA_V3_BAND_ROWS = 128;
constexpr unsigned DA_V3_WIN = 80;
constexpr unsigned DA_V3_SCRATCH_LD = DA_V3_WIN + 8;
// Scratch f32 [64][88] | K, V [2 stages][2][64][ld] | PK, PQ [2][128][ld] | slots u32 [2][128].
constexpr unsigned disentangled_v3_smem(unsigned d, unsigned band) { return 4 * V3_ROWS * DA_V3_SCRATCH_LD + 2 * 4 * V3_KEYS * v3_ld(d) + band * (2 * 2 * DA_V3_BAND_ROWS * v3_ld(d) + 4 * 2 * DA_V3_BAND_ROWS); }

// The wgmma attention's band products (all 128 band rows of a warpgroup) go through an
// f32 scratch of rows 128 + 8 floats (136 ≡ 8 mod 32 banks: conflict-free float2 stores).
constexpr unsigned DA_WG_SCRATCH_LD = DA_V3_BAND_ROWS + 8;

// disentangled_attention v5 (sm_90a, d = 64): a producer warpgroup and two consumer
// warpgroups of 64 query rows each. 128-byte-swizzled tiles of 64-element rows:
// Q [2][64] | K [2 stages][64] | V [2 stages][64] | PK [2 consumers][2 stages][128] |
// PQ [2 consumers][128] | scratch f32 [2][64][136] | 21 mbarriers, from a 1024-byte
// aligned base (up to 1 KB of padding). K and V have rings of their own and PK two
// stages because a consumer issues the next tile's S and C before this tile's softmax.
constexpr unsigned DA_V5_THREADS = 384;
constexpr unsigned DA_V5_CONSUMERS = 2;
constexpr unsigned DA_V5_TILE_BYTES = V3_ROWS * 64 * 2;
constexpr unsigned DA_V5_BAND_BYTES = DA_V3_BAND_ROWS * 64 * 2;
constexpr unsigned DA_V5_SCRATCH_BYTES = 4 * V3_ROWS * DA_WG_SCRATCH_LD;
constexpr unsigned DA_V5_BARRIER_COUNT = 21;
constexpr unsigned DA_V5_BARRIERS = (DA_V5_CONSUMERS + 4) * DA_V5_TILE_BYTES + 3 * DA_V5_CONSUMERS * DA_V5_BAND_BYTES + DA_V5_CONSUMERS * DA_V5_SCRATCH_BYTES;
constexpr unsigned DA_V5_SMEM = DA_V5_BARRIERS + DA_V5_BARRIER_COUNT * 8 + 1024;

// question_loglik: f32 (v1) tiles of 16 hidden rows; bf16/f16 (v3) tiles of 32 rows by
// 128 vocabulary words, staged in 64-column slices (rows of 64 + 8 elements), logits
// through an f32 [32][128 + 8] tile (136 ≡ 8 mod 32 banks: the float2 stores of a
// half-warp, rows g·136 + 2t, are conflict-free; 132 made them 2-way).
constexpr unsigned LOGLIK_ROWS = 16;
constexpr unsigned LOGLIK_TC_ROWS = 32;
constexpr unsigned LOGLIK_TC_WORDS = 128;
constexpr unsigned LOGLIK_TC_COLS = 64;
constexpr unsigned LOGLIK_TC_LD = LOGLIK_TC_COLS + 8;
constexpr unsigned LOGLIK_TC_LDZ = LOGLIK_TC_WORDS + 8;
// Hidden [2][32][72] and head [2][128][72] slices (16-bit), the logit tile (f32).
constexpr unsigned LOGLIK_TC_SMEM = 2 * 2 * (LOGLIK_TC_ROWS + LOGLIK_TC_WORDS) * LOGLIK_TC_LD + 4 * LOGLIK_TC_ROWS * LOGLIK_TC_LDZ;

// wgmma_check: A [64][64] and B [128][64] 16-bit tiles.
constexpr unsigned WGMMA_CHECK_SMEM = 2 * (64 + 128) * 64;

// tma_check: a producer warpgroup and two consumer warpgroups; 2 stages of A [128][64]
// and B [128][64] 16-bit tiles (1024-byte aligned: up to 1 KB of padding), 4 mbarriers.
constexpr unsigned TMA_CHECK_THREADS = 384;
constexpr unsigned TMA_CHECK_SMEM = 2 * 2 * (128 * 64 * 2) + 1024 + 4 * 8;

// cls_head and token_head (heads.cuh): blocks of 8 rows (sequences or tokens) staged
// in f32, cls_head's pooler spread over chunks of 64 outputs (8 per warp).
constexpr unsigned HEAD_THREADS = 256;
constexpr unsigned HEAD_ROWS = 8;
constexpr unsigned HEAD_POOLER_CHUNK = 64;
// [8][floats] f32: cls_head hidden + pooler chunk, token_head hidden + labels.
constexpr unsigned head_smem(unsigned floats) { return 4 * HEAD_ROWS * floats; }

// layer_norm: the row in f32.
constexpr unsigned layer_norm_smem(unsigned cols) { return 4 * cols; }

}  // namespace hopscore::geometry
