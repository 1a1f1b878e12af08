#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_cache.cuh"

namespace dgemma::cuda {
namespace {

// One block per (new token j, head h) row of D elements.
__global__ void kv_write_kernel(uint16_t* __restrict__ cache, int64_t Hkv, int64_t cap, int64_t D, int64_t offset,
                                const uint16_t* __restrict__ src) {
  const int64_t r = blockIdx.x;  // r = j * Hkv + h, the source row
  const int64_t j = r / Hkv, h = r % Hkv;
  const uint16_t* s = src + r * D;
  uint16_t* d = cache + (h * cap + offset + j) * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) d[i] = s[i];
}

}  // namespace

void launch_kv_write(uint16_t* cache, int64_t Hkv, int64_t cap, int64_t D, int64_t offset, const uint16_t* src, int64_t n,
                     cudaStream_t stream) {
  if (n <= 0 || Hkv <= 0 || D <= 0) return;
  kv_write_kernel<<<static_cast<unsigned>(n * Hkv), threads_for_row(D), 0, stream>>>(cache, Hkv, cap, D, offset, src);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dgemma::cuda
