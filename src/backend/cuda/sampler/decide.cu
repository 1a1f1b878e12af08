// The decide op in one block per canvas (all canvases of a step in one launch) (the CPU reference is
// backend/cpu/decide.cpp with the rules of backend/decide_rules.h; the results are bit-identical):
//   1. every position's rank in the stable ascending order of the entropies (an all-pairs count:
//      C^2 comparisons, 65,536 at C = 256 — cheaper than a sort's barriers at this size);
//   2. one thread walks the sorted entropies with the reference's fp32 prefix sum (the sum order is
//      what makes a decision bit-identical, so it stays sequential: C additions) and sums the
//      entropies in position order for the confidence test;
//   3. every position writes its next-canvas token (the sample if accepted, else a renoise token from
//      the counter-based RNG) and compares its argmax with the previous step's.
// Pinned positions (a pin mask given) sort after every free one, so the walk of step 2 covers the
// free positions alone (decide_rules.h); they are accepted, keep their pinned token and are left out
// of the mean and the argmax comparison. Without a mask every position is free: the same operations
// in the same order as before pins existed.
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/sampler/decide.cuh"
#include "util/counter_rng.h"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) decide_kernel(const DecideBatch* b) {
  extern __shared__ float smem[];
  const DecideLaunch& d = b->c[blockIdx.x];
  const int C = static_cast<int>(d.C);
  float* h = smem;                                        // [C] entropies by position
  float* sorted = smem + C;                               // [C] entropies in ascending order
  int* rank = reinterpret_cast<int*>(smem + 2 * C);       // [C] position -> sorted index
  int* accepted = reinterpret_cast<int*>(smem + 3 * C);   // [C] sorted index -> accepted
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

  int same = 1;
  for (int p = threadIdx.x; p < C; p += blockDim.x) {
    const int acc = accepted[rank[p]];
    const int32_t am = d.argmax[p];
    if (d.pin_mask != nullptr && d.pin_mask[p] != 0) {
      d.canvas[p] = d.pin_tokens[p];
    } else {
      const int32_t chosen = d.sample != nullptr ? d.sample[p] : am;
      d.canvas[p] = acc ? chosen : static_cast<int32_t>(rng::uniform_token(d.renoise_key, static_cast<uint32_t>(p), d.vocab));
      if (d.have_prev && d.prev_argmax[p] != am) same = 0;
    }
    if (d.accept != nullptr) d.accept[p] = static_cast<uint8_t>(acc);
    d.prev_argmax[p] = am;  // read above by this same thread only
  }
  same = __syncthreads_and(same);
  if (threadIdx.x == 0) d.flags[0] = d.have_prev && same ? 1 : 0;
}

}  // namespace

DecideBatch make_decide_batch(const DecideLaunch* canvases, int n) {
  if (n < 1 || n > kMaxDecideBatch) CUDA_CHECK(cudaErrorInvalidValue);  // the caller groups the canvases
  DecideBatch b;
  b.n = n;
  for (int i = 0; i < n; ++i) b.c[i] = canvases[i];
  return b;
}

void launch_decide(const DecideBatch& b, const DecideBatch* dev, Stream stream) {
  if (b.n < 1 || b.n > kMaxDecideBatch || dev == nullptr) CUDA_CHECK(cudaErrorInvalidValue);
  int64_t max_c = 0;
  for (int i = 0; i < b.n; ++i) max_c = max_c > b.c[i].C ? max_c : b.c[i].C;
  const size_t smem = static_cast<size_t>(max_c) * 16;  // each block uses its own canvas's C of it
  if (smem > 48 * 1024) {
    static const cudaError_t attr =
        cudaFuncSetAttribute(decide_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 16 * 8192);
    CUDA_CHECK(attr);
  }
  launch_kernel(stream, decide_kernel, b.n, kThreads, smem, dev);
}

}  // namespace dgemma::cuda
