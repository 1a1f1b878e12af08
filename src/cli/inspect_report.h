#pragma once
// `dgemma inspect MODEL`: everything worth knowing about a model directory before serving it — the
// config, the parameter count by group, the checkpoint's bytes by dtype, the KV/memory plan on a GPU
// (engine/memory_plan.h, the plan the engine allocates by; the GPU of this machine or one of a given
// size), and a validation of the
// checkpoint against the shapes the config implies.
// Built as a struct (tests read it) and formatted as aligned text or JSON (the same content).
//
// Parameter counts come from expected_weights(); nothing the size of the model is ever allocated.
// "Active per token" (count_parameters) = attention + dense MLP + router + norms + layer scalars
// + top_k/num_experts of the experts + the whole embedding (the tied LM head reads all of it for every
// token); the self-conditioning MLP is not counted (it builds the decoder input once per canvas
// position and step, it is not part of the per-token LM).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/memory_plan.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/json.h"

namespace dgemma {

struct InspectOptions {
  std::string model_dir;
  std::string load_format = "auto";  // auto | safetensors | dummy
  int64_t max_model_len = 0;         // 0: max_position_embeddings (as the engine)
  int max_num_seqs = 4;
  int64_t max_num_batched_tokens = 0;  // 0: as the engine derives it
  bool enable_chunked_prefill = true;
  uint64_t kv_cache_memory = 0;        // --kv-cache-memory (0: what the budget leaves)
  std::optional<int> canvas_length;  // overrides config.json's canvas_length
  // The GPU's memory (per GPU with tensor parallelism); absent: GPU 0's, and without a GPU the plan has
  // no budget (no KV pool, no verdict).
  std::optional<double> gpu_memory_bytes;
  int tensor_parallel_size = 1;      // > 1: the memory plan of each of that many GPUs
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;        // --enforce-eager: no CUDA graph pool in the plan
  // Checkpoints larger than this are validated from their headers only (names, shapes, dtypes);
  // smaller ones are also loaded with load_weights on the CPU backend (zero-copy mmaps).
  uint64_t full_load_limit_bytes = uint64_t{8} << 30;
};

// Distinct attention geometry and the layers that share it.
struct LayerGroup {
  LayerType type = LayerType::kSliding;
  int head_dim = 0;
  int num_kv_heads = 0;
  bool k_eq_v = false;
  std::vector<int> layers;
};

struct DtypeTotal {
  int64_t tensors = 0;
  uint64_t bytes = 0;
};

struct CheckpointSummary {
  bool present = false;       // false for dummy weights
  std::string path;           // the model directory it was opened from
  int files = 0;
  int64_t tensors = 0;
  uint64_t total_bytes = 0;
  std::map<std::string, DtypeTotal> by_dtype;  // safetensors dtype name -> totals over every tensor
  int64_t text_tensors = 0;                    // tensors matched to expected_weights (either prefix)
  int64_t vision_tensors = 0;                  // the vision tower's and embed_vision's
  uint64_t vision_bytes = 0;
  int64_t encoder_copies = 0;   // model.encoder.language_model.* copies next to model.decoder.* (layer_scalar)
  bool lm_head = false;         // an (ignored) lm_head.weight; the head is tied to the embedding
  std::vector<std::string> unexpected;  // neither text, vision nor lm_head: ignored with a warning
  std::map<std::string, int64_t> linear_formats;  // weight format name -> linear slots (expert stacks count once)
};

struct ValidationReport {
  std::string method;                  // what was checked, in words
  bool loaded = false;                 // load_weights ran (small checkpoints)
  std::string load_error;              // its error message when it threw
  std::vector<std::string> problems;   // every missing / misshaped / wrongly typed tensor
  std::vector<std::string> warnings;   // ignored tensors and similar
  bool ok() const { return problems.empty(); }
};

struct InspectReport {
  std::string model_dir;
  std::vector<std::string> architectures;  // config.json "architectures"
  std::string text_model_type;             // text_config.model_type
  ModelConfig config;
  GenerationConfig generation;
  bool generation_config_file = false;     // generation_config.json present (else built-in defaults)
  std::string load_format;                 // resolved: safetensors | dummy
  std::string load_format_note;            // why (auto)
  ParameterCounts params;
  std::vector<LayerGroup> layer_groups;
  std::string layer_pattern;               // e.g. "(5×sliding, 1×full) ×5"
  std::vector<int> full_layers;
  CheckpointSummary checkpoint;
  std::map<std::string, DtypeTotal> bytes_by_dtype;  // checkpoint's, or BF16 x params for dummy
  MemoryPlan plan;
  std::string gpu_memory_source;  // "--gpu-memory-bytes" or "GPU 0"; empty: no budget (no GPU, no flag)
  ValidationReport validation;
};

// Throws Error for a missing directory / config.json, bad JSON, an inconsistent config, bad options
// or an unreadable checkpoint file. Checkpoint *content* problems are listed in report.validation.
InspectReport build_inspect_report(const InspectOptions& options);

// Compact layer-type pattern: "(5×sliding, 1×full) ×5" when periodic, else a run-length list.
std::string layer_type_pattern(const std::vector<LayerSpec>& layers);

std::string format_inspect_text(const InspectReport& report);
Json inspect_report_json(const InspectReport& report);

}  // namespace dgemma
