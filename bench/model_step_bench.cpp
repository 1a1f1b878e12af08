// Model-level benchmark: dummy weights of any config (e.g. the real 26B-A4B shape) on a backend;
// times the prompt prefill and batched denoising steps (forward + sampler + self-conditioning) with
// the engine's core (scheduler, model runner, paged KV pool), steps forced to the cap. Built on the GPU
// machine by scripts/device_build.sh (target dgemma_bench); used by bench/denoise_step_bench.py.
//   dgemma_bench MODEL_DIR [--device cuda|cpu] [--batch N] [--prompt-len P] [--steps S] [--canvases K]
//                [--quantization bf16|nvfp4-modelopt|nvfp4-ct|fp8-dynamic]   (dummy weights in that format)
//                [--kernel-family auto|hopper|portable] [--attention auto|per-item] [--flash-splits N]
//                [--moe-kernel auto|small-rows|mma-sync-128x128|wgmma-64x128|tma-128x256]
//                [--quant-tile auto|32x64|32x128-k256|128x64] [--dense-quant-tile ...]
//                [--dense-quant w8a8|kernel|bf16] [--fp8-moe auto|w8a8|w8a16] [--fp8-row-fusion on|off]
//                                     (the CUDA backend's kernel choices, cuda_options.h; each automatic
//                                      by default)
//                [--profile-step N]   (the profiler's capture window around the measured round's N-th
//                                      denoising step, N >= 2: `ncu --profile-from-start off` times that
//                                      step's kernels alone; bench/step_profile.py)
//                [--runs B:S[:P],...]   (several runs on one set of weights, each batch B, S steps and a
//                                        P-token prompt (default --prompt-len), one result line each:
//                                        the quantised formats' dummy weights take ~30 s to make)
//                [--cuda-graphs on|off]  (on, the default: the run's denoising step recorded as a CUDA graph
//                                         and replayed, as dgemma serve; off: op by op, --enforce-eager)
//                [--images N]            (N images of 280 soft tokens (42 x 60 patches, random pixels) at the
//                                         start of every prompt: the prefill runs the vision tower; the
//                                         config needs a vision_config, e.g. denoise_step_bench.py
//                                         --write-model DIR --with-vision)
//                [--max-model-len L]     (the context the recorded attention plans assume: 32,768 by default,
//                                         the recipe's, capped by max_position_embeddings)
//                [--guided-schema FILE]  (every canvas guided by the JSON Schema in FILE, docs/API.md "Guided
//                                         decoding on the canvas": its gap mask before sampling, the decide
//                                         walk, the commit rule; the schema's value spans the answer)
//                [--tokenizer FILE]      (the tokenizer.json the constraint is lifted to; default: a
//                synthetic
//                                         vocabulary of the model's size — fillers, the 256 bytes, then short
//                                         ASCII pieces)
// Prefill and denoising are timed apart: every prompt is encoded in prefill-only steps (the step budget
// holds all prompts; the last chunk is not fused with the first denoising step, fuse_prefill_tail), so
// every denoising step carries the whole batch of canvases and nothing else.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "guided/guided.h"
#include "guided/token_constraint.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/weights.h"
#include "support/model_core.h"
#include "text/tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/timing.h"

using namespace dgemma;

namespace {
struct Run {
  int batch = 1, steps = 48, prompt_len = 512;
};
struct Graphs {
  bool on = true;
  int64_t max_context = 32768;
};

// The prompt's images (--images): each a block of 280 soft tokens after <|image>, then <image|>.
struct PromptImages {
  int count = 0;
  std::shared_ptr<const std::vector<uint8_t>> patches;  // one image's, shared by all
};
constexpr int64_t kImageGridH = 42, kImageGridW = 60;  // 14 x 20 pooled cells: 280 soft tokens

// A vocabulary of `size` ids for a model without a tokenizer: 0 pad and 1 eos (fillers), 2 and 3 never
// (control tokens), the 256 bytes, then pieces of 2..7 ASCII characters (letters, digits, punctuation,
// space), deterministic.
std::shared_ptr<const guided::TokenVocabulary> synthetic_vocabulary(int64_t size) {
  std::vector<std::string> pieces = {"", "", "", ""};
  std::vector<guided::TokenKind> kinds = {guided::TokenKind::kFiller, guided::TokenKind::kFiller,
                                          guided::TokenKind::kNever, guided::TokenKind::kNever};
  for (int b = 0; b < 256 && static_cast<int64_t>(pieces.size()) < size; ++b) {
    pieces.push_back(std::string(1, static_cast<char>(b)));
    kinds.push_back(guided::TokenKind::kText);
  }
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,:\"{}[]";
  while (static_cast<int64_t>(pieces.size()) < size) {
    std::string p;
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int len = 2 + static_cast<int>((x >> 60) % 6);
    for (int i = 0; i < len; ++i) p.push_back(kChars[(x >> (8 * (i % 7))) % (sizeof(kChars) - 1)]);
    pieces.push_back(p);
    kinds.push_back(guided::TokenKind::kText);
  }
  return guided::TokenVocabulary::from_pieces(pieces, kinds);
}

// The integer value of flag `flag`; exits with a message unless `v` is a whole decimal integer.
long long int_arg(const std::string& flag, const char* v) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE) {
    std::fprintf(stderr, "%s: an integer, not '%s'\n", flag.c_str(), v);
    std::exit(2);
  }
  return n;
}

