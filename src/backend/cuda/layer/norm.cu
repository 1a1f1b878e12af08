// RMSNorm (Gemma-4: x * (mean(x^2) + eps)^-0.5 * w, no 1+w) with the CPU reference's rounding points.
//
// RMSNorm: the CPU sums squares in double. Squares of bf16 values are exact in double and their sum
// stays exact for any realistic dynamic range, so the parallel double sum here gives the same mean
// bit for bit. (mean + eps)^-0.5 is evaluated as 1/sqrt in double and rounded once: the correctly
// rounded fp32 value that glibc's powf returns in all but rare cases (CUDA's powf may be ulps off).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/layer/norm.cuh"

namespace dgemma::cuda {
namespace {

__device__ __forceinline__ float row_inv_rms(const uint16_t* xr, int64_t n, float eps, double* shared) {
  double ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = bf16_to_f32(xr[i]);
    ss += static_cast<double>(v) * v;
  }
  return inv_rms_of(block_reduce(ss, SumOp{}, 0.0, shared), n, eps);
}

// One block per row; kRouter: the router's form (no weight; * scale, * root, with its roundings). x and
// out may alias: each element is read and written by the same thread, and all reads of the first pass
// finish before the reduction's barrier.
template <bool kRouter>
__global__ void rmsnorm_kernel(const uint16_t* x, const uint16_t* __restrict__ w, float root, uint16_t* out,
                               int64_t n, float eps) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * n;
  uint16_t* o = out + row * n;
  const float inv = row_inv_rms(xr, n, eps, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (kRouter) {
      float v = round_bf16(__fmul_rn(bf16_to_f32(xr[i]), inv));  // rmsnorm without scale
      v = round_bf16(__fmul_rn(v, bf16_to_f32(w[i])));            // * router.scale
      o[i] = f32_to_bf16(__fmul_rn(v, root));                     // * hidden^-0.5
    } else {
      float v = __fmul_rn(bf16_to_f32(xr[i]), inv);
      if (w != nullptr) v = __fmul_rn(v, bf16_to_f32(w[i]));
      o[i] = f32_to_bf16(v);
    }
  }
}

// Vectorised RMSNorm (rows of n = 8 * words elements, vec8_ok): the same maths as above, read as
// 16-byte words. kRouter selects the router's form (no weight; * scale, * root, with its roundings).
// Rows of up to 64 words get one warp each (no block barrier; the per-head q/k norms), longer rows
// one block. Each word is read and written by the same thread, so x and out may alias.
template <bool kRouter>
__device__ __forceinline__ void norm_word(const uint4* xr, const uint4* w, const uint4* scale, float root, float inv,
                                          uint4* o, int64_t i) {
  float v[8];
  unpack_bf16x8(xr[i], v);
  float ww[8];
  if (kRouter) {
    unpack_bf16x8(scale[i], ww);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(round_bf16(__fmul_rn(round_bf16(__fmul_rn(v[k], inv)), ww[k])), root);
  } else if (w != nullptr) {
    norm8(v, inv, w[i], v);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(v[k], inv);
  }
  o[i] = pack_bf16x8(v);
}

template <bool kRouter>
__global__ void rmsnorm_warp_kernel(const uint4* x, const uint4* __restrict__ w, const uint4* __restrict__ scale,
                                    float root, uint4* out, int64_t rows, int64_t words, float eps) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  const uint4* xr = x + row * words;
  uint4* o = out + row * words;
  double ss = 0;
  for (int64_t i = lane; i < words; i += 32) ss += word_squares(xr[i]);
  ss = warp_reduce(ss, SumOp{});
  const float inv = inv_rms_of(ss, words * 8, eps);
  for (int64_t i = lane; i < words; i += 32) norm_word<kRouter>(xr, w, scale, root, inv, o, i);
}

template <bool kRouter>
__global__ void rmsnorm_block_kernel(const uint4* x, const uint4* __restrict__ w, const uint4* __restrict__ scale,
                                     float root, uint4* out, int64_t words, float eps) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const uint4* xr = x + row * words;
  uint4* o = out + row * words;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) ss += word_squares(xr[i]);
  ss = block_reduce(ss, SumOp{}, 0.0, shared);
  const float inv = inv_rms_of(ss, words * 8, eps);
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) norm_word<kRouter>(xr, w, scale, root, inv, o, i);
}

template <bool kRouter>
void launch_norm_vec(const uint16_t* x, const uint16_t* w, const uint16_t* scale, float root, uint16_t* out,
                     int64_t rows, int64_t n, float eps, Stream stream) {
  const int64_t words = n / 8;
  auto* xv = reinterpret_cast<const uint4*>(x);
  auto* wv = reinterpret_cast<const uint4*>(w);
  auto* sv = reinterpret_cast<const uint4*>(scale);
  auto* ov = reinterpret_cast<uint4*>(out);
  if (words <= 64) {
    constexpr int kWarpsPerBlock = 8;
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, kWarpsPerBlock));
    launch_kernel(stream, rmsnorm_warp_kernel<kRouter>, blocks, 32 * kWarpsPerBlock, 0, xv, wv, sv, root, ov,
                  rows, words, eps);
  } else {
    const int threads = threads_for_row(ceil_div(words, 2));
    launch_kernel(stream, rmsnorm_block_kernel<kRouter>, static_cast<unsigned>(rows), threads, 0, xv, wv, sv,
                  root, ov, words, eps);
  }
}

}  // namespace

void launch_rmsnorm(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t rows, int64_t n, float eps,
                    Stream stream) {
  if (rows <= 0 || n <= 0) return;
  if (vec8_ok(n, x, w, out)) return launch_norm_vec<false>(x, w, nullptr, 1.0f, out, rows, n, eps, stream);
  const unsigned blocks = static_cast<unsigned>(rows);
  launch_kernel(stream, rmsnorm_kernel<false>, blocks, threads_for_row(n), 0, x, w, 1.0f, out, n, eps);
}

void launch_router_norm(const uint16_t* x, const uint16_t* scale, float root, uint16_t* out, int64_t rows, int64_t n,
                        float eps, Stream stream) {
  if (rows <= 0 || n <= 0) return;
  if (vec8_ok(n, x, scale, out)) return launch_norm_vec<true>(x, nullptr, scale, root, out, rows, n, eps, stream);
  const unsigned blocks = static_cast<unsigned>(rows);
  launch_kernel(stream, rmsnorm_kernel<true>, blocks, threads_for_row(n), 0, x, scale, root, out, n, eps);
}

}  // namespace dgemma::cuda
