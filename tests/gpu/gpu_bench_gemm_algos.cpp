// `dgemma_gpu_check --bench gemm-algos`: every algorithm cuBLASLt's heuristic offers for the dense GEMMs
// of a 26B-A4B layer (q|k|v, o, the dense MLP's gate|up and down) at T = 256 / 1,024 / 4,096, in bf16
// and in W8A8 FP8 (E4M3 operands with outer-vector fp32 scales, no fast accumulation, as
// quant/fp8_gemm.cpp runs them). Per algorithm: its configuration (algorithm id, tile and stages ids of
// cublasLt.h's enums, split-K count, reduction scheme, CTA swizzle, the heuristic's wave count and
// workspace), its time (CUDA events: the fastest of three bursts of 20 back to back on the backend's
// stream), the weight bytes over that time against the H100's 3.35 TB/s, and whether its output equals
// the product path's bit for bit (bf16: cuda::gemm, cublasGemmEx as every bf16 linear runs it, timed in
// the first row; FP8: the heuristic's first algorithm, the one Fp8Gemm takes). What it is for: whether a
// fixed rule over the heuristic's list (or a start-up choice) would bring the dense linears toward
// their bandwidth floor, and at what cost in bit-identity.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/context.h"
#include "backend/cuda/cuda_backend.h"
#include "gpu_check_util.h"
#include "gpu_checks.h"

namespace dgemma::gpu_test {
namespace {

constexpr double kHbm = 3.35e12;  // H100 SXM HBM3, bytes a second
constexpr int kMaxAlgos = 16;
constexpr size_t kWorkspace = size_t{32} << 20;  // the size the backend gives cuBLAS (core/context.cpp)

struct Shape {
  const char* name;
  int64_t N, K;
};
// The 26B-A4B layer's dense linears: hidden 2816, 16 query heads and 8 + 8 KV heads of 256, dense MLP
// intermediate 2112 (gate and up in one GEMM).
constexpr Shape kShapes[] = {
    {"q|k|v", 8192, 2816}, {"o", 2816, 4096}, {"mlp gate|up", 4224, 2816}, {"mlp down", 2816, 2112}};

template <typename V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const V& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}

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

// Milliseconds of one `fn`: the fastest of three bursts of 20 back to back, after three warm-ups.
double time_events(cudaStream_t st, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();
  double best = 1e30;
  for (int burst = 0; burst < 3; ++burst) {
    CUDA_CHECK(cudaEventRecord(a, st));
    for (int i = 0; i < 20; ++i) fn();
    CUDA_CHECK(cudaEventRecord(b, st));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, static_cast<double>(ms) / 20);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

std::vector<uint8_t> to_host(const void* p, size_t n) {
  std::vector<uint8_t> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost));
  return h;
}

// One shape at one T in one type: the heuristic's list, each algorithm timed and compared with the
// product path's output (`product`, timed first; without it the list's first algorithm, FP8's path).
void print_header() {
  std::printf("%-4s %5s %6s %6s %6s %-7s %7s %6s %9s %10s %8s %6s %s\n", "#", "algo", "tile", "stages", "splitK",
              "reduce", "swizzle", "waves", "ws KiB", "us", "GB/s", "% HBM", "same bits");
}

struct Lt {
  cublasLtHandle_t h = nullptr;
  void* ws = nullptr;
};

