// dgemma_gpu_check: the CUDA-vs-CPU checks of gpu_checks.h without GoogleTest, for machines that
// have CUDA but not the Debian test packages (built by scripts/device_build.sh, which defines
// DGEMMA_GPU_CHECK_MAIN; in the CMake build this file is empty and gpu_tests uses GoogleTest).
//   dgemma_gpu_check [--kernel-family auto|hopper|portable] [--poison-allocations] [substring...]
//                                     runs the checks whose name contains any substring (all if none)
//                                     with the run's backend in that kernel family (auto by default;
//                                     checks of one family's kernels force it where the GPU runs it);
//                                     --poison-allocations: every CUDA allocation of the checks' backends
//                                     starts as NaN bytes (CudaOptions::poison_allocations), so a check
//                                     whose GPU side reads memory nothing wrote fails every time
//   dgemma_gpu_check [--kernel-family F] --only NAME...   runs the checks of exactly these names
//   dgemma_gpu_check --list           prints every check's name, one a line, in run order (no GPU needed)
//   dgemma_gpu_check --bench experts  the quantised expert GEMMs (grouped kernels) per format and T
//   dgemma_gpu_check --bench tp-experts  the expert GEMMs per rank of N = 2 / 4, split by expert and by
//                                     intermediate dimension, against the unsplit block
//   dgemma_gpu_check --bench gemm-algos  every cuBLASLt algorithm of the dense linears' GEMMs (bf16, FP8)
//                                     with its time and whether it equals the product path bit for bit
//   dgemma_gpu_check --bench [quant|flash|tail|fused|small|moe|w8a8|vision]  times the CUDA ops at the
//   26B-A4B shapes
//                                     (canvas 256) instead (quant: only the quantised kernels' rows; flash:
//                                     only the attention_batch rows; moe: the bf16 grouped
//                                     expert GEMMs per variant and T; tail: the LM head, sampler,
//                                     self-conditioning GEMM and decide only; fused: the fused projections'
//                                     GEMMs; small: the per-layer small kernels only; w8a8: the dense
//                                     FP8 linears and the FP8 MoE block, W8A8 / W8A16 / bf16; vision: the
//                                     released vision tower at 1 and 8 images)
// Prints each check's statistics, then "N passed, M failed"; exit status 0 only if all passed. With
// no GPU it fails (exit 1): on the machine it is meant for, that is an error.
#ifdef DGEMMA_GPU_CHECK_MAIN
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gpu_check_util.h"
#include "gpu_checks.h"

