#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/kv_cache.cuh"

namespace dgemma::cuda {
namespace {

// One block per (token j, head h) row of D elements, copied as 16-byte words (D is a multiple of 8).
__global__ void kv_write_paged_kernel(uint16_t* __restrict__ pages, int64_t Hkv, int64_t P, int64_t D,
                                      const int32_t* __restrict__ table, int64_t first,
                                      const uint16_t* __restrict__ src) {
  const int64_t r = blockIdx.x;  // r = j * Hkv + h, the source row
  const int64_t j = r / Hkv, h = r % Hkv;
  const int64_t pos = first + j;
  const int64_t page = table[pos / P];
  const uint4* s = reinterpret_cast<const uint4*>(src + r * D);
  uint4* d = reinterpret_cast<uint4*>(pages + ((page * Hkv + h) * P + pos % P) * D);
  for (int64_t i = threadIdx.x; i < D / 8; i += blockDim.x) d[i] = s[i];
}

// One block per (head h, cached token j) row.
__global__ void kv_gather_kernel(const uint16_t* __restrict__ pages, int64_t Hkv, int64_t P, int64_t D,
                                 const int32_t* __restrict__ table, int64_t first, int64_t L,
                                 uint16_t* __restrict__ dst) {
  const int64_t r = blockIdx.x;  // r = h * L + j, the destination row
  const int64_t h = r / L, j = r % L;
  const int64_t pos = first + j;
  const int64_t page = table[pos / P];
  const uint4* s = reinterpret_cast<const uint4*>(pages + ((page * Hkv + h) * P + pos % P) * D);
  uint4* d = reinterpret_cast<uint4*>(dst + r * D);
  for (int64_t i = threadIdx.x; i < D / 8; i += blockDim.x) d[i] = s[i];
}

unsigned threads_for_words(int64_t D) {
  const int64_t w = D / 8;
  return static_cast<unsigned>(w >= 64 ? 64 : (w < 1 ? 1 : w));
}

}  // namespace

void launch_kv_write_paged(uint16_t* pages, int64_t Hkv, int64_t P, int64_t D, const int32_t* table, int64_t first,
                           const uint16_t* src, int64_t n, Stream stream) {
  if (n <= 0 || Hkv <= 0 || D <= 0) return;
  launch_kernel(stream, kv_write_paged_kernel, static_cast<unsigned>(n * Hkv), threads_for_words(D), 0, pages,
                Hkv, P, D, table, first, src);
}

void launch_kv_gather(const uint16_t* pages, int64_t Hkv, int64_t P, int64_t D, const int32_t* table, int64_t first,
                      int64_t L, uint16_t* dst, Stream stream) {
  if (L <= 0 || Hkv <= 0 || D <= 0) return;
  launch_kernel(stream, kv_gather_kernel, static_cast<unsigned>(Hkv * L), threads_for_words(D), 0, pages, Hkv,
                P, D, table, first, L, dst);
}

}  // namespace dgemma::cuda
