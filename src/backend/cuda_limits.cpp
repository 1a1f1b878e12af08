#include "backend/cuda_limits.h"

#include <fmt/format.h>

#include "util/error.h"

namespace dgemma {

std::string cuda_unsupported_reason(const CudaModelShape& s) {
  using namespace cuda_limits;
  for (const int64_t d : s.head_dims) {
    if (d <= 0 || d % kHeadDimMultiple != 0)
      return fmt::format(
          "head_dim {}: the CUDA kernels need head dims that are multiples of {} (16-byte rows of the "
          "KV cache)",
          d, kHeadDimMultiple);
    if (d > kMaxHeadDim)
      return fmt::format("head_dim {}: the CUDA kernels take head dims up to {}", d, kMaxHeadDim);
  }
  if (s.vocab_size > kMaxVocab)
    return fmt::format("vocab_size {}: the CUDA sampler takes vocabularies of up to {} tokens", s.vocab_size,
                       kMaxVocab);
  if (s.num_experts <= 0) return {};
  const int64_t H = s.hidden_size, I = s.moe_intermediate_size;
  for (const auto& [name, v] :
       {std::pair<const char*, int64_t>{"hidden_size", H}, {"moe_intermediate_size", I}}) {
    if (v <= 0 || v % kMoeDimMultiple != 0)
      return fmt::format("{} {}: the CUDA MoE kernels need multiples of {} (16-byte rows)", name, v,
                         kMoeDimMultiple);
    if (v > kMaxMoeDim)
      return fmt::format("{} {}: the CUDA MoE kernels take at most {}", name, v, kMaxMoeDim);
    if (s.quantized && v % kQuantDimMultiple != 0)
      return fmt::format("{} {}: the CUDA kernels of quantised experts need multiples of {} (whole K stages)",
                         name, v, kQuantDimMultiple);
  }
  if (2 * I * H >= kMaxExpertElements)
    return fmt::format("an expert's gate | up of {} x {} elements: the CUDA MoE kernels take fewer than {}",
                       2 * I, H, kMaxExpertElements);
  if (s.num_experts > kMaxExperts)
    return fmt::format("num_experts {}: the CUDA routing kernel takes at most {} experts", s.num_experts,
                       kMaxExperts);
  if (s.top_k < 1 || s.top_k > kMaxTopK || s.top_k > s.num_experts)
    return fmt::format(
        "top_k_experts {}: the CUDA routing kernel takes 1 to {} experts a token (and at most "
        "num_experts)",
        s.top_k, kMaxTopK);
  return {};
}

void check_cuda_supports(const CudaModelShape& shape) {
  const std::string why = cuda_unsupported_reason(shape);
  if (!why.empty())
    fail(ErrorKind::kUnsupported, "this model cannot run on the CUDA backend: {}; use --device cpu", why);
}

}  // namespace dgemma
