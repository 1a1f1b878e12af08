// Model-level benchmark: dummy weights of any config (e.g. the real 26B-A4B shape) on a backend;
// times the prompt prefill and batched denoising steps (forward + sampler + self-conditioning) with
// the engine's core (scheduler, model runner, paged KV pool), steps forced to the cap. Built on the GPU
// machine by scripts/device_build.sh (target dgemma_bench); used by bench/denoise_step_bench.py.
//   dgemma_bench MODEL_DIR [--device cuda|cpu] [--batch N] [--prompt-len P] [--steps S] [--canvases K]
//                [--attention flash|flash-v0|flash-v1|flash-v2|flash-v3|flash-v4|cublas|fused|fused256]
//                [--moe device|host] [--moe-variant V]
//                [--quantization bf16|nvfp4-modelopt|nvfp4-ct|fp8-dynamic]   (dummy weights in that format)
//                [--dense-quant w8a8|on|off]   (quantised dense linears: FP8-dynamic's W8A8 on cuBLASLt, the
//                                               W8A16 / W4A16 kernel, or bf16 cuBLAS; tuning.h
//                                               set_dense_quant)
//                [--small-kernels fused|ops]   (the fused qkv prologue and MoE routing, or the earlier
//                                               kernels)
//                [--profile-step N]   (the profiler's capture window around the measured round's N-th
//                                      denoising step, N >= 2: `ncu --profile-from-start off` times that
//                                      step's kernels alone; bench/step_profile.py)
//                [--runs B:S[:P],...]   (several runs on one set of weights, each batch B, S steps and a
//                                        P-token prompt (default --prompt-len), one result line each:
//                                        the quantised formats' dummy weights take ~30 s to make)
//                [--cuda-graphs on|off]  (on, the default: the run's denoising step recorded as a CUDA graph
//                                         and replayed, as dgemma serve; off: op by op, --enforce-eager)
//                [--max-model-len L]     (the context the recorded attention plans assume: 32,768 by default,
//                                         the recipe's, capped by max_position_embeddings)
// Prefill and denoising are timed apart: every prompt is encoded in prefill-only steps (the step budget
// holds all prompts; the last chunk is not fused with the first denoising step, fuse_prefill_tail), so
// every denoising step carries the whole batch of canvases and nothing else.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/weights.h"
#include "support/model_core.h"
#include "util/error.h"
#include "util/timing.h"
#if DGEMMA_HAVE_CUDA
#include "backend/cuda/tuning.h"
#endif

using namespace dgemma;

