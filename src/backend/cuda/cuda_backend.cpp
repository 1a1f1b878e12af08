// The CUDA backend: every op of backend.h on one stream of one GPU, bf16 activations with fp32
// maths and the CPU reference's bf16 rounding points (tests/gpu compare the two op by op).
//
// Memory: a caching allocator (cuda_context.cpp); alloc() memory is not zeroed. to_host synchronises
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
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

#include "backend/cuda/block_copy.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_graph.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/decide.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/grouped_moe_fp4.cuh"
#include "backend/cuda/grouped_moe_w8a8.cuh"
#include "backend/cuda/quant_layout.h"
#include "backend/cuda/kv_cache.cuh"
#include "backend/cuda/norm_rope.cuh"
#include "backend/cuda/qkv_prologue.cuh"
#include "backend/cuda/sampler.cuh"
#include "backend/cpu/quant.h"
#include "backend/decide_rules.h"
#include "util/counter_rng.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/log.h"
#include "util/parallel.h"

namespace dgemma::cuda {

namespace {

// One canvas's sampler arguments, validated, as the kernels take them.
SamplerLaunch sampler_launch(const SamplerArgs& a) {
  const char* op = "sampler";
  need_type(a.logits, ScalarType::kBF16, op, "logits");
  DG_CHECK(a.logits.ndim == 2);
  const int64_t C = a.logits.dim(0), V = a.logits.dim(1);
  DG_CHECK(V > 0 && V < INT_MAX);
  need_type(a.entropy, ScalarType::kF32, op, "entropy");
  need_type(a.argmax, ScalarType::kI32, op, "argmax");
  need_type(a.sample, ScalarType::kI32, op, "sample");
  DG_CHECK(a.entropy.numel() == C && a.argmax.numel() == C && a.sample.numel() == C);
  SamplerLaunch s;
  s.logits = a.logits.ptr<uint16_t>();
  s.C = C;
  s.V = V;
  s.softcap = a.softcap;
  s.temperature = a.temperature;
  s.sample_key = a.sample_key;
  s.want_probs = a.want_probs;
  s.want_sample = a.want_sample;
  s.entropy = a.entropy.ptr<float>();
  s.argmax = a.argmax.ptr<int32_t>();
  s.sample = a.sample.ptr<int32_t>();
  auto optional = [&](const Tensor& t, const char* what) -> float* {
    if (t.empty()) return nullptr;
    need_type(t, ScalarType::kF32, op, what);
    DG_CHECK(t.numel() == C);
    return t.ptr<float>();
  };
  s.argmax_logprob = optional(a.argmax_logprob, "argmax_logprob");
  s.argmax_gap = optional(a.argmax_gap, "argmax_gap");
  s.sample_gap = optional(a.sample_gap, "sample_gap");
  s.sample_floor = optional(a.sample_floor, "sample_floor");
  s.filter = a.filter;
  if (a.top_n > 0) {
    DG_CHECK(a.top_n <= kMaxTopN && a.top_n <= V);
    need_type(a.top_ids, ScalarType::kI32, op, "top_ids");
    need_type(a.top_logprobs, ScalarType::kF32, op, "top_logprobs");
    DG_CHECK(a.top_ids.numel() == C * a.top_n && a.top_logprobs.numel() == C * a.top_n);
    s.top_n = a.top_n;
    s.top_ids = a.top_ids.ptr<int32_t>();
    s.top_logprobs = a.top_logprobs.ptr<float>();
  }
  return s;
}

}  // namespace

// The launch groups of a step's canvases (kMaxSamplerBatch each), validated, as the kernels read them.
std::vector<SamplerBatch> sampler_batches(std::span<const SamplerArgs> canvases) {
  std::vector<SamplerLaunch> all;
  all.reserve(canvases.size());
  for (const SamplerArgs& a : canvases) {
    all.push_back(sampler_launch(a));
    if (all.back().V != all.front().V)
      fail(ErrorKind::kInternal, "sampler_batch: canvases of {} and {} columns", all.front().V, all.back().V);
  }
  std::vector<SamplerBatch> groups;
  for (size_t i = 0; i < all.size(); i += kMaxSamplerBatch)
    groups.push_back(make_sampler_batch(all.data() + i, static_cast<int>(std::min<size_t>(kMaxSamplerBatch, all.size() - i))));
  return groups;
}

size_t encoded_sampler_bytes(int canvases) {
  return static_cast<size_t>((canvases + kMaxSamplerBatch - 1) / kMaxSamplerBatch) * sizeof(SamplerBatch);
}

void encode_sampler_args(std::span<const SamplerArgs> canvases, void* host) {
  const std::vector<SamplerBatch> groups = sampler_batches(canvases);
  std::memcpy(host, groups.data(), groups.size() * sizeof(SamplerBatch));
}

// One launch per pass for each group; the kernels read group g at encoded + g (device memory), or, without
// `encoded`, from a copy sent up through the staging ring ahead of the launches.
void sampler_batch(const Context& ctx, std::span<const SamplerArgs> canvases, const SamplerBatch* encoded) {
  const std::vector<SamplerBatch> groups = sampler_batches(canvases);
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t ws_bytes = sampler_workspace_bytes(groups[g]);
    const size_t args_at = (ws_bytes + 255) / 256 * 256;
    Tensor workspace = ctx.alloc(ScalarType::kU8, {static_cast<int64_t>(args_at + (encoded ? 0 : sizeof(SamplerBatch)))});
    const SamplerBatch* dev = encoded + g;
    if (encoded == nullptr) {
      dev = reinterpret_cast<const SamplerBatch*>(workspace.ptr<uint8_t>() + args_at);
      ctx.upload_small(const_cast<SamplerBatch*>(dev), &groups[g], sizeof(SamplerBatch));
    }
    launch_sampler(groups[g], dev, workspace.data, ctx.stream);
  }
}

