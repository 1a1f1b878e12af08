#pragma once
// Everything needed to build an engine from the command line (dgemma serve / generate).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/cuda_options.h"
#include "backend/tensor.h"
#include "engine/kv_pool.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "model/config.h"
#include "util/json.h"

namespace dgemma {

struct EngineConfig {
  std::string model_dir;               // HF model directory
  std::string load_format = "auto";    // auto | safetensors | dummy
  std::string device = "auto";         // auto | cpu | cuda
  CudaOptions cuda;                    // the CUDA backend's kernel choices (--kernel-family, --fp8-moe)
  std::string dtype = "auto";          // auto | bfloat16
  std::string quantization;            // vLLM's --quantization: empty/auto = what the checkpoint declares
  int64_t max_model_len = 0;           // 0: from config (max_position_embeddings), capped by memory
  int max_num_seqs = 4;                // running requests
  int tensor_parallel_size = 1;        // -tp N: ranks the model is split over (CPU: threads of the simulation)
  int data_parallel_size = 1;          // -dp N: engine replicas behind one server (engine/data_parallel.h)
  int cuda_device = 0;                 // the GPU of a one-GPU engine (a data-parallel replica's)
  int64_t max_num_batched_tokens = 0;  // 0: derived (max_num_seqs * canvas + prefill chunk)
  int max_queue = 1024;                // waiting requests before 503
  double gpu_memory_utilization = 0.9;   // share of the device's memory the engine may use (CUDA)
  uint64_t kv_cache_memory = 0;          // --kv-cache-memory: bytes of KV pool (0: what the budget leaves)
  std::optional<int> canvas_length;        // --diffusion-config canvas_length
  std::optional<int> max_denoising_steps;  // --diffusion-config max_denoising_steps
  Json hf_overrides = Json::object();      // --hf-overrides (diffusion_sampler, diffusion_entropy_bound, ...)
  std::string generation_config;           // --generation-config: "auto" (model dir), "vllm" (built-in defaults) or a directory
  Json override_generation_config = Json::object();  // --override-generation-config
  uint64_t seed = 0;                       // --seed: base for requests without their own seed
  // --limit-mm-per-prompt '{"image": N}': images a prompt may hold (-1: the default, 999 as in vLLM; 0: a
  // text-only deployment: the vision tower is not loaded).
  int max_images_per_prompt = -1;
  ImageMask image_mask = ImageMask::kGenerate;  // --image-attention: how image blocks attend
  bool enable_prefix_caching = true;     // on by default, as in vLLM
  bool enable_chunked_prefill = true;
  bool warmup = false;  // the runner's start-up warm-up (diffusion_runner.h); serve turns it on for the GPU
                        // unless --no-warmup
  // --enforce-eager (vLLM's flag): no CUDA graphs; every step runs op by op. Otherwise, on a backend
  // with graphs, the engine records one denoising step per batch-size bucket at start-up.
  bool enforce_eager = false;
  // Debug dumps (`dgemma generate --dump`): called before every engine step with its index; the hook it
  // returns (may be empty) receives every named intermediate of that step's forward pass.
  using DumpHookFn = std::function<void(const std::string& name, const Tensor& t)>;
  std::function<DumpHookFn(int64_t step)> step_dump;
};

// Builds the model-backed engine (loads weights, allocates the KV cache, starts the engine thread).
// Throws Error with a clear message on a bad model directory or an impossible memory plan.
std::unique_ptr<EngineInterface> create_model_engine(const EngineConfig& config);

// The same engine over another runner (the test server's scripted and fault-injected ones): the same
// flags, configs and memory plan as the CPU model engine (admission, page accounting and preemption
// follow the same plan). `canvas_length` (optional) replaces the checkpoint's, as --diffusion-config
// canvas_length would; make_runner builds the runner for the resolved model and generation configs and
// the plan's KV pool (a runner with a model allocates it; a scripted one ignores it).
using RunnerFactory = std::function<std::unique_ptr<ModelRunner>(const ModelConfig&, const GenerationConfig&,
                                                                 const KvPoolPlan&)>;
std::unique_ptr<EngineInterface> create_engine_with_runner(const EngineConfig& config,
                                                           std::optional<int> canvas_length,
                                                           const RunnerFactory& make_runner);
// --device as the engine resolves it: "auto" becomes "cuda" when a GPU is usable, else "cpu".
std::string resolve_device(const std::string& device);

}  // namespace dgemma