namespace {
uint64_t launches_so_far() {
#if DGEMMA_HAVE_CUDA
  return cuda::launches_so_far();
#else
  return 0;
#endif
}
// Host waits for the GPU so far: their count and the time spent in them (ns).
uint64_t syncs_so_far() {
#if DGEMMA_HAVE_CUDA
  return cuda::syncs_so_far();
#else
  return 0;
#endif
}
uint64_t sync_wait_ns_so_far() {
#if DGEMMA_HAVE_CUDA
  return cuda::sync_wait_ns_so_far();
#else
  return 0;
#endif
}
// The profiler's capture window (CUDA only).
void profiler_window(bool open) {
#if DGEMMA_HAVE_CUDA
  if (open) cuda::profiler_start();
  else cuda::profiler_stop();
#else
  (void)open;
#endif
}
struct Run {
  int batch = 1, steps = 48, prompt_len = 512;
};
struct Graphs {
  bool on = true;
  int64_t max_context = 32768;
};

// "B:S[:P],..." -> runs (each number positive); false on anything else.
bool parse_runs(const std::string& text, int default_prompt, std::vector<Run>* runs) {
  size_t at = 0;
  while (true) {
    const size_t end = std::min(text.find(',', at), text.size());
    std::vector<long> fields;
    const char* p = text.c_str() + at;
    const char* stop = text.c_str() + end;
    while (p < stop) {
      char* next = nullptr;
      const long v = std::strtol(p, &next, 10);
      if (next == p || v < 1 || v > 1000000) return false;
      fields.push_back(v);
      p = next;
      if (p < stop && *p++ != ':') return false;
      if (p == stop && p[-1] == ':') return false;
    }
    if (fields.size() < 2 || fields.size() > 3) return false;
    runs->push_back(Run{static_cast<int>(fields[0]), static_cast<int>(fields[1]),
                        fields.size() == 3 ? static_cast<int>(fields[2]) : default_prompt});
    if (end == text.size()) return true;
    at = end + 1;
  }
}

// One run: its prompts prefilled alone (the step budget holds every prompt, and no prompt's last chunk
// shares its pass with the first denoising step), then the denoising steps of the whole batch, twice
// (the first round warms up); prints the second round's figures as one line.
void measure_run(DiffusionGemma& model, Backend& be, const ModelConfig& mc, const Run& run, int canvases, int profile_step,
                 const Graphs& graphs) {
  const int64_t C = mc.canvas_length;
  const int batch = run.batch, steps = run.steps, prompt_len = run.prompt_len;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  // Token ids below any vocabulary (the 26B's 262,144 leaves them as they are; a test model's is smaller).
  for (int i = 0; i < prompt_len; ++i) prompt[i] = static_cast<int32_t>((1000 + (i * 7919) % 200000) % mc.text.vocab_size);
  ModelCoreOptions o;
  o.max_num_seqs = batch;
  o.max_num_batched_tokens = std::max<int64_t>(static_cast<int64_t>(batch) * prompt_len, C);
  o.prefill_chunk = prompt_len;
  o.kv_tokens = static_cast<int64_t>(batch) * (prompt_len + (canvases + 1) * C);
  o.prefix_caching = false;  // every round encodes its prompts
  o.fuse_prefill_tail = false;
  o.runner.batch_buckets = {batch};
  o.runner.cuda_graphs = graphs.on;
  if (graphs.on)
    o.runner.plan_context = std::max<int64_t>(graphs.max_context, prompt_len + (canvases + 1) * C);
  Stopwatch rec;
  ModelCore core(be, model, o);
  const bool recorded = !core.graph_batches().empty();
  if (recorded)
    std::fprintf(stderr, "batch %d: denoising step recorded as a CUDA graph in %.0f ms\n", batch, rec.ms());
  double first_round_step_ms = 0;
  for (int rep = 0; rep < 2; ++rep) {  // the first round warms up (cuBLAS handles, allocator)
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (int b = 0; b < batch; ++b) {
      SequenceParams p;
      p.diffusion.max_denoising_steps = steps;
      p.diffusion.confidence_threshold = 1e-30;  // never stop early: time the step cap
      p.seed = static_cast<uint64_t>(b + 1);
      p.max_tokens = canvases * C;
      p.ignore_eos = true;
      seqs.push_back(core.make_sequence(static_cast<uint64_t>(rep * batch + b + 1), prompt, p));
      core.core().add(seqs.back().get());
    }
    double prefill_ms = 0, step_ms = 0;
    int64_t step_count = 0;
    uint64_t step_launches = 0, step_syncs = 0, step_wait_ns = 0;
    std::vector<CoreEvent> events;
    Stopwatch all;
    while (core.core().has_work()) {
      Stopwatch sw;
      const uint64_t launches0 = launches_so_far(), syncs0 = syncs_so_far(), wait0 = sync_wait_ns_so_far();
      // After a denoising step the next is one too (the batch denoises together until it ends).
      const bool profiled = rep == 1 && profile_step >= 2 && step_count + 1 == profile_step;
      if (profiled) profiler_window(true);
      const StepStats st = core.core().step(events);
      be.synchronize();
      if (profiled) profiler_window(false);
      for (const CoreEvent& ev : events)
        if (ev.event.kind == RequestEvent::Kind::kError)
          throw Error(ErrorKind::kInternal, "a sequence failed: " + ev.event.message);
      if (st.denoise_items == 0) {
        prefill_ms += sw.ms();
      } else {
        step_ms += sw.ms();
        ++step_count;
        step_launches += launches_so_far() - launches0;
        step_syncs += syncs_so_far() - syncs0;
        step_wait_ns += sync_wait_ns_so_far() - wait0;
      }
    }
    const double total = all.ms();
    if (rep == 0) first_round_step_ms = step_ms / static_cast<double>(std::max<int64_t>(step_count, 1));
    if (rep == 1) {
      std::printf("batch %d, prompt %d, canvas %lld, %d steps x %d canvas(es): prefill %.1f ms (%.0f tokens/s), "
                  "%.2f ms per denoising step (%lld steps), %.0f ms total, %.0f tokens/s, %.0f launches per step, "
                  "%.1f host waits per step (%.2f ms waiting: the rest of the step is host time), %s, "
                  "first round %.2f ms per step\n",
                  batch, prompt_len, static_cast<long long>(C), steps, canvases, prefill_ms,
                  1e3 * batch * prompt_len / prefill_ms, step_ms / step_count, static_cast<long long>(step_count), total,
                  1e3 * batch * canvases * C / (total - prefill_ms),
                  static_cast<double>(step_launches) / static_cast<double>(step_count),
                  static_cast<double>(step_syncs) / static_cast<double>(step_count),
                  1e-6 * static_cast<double>(step_wait_ns) / static_cast<double>(step_count),
                  recorded ? "CUDA graph" : "op by op", first_round_step_ms);
      std::fflush(stdout);  // each run's line as soon as it is measured
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: dgemma_bench MODEL_DIR [--device cuda|cpu] [--batch N] [--prompt-len P] [--steps S] "
                 "[--canvases K]\n"
                 "                   [--attention "
                 "flash|flash-v0|flash-v1|flash-v2|flash-v3|flash-v4|cublas|fused|fused256] [--moe "
                 "device|host] [--moe-variant V]   (CUDA kernel choices, for A/B runs)\n"
                 "                   [--quantization bf16|nvfp4-modelopt|nvfp4-ct|fp8-dynamic]   (dummy "
                 "weights' format)\n"
                 "                   [--dense-quant w8a8|on|off]   (quantised dense linears: W8A8 cuBLASLt, "
                 "quantised kernel or bf16 cuBLAS)\n"
                 "                   [--small-kernels fused|ops]   (fused qkv prologue and MoE routing, or "
                 "the earlier kernels)\n"
                 "                   [--fused-projections on|off]   (q|k|v and gate|up as one GEMM each, or "
                 "one GEMM per projection)\n"
                 "                   [--profile-step N]   (profiler capture window around the N-th measured "
                 "denoising step)\n"
                 "                   [--runs B:S[:P],...]   (several runs, batch B, S steps, P-token prompt, "
                 "on one set of weights)\n"
                 "                   [--cuda-graphs on|off] [--max-model-len L]   (denoising steps replayed "
                 "as a CUDA graph, as dgemma serve)\n");
    return 2;
  }
  std::string dir = argv[1], device = "cuda", quantization;  // empty: what the config declares
  int batch = 1, prompt_len = 512, steps = 48, canvases = 1, profile_step = 0;
  const char* runs_arg = nullptr;  // --runs, when given
  bool small_fused = true;
  bool fuse_projections = true;  // --fused-projections
  Graphs graphs;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device") device = argv[i + 1];
    else if (k == "--quantization") quantization = argv[i + 1];
    else if (k == "--batch") batch = std::atoi(argv[i + 1]);
    else if (k == "--prompt-len") prompt_len = std::atoi(argv[i + 1]);
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--canvases") canvases = std::atoi(argv[i + 1]);
    else if (k == "--profile-step") profile_step = std::atoi(argv[i + 1]);
    else if (k == "--runs") runs_arg = argv[i + 1];
    else if (k == "--small-kernels") small_fused = std::string(argv[i + 1]) != "ops";
    else if (k == "--cuda-graphs") graphs.on = std::string(argv[i + 1]) != "off";
    else if (k == "--max-model-len") graphs.max_context = std::atoll(argv[i + 1]);
    else if (k == "--fused-projections")
      fuse_projections = std::string(argv[i + 1]) != "off";
#if DGEMMA_HAVE_CUDA
    else if (k == "--attention") {
      // flash (the default: one launch per layer, the default variant) | flash-v0 .. flash-v4 (its kernel
      // variants, set_flash_attention_variant; v0 the mma.sync kernel, v3 / v4 the Hopper wgmma kernel,
      // v4 on 80-key tiles) | flash256 (flash for head dim <= 256, cuBLAS above) | cublas | fused |
      // fused256 (fused for head dim <= 256)
      const std::string v = argv[i + 1];
      const int flash_variant = v == "flash-v0"   ? 0
                                : v == "flash-v1" ? 1
                                : v == "flash-v2" ? 2
                                : v == "flash-v3" ? 3
                                : v == "flash-v4" ? 4
                                                  : -1;
      cuda::set_fused_attention(v == "fused" || v == "fused256");
      cuda::set_fused_attention_max_dim(v == "fused256" ? 256 : 0);
      cuda::set_flash_attention(v == "flash" || flash_variant >= 0 || v == "flash256");
      cuda::set_flash_attention_max_dim(v == "flash256" ? 256 : 0);
      if (flash_variant >= 0) cuda::set_flash_attention_variant(flash_variant);  // tuning.h
    } else if (k == "--dense-quant") {
      cuda::DenseQuant path{};
      if (!cuda::parse_dense_quant(argv[i + 1], &path)) {
        std::fprintf(stderr, "--dense-quant: w8a8, on or off, not %s\n", argv[i + 1]);
        return 2;
      }
      cuda::set_dense_quant(path);
    } else if (k == "--moe") {
      cuda::set_moe_device_grouping(std::string(argv[i + 1]) != "host");
    } else if (k == "--moe-variant") {
      cuda::set_grouped_moe_variant(std::atoi(argv[i + 1]));  // 0 automatic (tuning.h)
    }
#endif
  }
  std::vector<Run> runs;
  if (!runs_arg) {
    if (batch < 1 || steps < 1 || prompt_len < 1) {
      std::fprintf(stderr, "--batch, --steps and --prompt-len take positive integers\n");
      return 2;
    }
    runs.push_back(Run{batch, steps, prompt_len});
  }
  else if (!parse_runs(runs_arg, prompt_len, &runs)) {
    std::fprintf(stderr, "--runs: a comma-separated list of BATCH:STEPS[:PROMPT_LEN], not %s\n", runs_arg);
    return 2;
  }
#if DGEMMA_HAVE_CUDA
  cuda::set_fused_qkv_prologue(small_fused);
  cuda::set_fused_moe_routing(small_fused);
#endif
  try {
    ModelConfig mc = load_model_config(dir);
    if (!quantization.empty()) mc.quant = quant_preset(quantization);
    std::fprintf(stderr, "weights: %s\n", mc.quant.quantized() ? mc.quant.summary.c_str() : "bf16");
#if DGEMMA_HAVE_CUDA
    if (mc.quant.quantized() && device == "cuda") {
      std::fprintf(stderr, "dense quantised linears: --dense-quant %s\n", cuda::dense_quant_name(cuda::dense_quant()));
    }
#endif
    auto be = device == "cuda" ? make_cuda_backend(0) : make_cpu_backend();
    Stopwatch load;
    DiffusionGemma model(mc, dummy_weights(mc, *be, 1, WeightLoadOptions{.fuse_projections = fuse_projections}), *be);
    be->synchronize();
    std::fprintf(stderr, "dummy weights in %.1f s\n", load.seconds());
    graphs.max_context = std::min<int64_t>(graphs.max_context, mc.text.max_position_embeddings);
    for (const Run& run : runs) measure_run(model, *be, mc, run, canvases, profile_step, graphs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dgemma_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
