// create_model_engine: flags -> backend, model config, generation config, weights, memory plan, engine.
#include <algorithm>
#include <filesystem>

#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine/kv_pool.h"
#include "engine/limits.h"
#include "engine/params.h"
#include "model/inspect_report.h"
#include "model/weights.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mmap_file.h"
#include "util/progress.h"

namespace dgemma {
namespace {

GenerationConfig resolve_generation_config(const EngineConfig& c, const ModelConfig& mc) {
  GenerationConfig g;
  if (c.generation_config.empty() || c.generation_config == "auto") {
    g = load_generation_config(c.model_dir, mc);
  } else if (c.generation_config == "vllm") {
    g = default_generation_config(mc);
  } else {
    if (!std::filesystem::is_directory(c.generation_config))
      fail_arg("--generation-config: '{}' is not 'auto', 'vllm' or a directory", c.generation_config);
    g = load_generation_config(c.generation_config, mc);
  }
  if (!c.override_generation_config.empty())
    g = parse_generation_config(c.override_generation_config, "--override-generation-config", g);
  for (auto it = c.hf_overrides.begin(); it != c.hf_overrides.end(); ++it) {
    if (it.key() == "diffusion_sampler") {
      if (!it.value().is_string() || it.value().get<std::string>() != "entropy_bound")
        fail_arg("--hf-overrides: diffusion_sampler must be \"entropy_bound\" (the only sampler DiffusionGemma has)");
    } else if (it.key() == "diffusion_entropy_bound") {
      if (!it.value().is_number() || !(it.value().get<double>() > 0))
        fail_arg("--hf-overrides: diffusion_entropy_bound must be a number > 0");
      g.entropy_bound = it.value().get<double>();  // unlike vLLM, this really sets the bound
    } else {
      DG_LOG_WARN("engine", "--hf-overrides: key '{}' has no effect in dgemma; ignored", it.key());
    }
  }
  if (c.max_denoising_steps) g.max_denoising_steps = *c.max_denoising_steps;
  try {
    g.validate();
    // The checkpoint's values pass the same limits as a request's overrides, so no request fails on them.
    (void)resolve_diffusion_params(SamplingParams{}, g);
  } catch (const Error& e) {
    fail_arg("generation settings: {}", e.what());
  }
  return g;
}

}  // namespace

std::unique_ptr<EngineInterface> create_model_engine(const EngineConfig& c) {
  if (c.max_num_seqs < 1 || c.max_num_seqs > limits::kMaxNumSeqs)
    fail_arg("--max-num-seqs must be in [1, {}] (got {})", limits::kMaxNumSeqs, c.max_num_seqs);
  if (c.max_queue < 0 || c.max_queue > limits::kMaxQueue)
    fail_arg("--max-queue must be in [0, {}] (got {})", limits::kMaxQueue, c.max_queue);
  if (!(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1))
    fail_arg("--gpu-memory-utilization must be in (0, 1] (got {})", c.gpu_memory_utilization);
  if (c.dtype != "auto" && c.dtype != "bfloat16" && c.dtype != "bf16")
    fail_arg("--dtype {} is not supported (bfloat16 only)", c.dtype);

  ModelConfig mc = load_model_config(c.model_dir);
  if (c.canvas_length) {
    mc.canvas_length = *c.canvas_length;
    validate_model_config(mc, "--diffusion-config canvas_length");
  }
  if (mc.canvas_length > limits::kMaxCanvasLength)
    fail_arg("canvas_length {} is more than the engine's limit of {}", mc.canvas_length, limits::kMaxCanvasLength);
  GenerationConfig g = resolve_generation_config(c, mc);

  std::string device = c.device;
  if (device == "auto") device = cuda_available() ? "cuda" : "cpu";
  std::unique_ptr<Backend> backend;
  if (device == "cuda") backend = make_cuda_backend(0);
  else if (device == "cpu") backend = make_cpu_backend();
  else fail_arg("--device must be auto, cuda or cpu (got '{}')", c.device);
  DG_LOG_INFO("engine", "backend: {}", backend->name());

  ModelWeights w;
  if (c.load_format == "dummy") {
    w = dummy_weights(mc, *backend, c.seed);
    DG_LOG_INFO("engine", "dummy weights (deterministic random, seed {})", c.seed);
  } else if (c.load_format == "auto" || c.load_format == "safetensors") {
    ProgressReporter progress(ProgressReporter::for_stderr("loading weights"));
    w = load_weights(mc, c.model_dir, *backend, [&](uint64_t done, uint64_t total) { progress.update(done, total); });
  } else {
    fail_arg("--load-format must be auto, safetensors or dummy (got '{}')", c.load_format);
  }

  // Context length, step budget and the KV pool from the memory budget (vLLM's rule: the pool gets
  // what the weights, the per-sequence work buffers and the activations leave of the budget). The
  // context length no longer reserves memory: requests take pages as they grow.
  const int64_t C = mc.canvas_length;
  const int64_t max_len = c.max_model_len > 0 ? c.max_model_len : mc.text.max_position_embeddings;
  if (max_len <= C) fail_arg("--max-model-len {} must exceed canvas_length {}", max_len, C);
  if (max_len > mc.text.max_position_embeddings)
    fail_arg("--max-model-len {} exceeds the model's max_position_embeddings {}", max_len, mc.text.max_position_embeddings);
  EngineSizing sz;
  sz.max_model_len = max_len;
  sz.prefill_chunk = c.enable_chunked_prefill ? std::min<int64_t>(2048, max_len) : max_len;
  sz.max_num_batched_tokens = c.max_num_batched_tokens > 0 ? std::max<int64_t>(c.max_num_batched_tokens, C)
                                                           : int64_t{c.max_num_seqs} * 2 * C + sz.prefill_chunk;
  const KvGeometry geo = kv_geometry(mc);
  // Tokens one step may encode (a prefill chunk always goes ahead, even over the budget).
  const int64_t step_tokens = std::max(sz.max_num_batched_tokens, sz.prefill_chunk);
  const uint64_t work = static_cast<uint64_t>(c.max_num_seqs) * static_cast<uint64_t>(C) *
                        static_cast<uint64_t>(mc.text.vocab_size + mc.text.hidden_size) * 2;
  const uint64_t act = activation_bytes_per_token(mc) * static_cast<uint64_t>(step_tokens) +
                       kWorkspaceReserveBytes;
  const MemoryInfo mem = backend->memory_info();
  uint64_t kv_budget = c.kv_cache_memory;
  if (kv_budget == 0) {
    if (device == "cuda") {
      const double budget = static_cast<double>(mem.total) * c.gpu_memory_utilization;
      const double used = static_cast<double>(mem.total - mem.free);  // weights and context so far
      const double left = budget - used - static_cast<double>(work) - static_cast<double>(act);
      kv_budget = left > 0 ? static_cast<uint64_t>(left) : 0;
    } else {
      // CPU: what max_num_seqs sequences of max_model_len need, at most 4 GiB (tests, small models).
      const uint64_t per_seq = static_cast<uint64_t>((max_len + C - 1) / C) * geo.bytes_per_page[static_cast<int>(KvGroup::kFull)];
      kv_budget = std::min<uint64_t>(uint64_t{4} << 30, per_seq * static_cast<uint64_t>(c.max_num_seqs)) +
                  static_cast<uint64_t>(sliding_pages_needed(geo, c.max_num_seqs, step_tokens)) *
                      geo.bytes_per_page[static_cast<int>(KvGroup::kSliding)];
    }
  }
  sz.kv = plan_kv_pool(geo, kv_budget, c.max_num_seqs, step_tokens);
  const bool has_full = geo.layers[static_cast<int>(KvGroup::kFull)] > 0;
  if ((has_full && sz.kv.full_tokens < 2 * C) || (!has_full && sz.kv.pages[static_cast<int>(KvGroup::kSliding)] == 0))
    throw Error(ErrorKind::kResourceExhausted,
                fmt::format("not enough memory for the KV cache: {:.2f} GiB left for it after the weights, {:.2f} GiB of "
                            "per-sequence buffers (--max-num-seqs {}) and {:.2f} GiB of activations; lower "
                            "--max-num-seqs or raise --gpu-memory-utilization / --kv-cache-memory",
                            kv_budget / double(1ull << 30), work / double(1ull << 30), c.max_num_seqs, act / double(1ull << 30)));
  DG_LOG_INFO("engine",
              "max_model_len {}, max_num_seqs {}, {} tokens per step; KV pool {:.2f} GiB: {} full-attention pages ({} tokens) + "
              "{} sliding pages of {} tokens; prefix caching {}",
              max_len, c.max_num_seqs, sz.max_num_batched_tokens, sz.kv.bytes / double(1ull << 30),
              sz.kv.pages[static_cast<int>(KvGroup::kFull)], sz.kv.full_tokens, sz.kv.pages[static_cast<int>(KvGroup::kSliding)],
              C, c.enable_prefix_caching ? "on" : "off");
  auto model = std::make_unique<DiffusionGemma>(mc, std::move(w), *backend);
  return std::make_unique<DiffusionEngine>(c, std::move(backend), std::move(model), std::move(g), sz);
}

}  // namespace dgemma
