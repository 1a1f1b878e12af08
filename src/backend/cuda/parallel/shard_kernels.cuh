#pragma once
// The small kernels of the sharded (tensor-parallel) ops of the CUDA backend (shard_kernels.cu): the
// vocabulary-sharded embedding lookup, the block partials' layout and sums of the self-conditioning
// GEMM, the expert-parallel MoE's -0 fill and tile list, and the one-device collective's sums. Each is
// what the CPU backend's op computes, element for element (backend.h documents the ops).
#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// out[t] = bf16(table[ids[t] - first] * scale) where first <= ids[t] < first + rows, else -0 (bf16
// 0x8000: the neutral element of the exact sum that follows); ids outside [0, vocab_total) set
// error_word bit kErrEmbedTokenId (and write -0).
void launch_embed_shard(const int32_t* ids, int64_t T, const uint16_t* table, int64_t first, int64_t rows,
                        int64_t vocab_total, int64_t H, float scale, uint16_t* out, unsigned* error_word,
                        Stream stream);

// out[m] = bf16(sum over b in order of partials[b, m]), the sum starting from +0 as the CPU's.
void launch_sum_blocks(const float* partials, int64_t M, int64_t B, uint16_t* out, Stream stream);

// n copies of the 16-bit `value`.
void launch_fill_u16(uint16_t* p, int64_t n, uint16_t value, Stream stream);

// The MoE tile list (moe/grouped.cuh) restricted to experts [e0, e1): their entries renumbered to
// e - e0 (the rank's weights), every other entry -1 (skipped by the grouped kernels).
void launch_moe_tiles_local(int32_t* tiles, int64_t max_tiles, int e0, int e1, Stream stream);

// The sum over ranks of n elements, rank by rank in rank order from rank 0's value (bf16: in f32, rounded
// once; f32; i32: wrapping) — the thread collective's order. type: 0 bf16, 1 f32, 2 i32.
constexpr int kMaxRanks = 8;
struct RankPointers {
  const void* p[kMaxRanks];
};
void launch_sum_ranks(const RankPointers& in, int ranks, int type, int64_t n, void* out, Stream stream);

}  // namespace dgemma::cuda
