// The block copies of core/block_copy.cuh: grid (chunks of a block, blocks); each thread copies 16-byte words
// when the block size and every address allow it (the step's canvases and soft embeddings: C * 4 and
// C * H * 2 bytes of allocator blocks), else single bytes.
#include "backend/cuda/core/block_copy.cuh"
#include "backend/cuda/core/common.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWordsPerThread = 4;  // 16-byte words per thread per chunk: 16 KiB a CTA

template <typename Word>
__global__ void __launch_bounds__(kThreads) gather_kernel(const uint64_t* table, int64_t words, Word* dst, bool zero_missing) {
  const int64_t i = blockIdx.y;
  const Word* src = reinterpret_cast<const Word*>(static_cast<uintptr_t>(table[i]));
  if (src == nullptr && !zero_missing) return;
  Word* out = dst + i * words;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kWordsPerThread + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kWordsPerThread; ++k) {
    const int64_t w = first + static_cast<int64_t>(k) * kThreads;
    if (w < words) out[w] = src != nullptr ? src[w] : Word{};
  }
}

template <typename Word>
__global__ void __launch_bounds__(kThreads) scatter_kernel(const Word* src, const uint64_t* table, int64_t words) {
  const int64_t i = blockIdx.y;
  Word* dst = reinterpret_cast<Word*>(static_cast<uintptr_t>(table[i]));
  if (dst == nullptr) return;
  const Word* in = src + i * words;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kWordsPerThread + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kWordsPerThread; ++k) {
    const int64_t w = first + static_cast<int64_t>(k) * kThreads;
    if (w < words) dst[w] = in[w];
  }
}

dim3 grid_of(int64_t words, int64_t n) {
  const int64_t per_cta = int64_t{kThreads} * kWordsPerThread;
  return dim3(static_cast<unsigned>((words + per_cta - 1) / per_cta), static_cast<unsigned>(n));
}

// 16-byte words when the size and the step buffer allow (the named blocks are allocator blocks, 256-byte
// aligned, or rows of them at multiples of the block size: checked on the device would cost a branch per
// word, so the caller's sizes decide; the backend only names such blocks).
bool wide(int64_t bytes, const void* p) { return bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void launch_gather_blocks(const uint64_t* table, int64_t n, int64_t bytes, void* dst, bool zero_missing,
                          Stream stream) {
  if (n <= 0 || bytes <= 0) return;
  if (n > 65535) CUDA_CHECK(cudaErrorInvalidValue);
  if (wide(bytes, dst)) {
    launch_kernel(stream, gather_kernel<uint4>, grid_of(bytes / 16, n), kThreads, 0, table, bytes / 16,
                  static_cast<uint4*>(dst), zero_missing);
  } else {
    launch_kernel(stream, gather_kernel<uint8_t>, grid_of(bytes, n), kThreads, 0, table, bytes,
                  static_cast<uint8_t*>(dst), zero_missing);
  }
}

void launch_scatter_blocks(const void* src, const uint64_t* table, int64_t n, int64_t bytes, Stream stream) {
  if (n <= 0 || bytes <= 0) return;
  if (n > 65535) CUDA_CHECK(cudaErrorInvalidValue);
  if (wide(bytes, src)) {
    launch_kernel(stream, scatter_kernel<uint4>, grid_of(bytes / 16, n), kThreads, 0,
                  static_cast<const uint4*>(src), table, bytes / 16);
  } else {
    launch_kernel(stream, scatter_kernel<uint8_t>, grid_of(bytes, n), kThreads, 0,
                  static_cast<const uint8_t*>(src), table, bytes);
  }
}

}  // namespace dgemma::cuda
