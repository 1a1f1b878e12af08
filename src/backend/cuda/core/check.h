#pragma once
// Error checks for CUDA runtime and cuBLAS calls, usable from .cpp and .cu files alike (no fmt in
// nvcc-compiled code: the throwing happens in core/check.cpp). A failure is a dgemma::Error naming the
// call, the file and the line.
#include <cstdint>

namespace dgemma::cuda {

[[noreturn]] void fail_cuda(int code, const char* expr, const char* file, int line);
[[noreturn]] void fail_cublas(int status, const char* expr, const char* file, int line);

}  // namespace dgemma::cuda

#define CUDA_CHECK(expr)                                                                            \
  do {                                                                                              \
    const int dg_cuda_err_ = static_cast<int>(expr);                                                \
    if (dg_cuda_err_ != 0) ::dgemma::cuda::fail_cuda(dg_cuda_err_, #expr, __FILE__, __LINE__);       \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                          \
  do {                                                                                              \
    const int dg_cublas_st_ = static_cast<int>(expr);                                               \
    if (dg_cublas_st_ != 0) ::dgemma::cuda::fail_cublas(dg_cublas_st_, #expr, __FILE__, __LINE__);   \
  } while (0)
