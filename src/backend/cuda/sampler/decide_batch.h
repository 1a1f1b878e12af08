#pragma once
// The canvases of one decide launch as its kernel reads them (DecideBatch: a plain struct, copied to
// device memory as it is). Plain C++ without CUDA headers: the kernel's header
// (sampler/decide_kernel.cuh) is also compiled on the host by the emulated unit tests. sampler/decide.cuh
// declares the launcher.
#include <cstdint>

// The guided walk, shared with the CPU reference (decide_rules.h): host and device code under nvcc.
#if defined(__CUDACC__) && !defined(DGEMMA_GUIDED_HD)
#define DGEMMA_GUIDED_HD __host__ __device__
#endif
#include "guided/token_walk.h"

namespace dgemma::cuda {

// A canvas's guided gap (backend.h GuidedGap) as the kernel walks it: the constraint's tables on the
// device (decide_rules.h guided_view). distance null: no gap.
struct DecideGap {
  guided::TokenConstraintView view{};
  const int32_t* distance = nullptr;  // [num_states]
  int32_t first = 0, last = 0, state = 0;
  int64_t room = 0;
  DGEMMA_GUIDED_HD bool active() const { return distance != nullptr && last > first; }
};

struct DecideLaunch {
  const float* entropy = nullptr;   // [C]
  const int32_t* argmax = nullptr;  // [C]
  const int32_t* sample = nullptr;  // [C] (null when greedy: the argmax is taken)
  int64_t C = 0;
  float entropy_bound = 0, confidence_threshold = 0;
  uint64_t renoise_key = 0;
  uint32_t vocab = 0;
  int32_t* prev_argmax = nullptr;  // [C]
  bool have_prev = false;
  int32_t* canvas = nullptr;            // [C]
  int32_t* flags = nullptr;             // [2]
  uint8_t* accept = nullptr;            // [C] or null
  const uint8_t* pin_mask = nullptr;    // [C] or null: 1 = pinned
  const int32_t* pin_tokens = nullptr;  // [C] with pin_mask
  DecideGap gap;                        // a guided gap (inactive: the rules above alone)
};
// Canvases per launch; a larger batch is launched in groups of this many.
constexpr int kMaxDecideBatch = 16;
struct DecideBatch {
  DecideLaunch c[kMaxDecideBatch];
  int n = 0;
};

}  // namespace dgemma::cuda
