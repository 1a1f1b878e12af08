#pragma once
// The accept / renoise / stop decision of one denoising step (backend.h DecideArgs), one block per
// canvas, all canvases of a batch in one launch (host launcher; kernel in decide.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dgemma::cuda {

struct DecideLaunch {
  const float* entropy = nullptr;   // [C]
  const int32_t* argmax = nullptr;  // [C]
  const int32_t* sample = nullptr;  // [C] (null when greedy: the argmax is taken)
  int64_t C = 0;
  float entropy_bound = 0, confidence_threshold = 0;
  uint64_t renoise_key = 0;
  uint32_t vocab = 0;
  int32_t* prev_argmax = nullptr;   // [C]
  bool have_prev = false;
  int32_t* canvas = nullptr;        // [C]
  int32_t* flags = nullptr;         // [2]
  uint8_t* accept = nullptr;        // [C] or null
  const uint8_t* pin_mask = nullptr;    // [C] or null: 1 = pinned
  const int32_t* pin_tokens = nullptr;  // [C] with pin_mask
};
// Canvases per launch (they ride in the kernel parameters, at most 4 KiB).
constexpr int kMaxDecideBatch = 16;
void launch_decide(const DecideLaunch* canvases, int n, cudaStream_t stream);

}  // namespace dgemma::cuda
