// The decide op in one block per canvas (all canvases of a step in one launch); the block's work is
// sampler/decide_kernel.cuh (the CPU reference is backend/cpu/decide.cpp with the rules of
// backend/decide_rules.h; the results are bit-identical).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/sampler/decide.cuh"
#include "backend/cuda/sampler/decide_kernel.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) decide_kernel(const DecideBatch* b) {
  decide_block(b->c[blockIdx.x]);
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
  const size_t smem = static_cast<size_t>(max_c) * kDecideSmemPerPosition;  // each block uses its own C of it
  // Set at every such launch, as the other launchers do: a function attribute holds for the device
  // current at the call, and each device of a tensor-parallel process needs its own.
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(decide_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kDecideSmemPerPosition * 8192));
  launch_kernel(stream, decide_kernel, b.n, kThreads, smem, dev);
}

}  // namespace dgemma::cuda