void sampler(const Context& ctx, const SamplerArgs& a) { sampler_batch(ctx, std::span<const SamplerArgs>(&a, 1), nullptr); }

namespace {

const uint16_t* bf16_in(const Tensor& t, const char* op, const char* what) {
  need_type(t, ScalarType::kBF16, op, what);
  return t.ptr<uint16_t>();
}
uint16_t* bf16_out(const Tensor& t, const char* op, const char* what) {
  need_type(t, ScalarType::kBF16, op, what);
  return t.ptr<uint16_t>();
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

  // Where a quantised weight goes (CudaOptions::dense_quant and fp8_experts): the one rule.
  enum class Placement {
    kW8A8,    // row-major E4M3 as in the checkpoint: cuBLASLt's FP8 GEMM (fp8_gemm.h) or the W8A8 experts
    kKernel,  // repacked for the W4A16 / W8A16 kernels (quant_layout.h)
    kBf16,    // dequantised exactly, rounded to bf16 once
  };
  Placement placement(const Weight& host) {
    const bool fp8 = host.format == WeightFormat::kFp8Channel;
    const bool kernel_shape = host.rows() % 8 == 0 && host.cols() % 64 == 0;
    if (host.data.ndim == 3) {  // expert stacks: W8A8 on FP8 wgmma, else the W8A16 / W4A16 kernels
      if (fp8 && host.act == ActQuant::kFp8Token && ctx_.options.fp8_experts == Fp8Experts::kW8A8 &&
          grouped_w8a8_supported(host.rows(), host.cols(), nullptr))
        return Placement::kW8A8;
      return kernel_shape ? Placement::kKernel : Placement::kBf16;
    }
    const DenseQuant path = ctx_.options.dense_quant;
    if (path == DenseQuant::kW8A8 && fp8 && host.act == ActQuant::kFp8Token) {
      activate();
      if (fp8_gemm_.supported(host.rows(), host.cols())) return Placement::kW8A8;
      if (!warned_w8a8_) {
        DG_LOG_WARN("cuda", "cuBLASLt takes no W8A8 FP8 GEMM of a [{}, {}] weight: such linears run W8A16", host.rows(),
                    host.cols());
        warned_w8a8_ = true;
      }
    }
    return path != DenseQuant::kBf16 && kernel_shape ? Placement::kKernel : Placement::kBf16;
  }

  // kBf16 serves quantised weights off the kernels' shape rule (K % 64, rows % 8), and dense linears
  // with DenseQuant::kBf16: the weight is dequantised exactly on the host (the CPU reference,
  // fp32) and rounded to bf16 once, then served by the bf16 kernels: bf16 speed and memory for those
  // weights, and FP8-dynamic's activation quantisation is not emulated. The device weight's `act`
  // says what the device computes: kFp8Token only for kW8A8 (which matmul reads as the row-major
  // layout), kNone for the W8A16 kernel's repacked weights.
  Weight upload_weight(const Weight& host) override {
    if (!host.quantized()) return Backend::upload_weight(host);
    const Placement where = placement(host);
    if (where == Placement::kW8A8) {
      DG_CHECK(host.data.device == Device::kCpu);
      return Backend::upload_weight(host);
    }
    if (where == Placement::kKernel) {
      Weight w = host;
      w.act = ActQuant::kNone;  // W4A16 / W8A16: bf16 activations
      if (host.format == WeightFormat::kNvfp4)
        DG_CHECK(host.block.device == Device::kCpu && host.block.numel() == host.experts() * host.rows() * (host.cols() / 16));
      Tensor bytes = host.data.ndim == 3 ? host_tensor(host.data.type, {host.data.dim(0), host.data.dim(1), host.data.dim(2)})
                                         : host_tensor(host.data.type, {host.data.dim(0), host.data.dim(1)});
      const int64_t n = static_cast<int64_t>(bytes.nbytes()), chunk = int64_t{1} << 20;  // whole rows per chunk
      const int64_t row = host.data.dim(-1), rows_per_chunk = std::max<int64_t>(1, chunk / row);
      const int64_t n_rows = n / row;
      parallel_for(static_cast<size_t>((n_rows + rows_per_chunk - 1) / rows_per_chunk), [&](size_t b, size_t e) {
        for (size_t c = b; c < e; ++c) {
          const int64_t r0 = static_cast<int64_t>(c) * rows_per_chunk, r1 = std::min(n_rows, r0 + rows_per_chunk);
          std::memcpy(bytes.ptr<uint8_t>() + r0 * row, host.data.ptr<uint8_t>() + r0 * row, static_cast<size_t>((r1 - r0) * row));
          if (host.format == WeightFormat::kNvfp4)  // the device scale codes have no zero (quant_layout.h)
            zero_unscaled_blocks(bytes.ptr<uint8_t>() + r0 * row, host.block.ptr<uint8_t>() + r0 * (host.cols() / 16),
                                 r1 - r0, host.cols());
          repack_quant_weights(host.format == WeightFormat::kFp8Channel, bytes.ptr<uint8_t>() + r0 * row, (r1 - r0) * row);
        }
      });
      w.data = bytes;
      if (host.format == WeightFormat::kNvfp4) {  // block scales stage major (quant_layout.h), same dims
        DG_CHECK(host.block.device == Device::kCpu && host.block.numel() == host.experts() * host.rows() * (host.cols() / 16));
        Tensor scales = host_tensor(host.block.type, {host.block.numel()});
        const int64_t per_expert = host.rows() * (host.cols() / 16);
        parallel_for(static_cast<size_t>(host.experts()), [&](size_t b, size_t e) {
          for (size_t x = b; x < e; ++x)
            repack_block_scales(host.block.ptr<uint8_t>() + x * per_expert, scales.ptr<uint8_t>() + x * per_expert, 1,
                                host.rows(), host.cols());
        });
        w.block = host.block.ndim == 3 ? scales.reshape({host.experts(), host.rows(), host.cols() / 16})
                                       : scales.reshape({host.rows(), host.cols() / 16});
      }
      return Backend::upload_weight(w);
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
    const int64_t E = host.experts(), N = host.rows(), K = host.cols();
    Tensor bf = host.data.ndim == 3 ? host_tensor(ScalarType::kBF16, {E, N, K}) : host_tensor(ScalarType::kBF16, {N, K});
    parallel_for(static_cast<size_t>(E * N), [&](size_t b, size_t e) {
      std::vector<float> row(static_cast<size_t>(K));
      for (size_t r = b; r < e; ++r) {
        const int64_t ex = static_cast<int64_t>(r) / N, n = static_cast<int64_t>(r) % N;
        cpu::dequant_rows(host, ex, n, 1, row.data());
        const float rs = cpu::row_scales(host, ex)[n];
        uint16_t* dst = bf.ptr<uint16_t>() + static_cast<int64_t>(r) * K;
        for (int64_t k = 0; k < K; ++k) dst[k] = f32_to_bf16(row[static_cast<size_t>(k)] * rs);
      }
    });
    return Weight(upload(bf));
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
        Tensor q = ctx_.alloc(ScalarType::kU8, {T, K}), s = ctx_.alloc(ScalarType::kF32, {T});
        launch_quantize_fp8_rows(xp, T, K, q.ptr<uint8_t>(), s.ptr<float>(), ctx_.stream);
        fp8_gemm_.run(q.ptr<uint8_t>(), s.ptr<float>(), weight.data.ptr<uint8_t>(), weight.row_scale.ptr<float>(), T, N,
                      K, bf16_out(out, "matmul", "out"));
        return;
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

  void matmul_kn(const Tensor& x, const Tensor& w, const Tensor& out) override {
    activate();
    const int64_t T = x.dim(0), K = x.dim(-1), N = w.dim(-1);
    DG_CHECK(w.ndim == 2 && w.dim(0) == K && x.numel() == T * K && out.numel() == T * N);
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
    if (!residual_fusable(H, {x, o, wp, wa, wb, h1, oa, ob, on, wr, z})) return Backend::attn_residual(a);
    launch_attn_residual(x, o, wp, h1, wa, oa, wb, ob, on, wr, a.router_root, z, T, H, a.eps, ctx_.stream);
  }

  void ffn_residual(const FfnResidualArgs& a) override {
    activate();
    const int64_t H = a.h1.dim(-1), T = a.h1.numel() / std::max<int64_t>(H, 1);
    auto opt = [](const Tensor& t) { return t.empty() ? nullptr : t.ptr<uint16_t>(); };
    const char* op = "ffn_residual";
    DG_CHECK(a.m1.numel() == T * H && a.m2.numel() == T * H && a.out.numel() == T * H);
    DG_CHECK(a.norm1.numel() == H && a.norm2.numel() == H && a.norm_f.numel() == H);
    for (const Tensor* t : {&a.m1n, &a.m2n, &a.f}) DG_CHECK(t->empty() || t->numel() == T * H);
    const uint16_t* h1 = bf16_in(a.h1, op, "h1");
    const uint16_t* m1 = bf16_in(a.m1, op, "m1");
    const uint16_t* m2 = bf16_in(a.m2, op, "m2");
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
    if (!residual_fusable(H, {h1, m1, m2, w1, w2, wf, out, m1n, m2n, f, wn, next})) return Backend::ffn_residual(a);
    launch_ffn_residual(h1, m1, m2, w1, w2, wf, a.scale, out, m1n, m2n, f, wn, next, T, H, a.eps, ctx_.stream);
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

  void gelu_mul_halves(const Tensor& gate_up, const Tensor& out) override {
    activate();
    const int64_t T = gate_up.dim(0), I = out.dim(-1);
    DG_CHECK(gate_up.numel() == 2 * out.numel() && out.dim(0) == T && out.numel() == T * I);
    launch_gelu_mul_halves(bf16_in(gate_up, "gelu_mul_halves", "gate_up"), bf16_out(out, "gelu_mul_halves", "out"), T, I,
                           ctx_.stream);
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
    // Expert parallelism (MoeArgs::collective) has no CUDA kernels yet: refused, never approximated.
    if (a.collective != nullptr || a.expert_first != 0)
      fail(ErrorKind::kUnsupported, "tensor parallelism: the CUDA backend has no expert-parallel MoE yet");
    cuda::moe(ctx_, a);
  }

  void sampler(const SamplerArgs& a) override { sampler_batch(std::span<const SamplerArgs>(&a, 1)); }

  void sampler_batch(std::span<const SamplerArgs> canvases) override {
    activate();
    for (const SamplerArgs& a : canvases)
      if (a.collective != nullptr || a.vocab_first != 0)
        fail(ErrorKind::kUnsupported, "tensor parallelism: the CUDA backend has no vocabulary-sharded sampler yet");
    if (!canvases.empty()) cuda::sampler_batch(ctx_, canvases, nullptr);
  }

  void decide(const DecideArgs& a) override { decide_batch(std::span<const DecideArgs>(&a, 1)); }

  // ---- a step's arguments in device memory, graphs ----
  size_t encoded_sampler_bytes(int canvases) const override { return cuda::encoded_sampler_bytes(canvases); }
  size_t encoded_decide_bytes(int canvases) const override {
    return static_cast<size_t>((canvases + kMaxDecideBatch - 1) / kMaxDecideBatch) * sizeof(DecideBatch);
  }
  void encode_sampler_args(std::span<const SamplerArgs> canvases, void* host) const override {
    cuda::encode_sampler_args(canvases, host);
  }
  void encode_decide_args(std::span<const DecideArgs> canvases, void* host) const override {
    const std::vector<DecideBatch> groups = decide_batches(canvases);
    std::memcpy(host, groups.data(), groups.size() * sizeof(DecideBatch));
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
    if (canvases.empty()) return;
    need_cuda(encoded, "decide_batch_encoded", "encoded");
    DG_CHECK(encoded.nbytes() >= encoded_decide_bytes(static_cast<int>(canvases.size())) &&
             reinterpret_cast<uintptr_t>(encoded.data) % alignof(DecideBatch) == 0);
    decide_groups(canvases, static_cast<const DecideBatch*>(encoded.data));
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

  void decide_batch(std::span<const DecideArgs> canvases) override { decide_groups(canvases, nullptr); }

  // The launch groups (kMaxDecideBatch canvases each), validated, as the kernel reads them.
  static std::vector<DecideBatch> decide_batches(std::span<const DecideArgs> canvases) {
    std::vector<DecideLaunch> all;
    all.reserve(canvases.size());
    for (const DecideArgs& a : canvases) all.push_back(decide_launch(a));
    std::vector<DecideBatch> groups;
    for (size_t i = 0; i < all.size(); i += kMaxDecideBatch)
      groups.push_back(make_decide_batch(all.data() + i, static_cast<int>(std::min<size_t>(kMaxDecideBatch, all.size() - i))));
    return groups;
  }

  // The kernel reads group g at encoded + g, or, with encoded null, from a copy sent up first.
  void decide_groups(std::span<const DecideArgs> canvases, const DecideBatch* encoded) {
    activate();
    const std::vector<DecideBatch> groups = decide_batches(canvases);
    for (size_t g = 0; g < groups.size(); ++g) {
      if (encoded != nullptr) {
        launch_decide(groups[g], encoded + g, ctx_.stream);
        continue;
      }
      Tensor copy = ctx_.alloc(ScalarType::kU8, {static_cast<int64_t>(sizeof(DecideBatch))});
      ctx_.upload_small(copy.data, &groups[g], sizeof(DecideBatch));
      launch_decide(groups[g], reinterpret_cast<const DecideBatch*>(copy.data), ctx_.stream);
    }
  }

  static DecideLaunch decide_launch(const DecideArgs& a) {
    DecideLaunch d;
    d.C = check_decide_args(a, Device::kCuda);
    d.entropy = a.entropy.ptr<float>();
    d.argmax = a.argmax.ptr<int32_t>();
    d.sample = a.greedy ? nullptr : a.sample.ptr<int32_t>();
    d.entropy_bound = a.entropy_bound;
    d.confidence_threshold = a.confidence_threshold;
    d.renoise_key = a.renoise_key;
    d.vocab = static_cast<uint32_t>(a.vocab);
    d.prev_argmax = a.prev_argmax.ptr<int32_t>();
    d.have_prev = a.have_prev;
    d.canvas = a.canvas.ptr<int32_t>();
    d.flags = a.flags.ptr<int32_t>();
    d.accept = a.accept.empty() ? nullptr : a.accept.ptr<uint8_t>();
    if (!a.pin_mask.empty()) {
      d.pin_mask = a.pin_mask.ptr<uint8_t>();
      d.pin_tokens = a.pin_tokens.ptr<int32_t>();
    }
    return d;
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
