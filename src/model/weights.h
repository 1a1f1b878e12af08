#pragma once
// Checkpoint names -> typed per-layer weight structs (docs/MODEL.md §2). Text weights are accepted under
// model.decoder.* (the released checkpoint) or model.encoder.language_model.*; full-attention layers
// have no v_proj (K=V); the duplicated encoder layer_scalar buffers are read for the encoder pass;
// the LM head is the tied embedding; the vision tower and its projection load too (vision_weights.h) unless
// the deployment is text-only (WeightLoadOptions::vision), then they are skipped (logged) and take no memory.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/vision_weights.h"

namespace dgemma {

class SafetensorsCheckpoint;

enum class WeightGroup { kEmbedding, kAttention, kDenseMlp, kRouter, kExperts, kNorm, kSelfConditioning, kScalar };
const char* weight_group_name(WeightGroup g);

// One tensor the model expects, by its canonical checkpoint name (under model.decoder.).
struct WeightSpec {
  std::string name;             // e.g. "layers.3.self_attn.q_proj.weight" (relative to the text prefix)
  std::vector<int64_t> shape;
  WeightGroup group;
  int layer = -1;               // -1 for global tensors
};
std::vector<WeightSpec> expected_weights(const ModelConfig& config);

// True for tensors of the vision tower and its projection.
bool is_vision_tensor(const std::string& name);

// The projections that read one input are fused at load (model/fused_weights.h): qkv_proj holds the q,
// k and (unless K=V) v rows [Hq D + Hkv D (+ Hkv D), H], mlp_gate_up the gate then the up rows [2I, H];
// then their parts are empty. Parts stored in different formats stay separate (the fused one empty).
struct LayerWeights {
  LayerSpec spec;
  Tensor input_norm, post_attn_norm;                       // [H]
  Weight qkv_proj;                                         // q | k | v fused (or empty: the parts below)
  Weight q_proj, k_proj, v_proj, o_proj;                   // v_proj empty on full layers (K=V)
  Tensor q_norm, k_norm;                                   // [D]
  Tensor pre_ff_norm, post_ff_norm1;                       // dense MLP pre/post norms
  Weight mlp_gate_up;                                      // gate | up fused (or empty: the parts below)
  Weight mlp_gate, mlp_up, mlp_down;
  Tensor router_proj, router_scale, per_expert_scale;
  Tensor pre_ff_norm2, post_ff_norm2;                      // MoE pre/post norms
  Weight experts_gate_up, experts_down;                    // [E, 2I, H], [E, H, I] (stacked per-expert tensors)
  Tensor post_ff_norm;                                     // norm of the summed FFN
  float layer_scalar_decoder = 1.0f;                       // bf16 values
  float layer_scalar_encoder = 1.0f;
};

struct ModelWeights {
  Tensor embed;       // [V, H] (also the LM head)
  Tensor final_norm;  // [H]
  Tensor sc_pre_norm, sc_down;
  Tensor sc_gate_up;     // [2S, H]: the self-conditioning MLP's gate then up rows (bf16: always fused)
  Tensor sc_gate, sc_up; // its parts, empty after load
  std::vector<LayerWeights> layers;
  VisionWeights vision;  // empty when the config has no vision_config or the deployment is text-only
  std::shared_ptr<const SafetensorsCheckpoint> checkpoint;  // keeps mmaps alive (CPU borrows them)
};

// Called with (bytes read and uploaded so far, bytes in all) before the first tensor and after each.
using LoadProgress = std::function<void(uint64_t done, uint64_t total)>;

struct WeightLoadOptions {
  // Load the vision tower and embed_vision (when the config has a vision_config). false: a text-only
  // deployment (no image per prompt): the vision tensors are not read and use no memory.
  bool vision = true;
  // q | k | v and the gate | up pairs as one weight each where their parts allow (model/fused_weights.h);
  // false: every part stays its own weight (the same bits; an A/B for benchmarks and tests).
  bool fuse_projections = true;
};

// Loads and validates the checkpoint at `path` (directory or file) for `config`, onto `backend`.
// Linear layers may be quantised as config.quant allows (linear_loader.h). Every missing, misshaped
// or wrongly typed tensor is reported at once in one Error(kInvalidFile); GGUF files are refused.
ModelWeights load_weights(const ModelConfig& config, const std::string& path, Backend& backend,
                          const LoadProgress& progress = {}, const WeightLoadOptions& options = {});

// Header-only check (no tensor data read) of a linear slot whose fused / bf16 name is absent: its
// per-expert or quantised module tensors are checked by name, dtype and shape and marked used.
// Returns the format found (nullopt after recording problems).
std::optional<WeightFormat> check_linear_headers(const ModelConfig& config, const SafetensorsCheckpoint& ckpt,
                                                 const WeightSpec& spec, std::set<std::string>& used,
                                                 std::vector<std::string>& problems);
bool is_linear_group(WeightGroup g);  // attention, dense MLP, experts

// Deterministic random weights of the configured shape (benchmarks, tests, the embedded model). When
// config.quant is set (e.g. quant_preset), the linears that format quantises are random quantised
// weights of that format (random codes, scales giving ~1/sqrt(fan_in) weights).
// The vision tower's are included as options.vision says (vision_weights.h dummy_vision_weights).
ModelWeights dummy_weights(const ModelConfig& config, Backend& backend, uint64_t seed = 0,
                           const WeightLoadOptions& options = {});

struct ParameterCounts {
  int64_t total = 0;               // all text parameters
  int64_t vision = 0;              // the vision tower and its projection (vision_weights.h)
  int64_t active_per_token = 0;    // with top_k of num_experts experts
  int64_t by_group[8] = {};
};
ParameterCounts count_parameters(const ModelConfig& config);

// Bytes the text weights take on a CUDA device under config.quant (the published checkpoints' choice of
// quantised linears): NVFP4 0.5 + 1/16 bytes a weight, FP8 1, plus an fp32 scale a row, for the linears
// the quantised kernels take (K % 64, rows % 8); bf16 for everything else.
// tp_size > 1: one rank's share under tensor parallelism (model/shard_plan.h rank_weight_share).
uint64_t device_weight_bytes(const ModelConfig& config, int tp_size = 1);

}  // namespace dgemma
