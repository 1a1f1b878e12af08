#pragma once
// Upper bounds of the CUDA backend's per-call scratch buffers, in one place for the kernels' host
// code (flash_attention.cu, sampler.cu assert against these) and the memory plan (engine/memory_plan,
// which has no CUDA). Plain C++17: nvcc compiles it too.
#include <cstdint>

namespace dgemma::workspace_bounds {

// Flash attention (flash_attention.cu): the automatic key-split count is at most this; a launch with
// s > 1 splits holds fp32 partials of every query row: s * rows * (D + 2) * 4 bytes (rows = T * Hq),
// the (max, sum) part rounded to 16 bytes.
inline constexpr int64_t kFlashMaxAutoSplits = 8;
inline constexpr uint64_t flash_split_bytes(int64_t tokens, int64_t q_heads, int64_t head_dim, int64_t splits) {
  const uint64_t rows = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(q_heads);
  const uint64_t s = static_cast<uint64_t>(splits);
  return (s * rows * 8 + 15) / 16 * 16 + s * rows * static_cast<uint64_t>(head_dim) * 4;
}

// The sampler (sampler.cu workspace_layout), per launch of up to kSamplerMaxBatch canvases of C rows
// over a vocabulary cut into `splits` slices: per (row, slice) cell a Stats record (at most
// kSamplerStatsBytes) + a float slice max + up to kSamplerMaxTopN top-N entries of 8 bytes; per row
// two floats; per canvas a z table of kSamplerZTable 8-byte entries; once, the filter histograms of
// kSamplerFilterRows rows x kSamplerBins uint32; each of the 7 parts rounded up to 256 bytes.
inline constexpr int kSamplerMaxBatch = 16;
inline constexpr uint64_t kSamplerStatsBytes = 128;
inline constexpr uint64_t kSamplerMaxTopN = 20;
inline constexpr uint64_t kSamplerZTable = 65536;
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
  return cells * (kSamplerStatsBytes + 4 + kSamplerMaxTopN * 8) + rows * 8 + n * kSamplerZTable * 8 +
         hist_rows * kSamplerBins * 4 + 7 * 256;
}

}  // namespace dgemma::workspace_bounds
