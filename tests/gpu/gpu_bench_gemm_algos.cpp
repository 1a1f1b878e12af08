// `dgemma_gpu_check --bench gemm-algos`: every algorithm cuBLASLt's heuristic offers for the dense GEMMs
// of a 26B-A4B layer (q|k|v, o, the dense MLP's gate|up and down) at T = 256 / 1,024 / 4,096, in bf16
// and in W8A8 FP8, and for the LM head (bf16, V = 262,144) at T = 256 / 1,024 (E4M3 operands with outer-vector fp32 scales, no fast accumulation, as
// quant/fp8_gemm.cpp runs them). Per algorithm: its configuration (algorithm id, tile and stages ids of
// cublasLt.h's enums, split-K count, reduction scheme, CTA swizzle, the heuristic's wave count and
// workspace), its time (time_launches: the fastest of five bursts of 10 back to back on the backend's
// stream), the weight bytes over that time against the H100's 3.35 TB/s, and whether its output equals
// the product path's bit for bit (bf16: Backend::matmul, cublasGemmEx as every bf16 linear runs it, timed in
// the first row; FP8: the heuristic's first algorithm, the one Fp8Gemm takes). What it is for: whether a
// fixed rule over the heuristic's list (or a start-up choice) would bring the dense linears toward
// their bandwidth floor, and at what cost in bit-identity.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/quant/lt_matmul.h"
#include "expert_problem.h"
#include "gpu_check_util.h"
#include "gpu_checks.h"

namespace dgemma::gpu_test {
namespace {

constexpr int kMaxAlgos = 16;

struct Shape {
  const char* name;
  int64_t N, K;
};
// The 26B-A4B layer's dense linears: hidden 2816, 16 query heads and 8 + 8 KV heads of 256, dense MLP
// intermediate 2112 (gate and up in one GEMM).
constexpr Shape kShapes[] = {
    {"q|k|v", 8192, 2816}, {"o", 2816, 4096}, {"mlp gate|up", 4224, 2816}, {"mlp down", 2816, 2112}};

template <typename V>
V algo_attr(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  V v{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &written) != CUBLAS_STATUS_SUCCESS) return V{};
  return v;
}

const char* reduction_name(uint32_t s) {
  switch (s) {
    case CUBLASLT_REDUCTION_SCHEME_NONE: return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE: return "inplace";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: return "fp32";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE: return "output";
    default: return "?";
  }
}

void print_header() {
  std::printf("%-4s %5s %6s %6s %6s %-7s %7s %6s %9s %10s %8s %6s %s\n", "#", "algo", "tile", "stages", "splitK",
              "reduce", "swizzle", "waves", "ws KiB", "us", "GB/s", "% HBM", "same bits");
}

// One shape at one T in one type: the heuristic's list, each algorithm timed and compared with the
// product path's output (`product`, timed first; without it the list's first algorithm, FP8's path).
void sweep(cublasLtHandle_t lt, const Tensor& workspace, cudaStream_t st, bool fp8, int64_t T, const Shape& s,
           const void* w, const void* x, const float* w_scale, const float* x_scale, const Tensor& out,
           const std::function<void()>& product, const char* product_name) {
  const int64_t N = s.N, K = s.K;
  const double weight_bytes = static_cast<double>(N) * static_cast<double>(K) * (fp8 ? 1 : 2);
  std::printf("\n%s %s [T=%lld, K=%lld] x [N=%lld]: weights %.1f MB, floor %.2f us at 3.35 TB/s\n",
              fp8 ? "FP8 W8A8" : "bf16", s.name, static_cast<long long>(T), static_cast<long long>(K),
              static_cast<long long>(N), weight_bytes / 1e6, weight_bytes / kHbmBytesPerS * 1e6);
  print_header();
  std::vector<uint16_t> want;
  if (product) {
    const double ms = time_launches(product);
    want = u16(out);
    std::printf("%-4s %-52s %10.2f %8.0f %6.1f %s\n", "-", product_name, ms * 1e3, weight_bytes / (ms * 1e-3) / 1e9,
                100.0 * weight_bytes / (ms * 1e-3) / kHbmBytesPerS, "(reference)");
  }
  cublasLtMatmulDesc_t desc = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cuda::describe_dense_matmul(desc, fp8);
  if (fp8) {
    cuda::set_lt_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale));
    cuda::set_lt_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scale));
  }
  const cuda::DenseLayouts l(T, N, K, fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF);
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace.nbytes();
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t res[kMaxAlgos] = {};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, l.a, l.b, l.d, l.d, pref, kMaxAlgos, res, &found);
  if (hs != CUBLAS_STATUS_SUCCESS) std::printf("the heuristic refused the shape (status %d)\n", static_cast<int>(hs));
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; i < found; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const cublasLtMatmulAlgo_t& a = res[i].algo;
    auto run = [&] {
      CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, w, l.a, x, l.b, &beta, out.data, l.d, out.data, l.d, &a,
                                  workspace.data, workspace.nbytes(), st));
    };
    poison(out);
    run();
    const std::vector<uint16_t> got = u16(out);
    if (want.empty()) want = got;  // FP8: the heuristic's first is the product path
    size_t differ = 0;
    for (size_t j = 0; j < got.size(); ++j) differ += got[j] != want[j];
    const double ms = time_launches(run);
    char same[48];
    if (differ == 0) std::snprintf(same, sizeof same, "yes");
    else std::snprintf(same, sizeof same, "no (%.2f%% differ)", 100.0 * static_cast<double>(differ) / static_cast<double>(T * N));
    std::printf("%-4d %5d %6u %6u %6u %-7s %7u %6.2f %9zu %10.2f %8.0f %6.1f %s\n", i,
                algo_attr<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID), algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                reduction_name(algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)),
                algo_attr<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), res[i].wavesCount,
                res[i].workspaceSize / 1024, ms * 1e3, weight_bytes / (ms * 1e-3) / 1e9,
                100.0 * weight_bytes / (ms * 1e-3) / kHbmBytesPerS, same);
    std::fflush(stdout);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(desc);
}

}  // namespace

