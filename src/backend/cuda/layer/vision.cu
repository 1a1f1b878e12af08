// The vision tower's 2-D RoPE and pooler with the CPU reference's rounding points (vision.cuh).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/layer/vision.cuh"

namespace dgemma::cuda {
namespace {

// One block per patch: bf16 cos/sin of both axes' angles in shared memory, then every (head, half, pair).
__global__ void rope_2d_kernel(uint16_t* x, const int32_t* __restrict__ positions,
                               const float* __restrict__ inv_freq, int64_t heads, int64_t D) {
  extern __shared__ float cs[];  // cos [2 quarter] (columns, then rows), then sin [2 quarter]
  const int64_t t = blockIdx.x, quarter = D / 4;
  float* c = cs;
  float* s = cs + 2 * quarter;
  for (int64_t k = threadIdx.x; k < 2 * quarter; k += blockDim.x) {
    const int64_t axis = k / quarter, j = k % quarter;
    const float f = __fmul_rn(inv_freq[j], static_cast<float>(positions[2 * t + axis]));  // fp32
    c[k] = round_bf16(cos_f32(f));
    s[k] = round_bf16(sin_f32(f));
  }
  __syncthreads();
  uint16_t* base = x + t * heads * D;
  for (int64_t k = threadIdx.x; k < heads * 2 * quarter; k += blockDim.x) {
    const int64_t h = k / (2 * quarter), r = k % (2 * quarter), axis = r / quarter, j = r % quarter;
    uint16_t* v = base + h * D + axis * 2 * quarter;
    const float cj = c[axis * quarter + j], sj = s[axis * quarter + j];
    const float x1 = bf16_to_f32(v[j]), x2 = bf16_to_f32(v[j + quarter]);
    const float o1 = round_bf16(__fadd_rn(round_bf16(__fmul_rn(x1, cj)), round_bf16(__fmul_rn(-x2, sj))));
    const float o2 = round_bf16(__fadd_rn(round_bf16(__fmul_rn(x2, cj)), round_bf16(__fmul_rn(x1, sj))));
    v[j] = f32_to_bf16(o1);
    v[j + quarter] = f32_to_bf16(o2);
  }
}

// One block per pooled cell, threads over the hidden size: the cell's k x k patches summed in patch
// order (rows, then columns) in fp32, each times 1 / k^2, as the reference's matmul with 1 / k^2 weights.
__global__ void vision_pool_kernel(const uint16_t* __restrict__ x, int64_t row_first, int64_t grid_w,
                                   int64_t k, int64_t H, float scale, const uint16_t* __restrict__ bias,
                                   const uint16_t* __restrict__ std_scale, uint16_t* __restrict__ out,
                                   int64_t out_first) {
  const int64_t cell = blockIdx.x, pw = grid_w / k, cx = cell % pw, cy = cell / pw;
  const float w = __fdiv_rn(1.0f, static_cast<float>(k * k));
  uint16_t* o = out + (out_first + cell) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float acc = 0.f;
    for (int64_t dy = 0; dy < k; ++dy)
      for (int64_t dx = 0; dx < k; ++dx)
        acc = __fadd_rn(
            acc, __fmul_rn(bf16_to_f32(x[(row_first + (cy * k + dy) * grid_w + cx * k + dx) * H + i]), w));
    float v = __fmul_rn(round_bf16(acc), scale);
    if (bias) v = __fmul_rn(__fsub_rn(v, bf16_to_f32(bias[i])), bf16_to_f32(std_scale[i]));
    o[i] = f32_to_bf16(v);
  }
}

}  // namespace

void launch_rope_2d(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads,
                    int64_t D, Stream stream) {
  if (T <= 0 || heads <= 0 || D < 4) return;
  const size_t shared = static_cast<size_t>(D / 4) * 4 * sizeof(float);
  launch_kernel(stream, rope_2d_kernel, static_cast<unsigned>(T), threads_for_row(heads * (D / 2)), shared, x,
                positions, inv_freq, heads, D);
}

void launch_vision_pool(const uint16_t* x, int64_t row_first, int64_t grid_h, int64_t grid_w, int64_t k,
                        int64_t H, float scale, const uint16_t* bias, const uint16_t* std_scale,
                        uint16_t* out, int64_t out_first, Stream stream) {
  const int64_t cells = (grid_h / k) * (grid_w / k);
  if (cells <= 0 || H <= 0) return;
  launch_kernel(stream, vision_pool_kernel, static_cast<unsigned>(cells), threads_for_row(H), 0, x, row_first,
                grid_w, k, H, scale, bias, std_scale, out, out_first);
}

}  // namespace dgemma::cuda
