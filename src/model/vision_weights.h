#pragma once
// The vision tower's and the projection's tensors (model.encoder.vision_tower.*,
// model.encoder.embed_vision.*), by their checkpoint names, loaded and validated as the text weights are:
// every missing, misshaped or wrongly typed tensor is reported with its name (bf16; f16 / f32 converted).
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace dgemma {

class SafetensorsCheckpoint;

struct VisionLayerWeights {
  Tensor input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;  // [H]
  Weight q_proj, k_proj, v_proj, o_proj;                         // [Hq D, H] ..., o: [H, Hq D]
  Tensor q_norm, k_norm;                                         // [D]
  Weight mlp_gate, mlp_up, mlp_down;                             // [I, H], [I, H], [H, I]
};

struct VisionWeights {
  Weight patch_proj;           // [H, 3 p^2] (input_proj)
  Tensor position_table;       // [2, P, H]: column (x) table, then row (y) table
  Tensor std_bias, std_scale;  // [H] when the config standardizes, else empty
  std::vector<VisionLayerWeights> layers;
  Weight embed_projection;  // [text H, H] (embed_vision.embedding_projection)
  bool empty() const { return layers.empty(); }
};

// One tensor the tower expects: full checkpoint name and shape.
struct VisionTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};
// Empty when the config has no vision_config.
std::vector<VisionTensorSpec> expected_vision_tensors(const ModelConfig& config);
int64_t count_vision_parameters(const ModelConfig& config);  // 0 without vision_config
uint64_t vision_weight_bytes(const ModelConfig& config);     // bf16 bytes on the device

// Reads every expected vision tensor onto `backend`, marking the names used; problems are appended (the
// caller reports them with the text weights' problems).
VisionWeights load_vision_weights(const ModelConfig& config, const SafetensorsCheckpoint& ckpt,
                                  Backend& backend, std::vector<std::string>& problems,
                                  std::set<std::string>& used);

// The same checks without reading any tensor data (dgemma inspect of large checkpoints).
void check_vision_headers(const ModelConfig& config, const SafetensorsCheckpoint& ckpt,
                          std::set<std::string>& used, std::vector<std::string>& problems);

// Deterministic random vision weights of the configured shape (benchmarks, tests).
VisionWeights dummy_vision_weights(const ModelConfig& config, Backend& backend, uint64_t seed = 0);

}  // namespace dgemma
