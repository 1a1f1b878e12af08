// The composition root. create_model_engine: flags -> backend, model config, generation config,
// weights, memory plan -> runner -> engine core (prepared) -> engine. create_engine_with_runner: the
// same flags, configs and memory plan over a runner of the caller's.
#include <algorithm>
#include <filesystem>

#include "backend/cuda_limits.h"
#include "backend/nccl.h"
#include "engine/data_parallel.h"
#include "engine/diffusion_runner.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine/kv_pool.h"
#include "engine/limits.h"
#include "engine/memory_plan.h"
#include "engine/params.h"
#include "engine/tp_runner.h"
#include "model/shard_plan.h"
#include "model/tensor_parallel.h"
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

void check_engine_flags(const EngineConfig& c) {
  if (c.max_num_seqs < 1 || c.max_num_seqs > limits::kMaxNumSeqs)
    fail_arg("--max-num-seqs must be in [1, {}] (got {})", limits::kMaxNumSeqs, c.max_num_seqs);
  if (c.max_queue < 0 || c.max_queue > limits::kMaxQueue)
    fail_arg("--max-queue must be in [0, {}] (got {})", limits::kMaxQueue, c.max_queue);
  if (!(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1))
    fail_arg("--gpu-memory-utilization must be in (0, 1] (got {})", c.gpu_memory_utilization);
  if (c.dtype != "auto" && c.dtype != "bfloat16" && c.dtype != "bf16")
    fail_arg("--dtype {} is not supported (bfloat16 only)", c.dtype);
}

// The model's config with the canvas length the engine runs at (--diffusion-config canvas_length,
// else `fallback_canvas`, else the checkpoint's).
constexpr int kDefaultImagesPerPrompt = 999;  // vLLM's default per modality

// Whether the deployment takes images: the model has a vision tower, images are not limited to 0, and
// one rank runs the model (the tower's weights are not sharded).
bool images_loaded(const EngineConfig& c, const ModelConfig& mc) {
  return mc.has_vision && c.max_images_per_prompt != 0 && c.tensor_parallel_size == 1;
}

ModelConfig engine_model_config(const EngineConfig& c, std::optional<int> fallback_canvas = std::nullopt) {
  ModelConfig mc = load_model_config(c.model_dir);
  mc.image_mask = c.image_mask;
  check_quantization_flag(mc.quant, c.quantization);
  if (c.canvas_length || fallback_canvas) {
    mc.canvas_length = c.canvas_length ? *c.canvas_length : *fallback_canvas;
    validate_model_config(
        mc, c.canvas_length ? "--diffusion-config canvas_length" : "the runner's canvas_length");
  }
  if (mc.canvas_length > limits::kMaxCanvasLength)
    fail_arg("canvas_length {} is more than the engine's limit of {}", mc.canvas_length, limits::kMaxCanvasLength);
  return mc;
}

int64_t engine_max_model_len(const EngineConfig& c, const ModelConfig& mc) {
  const int64_t C = mc.canvas_length;
  const int64_t max_len = c.max_model_len > 0 ? c.max_model_len : mc.text.max_position_embeddings;
  if (max_len <= C) fail_arg("--max-model-len {} must exceed canvas_length {}", max_len, C);
  if (max_len > mc.text.max_position_embeddings)
    fail_arg("--max-model-len {} exceeds the model's max_position_embeddings {}", max_len, mc.text.max_position_embeddings);
  return max_len;
}

MemoryPlanInputs memory_plan_inputs(const EngineConfig& c, int64_t max_len, bool cpu) {
  MemoryPlanInputs in;
  in.max_model_len = max_len;
  in.max_num_seqs = c.max_num_seqs;
  in.max_num_batched_tokens = c.max_num_batched_tokens;
  in.enable_chunked_prefill = c.enable_chunked_prefill;
  in.cpu = cpu;
  in.gpu_memory_utilization = c.gpu_memory_utilization;
  in.kv_cache_memory = c.kv_cache_memory;
  in.cuda_graphs = !cpu && !c.enforce_eager;
  return in;
}

// What of the model the CUDA backend's kernels depend on (backend/cuda_limits.h).
CudaModelShape cuda_model_shape(const ModelConfig& mc) {
  CudaModelShape s;
  const TextConfig& t = mc.text;
  s.hidden_size = t.hidden_size;
  for (const LayerSpec& l : t.layers) s.head_dims.push_back(l.head_dim);
  s.vocab_size = t.vocab_size;
  s.num_experts = t.num_experts;
  s.top_k = t.top_k_experts;
  s.moe_intermediate_size = t.moe_intermediate_size;
  s.quantized = mc.quant.quantized();
  return s;
}

