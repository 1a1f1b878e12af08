#pragma once
// The model shapes the CUDA backend's kernels take, in one place: the engine checks a model against
// them when it loads it for CUDA (check_cuda_supports), so that a shape off a kernel's rule is refused
// at start-up with the limit named, not mid-request by an internal check. Plain C++ (C++17: the
// kernels' launchers include it to assert the same numbers), tested without a GPU.
#include <cstdint>
#include <string>
#include <vector>

namespace dgemma {

namespace cuda_limits {
// Head dims: 16-byte rows of the paged KV cache and of the attention operands; RoPE's table.
constexpr int64_t kHeadDimMultiple = 8;
constexpr int64_t kMaxHeadDim = 8192;
// The MoE block: 16-byte rows (hidden size and expert width), the routing kernel's register slots and
// top-k, the grouped kernels' grid and 32-bit element offsets.
constexpr int64_t kMoeDimMultiple = 8;
constexpr int64_t kMaxMoeDim = int64_t{1} << 20;
constexpr int64_t kMaxExperts = 256;
constexpr int64_t kMaxTopK = 32;
constexpr int64_t kMaxExpertElements = int64_t{1} << 31;  // 2 I x H of one expert's gate | up
// Quantised experts (NVFP4, FP8): whole 64-element K stages of the W4A16 / W8A16 kernels.
constexpr int64_t kQuantDimMultiple = 64;
// The sampler's 32-bit vocabulary indices.
constexpr int64_t kMaxVocab = (int64_t{1} << 31) - 1;
}  // namespace cuda_limits

// What of a model the limits above concern (the engine fills it from the model's config).
struct CudaModelShape {
  int64_t hidden_size = 0;
  std::vector<int64_t> head_dims;  // of every kind of attention layer
  int64_t vocab_size = 0;
  int64_t num_experts = 0;  // 0: no MoE block
  int64_t top_k = 0;
  int64_t moe_intermediate_size = 0;
  bool quantized = false;  // NVFP4 / FP8 weights, the experts kept quantised
};

// Why the CUDA backend cannot run a model of this shape (the first limit it breaks, with the model's
// value and the limit), or empty when it can.
std::string cuda_unsupported_reason(const CudaModelShape& shape);
// Throws Error(kUnsupported) with that reason and the way out (--device cpu) when there is one.
void check_cuda_supports(const CudaModelShape& shape);

}  // namespace dgemma
