#pragma once
// Upper bounds of the CUDA backend's per-call scratch buffers, in one place for the kernels' host
// code (attention/flash.cu, sampler/sampler.cu assert against these) and the memory plan (engine/memory_plan,
// which has no CUDA). Plain C++17: nvcc compiles it too.
#include <cstdint>

namespace dgemma::workspace_bounds {

// Flash attention (attention/flash.cu): the automatic key-split count is at most this; a launch with
// s > 1 splits holds fp32 partials of every query row: s * rows * (D + 2) * 4 bytes (rows = T * Hq),
// the (max, sum) part rounded to 16 bytes.
inline constexpr int64_t kFlashMaxAutoSplits = 8;
inline constexpr uint64_t flash_split_bytes(int64_t tokens, int64_t q_heads, int64_t head_dim, int64_t splits) {
  const uint64_t rows = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(q_heads);
  const uint64_t s = static_cast<uint64_t>(splits);
  return (s * rows * 8 + 15) / 16 * 16 + s * rows * static_cast<uint64_t>(head_dim) * 4;
}

// The sampler (sampler/sampler.cu workspace_layout), per launch of up to kSamplerMaxBatch canvases of C rows
// over a vocabulary cut into `splits` slices: per (row, slice) cell a Stats record (at most
// kSamplerStatsBytes) + a float slice max + up to kSamplerMaxTopN top-N entries of 8 bytes; per row
// two floats; per canvas a z table of kSamplerZTable entries of kSamplerZEntryBytes (z, bf16(z) and
// their exps); once, the filter histograms of
// kSamplerFilterRows rows x kSamplerBins uint32; each of the 7 parts rounded up to 256 bytes.
inline constexpr int kSamplerMaxBatch = 16;
inline constexpr uint64_t kSamplerStatsBytes = 128;
inline constexpr uint64_t kSamplerMaxTopN = 20;
inline constexpr uint64_t kSamplerZTable = 65536;
inline constexpr uint64_t kSamplerZEntryBytes = 16;
inline constexpr uint64_t kSamplerFilterRows = 64;
inline constexpr uint64_t kSamplerBins = 65536;
inline constexpr int64_t sampler_splits(int64_t vocab) {
  const int64_t s = (vocab + 16383) / 16384;
  return s < 1 ? 1 : (s > 32 ? 32 : s);
}
inline constexpr uint64_t sampler_bytes(int64_t canvases, int64_t canvas_rows, int64_t vocab) {
  const uint64_t n = static_cast<uint64_t>(canvases < kSamplerMaxBatch ? canvases : kSamplerMaxBatch);
  const uint64_t rows = n * static_cast<uint64_t>(canvas_rows);
  const uint64_t cells = rows * static_cast<uint64_t>(sampler_splits(vocab));
  const uint64_t hist_rows = static_cast<uint64_t>(canvas_rows) < kSamplerFilterRows ? static_cast<uint64_t>(canvas_rows)
                                                                                      : kSamplerFilterRows;
  return cells * (kSamplerStatsBytes + 4 + kSamplerMaxTopN * 8) + rows * 8 + n * kSamplerZTable * kSamplerZEntryBytes +
         hist_rows * kSamplerBins * 4 + 7 * 256;
}

// W8A8 FP8 (FP8-dynamic checkpoints with the W8A8 paths on, cuda_options.h): the per-token E4M3 copies of
// an FP8 linear's input and their fp32 scales (backend.h Fp8Rows), T * (K + 4) bytes each, each part
// rounded up to 256 bytes. A dense linear quantising its own input holds its copy for its matmul. The
// rows the ops write upstream (DiffusionGemma) live longer: the dense MLP's input and the experts' input
// (both written by the attention junction) with the down projection's input during the dense MLP; the
// experts' input with the MoE's down input (the T * top_k routed rows of the expert intermediate) during
// the MoE. The plan counts the largest of the three.
inline constexpr uint64_t fp8_rows_bytes(int64_t rows, int64_t k) {
  const uint64_t r = static_cast<uint64_t>(rows);
  return (r * static_cast<uint64_t>(k) + 255) / 256 * 256 + (r * 4 + 255) / 256 * 256;
}
inline constexpr uint64_t fp8_activation_bytes(int64_t tokens, int64_t widest_dense_input, int64_t hidden,
                                               int64_t intermediate, int64_t top_k,
                                               int64_t moe_intermediate) {
  const uint64_t dense = fp8_rows_bytes(tokens, widest_dense_input);
  const uint64_t mlp = 2 * fp8_rows_bytes(tokens, hidden) + fp8_rows_bytes(tokens, intermediate);
  const uint64_t moe = fp8_rows_bytes(tokens, hidden) + fp8_rows_bytes(tokens * top_k, moe_intermediate);
  const uint64_t most = dense > mlp ? dense : mlp;
  return most > moe ? most : moe;
}
// The workspace of the W8A8 GEMM's cuBLASLt handle (quant/fp8_gemm.cpp), taken with cudaMalloc on first use:
// outside the allocator.
inline constexpr uint64_t kFp8GemmWorkspaceBytes = uint64_t{32} << 20;

}  // namespace dgemma::workspace_bounds