// The value of an on|off flag; exits with a message on anything else.
bool on_off_arg(const std::string& flag, const char* v) {
  const std::string s = v;
  if (s != "on" && s != "off") {
    std::fprintf(stderr, "%s: on or off, not '%s'\n", flag.c_str(), v);
    std::exit(2);
  }
  return s == "on";
}

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
void measure_run(DiffusionGemma& model, Backend& be, const ModelConfig& mc, const Run& run, int canvases,
                 int profile_step, const Graphs& graphs, const PromptImages& pi,
                 const std::shared_ptr<const guided::TokenConstraint>& constraint) {
  const int64_t C = mc.canvas_length;
  const int batch = run.batch, steps = run.steps, prompt_len = run.prompt_len;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  // Token ids below any vocabulary (the 26B's 262,144 leaves them as they are; a test model's is smaller).
  for (int i = 0; i < prompt_len; ++i) prompt[i] = static_cast<int32_t>((1000 + (i * 7919) % 200000) % mc.text.vocab_size);
  const int64_t soft =
      kImageGridH / mc.vision.pooling_kernel_size * (kImageGridW / mc.vision.pooling_kernel_size);
  std::vector<PromptImage> images;
  for (int m = 0; m < pi.count; ++m) {
    const int64_t at = 1 + m * (soft + 2);  // after <bos> and the blocks before it
    if (at + soft + 1 >= prompt_len)
      throw Error(ErrorKind::kInvalidArgument, "--images: the prompt is too short for them");
    prompt[static_cast<size_t>(at)] = mc.boi_token_id;
    for (int64_t j = 0; j < soft; ++j) prompt[static_cast<size_t>(at + 1 + j)] = mc.image_token_id;
    prompt[static_cast<size_t>(at + 1 + soft)] = mc.eoi_token_id;
    PromptImage im;
    im.first = at + 1;
    im.grid_h = kImageGridH;
    im.grid_w = kImageGridW;
    im.patches = pi.patches;
    im.digest.fill(static_cast<uint8_t>(m + 1));
    images.push_back(im);
  }
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
      if (constraint) {
        auto g = std::make_shared<GuidedAnswer>();
        g->constraint = constraint;
        g->end = p.max_tokens;
        p.guided = std::move(g);
      }
      seqs.push_back(core.make_sequence(static_cast<uint64_t>(rep * batch + b + 1), prompt, p));
      if (!images.empty()) seqs.back()->set_images(images, std::vector<int64_t>(images.size(), soft));
      core.core().add(seqs.back().get());
    }
    double prefill_ms = 0, step_ms = 0;
    int64_t step_count = 0;
    uint64_t step_launches = 0, step_syncs = 0, step_wait_ns = 0;
    std::vector<CoreEvent> events;
    Stopwatch all;
    while (core.core().has_work()) {
      Stopwatch sw;
      const DeviceWorkStats work0 = be.work_stats();
      // After a denoising step the next is one too (the batch denoises together until it ends).
      const bool profiled = rep == 1 && profile_step >= 2 && step_count + 1 == profile_step;
      if (profiled) be.profiler_window(true);
      const StepStats st = core.core().step(events);
      be.synchronize();
      if (profiled) be.profiler_window(false);
      for (const CoreEvent& ev : events)
        if (ev.event.kind == RequestEvent::Kind::kError)
          throw Error(ErrorKind::kInternal, "a sequence failed: " + ev.event.message);
      if (st.denoise_items == 0) {
        prefill_ms += sw.ms();
      } else {
        step_ms += sw.ms();
        ++step_count;
        const DeviceWorkStats work = be.work_stats();
        step_launches += work.launches - work0.launches;
        step_syncs += work.syncs - work0.syncs;
        step_wait_ns += work.sync_wait_ns - work0.sync_wait_ns;
      }
    }
    const double total = all.ms();
    if (rep == 0) first_round_step_ms = step_ms / static_cast<double>(std::max<int64_t>(step_count, 1));
    if (rep == 1) {
      if (pi.count > 0)
        std::printf("%d image(s) of %lld soft tokens in each prompt: ", pi.count,
                    static_cast<long long>(soft));
      std::printf(
          "batch %d, prompt %d, canvas %lld, %d steps x %d canvas(es): prefill %.1f ms (%.0f tokens/s), "
          "%.2f ms per denoising step (%lld steps), %.0f ms total, %.0f tokens/s, %.0f launches per step, "
          "%.1f host waits per step (%.2f ms waiting: the rest of the step is host time), %s, "
          "first round %.2f ms per step%s\n",
          batch, prompt_len, static_cast<long long>(C), steps, canvases, prefill_ms,
          1e3 * batch * prompt_len / prefill_ms, step_ms / step_count, static_cast<long long>(step_count),
          total, 1e3 * batch * canvases * C / (total - prefill_ms),
          static_cast<double>(step_launches) / static_cast<double>(step_count),
          static_cast<double>(step_syncs) / static_cast<double>(step_count),
          1e-6 * static_cast<double>(step_wait_ns) / static_cast<double>(step_count),
          recorded ? "CUDA graph" : "op by op", first_round_step_ms, constraint ? ", guided" : "");
      std::fflush(stdout);  // each run's line as soon as it is measured
    }
  }
}

