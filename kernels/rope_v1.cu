// rope v1 (the 2026-11-26 kernel, kept while its successor in rope.cu has not run on
// hardware; `--gpu-kernels proven` launches it, kernels/proven.tsv holds its records):
// rotary position embedding in HF's half-split form (rotate_half), in place on
// the first `heads` heads (head_dim each) of every row of x [rows, cols]: for pair i <
// head_dim/2, (a, b) = (v[i], v[i + d/2]) -> (a·cos − b·sin, b·cos + a·sin) with the
// angle pos·inv_freq[i] taken in f32 (as HF's `freqs`) and the accurate cosf/sinf.
// One block per row; the row's cos/sin table is built once in shared memory.
// The source of commit d6c9117 but the entry names (rope_v1_<dtype>), which leave the
// machine code as it was. CPU twin: src/backend/cpu/rope.rs.
#include "common.cuh"

template <typename T>
__device__ void rope(T* x, const unsigned* positions, const float* inv_freq, unsigned rows,
                     unsigned cols, unsigned heads, unsigned head_dim) {
  HOPSCORE_DYNAMIC_SMEM(float, table);  // cos[half] then sin[half]
  const unsigned r = blockIdx.x;
  if (r >= rows) return;
  const unsigned half = head_dim / 2;
  const float pos = (float)positions[r];
  for (unsigned i = threadIdx.x; i < half; i += blockDim.x) {
    const float a = pos * inv_freq[i];
    table[i] = cosf(a);
    table[half + i] = sinf(a);
  }
  __syncthreads();
  T* row = x + (size_t)r * cols;
  for (unsigned p = threadIdx.x; p < heads * half; p += blockDim.x) {
    const unsigned h = p / half, i = p % half;
    T* v = row + (size_t)h * head_dim;
    const float a = hopscore::to_float(v[i]), b = hopscore::to_float(v[i + half]);
    const float c = table[i], s = table[half + i];
    v[i] = hopscore::from_float<T>(a * c - b * s);
    v[i + half] = hopscore::from_float<T>(b * c + a * s);
  }
}

#define ROPE_ENTRY(SUFFIX, T)                                                                    \
  extern "C" __global__ void rope_v1_##SUFFIX(T* x, const unsigned* positions,                    \
                                           const float* inv_freq, unsigned rows, unsigned cols, \
                                           unsigned heads, unsigned head_dim) {                 \
    rope(x, positions, inv_freq, rows, cols, heads, head_dim);                                  \
  }                                                                                             \
  HOPSCORE_ENTRY(rope_v1_##SUFFIX);

ROPE_ENTRY(f32, float)
ROPE_ENTRY(bf16, __nv_bfloat16)
ROPE_ENTRY(f16, __half)
