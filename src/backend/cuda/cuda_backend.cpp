// The CUDA backend: every op of backend.h on one stream of one GPU, bf16 activations with fp32
// maths and the CPU reference's bf16 rounding points (tests/gpu compare the two op by op).
//
// Memory: a caching allocator (core/context.cpp); alloc() memory is not zeroed. to_host synchronises
// the stream; from_host of a small buffer is staged through a pinned ring and copied asynchronously
// (the caller may reuse its buffer at once; a step's inputs go up without a synchronisation), larger
// ones and upload() synchronise. Ops only enqueue work; synchronize() and to_host wait and report
// kernel-detected input errors.
//
// Where results can differ from the CPU backend (and by how much) — the GPU tests' tolerances:
//  * GEMMs (matmul, attention scores and P.V, router, experts) sum in another order than the CPU's
//    fixed 8-way dot product, so a bf16 output occasionally rounds the other way (1 ulp).
//  * Sums of many terms in fp32 (attention softmax denominators, the self-conditioning softmax sum
//    here taken in double) differ in the last bits, which moves a bf16 probability by 1 ulp now and
//    then. The CPU's sequential fp32 sum over 262144 terms carries ~1e-5 relative error itself.
//  * fp32 libm functions (exp, tanh, cos, sin, pow) are evaluated in double and rounded once: this
//    matches glibc's (correctly rounded in almost all cases) fp32 results nearly always.
// Every other op is bit-identical to the CPU backend.
#include "backend/cuda/cuda_backend.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "backend/cuda/attention/attention.h"
#include "backend/cuda/core/block_copy.cuh"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/context.h"
#include "backend/cuda/core/graph.h"
#include "backend/cuda/core/kv_cache.cuh"
#include "backend/cuda/layer/elementwise.cuh"
#include "backend/cuda/layer/norm.cuh"
#include "backend/cuda/layer/qkv_prologue.cuh"
#include "backend/cuda/layer/residual.cuh"
#include "backend/cuda/layer/rope.cuh"
#include "backend/cuda/layer/vision.cuh"
#include "backend/cuda/moe/combine.cuh"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "backend/cuda/quant/fp8_gemm.h"
#include "backend/cuda/quant/weight_only.cuh"
#include "backend/cuda/quant/weight_placement.h"
#include "backend/cuda/sampler/ops.h"
#include "util/counter_rng.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma::cuda {
namespace {

const uint16_t* bf16_in(const Tensor& t, const char* op, const char* what) {
  need_type(t, ScalarType::kBF16, op, what);
  return t.ptr<uint16_t>();
}
uint16_t* bf16_out(const Tensor& t, const char* op, const char* what) {
  need_type(t, ScalarType::kBF16, op, what);
  return t.ptr<uint16_t>();
}

// The codes and scales of an op's optional FP8 rows (backend.h Fp8Rows) of a [T, K] output ({nullptr,
// nullptr}: not asked for).
std::pair<uint8_t*, float*> fp8_out(const Fp8Rows& rows, int64_t T, int64_t K, const char* op) {
  if (rows.empty()) return {nullptr, nullptr};
  check_fp8_rows(rows, T, K, Device::kCuda, op);
  return {rows.codes.ptr<uint8_t>(), rows.scales.ptr<float>()};
}

cudaMemcpyKind kind_of(Device dst, Device src) {
  if (dst == Device::kCuda) return src == Device::kCuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  return src == Device::kCuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

class CudaBackend final : public Backend {
 public:
  const Context& context() const { return ctx_; }
  CudaBackend(int device_index, const CudaOptions& resolved) : ctx_(device_index, resolved), fp8_gemm_(ctx_.stream) {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, device_index));
    name_ = fmt::format("cuda:{} ({}, sm_{}{})", device_index, p.name, p.major, p.minor);
  }

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }
  MemoryInfo memory_info() override {
    activate();
    size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return {free, total};
  }
  AllocatorStats allocator_stats() const override { return ctx_.allocator->stats(); }
  void set_allocator_ceiling(uint64_t bytes) override {
    activate();
    ctx_.allocator->set_ceiling(bytes);
  }
  void release_cached_memory() override {
    activate();
    ctx_.allocator->trim();
  }
  DeviceWorkStats work_stats() const override {
    return {ctx_.counters.launches(), ctx_.counters.syncs(), ctx_.counters.wait_ns()};
  }
  void profiler_window(bool open) override {
    activate();
    if (open) CUDA_CHECK(cudaProfilerStart());
    else CUDA_CHECK(cudaProfilerStop());
  }

  Tensor alloc(ScalarType type, std::initializer_list<int64_t> dims) override {
    activate();
    return ctx_.alloc(type, dims);
  }

  Tensor upload(const Tensor& host) override {
    activate();
    Tensor t = ctx_.alloc_shape(host.type, host.shape.data(), host.ndim);
    if (host.nbytes() > 0) {
      DG_CHECK(host.data != nullptr);
      CUDA_CHECK(cudaMemcpyAsync(t.data, host.data, host.nbytes(), kind_of(Device::kCuda, host.device), ctx_.stream));
      if (host.device == Device::kCpu) ctx_.sync();
    }
    return t;
  }

  // Where a quantised weight goes (quant/weight_placement.h); cuBLASLt is asked about a dense W8A8
  // linear's shape once per weight.
  WeightPlacement placement(const Weight& host) {
    bool dense_w8a8 = false;
    if (wants_dense_w8a8(host, ctx_.options)) {
      activate();
      dense_w8a8 = fp8_gemm_.supported(host.rows(), host.cols());
      if (!dense_w8a8 && !warned_w8a8_) {
        DG_LOG_WARN("cuda", "cuBLASLt takes no W8A8 FP8 GEMM of a [{}, {}] weight: such linears run W8A16", host.rows(),
                    host.cols());
        warned_w8a8_ = true;
      }
    }
    return weight_placement(host, ctx_.options, dense_w8a8);
  }

  // kBf16 serves quantised weights off the kernels' shape rule (K % 64, rows % 8), and dense linears
  // with DenseQuant::kBf16: bf16 speed and memory for those weights, and FP8-dynamic's activation
  // quantisation is not emulated. The device weight's `act` says what the device computes: kFp8Token
  // only for kW8A8 (which matmul reads as the row-major layout), kNone for the W8A16 kernel's repacked
  // weights.
  Weight upload_weight(const Weight& host) override {
    if (!host.quantized()) return Backend::upload_weight(host);
    switch (placement(host)) {
      case WeightPlacement::kW8A8:
        DG_CHECK(host.data.device == Device::kCpu);
        return Backend::upload_weight(host);
      case WeightPlacement::kKernel: return Backend::upload_weight(repacked_for_kernels(host));
      case WeightPlacement::kBf16: break;
    }
    DG_CHECK(host.data.device == Device::kCpu);
    if (!warned_dequant_) {
      // Dense linears with DenseQuant::kBf16 are dequantised by request; a weight off the kernels'
      // shape rule is worth a warning.
      if (host.rows() % 8 == 0 && host.cols() % 64 == 0)
        DG_LOG_INFO("cuda", "{} linears are dequantised to bf16 at load (dense quant bf16)", weight_format_name(host.format));
      else
        DG_LOG_WARN("cuda", "{} weights off the quantised kernels' shape rule are dequantised to bf16 at load",
                    weight_format_name(host.format));
      warned_dequant_ = true;
    }
    return Weight(upload(dequantized_bf16(host)));
  }

  void to_host(const Tensor& src, void* dst) override {
    if (src.nbytes() == 0) return;
    if (src.device == Device::kCpu) {  // e.g. the MoE's host debug outputs
      std::memcpy(dst, src.data, src.nbytes());
      return;
    }
    activate();
    const auto t0 = std::chrono::steady_clock::now();  // a copy into pageable memory waits in the call
    CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, ctx_.stream));
    ctx_.counters.add_wait(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()));
    ctx_.sync();
  }

  void from_host(const Tensor& dst, const void* src) override {
    if (dst.nbytes() == 0) return;
    if (dst.device == Device::kCpu) {
      std::memcpy(dst.data, src, dst.nbytes());
      return;
    }
    activate();
    // Small buffers (a step's input block, canvases) go through the pinned staging ring: no
    // synchronisation inside a step. Input errors the kernels find surface at the next sync.
    ctx_.upload_small(dst.data, src, dst.nbytes());
  }

  void copy(const Tensor& dst, const Tensor& src) override {
    DG_CHECK(dst.nbytes() == src.nbytes());
    if (src.nbytes() == 0) return;
    activate();
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), kind_of(dst.device, src.device), ctx_.stream));
    if (dst.device == Device::kCpu || src.device == Device::kCpu) ctx_.sync();
  }

  void copy_columns(const Tensor& dst, const Tensor& src, int64_t first) override {
    const int64_t T = dst.dim(0), n = T > 0 ? dst.numel() / T : 0, m = T > 0 ? src.numel() / T : 0;
    DG_CHECK(dst.type == src.type && src.dim(0) == T && first >= 0 && first + n <= m);
    DG_CHECK(dst.device == Device::kCuda && src.device == Device::kCuda);
    if (T == 0 || n == 0) return;
    activate();
    const size_t es = scalar_size(src.type);
    CUDA_CHECK(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(n) * es, src.ptr<uint8_t>() + static_cast<size_t>(first) * es,
                                 static_cast<size_t>(m) * es, static_cast<size_t>(n) * es, static_cast<size_t>(T),
                                 cudaMemcpyDeviceToDevice, ctx_.stream));
  }

  void synchronize() override {
    activate();
    ctx_.sync();
  }

  void embed(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) override {
    activate();
    need_type(ids, ScalarType::kI32, "embed", "ids");
    DG_CHECK(table.ndim == 2);
    const int64_t T = ids.numel(), V = table.dim(0), H = table.dim(1);
    DG_CHECK(out.numel() == T * H);
    launch_embed(ids.ptr<int32_t>(), T, bf16_in(table, "embed", "table"), V, H, scale, bf16_out(out, "embed", "out"),
                 ctx_.error_dev, ctx_.stream);
  }

  // ---- the sharded ops of tensor parallelism (backend.h; parallel/shard_kernels.cuh) ----
  void embed_shard(const Tensor& ids, const Tensor& table, int64_t first, int64_t vocab_total, float scale,
                   const Tensor& out) override {
    activate();
    need_type(ids, ScalarType::kI32, "embed_shard", "ids");
    DG_CHECK(table.ndim == 2 && first >= 0 && first + table.dim(0) <= vocab_total);
    const int64_t T = ids.numel(), H = table.dim(1);
    DG_CHECK(out.numel() == T * H);
    launch_embed_shard(ids.ptr<int32_t>(), T, bf16_in(table, "embed_shard", "table"), first, table.dim(0),
                       vocab_total, H, scale, bf16_out(out, "embed_shard", "out"), ctx_.error_dev,
                       ctx_.stream);
  }

  // Per block one cuBLAS GEMM with f32 output (x's and w's block b: columns / rows [b Kb, (b + 1) Kb)) into
  // out[b]: the same call for a block whichever rank holds it.
  void matmul_kn_blocks(const Tensor& x, const Tensor& w, int blocks, const Tensor& out) override {
    activate();
    const int64_t T = x.dim(0), K = x.dim(-1), N = w.dim(-1), B = blocks;
    DG_CHECK(w.ndim == 2 && w.dim(0) == K && x.numel() == T * K && B >= 1 && K % B == 0);
    need_type(out, ScalarType::kF32, "matmul_kn_blocks", "out");
    DG_CHECK(out.numel() == T * N * B);
    if (T == 0 || N == 0) return;
    const int64_t Kb = K / B;
    const uint16_t* xa = bf16_in(x, "matmul_kn_blocks", "x");
    const uint16_t* wa = bf16_in(w, "matmul_kn_blocks", "w");
    for (int64_t b = 0; b < B; ++b) {
      Gemm g;
      g.a = xa + b * Kb;
      g.lda = K;
      g.b = wa + b * Kb * N;
      g.b_nk = false;
      g.ldb = N;
      g.c = out.ptr<float>() + b * T * N;
      g.c_f32 = true;
      g.ldc = N;
      g.M = T;
      g.N = N;
      g.K = Kb;
      gemm(ctx_, g);
    }
  }

  void sum_blocks(const Tensor& partials, const Tensor& out) override {
    activate();
    need_type(partials, ScalarType::kF32, "sum_blocks", "partials");
    const int64_t B = partials.dim(0), M = out.numel();
    DG_CHECK(partials.numel() == M * B);
    launch_sum_blocks(partials.ptr<float>(), M, B, bf16_out(out, "sum_blocks", "out"), ctx_.stream);
  }

  void rmsnorm(const Tensor& x, const Tensor* weight, float eps, const Tensor& out) override {
    activate();
    const int64_t N = x.dim(-1);
    DG_CHECK(N > 0 && out.numel() == x.numel());
    const uint16_t* w = nullptr;
    if (weight != nullptr) {
      w = bf16_in(*weight, "rmsnorm", "weight");
      DG_CHECK(weight->numel() == N);
    }
    launch_rmsnorm(bf16_in(x, "rmsnorm", "x"), w, bf16_out(out, "rmsnorm", "out"), x.numel() / N, N, eps, ctx_.stream);
  }

  void matmul(const Tensor& x, const Weight& weight, const Tensor& out) override {
    activate();
    if (weight.quantized()) {  // kept quantised by upload_weight (placement): W8A8, or W4A16 / W8A16
      const int64_t T = x.dim(0), K = x.dim(-1), N = weight.rows();
      DG_CHECK(weight.data.ndim == 2 && weight.cols() == K && x.numel() == T * K && out.numel() == T * N);
      const bool fp8 = weight.format == WeightFormat::kFp8Channel;
      if (fp8 && weight.act == ActQuant::kFp8Token) {  // W8A8: e4m3 activations, cuBLASLt
        const uint16_t* xp = bf16_in(x, "matmul", "x");
        DG_CHECK((reinterpret_cast<uintptr_t>(xp) & 15u) == 0 && K % 16 == 0);
        const Fp8Rows xq{ctx_.alloc(ScalarType::kU8, {T, K}), ctx_.alloc(ScalarType::kF32, {T})};
        launch_quantize_fp8_rows(xp, T, K, xq.codes.ptr<uint8_t>(), xq.scales.ptr<float>(), ctx_.stream);
        return matmul_fp8(xq, weight, out);
      }
      DG_CHECK(fp8 ? grouped_fp8_supported(N, K, weight.data.data)
                   : grouped_fp4_supported(N, K, weight.data.data, weight.block.data));
      launch_dense_quant(fp8, bf16_in(x, "matmul", "x"), weight.data.ptr<uint8_t>(),
                         fp8 ? nullptr : weight.block.ptr<uint8_t>(), weight.row_scale.ptr<float>(), T, N, K,
                         bf16_out(out, "matmul", "out"), ctx_.options.quant_dense, ctx_.stream);
      return;
    }
    const Tensor& w = bf16_weight(weight, "matmul", "w");
    const int64_t T = x.dim(0), K = x.dim(-1), N = w.dim(0);
    DG_CHECK(w.ndim == 2 && w.dim(-1) == K && x.numel() == T * K && out.numel() == T * N);
    Gemm g;
    g.a = bf16_in(x, "matmul", "x");
    g.lda = K;
    g.b = w.ptr<uint16_t>();
    g.ldb = K;
    g.c = bf16_out(out, "matmul", "out");
    g.ldc = N;
    g.M = T;
    g.N = N;
    g.K = K;
    gemm(ctx_, g);
  }

  // The W8A8 GEMM (cuBLASLt) of rows quantised upstream: what matmul runs after its own quantisation.
  void matmul_fp8(const Fp8Rows& x, const Weight& weight, const Tensor& out) override {
    activate();
    const int64_t T = x.codes.ndim > 0 ? x.codes.dim(0) : 0, K = weight.cols(), N = weight.rows();
    check_fp8_input(x, weight, T, Device::kCuda, "matmul_fp8");
    DG_CHECK(weight.data.ndim == 2 && out.numel() == T * N);
    fp8_gemm_.run(x.codes.ptr<uint8_t>(), x.scales.ptr<float>(), weight.data.ptr<uint8_t>(),
                  weight.row_scale.ptr<float>(), T, N, K, bf16_out(out, "matmul_fp8", "out"));
  }

  // launch_quantize_fp8_rows where its layout holds (K % 8, 16-byte aligned rows), else the host reference.
  void quantize_fp8_rows(const Tensor& x, const Fp8Rows& out) override {
    activate();
    const int64_t T = x.ndim > 0 ? x.dim(0) : 0, K = T > 0 ? x.numel() / T : 0;
    const uint16_t* xp = bf16_in(x, "quantize_fp8_rows", "x");
    const auto [q, s] = fp8_out(out, T, K, "quantize_fp8_rows");
    if (K % 8 != 0 || ((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(q)) & 15u) != 0)
      return Backend::quantize_fp8_rows(x, out);
    launch_quantize_fp8_rows(xp, T, K, q, s, ctx_.stream);
  }

  // K (the vocabulary of the self-conditioning GEMM) in kVocabBlocks blocks summed in block order, as
  // the CPU's: exactly what a vocabulary-sharded rank computes with matmul_kn_blocks + sum_blocks.
  void matmul_kn(const Tensor& x, const Tensor& w, const Tensor& out) override {
    activate();
    const int64_t T = x.dim(0), K = x.dim(-1), N = w.dim(-1);
    DG_CHECK(w.ndim == 2 && w.dim(0) == K && x.numel() == T * K && out.numel() == T * N);
    if (K % kVocabBlocks == 0 && T > 0 && N > 0) {
      Tensor parts = ctx_.alloc(ScalarType::kF32, {kVocabBlocks, T, N});
      matmul_kn_blocks(x, w, kVocabBlocks, parts);
      sum_blocks(parts, out);
      return;
    }
    Gemm g;
    g.a = bf16_in(x, "matmul_kn", "x");
    g.lda = K;
    g.b = bf16_in(w, "matmul_kn", "w");
    g.b_nk = false;
    g.ldb = N;
    g.c = bf16_out(out, "matmul_kn", "out");
    g.ldc = N;
    g.M = T;
    g.N = N;
    g.K = K;
    gemm(ctx_, g);
  }

  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) override {
    activate();
    DG_CHECK(x.ndim == 3);
    const int64_t T = x.dim(0), NH = x.dim(1), D = x.dim(2);
    DG_CHECK(D % 2 == 0 && D <= 8192);
    need_type(positions, ScalarType::kI32, "rope", "positions");
    need_type(inv_freq, ScalarType::kF32, "rope", "inv_freq");
    DG_CHECK(inv_freq.numel() == D / 2 && positions.numel() == T);
    launch_rope(bf16_out(x, "rope", "x"), positions.ptr<int32_t>(), inv_freq.ptr<float>(), T, NH, D, ctx_.stream);
  }

  void rope_2d(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) override {
    activate();
    DG_CHECK(x.ndim == 3);
    const int64_t T = x.dim(0), NH = x.dim(1), D = x.dim(2);
    DG_CHECK(D % 4 == 0 && D <= 8192);
    need_type(positions, ScalarType::kI32, "rope_2d", "positions");
    need_type(inv_freq, ScalarType::kF32, "rope_2d", "inv_freq");
    DG_CHECK(inv_freq.numel() == D / 4 && positions.numel() == 2 * T);
    launch_rope_2d(bf16_out(x, "rope_2d", "x"), positions.ptr<int32_t>(), inv_freq.ptr<float>(), T, NH, D,
                   ctx_.stream);
  }

  void vision_pool(const VisionPoolArgs& a) override {
    activate();
    DG_CHECK(a.kernel >= 1 && a.std_bias.empty() == a.std_scale.empty());
    const int64_t H = a.x.dim(-1), N = a.x.numel() / H, S = a.out.numel() / H, k = a.kernel;
    const uint16_t* x = bf16_in(a.x, "vision_pool", "x");
    uint16_t* out = bf16_out(a.out, "vision_pool", "out");
    const uint16_t* bias = a.std_bias.empty() ? nullptr : bf16_in(a.std_bias, "vision_pool", "std_bias");
    const uint16_t* scale = a.std_scale.empty() ? nullptr : bf16_in(a.std_scale, "vision_pool", "std_scale");
    DG_CHECK(!bias || (a.std_bias.numel() == H && a.std_scale.numel() == H));
    for (const VisionPoolItem& it : a.items) {
      const int64_t gw = it.grid_w, gh = it.grid_h;
      DG_CHECK(gw > 0 && gh > 0 && gw % k == 0 && gh % k == 0 && it.row_first >= 0 &&
               it.row_first + gw * gh <= N);
      DG_CHECK(it.out_first >= 0 && it.out_first + (gw / k) * (gh / k) <= S);
      launch_vision_pool(x, it.row_first, gh, gw, k, H, a.scale, bias, scale, out, it.out_first, ctx_.stream);
    }
  }

  void attn_residual(const AttnResidualArgs& a) override {
    activate();
    const int64_t H = a.x.dim(-1), T = a.x.numel() / std::max<int64_t>(H, 1);
    auto opt = [](const Tensor& t) { return t.empty() ? nullptr : t.ptr<uint16_t>(); };
    const char* op = "attn_residual";
    DG_CHECK(a.o.numel() == T * H && a.h1.numel() == T * H && a.out_a.numel() == T * H && a.out_b.numel() == T * H);
    DG_CHECK(a.post_norm.numel() == H && a.norm_a.numel() == H && a.norm_b.numel() == H);
    DG_CHECK(a.o_normed.empty() || a.o_normed.numel() == T * H);
    const uint16_t* x = bf16_in(a.x, op, "x");
    const uint16_t* o = bf16_in(a.o, op, "o");
    const uint16_t* wp = bf16_in(a.post_norm, op, "post_norm");
    const uint16_t* wa = bf16_in(a.norm_a, op, "norm_a");
    const uint16_t* wb = bf16_in(a.norm_b, op, "norm_b");
    uint16_t* h1 = bf16_out(a.h1, op, "h1");
    uint16_t* oa = bf16_out(a.out_a, op, "out_a");
    uint16_t* ob = bf16_out(a.out_b, op, "out_b");
    uint16_t* on = opt(a.o_normed);
    DG_CHECK(a.router_out.empty() == a.router_scale.empty());
    const uint16_t* wr = nullptr;
    uint16_t* z = nullptr;
    if (!a.router_out.empty()) {
      DG_CHECK(a.router_scale.numel() == H && a.router_out.numel() == T * H);
      wr = bf16_in(a.router_scale, op, "router_scale");
      z = bf16_out(a.router_out, op, "router_out");
    }
    const auto [qa, sa] = fp8_out(a.out_a_fp8, T, H, op);
    const auto [qb, sb] = fp8_out(a.out_b_fp8, T, H, op);
    if (!residual_fusable(H, {x, o, wp, wa, wb, h1, oa, ob, on, wr, z, qa, qb}))
      return Backend::attn_residual(a);
    launch_attn_residual(x, o, wp, h1, wa, oa, wb, ob, on, wr, a.router_root, z, qa, sa, qb, sb, T, H, a.eps,
                         ctx_.stream);
  }

  void ffn_residual(const FfnResidualArgs& a) override {
    activate();
    const int64_t H = a.h1.dim(-1), T = a.h1.numel() / std::max<int64_t>(H, 1);
    auto opt = [](const Tensor& t) { return t.empty() ? nullptr : t.ptr<uint16_t>(); };
    const char* op = "ffn_residual";
    const bool slots = !a.m2_slots.empty();
    DG_CHECK(a.m1.numel() == T * H && a.out.numel() == T * H &&
             (slots ? a.m2.empty() : a.m2.numel() == T * H));
    DG_CHECK(a.norm1.numel() == H && a.norm2.numel() == H && a.norm_f.numel() == H);
    for (const Tensor* t : {&a.m1n, &a.m2n, &a.f}) DG_CHECK(t->empty() || t->numel() == T * H);
    const uint16_t* h1 = bf16_in(a.h1, op, "h1");
    const uint16_t* m1 = bf16_in(a.m1, op, "m1");
    MoeSlotRows m2_slots;
    if (slots) {
      const int64_t K = a.m2_order.ndim == 2 ? a.m2_order.dim(1) : 0;
      DG_CHECK(K >= 1 && a.m2_order.dim(0) == T && a.m2_slots.numel() == T * K * H);
      need_type(a.m2_order, ScalarType::kI32, op, "m2_order");
      m2_slots =
          MoeSlotRows{bf16_in(a.m2_slots, op, "m2_slots"), a.m2_order.ptr<int32_t>(), static_cast<int>(K)};
    }
    const uint16_t* m2 = slots ? nullptr : bf16_in(a.m2, op, "m2");
    const uint16_t* w1 = bf16_in(a.norm1, op, "norm1");
    const uint16_t* w2 = bf16_in(a.norm2, op, "norm2");
    const uint16_t* wf = bf16_in(a.norm_f, op, "norm_f");
    uint16_t* out = bf16_out(a.out, op, "out");
    uint16_t *m1n = opt(a.m1n), *m2n = opt(a.m2n), *f = opt(a.f);
    DG_CHECK(a.next_out.empty() == a.next_norm.empty());
    const uint16_t* wn = nullptr;
    uint16_t* next = nullptr;
    if (!a.next_out.empty()) {
      DG_CHECK(a.next_norm.numel() == H && a.next_out.numel() == T * H);
      wn = bf16_in(a.next_norm, op, "next_norm");
      next = bf16_out(a.next_out, op, "next_out");
    }
    DG_CHECK(a.next_out_fp8.empty() || next != nullptr);
    const auto [qn, sn] = fp8_out(a.next_out_fp8, T, H, op);
    if (!residual_fusable(H, {h1, m1, m2, m2_slots.rows, w1, w2, wf, out, m1n, m2n, f, wn, next, qn})) {
      if (!slots) return Backend::ffn_residual(a);
      FfnResidualArgs summed = a;  // the composed junction, on the slots' sum
      summed.m2 = ctx_.alloc(ScalarType::kBF16, {T, H});
      summed.m2_slots = summed.m2_order = Tensor{};
      launch_moe_combine(m2_slots.rows, m2_slots.order, T, m2_slots.top_k, H, summed.m2.ptr<uint16_t>(),
                         ctx_.stream);
      return Backend::ffn_residual(summed);
    }
    launch_ffn_residual(h1, m1, m2, m2_slots, w1, w2, wf, a.scale, out, m1n, m2n, f, wn, next, qn, sn, T, H,
                        a.eps, ctx_.stream);
  }

  void qkv_prologue(const QkvPrologueArgs& a) override {
    activate();
    const char* op = "qkv_prologue";
    DG_CHECK(a.q.ndim == 3 && a.k.ndim == 3 && a.v.ndim == 3);
    const int64_t T = a.q.dim(0), Hq = a.q.dim(1), D = a.q.dim(2), Hkv = a.k.dim(1);
    DG_CHECK(a.k.dim(0) == T && a.k.dim(2) == D && a.v.dim(0) == T && a.v.dim(1) == Hkv && a.v.dim(2) == D);
    const uint16_t* qkv = a.qkv.empty() ? nullptr : bf16_in(a.qkv, op, "qkv");
    DG_CHECK(a.qkv.empty() || a.qkv.numel() == T * (Hq + (a.k_eq_v ? 1 : 2) * Hkv) * D);
    DG_CHECK(D % 2 == 0 && a.q_norm.numel() == D && a.k_norm.numel() == D);
    need_type(a.positions, ScalarType::kI32, op, "positions");
    need_type(a.inv_freq, ScalarType::kF32, op, "inv_freq");
    DG_CHECK(a.positions.numel() == T && a.inv_freq.numel() == D / 2);
    uint16_t* q = bf16_out(a.q, op, "q");
    uint16_t* k = bf16_out(a.k, op, "k");
    uint16_t* v = bf16_out(a.v, op, "v");
    const uint16_t* wq = bf16_in(a.q_norm, op, "q_norm");
    const uint16_t* wk = bf16_in(a.k_norm, op, "k_norm");
    if (!qkv_prologue_fusable(D, {q, k, v, wq, wk, qkv})) return Backend::qkv_prologue(a);
    launch_qkv_prologue(q, k, v, a.k_eq_v, wq, wk, a.positions.ptr<int32_t>(), a.inv_freq.ptr<float>(), T, Hq, Hkv, D,
                        a.eps, ctx_.stream, qkv);
  }

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    activate();
    DG_CHECK(a.numel() == b.numel() && a.numel() == out.numel());
    launch_add(bf16_in(a, "add", "a"), bf16_in(b, "add", "b"), bf16_out(out, "add", "out"), a.numel(), ctx_.stream);
  }

  void scale(const Tensor& x, float s, const Tensor& out) override {
    activate();
    DG_CHECK(x.numel() == out.numel());
    launch_scale(bf16_in(x, "scale", "x"), s, bf16_out(out, "scale", "out"), x.numel(), ctx_.stream);
  }

  void mul(const Tensor& a, const Tensor& b, const Tensor& out) override {
    activate();
    const int64_t n = a.numel(), m = b.numel();
    DG_CHECK(m > 0 && n % m == 0 && out.numel() == n);
    launch_mul(bf16_in(a, "mul", "a"), bf16_in(b, "mul", "b"), bf16_out(out, "mul", "out"), n, m, ctx_.stream);
  }

  void gelu_mul(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    activate();
    DG_CHECK(gate.numel() == up.numel() && gate.numel() == out.numel());
    launch_gelu_mul(bf16_in(gate, "gelu_mul", "gate"), bf16_in(up, "gelu_mul", "up"), bf16_out(out, "gelu_mul", "out"),
                    gate.numel(), ctx_.stream);
  }

  void gelu_mul_halves(const Tensor& gate_up, const Tensor& out, const Fp8Rows& out_fp8) override {
    activate();
    const char* op = "gelu_mul_halves";
    const int64_t T = gate_up.dim(0), I = out.dim(-1);
    DG_CHECK(gate_up.numel() == 2 * out.numel() && out.dim(0) == T && out.numel() == T * I);
    const uint16_t* gu = bf16_in(gate_up, op, "gate_up");
    uint16_t* o = bf16_out(out, op, "out");
    const auto [q, s] = fp8_out(out_fp8, T, I, op);
    if (q == nullptr) return launch_gelu_mul_halves(gu, o, T, I, ctx_.stream);
    if (!gelu_mul_halves_fp8_fusable(I, {gu, o, q})) return Backend::gelu_mul_halves(gate_up, out, out_fp8);
    launch_gelu_mul_halves_fp8(gu, o, q, s, T, I, ctx_.stream);
  }

  void attention(const AttentionArgs& a) override {
    activate();
    cuda::attention(ctx_, a);
  }

  void attention_batch(const AttentionBatchArgs& a) override {
    activate();
    if (cuda::attention_batch(ctx_, a)) return;
    // The per-item path launches by the host's item table: a recording would replay these items' shapes.
    if (ctx_.capturing()) fail(ErrorKind::kUnsupported, "attention_batch: no one-launch kernel for this shape to record");
    Backend::attention_batch(a);
  }

  void moe(const MoeArgs& a) override {
    activate();
    cuda::moe(ctx_, a);  // expert parallelism (MoeArgs::collective) included
  }

  void sampler(const SamplerArgs& a) override { sampler_batch(std::span<const SamplerArgs>(&a, 1)); }

  void sampler_batch(std::span<const SamplerArgs> canvases) override {
    activate();
    // A tensor-parallel model gathers the vocabulary and runs this sampler over all of it
    // (DiffusionGemma::gathers_vocabulary): a vocabulary shard never reaches it.
    for (const SamplerArgs& a : canvases)
      if (a.collective != nullptr || a.vocab_first != 0)
        fail(ErrorKind::kInternal,
             "CUDA sampler: a vocabulary shard (the model gathers the vocabulary first)");
    if (!canvases.empty()) cuda::sampler_batch(ctx_, canvases, nullptr);
  }

  void decide(const DecideArgs& a) override { decide_batch(std::span<const DecideArgs>(&a, 1)); }

  // ---- a step's arguments in device memory, graphs ----
  size_t encoded_sampler_bytes(int canvases) const override { return cuda::encoded_sampler_bytes(canvases); }
  size_t encoded_decide_bytes(int canvases) const override { return cuda::encoded_decide_bytes(canvases); }
  void encode_sampler_args(std::span<const SamplerArgs> canvases, void* host) const override {
    cuda::encode_sampler_args(canvases, host);
  }
  void encode_decide_args(std::span<const DecideArgs> canvases, void* host) const override {
    cuda::encode_decide_args(canvases, host);
  }
  void sampler_batch_encoded(std::span<const SamplerArgs> canvases, const Tensor& encoded) override {
    activate();
    if (canvases.empty()) return;
    need_cuda(encoded, "sampler_batch_encoded", "encoded");
    DG_CHECK(encoded.nbytes() >= encoded_sampler_bytes(static_cast<int>(canvases.size())) &&
             reinterpret_cast<uintptr_t>(encoded.data) % alignof(SamplerBatch) == 0);
    cuda::sampler_batch(ctx_, canvases, static_cast<const SamplerBatch*>(encoded.data));
  }
  void decide_batch_encoded(std::span<const DecideArgs> canvases, const Tensor& encoded) override {
    activate();
    if (canvases.empty()) return;
    need_cuda(encoded, "decide_batch_encoded", "encoded");
    DG_CHECK(encoded.nbytes() >= encoded_decide_bytes(static_cast<int>(canvases.size())) &&
             reinterpret_cast<uintptr_t>(encoded.data) % alignof(DecideBatch) == 0);
    cuda::decide_batch(ctx_, canvases, static_cast<const DecideBatch*>(encoded.data));
  }
  void gather_blocks(const Tensor& table, int64_t n, int64_t block_bytes, const Tensor& dst, bool zero_missing) override {
    activate();
    need_cuda(table, "gather_blocks", "table");
    need_cuda(dst, "gather_blocks", "dst");
    DG_CHECK(n >= 0 && block_bytes >= 0 && table.nbytes() >= static_cast<size_t>(n) * 8 &&
             dst.nbytes() >= static_cast<size_t>(n * block_bytes) && reinterpret_cast<uintptr_t>(table.data) % 8 == 0);
    launch_gather_blocks(static_cast<const uint64_t*>(table.data), n, block_bytes, dst.data, zero_missing, ctx_.stream);
  }
  void scatter_blocks(const Tensor& src, const Tensor& table, int64_t n, int64_t block_bytes) override {
    activate();
    need_cuda(table, "scatter_blocks", "table");
    need_cuda(src, "scatter_blocks", "src");
    DG_CHECK(n >= 0 && block_bytes >= 0 && table.nbytes() >= static_cast<size_t>(n) * 8 &&
             src.nbytes() >= static_cast<size_t>(n * block_bytes) && reinterpret_cast<uintptr_t>(table.data) % 8 == 0);
    launch_scatter_blocks(src.data, static_cast<const uint64_t*>(table.data), n, block_bytes, ctx_.stream);
  }
  std::unique_ptr<StepGraph> capture(const std::function<void()>& body) override {
    activate();
    return capture_graph(ctx_, body);
  }
  bool supports_graphs() const override { return true; }
  // The sampler masks a guided gap's rows and decide walks its tokens (sampler/stats_kernel.cuh,
  // sampler/decide_kernel.cuh).
  bool supports_guided_gaps() const override { return true; }
  // The FFN junction sums the MoE's slot rows itself (layer/residual_kernel.cuh): one launch fewer a layer.
  bool sums_moe_slots() const override { return true; }

  void decide_batch(std::span<const DecideArgs> canvases) override {
    activate();
    cuda::decide_batch(ctx_, canvases, nullptr);
  }

  void kv_write(const Tensor& pages, const Tensor& page_table, int64_t first_pos, const Tensor& src) override {
    activate();
    DG_CHECK(pages.ndim == 4 && src.ndim == 3);
    need_type(page_table, ScalarType::kI32, "kv_write", "page_table");
    const int64_t Hkv = pages.dim(1), P = pages.dim(2), D = pages.dim(3), n = src.dim(0);
    DG_CHECK(src.dim(1) == Hkv && src.dim(2) == D && first_pos >= 0 && D % 8 == 0);
    DG_CHECK(n == 0 || (first_pos + n - 1) / P < page_table.numel());
    launch_kv_write_paged(bf16_out(pages, "kv_write", "pages"), Hkv, P, D, page_table.ptr<int32_t>(), first_pos,
                          bf16_in(src, "kv_write", "src"), n, ctx_.stream);
  }

  void fill_normal(const Tensor& t, uint64_t seed, float mean, float std) override {
    activate();
    launch_fill_normal(bf16_out(t, "fill_normal", "t"), t.numel(), rng::splitmix64(seed), mean, std, ctx_.stream);
  }

  void softcap_logits(const Tensor& logits, float softcap, const Tensor& out) override {
    activate();
    need_type(out, ScalarType::kF32, "softcap_logits", "out");
    DG_CHECK(out.numel() == logits.numel());
    launch_softcap(bf16_in(logits, "softcap_logits", "logits"), softcap, out.ptr<float>(), logits.numel(), ctx_.stream);
  }

 private:
  // The calling thread's current device must be ours for launches on our stream (engine threads may
  // differ from the thread that made the backend).
  void activate() const {
    int cur = -1;
    CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != ctx_.device) CUDA_CHECK(cudaSetDevice(ctx_.device));
  }

  Context ctx_;
  Fp8Gemm fp8_gemm_;  // the W8A8 linears' cuBLASLt state (made on first use)
  std::string name_;
  bool warned_dequant_ = false;
  bool warned_w8a8_ = false;
};

}  // namespace

std::unique_ptr<Backend> create_backend(int device_index, const CudaOptions& resolved) {
  return std::make_unique<CudaBackend>(device_index, resolved);
}

const Context& context_of(Backend& backend) {
  auto* b = dynamic_cast<CudaBackend*>(&backend);
  if (b == nullptr) fail(ErrorKind::kInvalidArgument, "the {} backend is not a CUDA backend", backend.name());
  return b->context();
}

}  // namespace dgemma::cuda
