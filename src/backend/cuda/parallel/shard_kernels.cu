// The sharded ops' small kernels (shard_kernels.cuh). Plain grid-stride loops: they move or add a few
// megabytes a step at most.
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 256;
constexpr uint16_t kNegZero = 0x8000;

__global__ void embed_shard_kernel(const int32_t* __restrict__ ids, const uint16_t* __restrict__ table,
                                   int64_t first, int64_t rows, int64_t vocab_total, int64_t H, float scale,
                                   uint16_t* __restrict__ out, unsigned* error_word) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  uint16_t* o = out + t * H;
  if (id < 0 || id >= vocab_total) {
    if (threadIdx.x == 0) atomicOr(error_word, kErrEmbedTokenId);
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) o[i] = kNegZero;
    return;
  }
  const int64_t local = static_cast<int64_t>(id) - first;
  if (local < 0 || local >= rows) {
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) o[i] = kNegZero;
    return;
  }
  const uint16_t* row = table + local * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    o[i] = f32_to_bf16(__fmul_rn(bf16_to_f32(row[i]), scale));
}

__global__ void sum_blocks_kernel(const float* __restrict__ p, int64_t M, int64_t B,
                                  uint16_t* __restrict__ out) {
  for (int64_t m = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; m < M;
       m += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int64_t b = 0; b < B; ++b) acc = __fadd_rn(acc, p[b * M + m]);
    out[m] = f32_to_bf16(acc);
  }
}

__global__ void fill_u16_kernel(uint16_t* p, int64_t n, uint16_t value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = value;
}

__global__ void tiles_local_kernel(int32_t* tiles, int64_t max_tiles, int e0, int e1) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < max_tiles;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int e = tiles[4 * j];
    tiles[4 * j] = e >= e0 && e < e1 ? e - e0 : -1;
  }
}

__global__ void sum_ranks_kernel(RankPointers in, int ranks, int type, int64_t n, void* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (type == 0) {
      float acc = bf16_to_f32(static_cast<const uint16_t*>(in.p[0])[i]);
      for (int r = 1; r < ranks; ++r)
        acc = __fadd_rn(acc, bf16_to_f32(static_cast<const uint16_t*>(in.p[r])[i]));
      static_cast<uint16_t*>(out)[i] = f32_to_bf16(acc);
    } else if (type == 1) {
      float acc = static_cast<const float*>(in.p[0])[i];
      for (int r = 1; r < ranks; ++r) acc = __fadd_rn(acc, static_cast<const float*>(in.p[r])[i]);
      static_cast<float*>(out)[i] = acc;
    } else {
      uint32_t acc = static_cast<uint32_t>(static_cast<const int32_t*>(in.p[0])[i]);
      for (int r = 1; r < ranks; ++r) acc += static_cast<uint32_t>(static_cast<const int32_t*>(in.p[r])[i]);
      static_cast<int32_t*>(out)[i] = static_cast<int32_t>(acc);
    }
  }
}

}  // namespace

void launch_embed_shard(const int32_t* ids, int64_t T, const uint16_t* table, int64_t first, int64_t rows,
                        int64_t vocab_total, int64_t H, float scale, uint16_t* out, unsigned* error_word,
                        Stream stream) {
  if (T <= 0 || H <= 0) return;
  launch_kernel(stream, embed_shard_kernel, static_cast<unsigned>(T), threads_for_row(H), 0, ids, table,
                first, rows, vocab_total, H, scale, out, error_word);
}

void launch_sum_blocks(const float* partials, int64_t M, int64_t B, uint16_t* out, Stream stream) {
  if (M <= 0) return;
  launch_kernel(stream, sum_blocks_kernel, grid_for(M, kThreads), kThreads, 0, partials, M, B, out);
}

void launch_fill_u16(uint16_t* p, int64_t n, uint16_t value, Stream stream) {
  if (n <= 0) return;
  launch_kernel(stream, fill_u16_kernel, grid_for(n, kThreads), kThreads, 0, p, n, value);
}

void launch_moe_tiles_local(int32_t* tiles, int64_t max_tiles, int e0, int e1, Stream stream) {
  if (max_tiles <= 0) return;
  launch_kernel(stream, tiles_local_kernel, grid_for(max_tiles, kThreads), kThreads, 0, tiles, max_tiles, e0,
                e1);
}

void launch_sum_ranks(const RankPointers& in, int ranks, int type, int64_t n, void* out, Stream stream) {
  DG_CHECK(ranks >= 1 && ranks <= kMaxRanks && type >= 0 && type <= 2);
  if (n <= 0) return;
  launch_kernel(stream, sum_ranks_kernel, grid_for(n, kThreads), kThreads, 0, in, ranks, type, n, out);
}

}  // namespace dgemma::cuda
