#pragma once
// The canvases of one sampler launch as its kernels read them (SamplerBatch: a plain struct, copied to
// device memory as it is). Plain C++ without CUDA headers: the kernels' header (sampler/sampler_kernel.cuh)
// is also compiled on the host by the emulated unit tests. sampler/sampler.cuh declares the launcher.
#include <cstdint>

#include "backend/sample_filter.h"

namespace dgemma::cuda {

// One canvas.
struct SamplerLaunch {
  uint16_t* logits = nullptr;  // [C, V] bf16, overwritten with the bf16 probabilities when want_probs
  int64_t C = 0, V = 0;
  float softcap = 30.0f, temperature = 1.0f;
  uint64_t sample_key = 0;
  bool want_probs = true;
  bool want_sample = true;        // false: no Gumbel noise; sample = argmax (sample_gap = argmax gap)
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
  // A guided gap (backend.h GuidedGap): rows [gap_first, gap_last) see only the tokens whose bit is set
  // in gap_mask (bit (id & 31) of word id / 32) and whose id is below gap_limit; the others' z is -inf.
  // gap_mask null: no gap (the rows take the unmasked path).
  const uint32_t* gap_mask = nullptr;
  int32_t gap_first = 0, gap_last = 0, gap_limit = 0;
  // Set by the launcher: this canvas's first row and first top-N entry in the batch's workspace.
  int64_t row0 = 0, top0 = 0;
};
constexpr int kMaxTopN = 20;
// Canvases per launch; a larger batch is launched in groups of this many.
constexpr int kMaxSamplerBatch = 16;

// The canvases of one launch as its kernels read them (a plain struct: copied to device memory as it
// is). make_sampler_batch assigns each canvas its workspace rows (row0, top0).
struct SamplerBatch {
  SamplerLaunch c[kMaxSamplerBatch];
  int n = 0;
  int splits = 1;
};
}  // namespace dgemma::cuda