EngineSizing engine_sizing(const EngineConfig& c, const MemoryPlan& plan, int64_t max_len) {
  EngineSizing sz;
  sz.max_num_seqs = c.max_num_seqs;
  sz.max_model_len = max_len;
  sz.max_num_batched_tokens = plan.max_num_batched_tokens;
  sz.prefill_chunk = plan.prefill_chunk;
  sz.kv = plan.pool;
  sz.prefix_caching = c.enable_prefix_caching;
  return sz;
}

// The runner's start-up work and device budget: the plan's ceilings on a GPU (`outside_allocator`:
// device memory in use outside the allocator when the plan was made), none on the CPU.
RunnerOptions runner_options(const EngineConfig& c, const MemoryPlan& plan, uint64_t outside_allocator) {
  RunnerOptions o;
  o.batch_buckets = engine_batch_buckets(c.max_num_seqs);
  o.warm_up = c.warmup;
  o.cuda_graphs = !c.enforce_eager;
  o.step_dump = c.step_dump;
  if (!plan.in.cpu)
    o.budget = {plan.step_ceiling_bytes, plan.graph_pool_bytes, plan.runtime_reserve_bytes,
                outside_allocator};
  return o;
}

// The core over the runner, prepared (the allocator's ceiling, warm-up, graphs), and the engine thread.
std::unique_ptr<EngineInterface> start_engine(const EngineConfig& c, const ModelConfig& mc,
                                              GenerationConfig g, const EngineSizing& sizing,
                                              std::unique_ptr<ModelRunner> runner) {
  std::unique_ptr<EngineCore> core = EngineCore::create(mc, sizing, std::move(runner));
  core->prepare([&](uint64_t id) {
    return resolve_sequence_params(SamplingParams{}, g, {c.seed, id, mc.canvas_length, mc.text.vocab_size});
  });
  auto engine = std::make_unique<DiffusionEngine>(c, std::move(core), std::move(g));
  if (images_loaded(c, mc)) {
    ImageSupport s;
    s.max_per_prompt = c.max_images_per_prompt < 0 ? kDefaultImagesPerPrompt : c.max_images_per_prompt;
    s.image_token_id = mc.image_token_id;
    s.boi_token_id = mc.boi_token_id;
    s.eoi_token_id = mc.eoi_token_id;
    s.patch_size = mc.vision.patch_size;
    s.pooling_kernel_size = mc.vision.pooling_kernel_size;
    s.max_soft_tokens = load_processor_config(c.model_dir, mc.vision).max_soft_tokens;
    s.max_block_tokens = sizing.prefill_chunk;
    engine->set_image_support(s);
  }
  return engine;
}

}  // namespace

std::string resolve_device(const std::string& device) {
  if (device == "auto") return cuda_available() ? "cuda" : "cpu";
  return device;
}

namespace {

// -dp N: N whole engines (replica r on GPU r; CPU: N engines of the CPU backend) behind one router.
std::unique_ptr<EngineInterface> create_data_parallel_engine(const EngineConfig& c) {
  const int dp = c.data_parallel_size;
  if (dp < 1 || dp > 8) fail_arg("--data-parallel-size must be 1 to 8 (got {})", dp);
  if (c.tensor_parallel_size > 1)
    fail_arg(
        "--data-parallel-size {} with --tensor-parallel-size {}: one or the other (replicas of split models "
        "are "
        "not supported)",
        dp, c.tensor_parallel_size);
  const std::string device = resolve_device(c.device);
  if (device == "cuda" && cuda_device_count() < dp)
    fail(ErrorKind::kUnsupported,
         "--data-parallel-size {} needs {} GPUs, one per replica (this process sees {})", dp, dp,
         cuda_device_count());
  std::vector<std::unique_ptr<EngineInterface>> replicas;
  for (int r = 0; r < dp; ++r) {
    EngineConfig rc = c;
    rc.data_parallel_size = 1;
    rc.cuda_device = device == "cuda" ? r : 0;
    DG_LOG_INFO("engine", "data-parallel replica {} of {}{}", r, dp,
                device == "cuda" ? fmt::format(" on GPU {}", r) : "");
    replicas.push_back(create_model_engine(rc));
  }
  const int canvas = replicas.front()->stats().canvas_length;
  return std::make_unique<DataParallelEngine>(std::move(replicas), canvas);
}

}  // namespace

