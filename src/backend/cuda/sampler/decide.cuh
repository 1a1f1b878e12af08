#pragma once
// The accept / renoise / stop decision of one denoising step (backend.h DecideArgs), one block per
// canvas, all canvases of a batch in one launch (host launcher; kernel in sampler/decide.cu). The kernel
// reads the per-canvas arguments (DecideBatch) from device memory, so that a step can send them up with its
// other inputs and a CUDA graph replays the launch with the next step's arguments.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

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
// Canvases per launch; a larger batch is launched in groups of this many.
constexpr int kMaxDecideBatch = 16;
struct DecideBatch {
  DecideLaunch c[kMaxDecideBatch];
  int n = 0;
};
// 1 <= n <= kMaxDecideBatch (else cudaErrorInvalidValue).
DecideBatch make_decide_batch(const DecideLaunch* canvases, int n);
// `b` (host) gives the grid and shared memory; the kernel reads `dev`, a copy of b in device memory (or
// of a batch of the same canvas count and sizes).
void launch_decide(const DecideBatch& b, const DecideBatch* dev, Stream stream);

}  // namespace dgemma::cuda