void gemm_algos_bench() {
  Backend& be = cuda();
  const cudaStream_t st = cuda_stream().handle;
  Data d("gemm algos");
  cublasLtHandle_t lt = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&lt));
  const Tensor workspace = be.alloc(ScalarType::kU8, {int64_t{32} << 20});  // the size the backend gives cuBLAS
  std::printf("cuBLASLt %zu; ids: cublasLt.h's cublasLtMatmulTile_t / cublasLtMatmulStages_t\n", cublasLtGetVersion());
  for (const Shape& s : kShapes) {
    Tensor w = be.alloc(ScalarType::kBF16, {s.N, s.K});
    be.fill_normal(w, 11, 0.0f, 0.02f);
    // E4M3 weights with their row scales, and activations likewise (one "expert" of T rows: codes and
    // per-row scales).
    const Weight w8 = random_experts(d, true, 1, s.N, s.K, 1, 0.02f);
    const Tensor w8_codes = up(w8.data), w8_scales = up(w8.row_scale);
    for (const int64_t T : {int64_t{256}, int64_t{1024}, int64_t{4096}}) {
      Tensor x = be.alloc(ScalarType::kBF16, {T, s.K}), out = be.alloc(ScalarType::kBF16, {T, s.N});
      be.fill_normal(x, 12, 0.0f, 1.0f);
      sweep(lt, workspace, st, false, T, s, w.data, x.data, nullptr, nullptr, out, [&] { be.matmul(x, w, out); },
            "cublasGemmEx (CUBLAS_GEMM_DEFAULT): every bf16 linear");
      const Weight x8 = random_experts(d, true, 1, T, s.K, 1, 1.0f);
      const Tensor x8_codes = up(x8.data), x8_scales = up(x8.row_scale);
      sweep(lt, workspace, st, true, T, s, w8_codes.data, x8_codes.data, w8_scales.ptr<float>(),
            x8_scales.ptr<float>(), out, nullptr, nullptr);
    }
  }
  // The LM head (the tied embedding [V, H] as a linear's weight; bf16 in every format) at batch 1 and 4.
  const Shape head{"lm head", 262144, 2816};
  Tensor w = be.alloc(ScalarType::kBF16, {head.N, head.K});
  be.fill_normal(w, 13, 0.0f, 0.02f);
  for (const int64_t T : {int64_t{256}, int64_t{1024}}) {
    Tensor x = be.alloc(ScalarType::kBF16, {T, head.K}), out = be.alloc(ScalarType::kBF16, {T, head.N});
    be.fill_normal(x, 14, 0.0f, 1.0f);
    sweep(lt, workspace, st, false, T, head, w.data, x.data, nullptr, nullptr, out, [&] { be.matmul(x, w, out); },
          "cublasGemmEx (CUBLAS_GEMM_DEFAULT): the LM head");
  }
  be.synchronize();
  cublasLtDestroy(lt);
}

}  // namespace dgemma::gpu_test