std::unique_ptr<EngineInterface> create_model_engine(const EngineConfig& c) {
  if (c.data_parallel_size != 1) return create_data_parallel_engine(c);
  check_engine_flags(c);
  ModelConfig mc = engine_model_config(c);
  GenerationConfig g = resolve_generation_config(c, mc);
  const int tp = c.tensor_parallel_size;
  validate_tensor_parallel(mc, tp);

  const std::string device = resolve_device(c.device);
  // `backend` is where the weights load: the device of a one-GPU engine, or the host when -tp N splits
  // them over GPUs (rank_backends: one per GPU, each taking its shard).
  std::unique_ptr<Backend> backend;
  std::vector<std::unique_ptr<Backend>> rank_backends;
  if (device == "cuda") {
    check_cuda_supports(cuda_model_shape(mc));  // refused here, naming the limit, not mid-request
    if (tp > 1) {
      const int gpus = cuda_device_count();
      if (gpus < tp)
        fail(ErrorKind::kUnsupported,
             "--tensor-parallel-size {} on CUDA needs {} GPUs, one per rank (this process sees {}); --device "
             "cpu runs "
             "the CPU simulation",
             tp, tp, gpus);
      for (int r = 0; r < tp; ++r) rank_backends.push_back(make_cuda_backend(r, c.cuda));
      backend = make_cpu_backend();
    } else {
      backend = make_cuda_backend(c.cuda_device, c.cuda);
    }
  } else if (device == "cpu") {
    backend = make_cpu_backend();
  } else {
    fail_arg("--device must be auto, cuda or cpu (got '{}')", c.device);
  }
  DG_LOG_INFO("engine", "backend: {}{}",
              rank_backends.empty() ? backend->name() : rank_backends.front()->name(),
              tp > 1 ? fmt::format(", tensor parallel over {} ranks ({})", tp,
                                   device == "cpu" ? "threads" : "GPUs, NCCL")
                     : "");

  ModelWeights w;
  WeightLoadOptions load_options;
  load_options.vision = images_loaded(c, mc);
  if (mc.has_vision && !load_options.vision)
    DG_LOG_INFO("engine", "image input off ({}): the vision tower is not loaded",
                tp > 1 ? "tensor parallelism" : "--limit-mm-per-prompt image 0");
  if (c.load_format == "dummy") {
    w = dummy_weights(mc, *backend, c.seed, load_options);
    DG_LOG_INFO("engine", "dummy weights (deterministic random, seed {})", c.seed);
  } else if (c.load_format == "auto" || c.load_format == "safetensors") {
    ProgressReporter progress(ProgressReporter::for_stderr("loading weights"));
    w = load_weights(
        mc, c.model_dir, *backend, [&](uint64_t done, uint64_t total) { progress.update(done, total); },
        load_options);
  } else {
    fail_arg("--load-format must be auto, safetensors or dummy (got '{}')", c.load_format);
  }

  // The memory plan (engine/memory_plan.h, the same `dgemma inspect` prints): the weights are loaded,
  // so on a GPU what they and the context use is measured, and the pool gets what the budget leaves
  // after the per-sequence buffers and the activation workspace.
  const int64_t C = mc.canvas_length;
  const int64_t max_len = engine_max_model_len(c, mc);
  std::shared_ptr<TensorParallelModel> gpu_ranks;
  if (!rank_backends.empty()) {  // each GPU takes its shard of the host weights; NCCL joins them
    std::vector<Backend*> ranks;
    for (const auto& b : rank_backends) ranks.push_back(b.get());
    std::unique_ptr<CollectiveGroup> group = make_nccl_group(ranks);
    gpu_ranks = TensorParallelModel::upload(mc, w, std::move(rank_backends), std::move(group));
    w = ModelWeights{};
  }
  MemoryPlanInputs in = memory_plan_inputs(c, max_len, device == "cpu");
  in.tensor_parallel_size = tp;
  uint64_t outside_allocator = 0;
  if (!in.cpu) {  // measured on the GPU (rank 0's: the ranks hold equal shares)
    Backend& gpu = gpu_ranks ? gpu_ranks->backend(0) : *backend;
    gpu.release_cached_memory();  // freed loading temporaries are not the weights
    const MemoryInfo mem = gpu.memory_info();
    in.device_bytes = mem.total;
    in.used_bytes = mem.total - mem.free;
    const uint64_t held = gpu.allocator_stats().reserved;
    outside_allocator = in.used_bytes > held ? in.used_bytes - held : 0;
  }
  const MemoryPlan plan = plan_memory(mc, in);
  if (!plan.fits)
    throw Error(
        ErrorKind::kResourceExhausted,
        fmt::format(
            "not enough memory for the KV cache: {:.2f} GiB left for it after {:.2f} GiB of weights, "
            "{:.2f} GiB of per-sequence buffers (--max-num-seqs {}), {:.2f} GiB of activation workspace "
            "({} tokens a step) and {:.2f} GiB of reserves; lower --max-num-seqs or "
            "--max-num-batched-tokens, or raise --gpu-memory-utilization / --kv-cache-memory",
            plan.kv_budget_bytes / double(1ull << 30), plan.weight_bytes / double(1ull << 30),
            plan.work_bytes_all_seqs / double(1ull << 30), c.max_num_seqs,
            plan.workspace_bytes / double(1ull << 30), plan.step_tokens,
            (plan.runtime_reserve_bytes + plan.pool_rounding_bytes) / double(1ull << 30)));
  const double gib = double(1ull << 30);
  DG_LOG_INFO("engine",
              "memory plan: {} = weights {:.2f} GiB + runtime reserve {:.2f} GiB + buffers {:.2f} GiB + "
              "workspace {:.2f} GiB (activations {:.2f}, attention splits {:.2f}, sampler {:.3f}, reserve {:.2f}, "
              "rounding {:.2f}) + CUDA graph pool {:.2f} GiB + KV pool {:.2f} GiB (+ rounding {:.2f}): {} full-attention pages ({} tokens, {} "
              "sequences of max_model_len {}) + {} sliding pages of {} tokens; max_num_seqs {}, {} tokens per step "
              "(steps of up to {}); prefix caching {}",
              in.cpu ? fmt::format("{:.2f} GiB (CPU: no device budget)", plan.total_bytes / gib)
                     : fmt::format("{:.2f} GiB of the {:.2f} GiB budget", plan.total_bytes / gib, plan.budget_bytes / gib),
              plan.weight_bytes / gib, plan.runtime_reserve_bytes / gib,
              plan.work_bytes_all_seqs / gib, plan.workspace_bytes / gib, plan.activation_bytes / gib,
              plan.attention_split_bytes / gib, plan.sampler_bytes / gib, plan.reserve_bytes / gib,
              plan.rounding_bytes / gib, plan.graph_pool_bytes / gib, plan.pool.bytes / gib, plan.pool_rounding_bytes / gib,
              plan.pool.pages[static_cast<int>(KvGroup::kFull)], plan.pool.full_tokens, plan.full_len_seqs, max_len,
              plan.pool.pages[static_cast<int>(KvGroup::kSliding)], C, c.max_num_seqs, plan.max_num_batched_tokens,
              plan.step_tokens, c.enable_prefix_caching ? "on" : "off");
  const RunnerOptions ro = runner_options(c, plan, outside_allocator);
  std::unique_ptr<ModelRunner> runner;
  if (gpu_ranks) {
    runner = std::make_unique<TensorParallelRunner>(gpu_ranks, plan.pool, ro);
  } else if (tp > 1) {  // the ranks' weights are views of the host weights just loaded
    runner =
        std::make_unique<TensorParallelRunner>(TensorParallelModel::cpu(mc, std::move(w), tp), plan.pool, ro);
  } else {
    std::shared_ptr<Backend> be = std::move(backend);
    auto model = std::make_shared<DiffusionGemma>(mc, std::move(w), *be);
    runner = std::make_unique<DiffusionModelRunner>(be, std::move(model), plan.pool, ro);
  }
  return start_engine(c, mc, std::move(g), engine_sizing(c, plan, max_len), std::move(runner));
}

std::unique_ptr<EngineInterface> create_engine_with_runner(const EngineConfig& c,
                                                           std::optional<int> canvas_length,
                                                           const RunnerFactory& make_runner) {
  check_engine_flags(c);
  const ModelConfig mc = engine_model_config(c, canvas_length);
  GenerationConfig g = resolve_generation_config(c, mc);
  const int64_t max_len = engine_max_model_len(c, mc);
  // Sized as the CPU model engine would be: admission, page accounting and preemption follow the same
  // plan.
  const MemoryPlan plan = plan_memory(mc, memory_plan_inputs(c, max_len, /*cpu=*/true));
  if (!plan.fits) fail(ErrorKind::kResourceExhausted, "--kv-cache-memory is too small for two canvases");
  std::unique_ptr<ModelRunner> runner = make_runner(mc, g, plan.pool);
  DG_LOG_INFO("engine", "canvas_length {}, {} full-attention pages, max_num_seqs {}, {} tokens per step",
              mc.canvas_length, plan.pool.pages[static_cast<int>(KvGroup::kFull)], c.max_num_seqs,
              plan.max_num_batched_tokens);
  return start_engine(c, mc, std::move(g), engine_sizing(c, plan, max_len), std::move(runner));
}

}  // namespace dgemma
