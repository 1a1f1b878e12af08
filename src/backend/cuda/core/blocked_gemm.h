#pragma once
// The vocabulary-blocked GEMM of the self-conditioning embedding (Backend::matmul_kn_blocks):
//   out[b] = x[:, b Kb : (b + 1) Kb] . w[b Kb : (b + 1) Kb, :]      (fp32, one [T, N] matrix a block)
// for the blocks a rank holds, as one cuBLASLt launch batched over its blocks. The algorithm is the
// heuristic's first answer for the whole vocabulary's block count (backend.h kVocabBlocks) that needs
// no workspace and no split-K, whatever count this call has: a block's sum then runs in the same order
// on every rank and on one GPU, so that a rank's blocks equal one GPU's bit for bit. Where cuBLASLt has
// no such algorithm for a shape, or refuses it for one of the counts a rank can hold, every call of the
// shape runs a plain cuBLAS GEMM a block (the same sums a block, in any count). Host C++.
#include <cstdint>
#include <memory>

#include "backend/cuda/core/context.h"

namespace dgemma::cuda {

class BlockedGemm {
 public:
  explicit BlockedGemm(const Context& ctx);
  ~BlockedGemm();
  BlockedGemm(const BlockedGemm&) = delete;
  BlockedGemm& operator=(const BlockedGemm&) = delete;

  // out [blocks, T, N] f32 of bf16 x [T, blocks Kb] and w [blocks Kb, N] (both contiguous, row-major),
  // where all_blocks (blocks times a power of two) is the block count of the whole product.
  void run(const uint16_t* x, const uint16_t* w, int64_t T, int64_t Kb, int64_t N, int blocks, int all_blocks,
           float* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgemma::cuda
