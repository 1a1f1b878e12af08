#include "model/vision_weights.h"

#include <cmath>
#include <map>

#include "model/linear_loader.h"
#include "model/safetensors.h"
#include "util/error.h"

namespace dgemma {
namespace {

constexpr const char* kTowerPrefix = "model.encoder.vision_tower.";
constexpr const char* kProjection = "model.encoder.embed_vision.embedding_projection.weight";

std::string layer_tensor(int i, const char* rest) {
  return std::string(kTowerPrefix) + "encoder.layers." + std::to_string(i) + "." + rest;
}

// The expected tensors, each with the slot it fills.
struct Slot {
  VisionTensorSpec spec;
  Tensor* tensor = nullptr;
  Weight* weight = nullptr;
};

std::vector<Slot> bind_slots(const ModelConfig& c, VisionWeights& w) {
  std::vector<Slot> slots;
  if (!c.has_vision) return slots;
  const VisionConfig& v = c.vision;
  const int64_t H = v.hidden_size, I = v.intermediate_size, D = v.head_dim;
  const int64_t Hq = v.num_attention_heads * D, Hkv = v.num_key_value_heads * D;
  auto tensor = [&](std::string name, std::vector<int64_t> shape, Tensor* t) {
    slots.push_back({{name, shape}, t});
  };
  auto linear = [&](std::string name, std::vector<int64_t> shape, Weight* lw) {
    slots.push_back({{name, shape}, nullptr, lw});
  };
  linear(std::string(kTowerPrefix) + "patch_embedder.input_proj.weight",
         {H, 3 * int64_t{v.patch_size} * v.patch_size}, &w.patch_proj);
  tensor(std::string(kTowerPrefix) + "patch_embedder.position_embedding_table",
         {2, v.position_embedding_size, H}, &w.position_table);
  if (v.standardize) {
    tensor(std::string(kTowerPrefix) + "std_bias", {H}, &w.std_bias);
    tensor(std::string(kTowerPrefix) + "std_scale", {H}, &w.std_scale);
  }
  w.layers.resize(static_cast<size_t>(v.num_hidden_layers));
  for (int i = 0; i < v.num_hidden_layers; ++i) {
    VisionLayerWeights& L = w.layers[static_cast<size_t>(i)];
    tensor(layer_tensor(i, "input_layernorm.weight"), {H}, &L.input_norm);
    linear(layer_tensor(i, "self_attn.q_proj.linear.weight"), {Hq, H}, &L.q_proj);
    linear(layer_tensor(i, "self_attn.k_proj.linear.weight"), {Hkv, H}, &L.k_proj);
    linear(layer_tensor(i, "self_attn.v_proj.linear.weight"), {Hkv, H}, &L.v_proj);
    linear(layer_tensor(i, "self_attn.o_proj.linear.weight"), {H, Hq}, &L.o_proj);
    tensor(layer_tensor(i, "self_attn.q_norm.weight"), {D}, &L.q_norm);
    tensor(layer_tensor(i, "self_attn.k_norm.weight"), {D}, &L.k_norm);
    tensor(layer_tensor(i, "post_attention_layernorm.weight"), {H}, &L.post_attn_norm);
    tensor(layer_tensor(i, "pre_feedforward_layernorm.weight"), {H}, &L.pre_ff_norm);
    linear(layer_tensor(i, "mlp.gate_proj.linear.weight"), {I, H}, &L.mlp_gate);
    linear(layer_tensor(i, "mlp.up_proj.linear.weight"), {I, H}, &L.mlp_up);
    linear(layer_tensor(i, "mlp.down_proj.linear.weight"), {H, I}, &L.mlp_down);
    tensor(layer_tensor(i, "post_feedforward_layernorm.weight"), {H}, &L.post_ff_norm);
  }
  linear(kProjection, {c.text.hidden_size, H}, &w.embed_projection);
  return slots;
}

Tensor alloc_shaped(Backend& backend, const std::vector<int64_t>& shape) {
  switch (shape.size()) {
    case 1:
      return backend.alloc(ScalarType::kBF16, {shape[0]});
    case 2:
      return backend.alloc(ScalarType::kBF16, {shape[0], shape[1]});
    default:
      return backend.alloc(ScalarType::kBF16, {shape[0], shape[1], shape[2]});
  }
}

}  // namespace

std::vector<VisionTensorSpec> expected_vision_tensors(const ModelConfig& config) {
  VisionWeights scratch;
  std::vector<VisionTensorSpec> out;
  for (const Slot& s : bind_slots(config, scratch)) out.push_back(s.spec);
  return out;
}

int64_t count_vision_parameters(const ModelConfig& config) {
  int64_t n = 0;
  for (const VisionTensorSpec& s : expected_vision_tensors(config)) {
    int64_t e = 1;
    for (int64_t d : s.shape) e *= d;
    n += e;
  }
  return n;
}

uint64_t vision_weight_bytes(const ModelConfig& config) {
  return static_cast<uint64_t>(count_vision_parameters(config)) * 2;
}

namespace {

// The checkpoint tensor of a slot when it is present with an accepted dtype and the expected shape; else
// nullptr after recording the problem.
const TensorInfo* checked_tensor(const SafetensorsCheckpoint& ckpt, const VisionTensorSpec& spec,
                                 std::set<std::string>& used, std::vector<std::string>& problems) {
  const TensorInfo* t = ckpt.find(spec.name);
  if (!t) {
    problems.push_back(
        fmt::format("missing tensor {} (expected shape {})", spec.name, shape_string(spec.shape)));
    return nullptr;
  }
  used.insert(t->name);
  if (t->dtype != DType::kBF16 && t->dtype != DType::kF16 && t->dtype != DType::kF32) {
    problems.push_back(fmt::format("tensor {} in {} has dtype {}; expected BF16 (F16/F32 are converted)",
                                   t->name, t->file, dtype_name(t->dtype)));
    return nullptr;
  }
  if (t->shape != spec.shape) {
    problems.push_back(fmt::format("tensor {} in {} has shape {}; expected {}", t->name, t->file,
                                   shape_string(t->shape), shape_string(spec.shape)));
    return nullptr;
  }
  return t;
}

}  // namespace

VisionWeights load_vision_weights(const ModelConfig& config, const SafetensorsCheckpoint& ckpt,
                                  Backend& backend, std::vector<std::string>& problems,
                                  std::set<std::string>& used) {
  VisionWeights w;
  for (Slot& s : bind_slots(config, w)) {
    const TensorInfo* t = checked_tensor(ckpt, s.spec, used, problems);
    if (!t) continue;
    const Tensor host = checkpoint_bf16_tensor(*t, s.spec.shape);
    if (s.weight)
      *s.weight = backend.upload_weight(Weight(host));
    else
      *s.tensor = backend.upload(host);
  }
  return w;
}

void check_vision_headers(const ModelConfig& config, const SafetensorsCheckpoint& ckpt,
                          std::set<std::string>& used, std::vector<std::string>& problems) {
  for (const VisionTensorSpec& spec : expected_vision_tensors(config))
    (void)checked_tensor(ckpt, spec, used, problems);
}

VisionWeights dummy_vision_weights(const ModelConfig& config, Backend& backend, uint64_t seed) {
  VisionWeights w;
  uint64_t index = 0;
  for (Slot& s : bind_slots(config, w)) {
    ++index;
    Tensor t = alloc_shaped(backend, s.spec.shape);
    const bool is_vector = s.spec.shape.size() == 1;
    const bool is_std_bias = s.spec.name.ends_with("std_bias");
    // Norm-like vectors near 1 (std_bias near 0), matrices with 1/sqrt(fan_in) scale, the position
    // tables small.
    const float mean = is_vector && !is_std_bias ? 1.0f : 0.0f;
    const float std = is_vector                  ? 0.05f
                      : s.spec.shape.size() == 3 ? 0.02f
                                                 : 1.0f / std::sqrt(static_cast<float>(s.spec.shape.back()));
    backend.fill_normal(t, seed * 1000003ull + 0x5649u * 7919u + index, mean, std);
    if (s.weight)
      *s.weight = Weight(t);
    else
      *s.tensor = t;
  }
  return w;
}

}  // namespace dgemma
