#include "backend/cuda/core/check.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "util/error.h"

namespace dgemma::cuda {

void fail_cuda(int code, const char* expr, const char* file, int line) {
  const auto err = static_cast<cudaError_t>(code);
  const ErrorKind kind = err == cudaErrorMemoryAllocation ? ErrorKind::kResourceExhausted : ErrorKind::kInternal;
  throw Error(kind, fmt::format("CUDA error {} ({}: {}) in {} at {}:{}", code, cudaGetErrorName(err),
                                cudaGetErrorString(err), expr, file, line));
}

void fail_cublas(int status, const char* expr, const char* file, int line) {
  const auto st = static_cast<cublasStatus_t>(status);
  const ErrorKind kind = st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::kResourceExhausted : ErrorKind::kInternal;
  throw Error(kind, fmt::format("cuBLAS error {} ({}: {}) in {} at {}:{}", status, cublasGetStatusName(st),
                                cublasGetStatusString(st), expr, file, line));
}

}  // namespace dgemma::cuda
