// create_model_engine: flags -> backend, model config, generation config, weights, memory plan, engine.
#include <algorithm>
#include <filesystem>

#ifdef DGEMMA_HAVE_CUDA
#include "backend/cuda/device_info.cuh"
#endif
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mmap_file.h"

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
  } catch (const Error& e) {
    fail_arg("generation settings: {}", e.what());
  }
  return g;
}

}  // namespace

std::unique_ptr<EngineInterface> create_model_engine(const EngineConfig& c) {
  if (c.max_num_seqs < 1 || c.max_num_seqs > 1024) fail_arg("--max-num-seqs must be in [1, 1024] (got {})", c.max_num_seqs);
  if (!(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1))
    fail_arg("--gpu-memory-utilization must be in (0, 1] (got {})", c.gpu_memory_utilization);
  if (c.dtype != "auto" && c.dtype != "bfloat16" && c.dtype != "bf16")
    fail_arg("--dtype {} is not supported (bfloat16 only)", c.dtype);

  ModelConfig mc = load_model_config(c.model_dir);
  check_quantization_flag(mc.quant, c.quantization);
  if (c.canvas_length) {
    mc.canvas_length = *c.canvas_length;
    validate_model_config(mc, "--diffusion-config canvas_length");
  }
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
    w = load_weights(mc, c.model_dir, *backend);
  } else {
    fail_arg("--load-format must be auto, safetensors or dummy (got '{}')", c.load_format);
  }

  // Context length and memory plan: every slot holds a KV cache for max_model_len tokens plus the
  // logits / self-conditioning buffers of one canvas.
  const int64_t C = mc.canvas_length;
  int64_t max_len = c.max_model_len > 0 ? c.max_model_len : std::min<int64_t>(mc.text.max_position_embeddings, 32768);
  if (max_len <= C) fail_arg("--max-model-len {} must exceed canvas_length {}", max_len, C);
  const int64_t chunk = std::max<int64_t>(C, std::min<int64_t>(2048, max_len));
  auto per_slot = [&](int64_t len) {
    return kv_bytes(mc, len, chunk) + static_cast<size_t>(C) * (mc.text.vocab_size + mc.text.hidden_size) * 2;
  };
  double budget = 8.0 * (1ull << 30);  // CPU: keep the caches under 8 GiB
#ifdef DGEMMA_HAVE_CUDA
  if (device == "cuda") {
    const auto devs = cuda::query_devices();
    budget = devs.empty() ? 0 : static_cast<double>(devs[0].free_memory) * c.gpu_memory_utilization - 4.0 * (1ull << 30);
  }
#endif
  while (static_cast<double>(per_slot(max_len)) * c.max_num_seqs > budget && c.max_model_len == 0 && max_len > 2 * C)
    max_len /= 2;
  if (static_cast<double>(per_slot(max_len)) * c.max_num_seqs > budget)
    throw Error(ErrorKind::kResourceExhausted,
                fmt::format("not enough memory for --max-num-seqs {} at --max-model-len {}: needs {:.2f} GiB for KV caches "
                            "and buffers, {:.2f} GiB available; lower either flag",
                            c.max_num_seqs, max_len, per_slot(max_len) * c.max_num_seqs / double(1ull << 30),
                            budget / double(1ull << 30)));
  DG_LOG_INFO("engine", "max_model_len {}, {} slots, {:.1f} MiB of KV + buffers per slot", max_len, c.max_num_seqs,
              per_slot(max_len) / double(1 << 20));
  auto model = std::make_unique<DiffusionGemma>(mc, std::move(w), *backend);
  return std::make_unique<DiffusionEngine>(c, std::move(backend), std::move(model), std::move(g), max_len);
}

}  // namespace dgemma