namespace {

// Median wall time of fn over `reps` runs after 2 warm-ups, in ms, synchronising the backend the
// checks run on now (gpu_test::cuda(): a bench in a WithOptions scope times that scope's backend).
double time_ms(const std::function<void()>& fn, int reps = 10) {
  dgemma::Backend& be = dgemma::gpu_test::cuda();
  for (int i = 0; i < 2; ++i) fn();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    be.synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The ops at the released model's shapes on random device data (fill_normal): one line each with the
// time and the bytes / FLOP floor numbers a reader needs to judge it. tail_only (`--bench tail`): the
// vocabulary-wide tail of a step alone (LM head, sampler, self-conditioning GEMM, decide).
int bench(bool quant_only, bool flash_only, bool tail_only, bool small_only) {
  using namespace dgemma;
  Backend& be = gpu_test::cuda();
  if (quant_only) {  // --bench quant: the quantised kernels' rows only
    std::printf("%-44s %10s\n", "op (26B-A4B shapes, canvas 256)", "median ms");
    gpu_test::quant_bench([&](const std::function<void()>& fn) { return time_ms(fn); },
                          [](const char* what, double ms) { std::printf("%-44s %10.3f\n", what, ms); });
    // last: the W8A8 rows (the newest kernels: a fault there cannot take the rows above with it)
    gpu_test::w8a8_bench([&](const std::function<void()>& fn) { return time_ms(fn); },
                         [](const char* what, double ms) { std::printf("%-60s %10.3f\n", what, ms); });
    return 0;
  }
  const int64_t C = 256, H = 2816, V = 262144, Hq = 16, E = 128, K = 8, I = 704;
  auto bf = [&](std::initializer_list<int64_t> dims, uint64_t seed, float std, float mean = 0.0f) {
    Tensor t = be.alloc(ScalarType::kBF16, dims);
    be.fill_normal(t, seed, mean, std);
    return t;
  };
  std::printf("%-44s %10s\n", "op (26B-A4B shapes, canvas 256)", "median ms");
  auto row = [](const char* what, double ms) {
    std::printf("%-44s %10.3f\n", what, ms);
    std::fflush(stdout);
  };
  if (flash_only) {
    gpu_test::flash_bench([&](const std::function<void()>& fn) { return time_ms(fn); }, row);
    return 0;
  }
  if (small_only) {  // --bench small: the per-layer small kernels' rows only
    gpu_test::small_kernel_bench([&](const std::function<void()>& fn) { return time_ms(fn); }, row);
    return 0;
  }
  {
    Tensor x = bf({C, H}, 1, 1.0f), w = bf({Hq * 256, H}, 2, 0.02f), o = be.alloc(ScalarType::kBF16, {C, Hq * 256});
    row("matmul q_proj [256,2816]x[4096,2816]^T", time_ms([&] { be.matmul(x, w, o); }));
    Tensor e = bf({V, H}, 3, 1.0f), logits = be.alloc(ScalarType::kBF16, {C, V});
    row("matmul LM head [256,2816]x[262144,2816]^T", time_ms([&] { be.matmul(x, e, logits); }));
    Tensor soft = be.alloc(ScalarType::kBF16, {C, H});
    Tensor probs = bf({C, V}, 4, 1e-6f, 4e-6f);
    row("matmul_kn SC [256,262144]x[262144,2816]", time_ms([&] { be.matmul_kn(probs, e, soft); }));
    Tensor n = be.alloc(ScalarType::kBF16, {C, H}), wn = bf({H}, 5, 0.1f, 1.0f);
    row("rmsnorm [256,2816]", time_ms([&] { be.rmsnorm(x, &wn, 1e-6f, n); }));
    Tensor raw = bf({C, V}, 6, 3.0f);
    Tensor ent = be.alloc(ScalarType::kF32, {C}), lp = be.alloc(ScalarType::kF32, {C});
    Tensor am = be.alloc(ScalarType::kI32, {C}), sm = be.alloc(ScalarType::kI32, {C});
    SamplerArgs sa;
    sa.temperature = 0.8f;
    sa.sample_key = 42;
    sa.entropy = ent;
    sa.argmax = am;
    sa.sample = sm;
    sa.argmax_logprob = lp;
    sa.logits = logits;
    row("sampler C=256 V=262144 (+probs)", time_ms([&] {
          be.copy(logits, raw);
          be.sampler(sa);
        }));
    row("  of which the copy of the logits", time_ms([&] { be.copy(logits, raw); }));
    sa.want_sample = false;
    row("sampler C=256 greedy (no noise drawn)", time_ms([&] {
          be.copy(logits, raw);
          be.sampler(sa);
        }));
    sa.want_sample = true;
    // Batch 4: the tail of a step with four denoising canvases, batched against one call per canvas.
    const int64_t B = 4;
    Tensor raw4 = bf({B * C, V}, 7, 3.0f), logits4 = be.alloc(ScalarType::kBF16, {B * C, V});
    std::vector<SamplerArgs> four;
    for (int64_t i = 0; i < B; ++i) {
      SamplerArgs a = sa;
      a.logits = logits4.rows(i * C, (i + 1) * C);
      a.temperature = 0.6f + 0.2f * static_cast<float>(i);
      a.sample_key = 42 + static_cast<uint64_t>(i);
      a.entropy = be.alloc(ScalarType::kF32, {C});
      a.argmax_logprob = be.alloc(ScalarType::kF32, {C});
      a.argmax = be.alloc(ScalarType::kI32, {C});
      a.sample = be.alloc(ScalarType::kI32, {C});
      four.push_back(a);
    }
    const double copy4 = time_ms([&] { be.copy(logits4, raw4); });
    row("sampler 4 x C=256, 4 calls (-copy)", time_ms([&] {
          be.copy(logits4, raw4);
          for (const SamplerArgs& a : four) be.sampler(a);
        }) - copy4);
    row("sampler 4 x C=256, one batch (-copy)", time_ms([&] {
          be.copy(logits4, raw4);
          be.sampler_batch(four);
        }) - copy4);
    Tensor x4 = bf({B * C, H}, 8, 1.0f), soft4 = be.alloc(ScalarType::kBF16, {B * C, H});
    row("matmul LM head [1024,2816]x[262144,2816]^T", time_ms([&] { be.matmul(x4, e, logits4); }));
    Tensor probs4 = bf({B * C, V}, 9, 1e-6f, 4e-6f);
    row("matmul_kn SC [1024,262144]x[262144,2816]", time_ms([&] { be.matmul_kn(probs4, e, soft4); }));
    row("matmul_kn SC 4 x [256,262144] calls", time_ms([&] {
          for (int64_t i = 0; i < B; ++i) be.matmul_kn(probs4.rows(i * C, (i + 1) * C), e, soft4.rows(i * C, (i + 1) * C));
        }));
  }
  for (int full = 0; full < 2 && !tail_only; ++full) {
    const int64_t D = full ? 512 : 256, Hkv = full ? 2 : 8, L = full ? 4096 : 1023;
    AttentionArgs a;
    a.q = bf({C, Hq, D}, 10, 0.25f);
    // The cache in C-token pages, in order (as the engine's pool holds a sequence).
    const int64_t pages = (L + C - 1) / C;
    a.k_pages = bf({pages, Hkv, C, D}, 11, 0.25f);
    a.v_pages = bf({pages, Hkv, C, D}, 12, 1.0f);
    Tensor table = host_tensor(ScalarType::kI32, {pages});
    for (int64_t i = 0; i < pages; ++i) table.ptr<int32_t>()[i] = static_cast<int32_t>(i);
    a.page_table = be.upload(table);
    a.cache_len = L;
    a.k_new = bf({C, Hkv, D}, 13, 0.25f);
    a.v_new = bf({C, Hkv, D}, 14, 1.0f);
    a.out = be.alloc(ScalarType::kBF16, {C, Hq, D});
    row(full ? "attention denoise D=512 Hkv=2 cache 4096 (cuBLAS)" : "attention denoise D=256 Hkv=8 cache 1023 (cuBLAS)",
        time_ms([&] { be.attention(a); }));
  }
  if (!tail_only) {  // the encoder's causal pass over a 512-token prompt chunk
    const int64_t D = 256, Hkv = 8, n = 512;
    AttentionArgs a;
    a.q = bf({n, Hq, D}, 15, 0.25f);
    a.k_new = bf({n, Hkv, D}, 16, 0.25f);
    a.v_new = bf({n, Hkv, D}, 17, 1.0f);
    a.causal = true;
    a.window = 1024;
    a.out = be.alloc(ScalarType::kBF16, {n, Hq, D});
    row("attention prefill 512 causal D=256 (cuBLAS)", time_ms([&] { be.attention(a); }));
  }
  if (!tail_only) {
    MoeArgs m;
    m.router_in = bf({C, H}, 20, 1.0f);
    m.expert_in = bf({C, H}, 21, 1.0f);
    m.router_scale = bf({H}, 22, 0.1f, 1.0f);
    m.router_proj = bf({E, H}, 23, 1.0f);
    m.per_expert_scale = bf({E}, 24, 0.1f, 1.0f);
    m.gate_up = bf({E, 2 * I, H}, 25, 0.02f);
    m.down = bf({E, H, I}, 26, 0.04f);
    m.top_k = static_cast<int>(K);
    m.out = be.alloc(ScalarType::kBF16, {C, H});
    // The whole MoE block at batch 1, 4, 8 and 16 canvases with each bf16 grouped GEMM kernel (the
    // automatic choice first; the hopper family's where the GPU runs them): the router / grouping /
    // combine are in every row alike. Floors: the expert weights are 1.52 GB (0.38 ms at 4 TB/s); the
    // expert FLOPs 0.095 TFLOP per 1,024 tokens.
    for (const int64_t n : {1, 4, 8, 16}) {
      MoeArgs mv = m;
      mv.router_in = bf({n * C, H}, 40 + static_cast<uint64_t>(n), 1.0f);
      mv.expert_in = bf({n * C, H}, 60 + static_cast<uint64_t>(n), 1.0f);
      mv.out = be.alloc(ScalarType::kBF16, {n * C, H});
      for (const MoeKernel k : {MoeKernel::kAuto, MoeKernel::kSmallRows, MoeKernel::kMmaSync128x128,
                                MoeKernel::kWgmma64x128, MoeKernel::kTma128x256}) {
        const bool hopper = k == MoeKernel::kWgmma64x128 || k == MoeKernel::kTma128x256;
        if (hopper && !gpu_test::sm90_gpu()) continue;
        const gpu_test::WithOptions scope(gpu_test::options_with([&](CudaOptions& o) {
          o.moe = k;
          if (hopper) o.family = KernelFamily::kHopper;
        }));
        Backend& b = gpu_test::cuda();
        char what[96];
        std::snprintf(what, sizeof what, "moe T=%lld bf16 grouped %s", static_cast<long long>(n * C), moe_kernel_word(k));
        row(what, time_ms([&] { b.moe(mv); }));
      }
    }
  }
  if (!tail_only) {
    gpu_test::grouped_moe_bench();  // the bf16 grouped GEMMs alone, per variant
    gpu_test::quant_bench([&](const std::function<void()>& fn) { return time_ms(fn); }, row);
    gpu_test::flash_bench([&](const std::function<void()>& fn) { return time_ms(fn); }, row);
    gpu_test::small_kernel_bench([&](const std::function<void()>& fn) { return time_ms(fn); }, row);
  }
  {
    DecideArgs d;
    d.entropy = be.alloc(ScalarType::kF32, {C});
    d.argmax = be.alloc(ScalarType::kI32, {C});
    d.sample = be.alloc(ScalarType::kI32, {C});
    d.prev_argmax = be.alloc(ScalarType::kI32, {C});
    d.canvas = be.alloc(ScalarType::kI32, {C});
    d.flags = be.alloc(ScalarType::kI32, {2});
    std::vector<float> h(C);
    std::vector<int32_t> ids(C);
    for (int64_t p = 0; p < C; ++p) {
      h[p] = static_cast<float>((p * 37) % 101) * 0.01f;
      ids[p] = static_cast<int32_t>(p);
    }
    be.from_host(d.entropy, h.data());
    for (const Tensor* t : {&d.argmax, &d.sample, &d.prev_argmax}) be.from_host(*t, ids.data());
    d.vocab = static_cast<int32_t>(V);
    d.have_prev = true;
    row("decide C=256 (accept, renoise, flags)", time_ms([&] { be.decide(d); }));
    std::vector<DecideArgs> four;
    for (int i = 0; i < 4; ++i) {
      DecideArgs di = d;
      di.prev_argmax = be.alloc(ScalarType::kI32, {C});
      di.canvas = be.alloc(ScalarType::kI32, {C});
      di.flags = be.alloc(ScalarType::kI32, {2});
      be.from_host(di.prev_argmax, ids.data());
      four.push_back(di);
    }
    row("decide 4 x C=256, 4 calls", time_ms([&] {
          for (const DecideArgs& a : four) be.decide(a);
        }));
    row("decide 4 x C=256, one batch", time_ms([&] { be.decide_batch(four); }));
    gpu_test::guided_tail_bench([&](const std::function<void()>& fn) { return time_ms(fn); }, row);
  }
  if (!tail_only) gpu_test::w8a8_bench([&](const std::function<void()>& fn) { return time_ms(fn); }, row);  // last (the newest kernels)
  return 0;
}

class PrintReporter final : public dgemma::gpu_test::Reporter {
 public:
  void fail(const std::string& message) override {
    ++failures;
    std::printf("  FAIL: %s\n", message.c_str());
  }
  void note(const std::string& message) override { std::printf("  %s\n", message.c_str()); }
  int failures = 0;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace dgemma::gpu_test;
  // The run's options first (the family, poisoned allocations), then the rest as usual.
  while (argc > 1) {
    int used = 0;
    if (std::strcmp(argv[1], "--kernel-family") == 0) {
      if (argc < 3 || !dgemma::parse_kernel_family(argv[2], &run_options().family)) {
        std::printf("--kernel-family: one of %s, not %s\n", dgemma::kernel_family_words().c_str(),
                    argc < 3 ? "nothing" : argv[2]);
        return 2;
      }
      used = 2;
    } else if (std::strcmp(argv[1], "--poison-allocations") == 0) {
      run_options().poison_allocations = true;
      used = 1;
    } else {
      break;
    }
    argv[used] = argv[0];
    argv += used;
    argc -= used;
  }
  if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {
    for (const Case& c : all_cases()) std::printf("%s\n", c.name.c_str());
    return 0;
  }
  if (!dgemma::cuda_available()) {
    std::printf("no CUDA GPU is visible to this process: the checks need one\n0 passed, 0 failed\n");
    return 1;
  }
  std::printf("random inputs: DGEMMA_TEST_SEED=%llu\n", static_cast<unsigned long long>(run_seed()));
  std::printf("backend: %s, kernel family %s\n", cuda().name().c_str(),
              dgemma::kernel_family_word(run_options().family));
  if (run_options().poison_allocations) std::printf("allocations poisoned (NaN bytes)\n");
  if (argc > 1 && std::strcmp(argv[1], "--bench") == 0) {
    auto mode = [&](const char* m) { return argc > 2 && std::strcmp(argv[2], m) == 0; };
    if (mode("fused")) {  // the fused projections' GEMMs against their parts'
      dgemma::gpu_test::fused_gemm_bench([&](const std::function<void()>& fn) { return time_ms(fn); },
                                         [](const char* what, double ms) { std::printf("%-56s %10.3f\n", what, ms); });
      return 0;
    }
    if (mode("w8a8")) {  // the dense FP8 linears and the FP8 MoE block: W8A8, W8A16, bf16
      dgemma::gpu_test::w8a8_bench([&](const std::function<void()>& fn) { return time_ms(fn); },
                                   [](const char* what, double ms) { std::printf("%-60s %10.3f\n", what, ms); });
      return 0;
    }
    if (mode("vision")) {  // the released vision tower at 1 and 8 images
      dgemma::gpu_test::vision_bench(
          [&](const std::function<void()>& fn) { return time_ms(fn, 5); },
          [](const char* what, double ms) { std::printf("%-64s %10.3f\n", what, ms); });
      return 0;
    }
    if (mode("moe")) {  // the bf16 grouped expert GEMMs alone, per variant and T
      dgemma::gpu_test::grouped_moe_bench();
      return 0;
    }
    if (mode("experts")) {  // the quantised expert GEMMs (grouped kernels) per format and T
      dgemma::gpu_test::experts_bench();
      return 0;
    }
    if (mode("tp-experts")) {  // the expert GEMMs per rank under the two expert splits
      dgemma::gpu_test::tp_experts_bench();
      return 0;
    }
    if (mode("gemm-algos")) {  // the dense linears' GEMMs under every cuBLASLt algorithm
      dgemma::gpu_test::gemm_algos_bench();
      return 0;
    }
    return bench(mode("quant"), mode("flash"), mode("tail"), mode("small"));
  }
  const bool exact = argc > 1 && std::strcmp(argv[1], "--only") == 0;
  int passed = 0, failed = 0;
  for (const Case& c : all_cases()) {
    bool selected = argc <= 1;
    for (int i = exact ? 2 : 1; i < argc; ++i) selected |= exact ? c.name == argv[i] : c.name.find(argv[i]) != std::string::npos;
    if (!selected) continue;
    std::printf("[ RUN  ] %s\n", c.name.c_str());
    std::fflush(stdout);
    PrintReporter r;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.run(r);
    } catch (const std::exception& e) {
      r.fail(std::string("exception: ") + e.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r.failures == 0) {
      ++passed;
      std::printf("[  OK  ] %s (%.0f ms)\n", c.name.c_str(), ms);
    } else {
      ++failed;
      std::printf("[ FAIL ] %s (%d failure(s), %.0f ms)\n", c.name.c_str(), r.failures, ms);
    }
    std::fflush(stdout);
  }
  if (passed + failed == 0 && argc > 1)
    std::printf("no check's name %s the arguments (dgemma_gpu_check --list names them all)\n",
                exact ? "is one of" : "contains one of");
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
#endif
