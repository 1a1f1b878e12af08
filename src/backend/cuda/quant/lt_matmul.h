#pragma once
// The cuBLASLt description of a dense linear's GEMM, out [T, N] = x [T, K] . W [N, K]^T, as the W8A8
// GEMM (quant/fp8_gemm.cpp) runs it and its algorithm bench (`dgemma_gpu_check --bench gemm-algos`)
// measures it: column-major, A = W as K x N (transposed), B = x as K x T, C = D = out^T as N x T (bf16),
// fp32 compute. FP8 adds outer-vector fp32 scales on A (per weight row) and B (per token) and turns fast
// accumulation off (its partial sums keep fewer bits on Hopper).
#include <cublasLt.h>

#include <cstdint>

#include "backend/cuda/core/check.h"

namespace dgemma::cuda {

template <typename V>
void set_lt_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const V& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}

// The descriptor's fixed attributes (the scale pointers are set per call, FP8 only).
inline void describe_dense_matmul(cublasLtMatmulDesc_t desc, bool fp8) {
  set_lt_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_lt_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (!fp8) return;
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  set_lt_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer);
  set_lt_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, outer);
  const int8_t fast_accum = 0;
  set_lt_desc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum);
}

// The three matrix layouts of one call (operands of type `in`: E4M3 or bf16).
struct DenseLayouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  DenseLayouts(int64_t T, int64_t N, int64_t K, cudaDataType_t in) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, in, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, in, static_cast<uint64_t>(K), static_cast<uint64_t>(T), K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, static_cast<uint64_t>(N), static_cast<uint64_t>(T), N));
  }
  ~DenseLayouts() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
  }
  DenseLayouts(const DenseLayouts&) = delete;
  DenseLayouts& operator=(const DenseLayouts&) = delete;
};

}  // namespace dgemma::cuda
