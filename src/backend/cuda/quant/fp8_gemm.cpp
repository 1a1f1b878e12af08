// The cuBLASLt FP8 GEMM of the W8A8 dense linears (quant/fp8_gemm.h).
#include "backend/cuda/quant/fp8_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <bit>
#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "backend/cuda/core/check.h"
#include "backend/cuda/quant/lt_matmul.h"
#include "backend/workspace_bounds.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma::cuda {

namespace {

constexpr size_t kWorkspaceBytes = workspace_bounds::kFp8GemmWorkspaceBytes;  // the memory plan counts it

int64_t bucket_of(int64_t T) { return std::max<int64_t>(16, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(T)))); }

}  // namespace

struct Fp8Gemm::Impl {
  Stream stream;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  void* workspace = nullptr;
  std::mutex mu;
  // (N, K, T bucket) -> the heuristic's first algorithm, or none (refused)
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::optional<cublasLtMatmulAlgo_t>> algos;

  // The lazily made handle, descriptor and workspace (only a model with W8A8 weights pays for them).
  void init() {
    if (lt != nullptr) return;
    CUBLAS_CHECK(cublasLtCreate(&lt));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    describe_dense_matmul(desc, true);
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  }

  std::optional<cublasLtMatmulAlgo_t> query(int64_t T, int64_t N, int64_t K) {
    init();
    // With outer-vector scale modes the heuristic refuses (CUBLAS_STATUS_INVALID_VALUE) while the scale
    // pointers are null (cuBLASLt 13.1): any device address stands in for them here; matmul() sets the
    // real ones.
    set_lt_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(workspace));
    set_lt_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(workspace));
    const DenseLayouts l(T, N, K, CUDA_R_8F_E4M3);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, l.a, l.b, l.d, l.d, pref, 1, &result, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) return std::nullopt;
    return result.algo;
  }

  const std::optional<cublasLtMatmulAlgo_t>& algo(int64_t T, int64_t N, int64_t K) {
    const auto key = std::make_tuple(N, K, bucket_of(T));
    auto it = algos.find(key);
    if (it == algos.end()) it = algos.emplace(key, query(bucket_of(T), N, K)).first;
    return it->second;
  }

  cublasStatus_t matmul(const cublasLtMatmulAlgo_t& a, const uint8_t* q, const float* x_scale, const uint8_t* w,
                        const float* row_scale, int64_t T, int64_t N, int64_t K, uint16_t* out) {
    set_lt_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(row_scale));
    set_lt_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scale));
    const DenseLayouts l(T, N, K, CUDA_R_8F_E4M3);
    const float alpha = 1.0f, beta = 0.0f;
    stream.count_launch();
    return cublasLtMatmul(lt, desc, &alpha, w, l.a, q, l.b, &beta, out, l.d, out, l.d, &a, workspace, kWorkspaceBytes,
                          stream);
  }

  ~Impl() {
    if (workspace != nullptr) {
      cudaStreamSynchronize(stream);
      cudaFree(workspace);
    }
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    if (lt != nullptr) cublasLtDestroy(lt);
  }
};

Fp8Gemm::Fp8Gemm(Stream stream) : impl_(std::make_unique<Impl>()) { impl_->stream = stream; }
Fp8Gemm::~Fp8Gemm() = default;

bool Fp8Gemm::supported(int64_t N, int64_t K) {
  if (N <= 0 || K <= 0 || N % 16 != 0 || K % 16 != 0 || N > INT_MAX || K > INT_MAX) return false;
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (int64_t T : {16, 256, 4096})
    if (!impl_->algo(T, N, K)) return false;
  return true;
}

void Fp8Gemm::run(const uint8_t* q, const float* x_scale, const uint8_t* w, const float* row_scale, int64_t T,
                  int64_t N, int64_t K, uint16_t* out) {
  if (T <= 0 || N <= 0) return;
  DG_CHECK(T <= INT_MAX && N <= INT_MAX && K <= INT_MAX);
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::optional<cublasLtMatmulAlgo_t>& a = impl_->algo(T, N, K);
  cublasStatus_t st = a ? impl_->matmul(*a, q, x_scale, w, row_scale, T, N, K, out) : CUBLAS_STATUS_NOT_SUPPORTED;
  if (st == CUBLAS_STATUS_SUCCESS) return;
  // The bucket's algorithm refused this T: the heuristic's answer for exactly this shape, cached
  // under the key (N, K, -T).
  const auto key = std::make_tuple(N, K, -T);
  auto it = impl_->algos.find(key);
  if (it == impl_->algos.end()) {
    it = impl_->algos.emplace(key, impl_->query(T, N, K)).first;
    DG_LOG_INFO("cuda", "W8A8 FP8 GEMM T={} N={} K={}: the T bucket's cuBLASLt algorithm refused it; this T's own taken",
                T, N, K);
  }
  if (it->second) st = impl_->matmul(*it->second, q, x_scale, w, row_scale, T, N, K, out);
  if (st != CUBLAS_STATUS_SUCCESS)
    fail(ErrorKind::kInternal, "cuBLASLt refused the W8A8 FP8 GEMM T={} N={} K={} (status {})", T, N, K,
         static_cast<int>(st));
}

}  // namespace dgemma::cuda
