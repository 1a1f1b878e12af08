#pragma once
// The fused per-position sampler of one denoising step (host launcher; kernel in sampler.cu).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/sample_filter.h"

namespace dgemma::cuda {

struct SamplerLaunch {
  uint16_t* logits = nullptr;  // [C, V] bf16, overwritten with the bf16 probabilities when want_probs
  int64_t C = 0, V = 0;
  float softcap = 30.0f, temperature = 1.0f;
  uint64_t sample_key = 0;
  bool want_probs = true;
  float* entropy = nullptr;       // [C]
  int32_t* argmax = nullptr;      // [C]
  int32_t* sample = nullptr;      // [C]
  float* argmax_logprob = nullptr;  // [C] or null
  float* argmax_gap = nullptr;      // [C] or null
  float* sample_gap = nullptr;      // [C] or null
  SampleFilter filter;              // the support of the sample (off: no extra pass)
  float* sample_floor = nullptr;    // [C] or null: each row's least allowed z
  int top_n = 0;                    // 0..kMaxTopN alternatives per row
  int32_t* top_ids = nullptr;       // [C, top_n]
  float* top_logprobs = nullptr;    // [C, top_n]
};
constexpr int kMaxTopN = 20;
// Scratch the launch needs (device memory of at least this many bytes, 16-byte aligned).
size_t sampler_workspace_bytes(const SamplerLaunch& s);
int sampler_splits(int64_t V);
void launch_sampler(const SamplerLaunch& s, void* workspace, cudaStream_t stream);

}  // namespace dgemma::cuda