// One kernel-choice flag into `o`; false when `k` is none of them. Exits with a message on a bad word.
bool parse_cuda_flag(const std::string& k, const char* v, CudaOptions& o) {
  auto take = [&](auto parse, auto* out, const std::string& words) {
    if (!parse(v, out)) {
      std::fprintf(stderr, "%s: one of %s, not %s\n", k.c_str(), words.c_str(), v);
      std::exit(2);
    }
    return true;
  };
  if (k == "--kernel-family") return take(parse_kernel_family, &o.family, kernel_family_words());
  if (k == "--attention") return take(parse_attention_kernel, &o.attention, attention_kernel_words());
  if (k == "--moe-kernel") return take(parse_moe_kernel, &o.moe, moe_kernel_words());
  if (k == "--quant-tile") return take(parse_quant_tile, &o.quant_experts, quant_tile_words());
  if (k == "--dense-quant-tile") return take(parse_quant_tile, &o.quant_dense, quant_tile_words());
  if (k == "--dense-quant") return take(parse_dense_quant, &o.dense_quant, dense_quant_words());
  if (k == "--fp8-moe") return take(parse_fp8_experts, &o.fp8_experts, fp8_experts_words());
  if (k == "--flash-splits") {
    o.flash_splits = static_cast<int>(int_arg(k, v));  // range-checked by resolve_cuda_options
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: dgemma_bench MODEL_DIR [--device cuda|cpu] [--batch N] [--prompt-len P] [--steps S] "
        "[--canvases K]\n"
        "                   [--quantization bf16|nvfp4-modelopt|nvfp4-ct|fp8-dynamic]   (dummy weights' "
        "format)\n"
        "                   [--kernel-family %s] [--attention %s] [--flash-splits N]   (N key splits "
        "of every flash launch; 0 planned)\n"
        "                   [--moe-kernel %s]\n"
        "                   [--quant-tile %s] [--dense-quant-tile (the same)]\n"
        "                   [--dense-quant %s] [--fp8-moe %s]   (CUDA kernel choices)\n"
        "                   [--fused-projections on|off]   (q|k|v and gate|up as one GEMM each, or one GEMM "
        "per projection)\n"
        "                   [--fp8-row-fusion on|off]   (FP8-dynamic: the W8A8 inputs' FP8 rows written by "
        "their producers, or a quantisation launch per linear)\n"
        "                   [--profile-step N]   (profiler capture window around the N-th measured denoising "
        "step)\n"
        "                   [--runs B:S[:P],...]   (several runs, batch B, S steps, P-token prompt, on one "
        "set of weights)\n"
        "                   [--cuda-graphs on|off] [--max-model-len L]   (denoising steps replayed as a CUDA "
        "graph, as dgemma serve)\n"
        "                   [--images N]   (N images of 280 soft tokens in each prompt; needs a vision_config)\n"
        "                   [--guided-schema FILE] [--tokenizer FILE]   (canvases guided by a JSON Schema)\n",
        kernel_family_words().c_str(), attention_kernel_words().c_str(), moe_kernel_words().c_str(),
        quant_tile_words().c_str(), dense_quant_words().c_str(), fp8_experts_words().c_str());
    return 2;
  }
  std::string dir = argv[1], device = "cuda", quantization;  // empty: what the config declares
  std::string schema_file, tokenizer_file;
  int batch = 1, prompt_len = 512, steps = 48, canvases = 1, profile_step = 0, images = 0;
  const char* runs_arg = nullptr;  // --runs, when given
  bool fuse_projections = true;  // --fused-projections
  bool fp8_row_fusion = true;    // --fp8-row-fusion
  Graphs graphs;
  CudaOptions cuda;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device") device = argv[i + 1];
    else if (k == "--quantization") quantization = argv[i + 1];
    else if (k == "--batch") batch = static_cast<int>(int_arg(k, argv[i + 1]));
    else if (k == "--prompt-len") prompt_len = static_cast<int>(int_arg(k, argv[i + 1]));
    else if (k == "--steps") steps = static_cast<int>(int_arg(k, argv[i + 1]));
    else if (k == "--images")
      images = static_cast<int>(int_arg(k, argv[i + 1]));
    else if (k == "--canvases") canvases = static_cast<int>(int_arg(k, argv[i + 1]));
    else if (k == "--profile-step") profile_step = static_cast<int>(int_arg(k, argv[i + 1]));
    else if (k == "--runs") runs_arg = argv[i + 1];
    else if (k == "--cuda-graphs") graphs.on = on_off_arg(k, argv[i + 1]);
    else if (k == "--max-model-len") graphs.max_context = int_arg(k, argv[i + 1]);
    else if (k == "--guided-schema")
      schema_file = argv[i + 1];
    else if (k == "--tokenizer")
      tokenizer_file = argv[i + 1];
    else if (k == "--fused-projections")
      fuse_projections = on_off_arg(k, argv[i + 1]);
    else if (k == "--fp8-row-fusion")
      fp8_row_fusion = on_off_arg(k, argv[i + 1]);
    else if (!parse_cuda_flag(k, argv[i + 1], cuda)) {
      std::fprintf(stderr, "dgemma_bench: unknown option %s\n", k.c_str());
      return 2;
    }
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
  try {
    ModelConfig mc = load_model_config(dir);
    if (!quantization.empty()) mc.quant = quant_preset(quantization);
    std::fprintf(stderr, "weights: %s\n", mc.quant.quantized() ? mc.quant.summary.c_str() : "bf16");
    auto be = device == "cuda" ? make_cuda_backend(0, cuda) : make_cpu_backend();
    Stopwatch load;
    DiffusionGemma model(mc, dummy_weights(mc, *be, 1, WeightLoadOptions{.fuse_projections = fuse_projections}), *be);
    model.set_fp8_row_fusion(fp8_row_fusion);
    be->synchronize();
    std::fprintf(stderr, "dummy weights in %.1f s\n", load.seconds());
    graphs.max_context = std::min<int64_t>(graphs.max_context, mc.text.max_position_embeddings);
    PromptImages pi;
    pi.count = images;
    if (images > 0) {
      if (!model.vision())
        throw Error(ErrorKind::kInvalidArgument, "--images: the config has no vision_config");
      const int64_t values = 3 * int64_t{mc.vision.patch_size} * mc.vision.patch_size;
      std::vector<uint8_t> px(static_cast<size_t>(kImageGridH * kImageGridW * values));
      for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
      pi.patches = std::make_shared<const std::vector<uint8_t>>(std::move(px));
    }
    std::shared_ptr<const guided::TokenConstraint> constraint;
    std::unique_ptr<Tokenizer> tokenizer;
    if (!schema_file.empty()) {
      std::ifstream in(schema_file);
      if (!in) throw Error(ErrorKind::kNotFound, "cannot read " + schema_file);
      const std::string schema((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::shared_ptr<const guided::TokenVocabulary> vocab;
      if (!tokenizer_file.empty()) {
        tokenizer = Tokenizer::from_file(tokenizer_file);
        std::vector<int32_t> fillers;
        for (const char* name : {"<pad>", "<eos>"})
          if (auto id = tokenizer->token_to_id(name)) fillers.push_back(*id);
        vocab = guided::TokenVocabulary::from_tokenizer(*tokenizer, fillers);
      } else {
        vocab = synthetic_vocabulary(mc.text.vocab_size);
      }
      Stopwatch compile;
      constraint = guided::compile_for_vocabulary(guided::ConstraintSpec::json_schema(schema), vocab);
      std::fprintf(stderr, "guided: %d states, gap mask %s, compiled in %.0f ms\n",
                   constraint->dfa().num_states, constraint->gap_mask_exact() ? "exact" : "byte-class",
                   compile.ms());
    }
    for (const Run& run : runs) measure_run(model, *be, mc, run, canvases, profile_step, graphs, pi, constraint);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dgemma_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
