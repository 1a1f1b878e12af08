// The vocabulary-blocked GEMM (core/blocked_gemm.h): one cuBLASLt launch batched over a rank's blocks.
#include "backend/cuda/core/blocked_gemm.h"

#include <cublasLt.h>

#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "backend/cuda/core/check.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma::cuda {

namespace {

constexpr int kHeuristicAnswers = 8;
constexpr uint32_t kAlignment = 16;  // the operands' alignment the algorithm may assume (bytes)

template <typename V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const V& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}

template <typename V>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const V& v) {
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, a, &v, sizeof v));
}

// The column-major view of `blocks` blocks: A = w's block as N x Kb (ld N), B = x's block as Kb x T
// (ld blocks Kb: x's row), D = out's block as N x T (ld N); batch strides Kb N, Kb and T N.
struct Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Layouts(int64_t T, int64_t Kb, int64_t N, int blocks) {
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, u(N), u(Kb), N));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, u(Kb), u(T), Kb * blocks));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, u(N), u(T), N));
    const int32_t count = blocks;
    for (cublasLtMatrixLayout_t l : {a, b, d}) set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
    set_layout(a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, Kb * N);
    set_layout(b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, Kb);
    set_layout(d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, T * N);
  }
  ~Layouts() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
  }
  Layouts(const Layouts&) = delete;
  Layouts& operator=(const Layouts&) = delete;
};

bool aligned(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) % kAlignment) == 0;
}

}  // namespace

struct BlockedGemm::Impl {
  const Context* ctx = nullptr;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  std::mutex mu;
  // (T, Kb, N, all_blocks) -> the algorithm every block count takes, or none (a GEMM a block)
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, std::optional<cublasLtMatmulAlgo_t>> algos;

  void init() {
    if (lt != nullptr) return;
    CUBLAS_CHECK(cublasLtCreate(&lt));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t no_workspace = 0;  // no split-K reductions: a block's sum is one CTA's
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &no_workspace, sizeof no_workspace));
    for (const auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &kAlignment, sizeof kAlignment));
  }

  // The heuristic's first algorithm for all_blocks blocks without split-K that cuBLASLt also takes for
  // every count a rank can hold (all_blocks / 2^i); none if there is no such algorithm.
  std::optional<cublasLtMatmulAlgo_t> choose(int64_t T, int64_t Kb, int64_t N, int all_blocks) {
    init();
    const Layouts whole(T, Kb, N, all_blocks);
    cublasLtMatmulHeuristicResult_t results[kHeuristicAnswers]{};
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt, desc, whole.a, whole.b, whole.d, whole.d, pref, kHeuristicAnswers,
                                       results, &found) != CUBLAS_STATUS_SUCCESS)
      return std::nullopt;
    for (int i = 0; i < found; ++i) {
      const cublasLtMatmulHeuristicResult_t& r = results[i];
      int32_t split_k = 1;
      size_t written = 0;
      if (r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize != 0 ||
          cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k,
                                               sizeof split_k, &written) != CUBLAS_STATUS_SUCCESS ||
          split_k > 1)
        continue;
      bool every_count = true;
      for (int count = all_blocks; count >= 1 && every_count; count /= 2) {
        const Layouts l(T, Kb, N, count);
        cublasLtMatmulHeuristicResult_t check{};
        every_count =
            cublasLtMatmulAlgoCheck(lt, desc, l.a, l.b, l.d, l.d, &r.algo, &check) == CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize == 0;
      }
      if (every_count) {
        int32_t id = 0, tile = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written);
        cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile,
                                             &written);
        DG_LOG_DEBUG("cuda",
                     "vocabulary-blocked GEMM T={} Kb={} N={}: one cuBLASLt launch over the blocks "
                     "(algorithm {}, tile {})",
                     T, Kb, N, id, tile);
        return r.algo;
      }
    }
    DG_LOG_DEBUG("cuda", "vocabulary-blocked GEMM T={} Kb={} N={}: a cuBLAS GEMM a block", T, Kb, N);
    return std::nullopt;
  }

  ~Impl() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    if (lt != nullptr) cublasLtDestroy(lt);
  }
};

BlockedGemm::BlockedGemm(const Context& ctx) : impl_(std::make_unique<Impl>()) {
  impl_->ctx = &ctx;
}
BlockedGemm::~BlockedGemm() = default;

void BlockedGemm::run(const uint16_t* x, const uint16_t* w, int64_t T, int64_t Kb, int64_t N, int blocks,
                      int all_blocks, float* out) {
  DG_CHECK(blocks >= 1 && all_blocks % blocks == 0);
  if (T <= 0 || N <= 0) return;
  const Context& ctx = *impl_->ctx;
  // The shape decides the path (the same answer on every rank); operands the algorithm cannot take
  // (alignment) go the per-block way only if no rank could, as every allocation is 256-byte aligned.
  const bool shaped = T <= INT_MAX && N <= INT_MAX && Kb <= INT_MAX / all_blocks &&
                      (Kb * 2) % kAlignment == 0 && (N * 2) % kAlignment == 0 && aligned(x) && aligned(w) &&
                      aligned(out);
  if (shaped) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const auto key = std::make_tuple(T, Kb, N, all_blocks);
    auto it = impl_->algos.find(key);
    if (it == impl_->algos.end()) it = impl_->algos.emplace(key, impl_->choose(T, Kb, N, all_blocks)).first;
    if (it->second) {
      const Layouts l(T, Kb, N, blocks);
      const float alpha = 1.0f, beta = 0.0f;
      ctx.stream.count_launch();
      CUBLAS_CHECK(cublasLtMatmul(impl_->lt, impl_->desc, &alpha, w, l.a, x, l.b, &beta, out, l.d, out, l.d,
                                  &*it->second, nullptr, 0, ctx.stream));
      return;
    }
  }
  for (int b = 0; b < blocks; ++b) {
    Gemm g;
    g.a = x + b * Kb;
    g.lda = Kb * blocks;
    g.b = w + b * Kb * N;
    g.b_nk = false;
    g.ldb = N;
    g.c = out + b * T * N;
    g.c_f32 = true;
    g.ldc = N;
    g.M = T;
    g.N = N;
    g.K = Kb;
    gemm(ctx, g);
  }
}

}  // namespace dgemma::cuda
