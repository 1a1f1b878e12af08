// RMSNorm (Gemma-4: x * (mean(x^2) + eps)^-0.5 * w, no 1+w) and NeoX RoPE with the CPU reference's
// rounding points.
//
// RMSNorm: the CPU sums squares in double. Squares of bf16 values are exact in double and their sum
// stays exact for any realistic dynamic range, so the parallel double sum here gives the same mean
// bit for bit. (mean + eps)^-0.5 is evaluated as 1/sqrt in double and rounded once: the correctly
// rounded fp32 value that glibc's powf returns in all but rare cases (CUDA's powf may be ulps off).
#include "backend/cuda/common.cuh"
#include "backend/cuda/norm_rope.cuh"

namespace dgemma::cuda {
namespace {

__device__ __forceinline__ float row_inv_rms(const uint16_t* xr, int64_t n, float eps, double* shared) {
  double ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = bf16_to_f32(xr[i]);
    ss += static_cast<double>(v) * v;
  }
  ss = block_reduce(ss, SumOp{}, 0.0, shared);
  const float ms = __fadd_rn(static_cast<float>(ss / static_cast<double>(n)), eps);
  return static_cast<float>(1.0 / sqrt(static_cast<double>(ms)));
}

// One block per row. x and out may alias: each element is read and written by the same thread, and
// all reads of the first pass finish before the reduction's barrier.
__global__ void rmsnorm_kernel(const uint16_t* x, const uint16_t* __restrict__ w, uint16_t* out, int64_t n, float eps) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * n;
  uint16_t* o = out + row * n;
  const float inv = row_inv_rms(xr, n, eps, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = __fmul_rn(bf16_to_f32(xr[i]), inv);
    if (w != nullptr) v = __fmul_rn(v, bf16_to_f32(w[i]));
    o[i] = f32_to_bf16(v);
  }
}

__global__ void router_norm_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ scale, float root,
                                   uint16_t* __restrict__ out, int64_t n, float eps) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * n;
  uint16_t* o = out + row * n;
  const float inv = row_inv_rms(xr, n, eps, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = round_bf16(__fmul_rn(bf16_to_f32(xr[i]), inv));  // rmsnorm without scale
    v = round_bf16(__fmul_rn(v, bf16_to_f32(scale[i])));        // * router.scale
    o[i] = f32_to_bf16(__fmul_rn(v, root));                     // * hidden^-0.5
  }
}

// One block per token: bf16 cos/sin of the token's angles in shared memory, then every (head, pair).
__global__ void rope_kernel(uint16_t* x, const int32_t* __restrict__ positions, const float* __restrict__ inv_freq,
                            int64_t heads, int64_t D) {
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

void launch_rmsnorm(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t rows, int64_t n, float eps,
                    cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  rmsnorm_kernel<<<static_cast<unsigned>(rows), threads_for_row(n), 0, stream>>>(x, w, out, n, eps);
  CUDA_CHECK_LAUNCH();
}

void launch_router_norm(const uint16_t* x, const uint16_t* scale, float root, uint16_t* out, int64_t rows, int64_t n,
                        float eps, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  router_norm_kernel<<<static_cast<unsigned>(rows), threads_for_row(n), 0, stream>>>(x, scale, root, out, n, eps);
  CUDA_CHECK_LAUNCH();
}

void launch_rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads, int64_t D,
                 cudaStream_t stream) {
  if (T <= 0 || heads <= 0 || D < 2) return;
  const size_t shared = static_cast<size_t>(D / 2) * 2 * sizeof(float);
  rope_kernel<<<static_cast<unsigned>(T), threads_for_row(heads * (D / 2)), shared, stream>>>(x, positions, inv_freq,
                                                                                             heads, D);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dgemma::cuda