void sweep(const Lt& lt, cudaStream_t st, bool fp8, int64_t T, const Shape& s, const void* w, const void* x,
           const float* w_scale, const float* x_scale, void* out, const std::function<void()>& product,
           const char* product_name) {
  const int64_t N = s.N, K = s.K;
  const double weight_bytes = static_cast<double>(N) * static_cast<double>(K) * (fp8 ? 1 : 2);
  std::printf("\n%s %s [T=%lld, K=%lld] x [N=%lld]: weights %.1f MB, floor %.2f us at 3.35 TB/s\n",
              fp8 ? "FP8 W8A8" : "bf16", s.name, static_cast<long long>(T), static_cast<long long>(K),
              static_cast<long long>(N), weight_bytes / 1e6, weight_bytes / kHbm * 1e6);
  print_header();
  std::vector<uint8_t> want;
  if (product) {
    const double ms = time_events(st, product);
    want = to_host(out, static_cast<size_t>(T * N) * 2);
    std::printf("%-4s %-52s %10.2f %8.0f %6.1f %s\n", "-", product_name, ms * 1e3, weight_bytes / (ms * 1e-3) / 1e9,
                100.0 * weight_bytes / (ms * 1e-3) / kHbm, "(reference)");
  }
  cublasLtMatmulDesc_t desc = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  if (fp8) {
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer);
    set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, outer);
    const int8_t fast_accum = 0;
    set_desc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum);
    set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale));
    set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scale));
  }
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, in_type, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, in_type, static_cast<uint64_t>(K), static_cast<uint64_t>(T), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, static_cast<uint64_t>(N), static_cast<uint64_t>(T), N));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspace;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t res[kMaxAlgos] = {};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt.h, desc, la, lb, ld, ld, pref, kMaxAlgos, res, &found);
  if (hs != CUBLAS_STATUS_SUCCESS) std::printf("the heuristic refused the shape (status %d)\n", static_cast<int>(hs));
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; i < found; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const cublasLtMatmulAlgo_t& a = res[i].algo;
    auto run = [&] {
      CUBLAS_CHECK(cublasLtMatmul(lt.h, desc, &alpha, w, la, x, lb, &beta, out, ld, out, ld, &a, lt.ws, kWorkspace, st));
    };
    CUDA_CHECK(cudaMemsetAsync(out, 0xff, static_cast<size_t>(T * N) * 2, st));
    run();
    CUDA_CHECK(cudaStreamSynchronize(st));
    const std::vector<uint8_t> got = to_host(out, static_cast<size_t>(T * N) * 2);
    if (want.empty()) want = got;  // FP8: the heuristic's first is the product path
    size_t differ = 0;
    for (size_t j = 0; j + 1 < got.size(); j += 2) differ += std::memcmp(&got[j], &want[j], 2) != 0;
    const double ms = time_events(st, run);
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
                100.0 * weight_bytes / (ms * 1e-3) / kHbm, same);
    std::fflush(stdout);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
}

// Random E4M3 codes of magnitude 2^-2 .. 2^2 (no NaN), random sign and mantissa.
void* fp8_codes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> h(n);
  for (auto& c : h) c = static_cast<uint8_t>((rng() & 0x87) | ((5 + rng() % 5) << 3));
  void* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, n));
  CUDA_CHECK(cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice));
  return d;
}

float* scales(size_t n, float lo, float hi, std::mt19937& rng) {
  std::vector<float> h(n);
  for (auto& v : h) v = std::uniform_real_distribution<float>(lo, hi)(rng);
  float* d = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

void gemm_algos_bench() {
  Backend& be = cuda();
  const cuda::Context& ctx = cuda::context_of(be);
  const cudaStream_t st = ctx.stream.handle;
  Lt lt;
  CUBLAS_CHECK(cublasLtCreate(&lt.h));
  CUDA_CHECK(cudaMalloc(&lt.ws, kWorkspace));
  std::mt19937 rng(static_cast<uint32_t>(run_seed()));
  std::printf("cuBLASLt %zu; ids: cublasLt.h's cublasLtMatmulTile_t / cublasLtMatmulStages_t\n", cublasLtGetVersion());
  for (const Shape& s : kShapes) {
    Tensor w = be.alloc(ScalarType::kBF16, {s.N, s.K});
    be.fill_normal(w, 11, 0.0f, 0.02f);
    void* w8 = fp8_codes(static_cast<size_t>(s.N * s.K), rng);
    float* ws8 = scales(static_cast<size_t>(s.N), 0.001f, 0.01f, rng);
    for (const int64_t T : {int64_t{256}, int64_t{1024}, int64_t{4096}}) {
      Tensor x = be.alloc(ScalarType::kBF16, {T, s.K}), out = be.alloc(ScalarType::kBF16, {T, s.N});
      be.fill_normal(x, 12, 0.0f, 1.0f);
      cuda::Gemm g;
      g.a = x.ptr<uint16_t>();
      g.lda = s.K;
      g.b = w.ptr<uint16_t>();
      g.ldb = s.K;
      g.b_nk = true;
      g.c = out.data;
      g.ldc = s.N;
      g.M = T;
      g.N = s.N;
      g.K = s.K;
      sweep(lt, st, false, T, s, w.data, x.data, nullptr, nullptr, out.data, [&] { cuda::gemm(ctx, g); },
            "cublasGemmEx (CUBLAS_GEMM_DEFAULT): every bf16 linear");
      void* x8 = fp8_codes(static_cast<size_t>(T * s.K), rng);
      float* xs8 = scales(static_cast<size_t>(T), 0.01f, 0.05f, rng);
      sweep(lt, st, true, T, s, w8, x8, ws8, xs8, out.data, nullptr, nullptr);
      CUDA_CHECK(cudaStreamSynchronize(st));
      cudaFree(x8);
      cudaFree(xs8);
    }
    cudaFree(w8);
    cudaFree(ws8);
  }
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaFree(lt.ws);
  cublasLtDestroy(lt.h);
}

}  // namespace dgemma::gpu_test
