// NeoX RoPE in place with the CPU reference's rounding points (rope.cuh).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/layer/rope.cuh"

namespace dgemma::cuda {
namespace {

// One block per token: bf16 cos/sin of the token's angles in shared memory, then every (head, pair).
__global__ void rope_kernel(uint16_t* x, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t heads, int64_t D) {
  extern __shared__ float cs[];  // cos [half], then sin [half]
  const int64_t t = blockIdx.x, half = D / 2;
  float* c = cs;
  float* s = cs + half;
  const float p = static_cast<float>(positions[t]);
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    const float f = __fmul_rn(inv_freq[j], p);  // fp32, as inv_freq @ position_ids
    c[j] = round_bf16(cos_f32(f));
    s[j] = round_bf16(sin_f32(f));
  }
  __syncthreads();
  uint16_t* base = x + t * heads * D;
  for (int64_t k = threadIdx.x; k < heads * half; k += blockDim.x) {
    const int64_t h = k / half, j = k % half;
    uint16_t* v = base + h * D;
    const float x1 = bf16_to_f32(v[j]), x2 = bf16_to_f32(v[j + half]);
    // (x * cos) + (rotate_half(x) * sin): each product and the sum rounded to bf16
    const float o1 = round_bf16(__fadd_rn(round_bf16(__fmul_rn(x1, c[j])), round_bf16(__fmul_rn(-x2, s[j]))));
    const float o2 = round_bf16(__fadd_rn(round_bf16(__fmul_rn(x2, c[j])), round_bf16(__fmul_rn(x1, s[j]))));
    v[j] = f32_to_bf16(o1);
    v[j + half] = f32_to_bf16(o2);
  }
}

}  // namespace

void launch_rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads,
                 int64_t D, Stream stream) {
  if (T <= 0 || heads <= 0 || D < 2) return;
  const size_t shared = static_cast<size_t>(D / 2) * 2 * sizeof(float);
  launch_kernel(stream, rope_kernel, static_cast<unsigned>(T), threads_for_row(heads * (D / 2)), shared, x,
                positions, inv_freq, heads, D);
}

}  // namespace dgemma::cuda
