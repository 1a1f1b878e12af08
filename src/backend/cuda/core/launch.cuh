#pragma once
// The launch of a kernel with an optional programmatic dependent launch (core/griddep.cuh): `kernel`
// over `grid` blocks of `threads` threads with `smem` bytes of dynamic shared memory on the stream,
// counted, its configuration errors thrown here. With `pdl` it carries the
// programmatic-stream-serialisation attribute: the kernel may start before the one ahead of it has
// finished and must wait for it in DG_GRIDDEP_WAIT() before it touches upstream data. Under stream
// capture the dependency becomes a programmatic edge of the graph. Past 48 KB of shared memory the
// opt-in size is set, and the largest shared-memory carve-out (at every launch: the attributes belong
// to the current device).
#include <cuda_runtime.h>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

template <typename... Params, typename... Args>
void launch_kernel(const Stream& stream, bool pdl, void (*kernel)(Params...), dim3 grid, dim3 threads, int smem,
                   const Args&... args) {
  if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = threads;
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream.handle;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
  stream.count_launch();
}

}  // namespace dgemma::cuda
