#pragma once
// Every launch of a dgemma kernel goes through launch_kernel: `kernel` over `grid` blocks of `threads`
// threads with `smem` bytes of dynamic shared memory on the stream, counted, its configuration errors
// thrown here. launch_large_smem first sets, past 48 KB, the opt-in shared-memory size and, always, the
// largest shared-memory carve-out (at every launch: the attributes belong to the current device).
#include <cuda_runtime.h>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// programmatic (sm_90+ only): the launch may begin while the previous kernel in the stream runs; the
// kernel waits for it with DG_GRID_DEPENDENCY_WAIT (core/kernel_macros.cuh) before reading its output.
template <typename... Params, typename... Args>
void launch_kernel_ex(const Stream& stream, bool programmatic, void (*kernel)(Params...), dim3 grid,
                      dim3 threads, size_t smem, const Args&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = threads;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream.handle;
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  if (programmatic) {
    cfg.attrs = &overlap;
    cfg.numAttrs = 1;
  }
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
  stream.count_launch();
}
template <typename... Params, typename... Args>
void launch_kernel(const Stream& stream, void (*kernel)(Params...), dim3 grid, dim3 threads, size_t smem,
                   const Args&... args) {
  launch_kernel_ex(stream, false, kernel, grid, threads, smem, args...);
}

template <typename... Params, typename... Args>
void launch_large_smem(void (*kernel)(Params...), dim3 grid, dim3 threads, int smem, const Stream& stream,
                       const Args&... args) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared));
  launch_kernel(stream, kernel, grid, threads, static_cast<size_t>(smem), args...);
}

}  // namespace dgemma::cuda
