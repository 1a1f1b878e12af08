#pragma once
// One block's work of the decide kernel (sampler/decide.cu): the decision of one canvas, in a header so
// that the unit tests run it on the host through tests/unit/backend/cuda_emulator.h
// (test_decide_emulated.cpp, against the CPU backend's decide). On the device sampler/decide.cu
// includes core/common.cuh first. What it needs: threadIdx / blockDim, __syncthreads,
// __syncthreads_and, dynamic and static shared memory, __fadd_rn / __fsub_rn / __fdiv_rn, the
// counter-based RNG and the guided walk (guided/token_walk.h, host and device code).
//   1. every position's rank in the stable ascending order of the entropies (an all-pairs count:
//      C^2 comparisons, 65,536 at C = 256 — cheaper than a sort's barriers at this size);
//   2. one thread walks the sorted entropies with the reference's fp32 prefix sum (the sum order is
//      what makes a decision bit-identical, so it stays sequential: C additions) and sums the
//      entropies in position order for the confidence test;
//   2b. with a guided gap (DecideGap), one thread walks the gap's chosen tokens (pinned positions: their
//      pinned token) through the automaton from the gap's state (guided::walk_tokens_within, the CPU
//      reference's own code): the positions of the gap after the longest kept prefix are not accepted;
//   3. every position writes its next-canvas token (the sample if accepted, else a renoise token from
//      the counter-based RNG) and compares its argmax with the previous step's.
// Pinned positions (a pin mask given) sort after every free one, so the walk of step 2 covers the
// free positions alone (decide_rules.h); they are accepted (but after a guided gap's kept prefix),
// keep their pinned token and are left out of the mean and the argmax comparison. Without a mask every
// position is free: the same operations in the same order as before pins existed; without a gap, step
// 2b is skipped.
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"
#include "backend/cuda/sampler/decide_batch.h"
#include "util/counter_rng.h"

namespace dgemma::cuda {
// Internal linkage (as sampler/sampler_kernel.cuh): the unit tests' host build shares a binary with
// the device build's host stub.
namespace {

// Dynamic shared memory: 16 bytes a position (four arrays of C).
constexpr int kDecideSmemPerPosition = 16;

__device__ __forceinline__ void decide_block(const DecideLaunch& d) {
  DG_KERNEL_DYNAMIC_SMEM(smem_raw);
  __shared__ int keep_end;  // a guided gap's first position after its kept prefix
  float* smem = reinterpret_cast<float*>(smem_raw);
  const int C = static_cast<int>(d.C);
  float* h = smem;                                       // [C] entropies by position
  float* sorted = smem + C;                              // [C] entropies in ascending order
  int* rank = reinterpret_cast<int*>(smem + 2 * C);      // [C] position -> sorted index
  int* accepted = reinterpret_cast<int*>(smem + 3 * C);  // [C] sorted index -> accepted
  int* pin = accepted;  // scratch while ranking (1 = pinned); accepted is written only afterwards
  for (int p = threadIdx.x; p < C; p += blockDim.x) {
    h[p] = d.entropy[p];
    pin[p] = d.pin_mask != nullptr && d.pin_mask[p] != 0 ? 1 : 0;
  }
  __syncthreads();

  for (int p = threadIdx.x; p < C; p += blockDim.x) {
    const float e = h[p];
    const int mp = pin[p];
    int r = 0;
    for (int q = 0; q < C; ++q) {
      const float o = h[q];
      const int mq = pin[q];
      r += (mq == mp ? (o < e || (o == e && q < p)) : mq < mp) ? 1 : 0;
    }
    rank[p] = r;
    sorted[r] = e;
  }
  __syncthreads();

  if (threadIdx.x == 0) {
    // The mean first: it reads the pin flags that the walk below overwrites.
    float sum = 0.0f;
    int n_free = 0;
    for (int p = 0; p < C; ++p) {
      if (pin[p]) continue;
      sum = __fadd_rn(sum, h[p]);
      ++n_free;
    }
    const float mean = n_free == 0 ? 0.0f : __fdiv_rn(sum, static_cast<float>(n_free));
    d.flags[1] = mean < d.confidence_threshold ? 1 : 0;
    float cum = 0.0f;
    for (int k = 0; k < C; ++k) {
      if (k >= n_free) {
        accepted[k] = 1;  // a pinned position
        continue;
      }
      const float v = sorted[k];
      const float before = __fsub_rn(__fadd_rn(cum, v), v);  // cumsum[k] - sorted[k], as the reference
      cum = __fadd_rn(cum, v);
      accepted[k] = before <= d.entropy_bound ? 1 : 0;
    }
  }
  __syncthreads();

  const DecideGap& g = d.gap;
  const bool guided = g.active();
  if (guided) {
    // The gap's chosen tokens over the entropies' place (read no more).
    int32_t* walked = reinterpret_cast<int32_t*>(h);
    for (int p = g.first + static_cast<int>(threadIdx.x); p < g.last; p += blockDim.x)
      walked[p] = d.pin_mask != nullptr && d.pin_mask[p] != 0 ? d.pin_tokens[p]
                  : d.sample != nullptr                       ? d.sample[p]
                                                              : d.argmax[p];
    __syncthreads();
    if (threadIdx.x == 0) {
      const guided::WalkResult r =
          guided::walk_tokens_within(g.view, g.distance, g.state, walked + g.first, g.last - g.first, g.room,
                                     d.pin_mask != nullptr ? d.pin_mask + g.first : nullptr);
      keep_end = g.first + r.accepted;
    }
    __syncthreads();
  }

  int same = 1;
  for (int p = threadIdx.x; p < C; p += blockDim.x) {
    int acc = accepted[rank[p]];
    if (guided && p >= keep_end && p < g.last) acc = 0;  // after the gap's kept prefix: renoised
    const int32_t am = d.argmax[p];
    if (d.pin_mask != nullptr && d.pin_mask[p] != 0) {
      d.canvas[p] = d.pin_tokens[p];
    } else {
      const int32_t chosen = d.sample != nullptr ? d.sample[p] : am;
      d.canvas[p] =
          acc ? chosen
              : static_cast<int32_t>(rng::uniform_token(d.renoise_key, static_cast<uint32_t>(p), d.vocab));
      if (d.have_prev && d.prev_argmax[p] != am) same = 0;
    }
    if (d.accept != nullptr) d.accept[p] = static_cast<uint8_t>(acc);
    d.prev_argmax[p] = am;  // read above by this same thread only
  }
  same = __syncthreads_and(same);
  if (threadIdx.x == 0) d.flags[0] = d.have_prev && same ? 1 : 0;
}

}  // namespace
}  // namespace dgemma::cuda
