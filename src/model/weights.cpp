#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "model/safetensors.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma {
namespace {

constexpr const char* kDecoderPrefix = "model.decoder.";
constexpr const char* kEncoderPrefix = "model.encoder.language_model.";

std::string layer_name(int i, const std::string& rest) { return "layers." + std::to_string(i) + "." + rest; }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Binds each expected tensor to its slot in the weight structs.
struct Slot {
  WeightSpec spec;
  Tensor* tensor = nullptr;       // for matrices and vectors
  float* scalar_decoder = nullptr;  // for layer_scalar
  float* scalar_encoder = nullptr;
};

std::vector<Slot> bind_slots(const ModelConfig& c, ModelWeights& w) {
  std::vector<WeightSpec> specs = expected_weights(c);
  w.layers.resize(c.text.num_hidden_layers);
  for (int i = 0; i < c.text.num_hidden_layers; ++i) w.layers[i].spec = c.text.layers[i];
  std::map<std::string, Tensor*> global = {
      {"embed_tokens.weight", &w.embed}, {"norm.weight", &w.final_norm},
      {"self_conditioning.pre_norm.weight", &w.sc_pre_norm}, {"self_conditioning.gate_proj.weight", &w.sc_gate},
      {"self_conditioning.up_proj.weight", &w.sc_up}, {"self_conditioning.down_proj.weight", &w.sc_down}};
  std::vector<Slot> slots;
  for (auto& s : specs) {
    Slot slot{s};
    if (s.layer < 0) {
      slot.tensor = global.at(s.name);
    } else {
      LayerWeights& L = w.layers[s.layer];
      const std::string rest = s.name.substr(s.name.find('.', 7) + 1);
      static const std::map<std::string, Tensor LayerWeights::*> kMembers = {
          {"input_layernorm.weight", &LayerWeights::input_norm},
          {"post_attention_layernorm.weight", &LayerWeights::post_attn_norm},
          {"self_attn.q_proj.weight", &LayerWeights::q_proj},
          {"self_attn.k_proj.weight", &LayerWeights::k_proj},
          {"self_attn.v_proj.weight", &LayerWeights::v_proj},
          {"self_attn.o_proj.weight", &LayerWeights::o_proj},
          {"self_attn.q_norm.weight", &LayerWeights::q_norm},
          {"self_attn.k_norm.weight", &LayerWeights::k_norm},
          {"pre_feedforward_layernorm.weight", &LayerWeights::pre_ff_norm},
          {"post_feedforward_layernorm_1.weight", &LayerWeights::post_ff_norm1},
          {"mlp.gate_proj.weight", &LayerWeights::mlp_gate},
          {"mlp.up_proj.weight", &LayerWeights::mlp_up},
          {"mlp.down_proj.weight", &LayerWeights::mlp_down},
          {"router.proj.weight", &LayerWeights::router_proj},
          {"router.scale", &LayerWeights::router_scale},
          {"router.per_expert_scale", &LayerWeights::per_expert_scale},
          {"pre_feedforward_layernorm_2.weight", &LayerWeights::pre_ff_norm2},
          {"post_feedforward_layernorm_2.weight", &LayerWeights::post_ff_norm2},
          {"experts.gate_up_proj", &LayerWeights::experts_gate_up},
          {"experts.down_proj", &LayerWeights::experts_down},
          {"post_feedforward_layernorm.weight", &LayerWeights::post_ff_norm},
      };
      if (rest == "layer_scalar") {
        slot.scalar_decoder = &L.layer_scalar_decoder;
        slot.scalar_encoder = &L.layer_scalar_encoder;
      } else {
        slot.tensor = &(L.*kMembers.at(rest));
      }
    }
    slots.push_back(slot);
  }
  return slots;
}

// Copies a checkpoint tensor into a bf16 host tensor (converting F32/F16), or borrows it when it
// already is aligned bf16 (zero-copy from the mmap).
Tensor to_bf16_tensor(const TensorInfo& t, const std::vector<int64_t>& shape) {
  Tensor out;
  out.type = ScalarType::kBF16;
  out.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) out.shape[i] = shape[i];
  const int64_t n = t.numel();
  if (t.dtype == DType::kBF16 && reinterpret_cast<uintptr_t>(t.data) % 2 == 0) {
    out.data = const_cast<uint8_t*>(t.data);
    return out;
  }
  Tensor h = host_tensor(ScalarType::kBF16, {n});
  uint16_t* dst = h.ptr<uint16_t>();
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    if (t.dtype == DType::kBF16) {
      uint16_t b;
      std::memcpy(&b, t.data + 2 * i, 2);
      v = bf16_to_f32(b);
    } else if (t.dtype == DType::kF16) {
      uint16_t b;
      std::memcpy(&b, t.data + 2 * i, 2);
      v = f16_to_f32(b);
    } else {
      std::memcpy(&v, t.data + 4 * i, 4);
    }
    dst[i] = f32_to_bf16(v);
  }
  out.data = h.data;
  out.owner = h.owner;
  return out;
}

float scalar_value(const TensorInfo& t) {
  if (t.dtype == DType::kBF16) {
    uint16_t b;
    std::memcpy(&b, t.data, 2);
    return bf16_to_f32(b);
  }
  if (t.dtype == DType::kF16) {
    uint16_t b;
    std::memcpy(&b, t.data, 2);
    return round_bf16(f16_to_f32(b));
  }
  float v;
  std::memcpy(&v, t.data, 4);
  return round_bf16(v);
}

}  // namespace

bool is_vision_tensor(const std::string& n) {
  for (const char* p : {"model.encoder.vision_tower.", "model.encoder.embed_vision.", "model.vision_tower.",
                        "model.embed_vision.", "embed_vision."})
    if (n.rfind(p, 0) == 0) return true;
  return false;
}

const char* weight_group_name(WeightGroup g) {
  switch (g) {
    case WeightGroup::kEmbedding: return "embedding";
    case WeightGroup::kAttention: return "attention";
    case WeightGroup::kDenseMlp: return "dense_mlp";
    case WeightGroup::kRouter: return "router";
    case WeightGroup::kExperts: return "experts";
    case WeightGroup::kNorm: return "norms";
    case WeightGroup::kSelfConditioning: return "self_conditioning";
    case WeightGroup::kScalar: return "layer_scalars";
  }
  return "?";
}

std::vector<WeightSpec> expected_weights(const ModelConfig& c) {
  const TextConfig& t = c.text;
  const int64_t H = t.hidden_size, V = t.vocab_size, I = t.intermediate_size, S = t.self_conditioning_size;
  const int64_t E = t.num_experts, MI = t.moe_intermediate_size, Hq = t.num_attention_heads;
  std::vector<WeightSpec> w;
  w.push_back({"embed_tokens.weight", {V, H}, WeightGroup::kEmbedding});
  w.push_back({"norm.weight", {H}, WeightGroup::kNorm});
  w.push_back({"self_conditioning.pre_norm.weight", {H}, WeightGroup::kSelfConditioning});
  w.push_back({"self_conditioning.gate_proj.weight", {S, H}, WeightGroup::kSelfConditioning});
  w.push_back({"self_conditioning.up_proj.weight", {S, H}, WeightGroup::kSelfConditioning});
  w.push_back({"self_conditioning.down_proj.weight", {H, S}, WeightGroup::kSelfConditioning});
  for (int i = 0; i < t.num_hidden_layers; ++i) {
    const LayerSpec& L = t.layers[i];
    const int64_t D = L.head_dim, Hkv = L.num_kv_heads;
    auto add = [&](const std::string& rest, std::vector<int64_t> shape, WeightGroup g) {
      w.push_back({layer_name(i, rest), std::move(shape), g, i});
    };
    add("input_layernorm.weight", {H}, WeightGroup::kNorm);
    add("self_attn.q_proj.weight", {Hq * D, H}, WeightGroup::kAttention);
    add("self_attn.k_proj.weight", {Hkv * D, H}, WeightGroup::kAttention);
    if (!L.k_eq_v) add("self_attn.v_proj.weight", {Hkv * D, H}, WeightGroup::kAttention);
    add("self_attn.o_proj.weight", {H, Hq * D}, WeightGroup::kAttention);
    add("self_attn.q_norm.weight", {D}, WeightGroup::kNorm);
    add("self_attn.k_norm.weight", {D}, WeightGroup::kNorm);
    add("post_attention_layernorm.weight", {H}, WeightGroup::kNorm);
    add("pre_feedforward_layernorm.weight", {H}, WeightGroup::kNorm);
    add("mlp.gate_proj.weight", {I, H}, WeightGroup::kDenseMlp);
    add("mlp.up_proj.weight", {I, H}, WeightGroup::kDenseMlp);
    add("mlp.down_proj.weight", {H, I}, WeightGroup::kDenseMlp);
    add("post_feedforward_layernorm_1.weight", {H}, WeightGroup::kNorm);
    add("router.proj.weight", {E, H}, WeightGroup::kRouter);
    add("router.scale", {H}, WeightGroup::kRouter);
    add("router.per_expert_scale", {E}, WeightGroup::kRouter);
    add("pre_feedforward_layernorm_2.weight", {H}, WeightGroup::kNorm);
    add("experts.gate_up_proj", {E, 2 * MI, H}, WeightGroup::kExperts);
    add("experts.down_proj", {E, H, MI}, WeightGroup::kExperts);
    add("post_feedforward_layernorm_2.weight", {H}, WeightGroup::kNorm);
    add("post_feedforward_layernorm.weight", {H}, WeightGroup::kNorm);
    add("layer_scalar", {1}, WeightGroup::kScalar);
  }
  return w;
}

ParameterCounts count_parameters(const ModelConfig& c) {
  ParameterCounts p;
  for (const auto& s : expected_weights(c)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    p.total += n;
    p.by_group[static_cast<int>(s.group)] += n;
    int64_t active = n;
    if (s.group == WeightGroup::kExperts) active = n / c.text.num_experts * c.text.top_k_experts;
    if (s.group == WeightGroup::kSelfConditioning) active = 0;  // decoder input only, not per token of the LM
    if (s.group == WeightGroup::kEmbedding) active = n;         // LM head (tied) reads it all per token
    p.active_per_token += active;
  }
  return p;
}

ModelWeights load_weights(const ModelConfig& config, const std::string& path, Backend& backend,
                          const LoadProgress& progress) {
  auto ckpt = std::make_shared<SafetensorsCheckpoint>(path);
  ModelWeights w;
  w.checkpoint = ckpt;
  std::vector<Slot> slots = bind_slots(config, w);
  std::vector<std::string> problems;
  std::set<std::string> used;
  // Progress counts the checkpoint bytes of the tensors that get uploaded.
  uint64_t total = 0, done = 0;
  for (const Slot& s : slots) {
    const TensorInfo* t = ckpt->find(kDecoderPrefix + s.spec.name);
    if (!t) t = ckpt->find(kEncoderPrefix + s.spec.name);
    if (t && !s.scalar_decoder) total += t->nbytes;
  }
  if (progress) progress(0, total);

  for (Slot& s : slots) {
    const TensorInfo* dec = ckpt->find(kDecoderPrefix + s.spec.name);
    const TensorInfo* enc = ckpt->find(kEncoderPrefix + s.spec.name);
    if (dec) used.insert(dec->name);
    if (enc) used.insert(enc->name);
    const TensorInfo* t = dec ? dec : enc;
    if (!t) {
      problems.push_back(fmt::format("missing tensor {}{} (expected shape {})", kDecoderPrefix, s.spec.name, shape_str(s.spec.shape)));
      continue;
    }
    auto check = [&](const TensorInfo* x) {
      if (x->dtype != DType::kBF16 && x->dtype != DType::kF16 && x->dtype != DType::kF32) {
        problems.push_back(fmt::format("tensor {} in {} has dtype {}; expected BF16 (F16/F32 are converted)", x->name, x->file, dtype_name(x->dtype)));
        return false;
      }
      if (x->shape != s.spec.shape) {
        problems.push_back(fmt::format("tensor {} in {} has shape {}; expected {}", x->name, x->file, shape_str(x->shape), shape_str(s.spec.shape)));
        return false;
      }
      return true;
    };
    if (s.scalar_decoder) {
      // The layer_scalar buffers are not tied: the encoder pass uses the encoder copy when present.
      const bool ok_dec = dec && check(dec);
      const bool ok_enc = enc && check(enc);
      if ((dec && !ok_dec) || (enc && !ok_enc)) continue;
      const float vd = ok_dec ? scalar_value(*dec) : scalar_value(*enc);
      const float ve = ok_enc ? scalar_value(*enc) : vd;
      *s.scalar_decoder = vd;
      *s.scalar_encoder = ve;
      if (vd != ve) DG_LOG_WARN("weights", "layer {}: encoder layer_scalar {} differs from decoder {}", s.spec.layer, ve, vd);
      continue;
    }
    if (!check(t)) continue;
    *s.tensor = backend.upload(to_bf16_tensor(*t, s.spec.shape));
    done += t->nbytes;
    if (progress && done < total) progress(done, total);
  }
  if (progress && problems.empty()) progress(total, total);  // before the notes below, so a bar ends first
  // Anything left: the tied lm_head and vision tensors are expected; report the rest.
  int vision = 0;
  std::vector<std::string> unknown;
  for (const TensorInfo* t : ckpt->tensors()) {
    if (used.count(t->name)) continue;
    if (is_vision_tensor(t->name)) {
      ++vision;
    } else if (t->name == "lm_head.weight") {
      DG_LOG_INFO("weights", "lm_head.weight present; the LM head is tied to the embedding, ignoring it");
    } else {
      unknown.push_back(t->name);
    }
  }
  if (vision > 0) DG_LOG_INFO("weights", "{}: ignoring {} vision tensors (text-only mode)", path, vision);
  if (!unknown.empty()) {
    std::string list;
    for (size_t i = 0; i < unknown.size() && i < 8; ++i) list += (i ? ", " : "") + unknown[i];
    DG_LOG_WARN("weights", "{}: ignoring {} unexpected tensors: {}{}", path, unknown.size(), list, unknown.size() > 8 ? ", ..." : "");
  }
  if (!problems.empty()) {
    std::string msg = fmt::format("{}: {} problem(s) with the checkpoint:", path, problems.size());
    for (const auto& p : problems) msg += "\n  - " + p;
    throw Error(ErrorKind::kInvalidFile, msg);
  }
  return w;
}

ModelWeights dummy_weights(const ModelConfig& config, Backend& backend, uint64_t seed) {
  ModelWeights w;
  std::vector<Slot> slots = bind_slots(config, w);
  uint64_t index = 0;
  for (Slot& s : slots) {
    ++index;
    if (s.scalar_decoder) {
      *s.scalar_decoder = *s.scalar_encoder = 1.0f;
      continue;
    }
    std::initializer_list<int64_t> dims = {};
    Tensor t;
    switch (s.spec.shape.size()) {
      case 1: t = backend.alloc(ScalarType::kBF16, {s.spec.shape[0]}); break;
      case 2: t = backend.alloc(ScalarType::kBF16, {s.spec.shape[0], s.spec.shape[1]}); break;
      default: t = backend.alloc(ScalarType::kBF16, {s.spec.shape[0], s.spec.shape[1], s.spec.shape[2]}); break;
    }
    (void)dims;
    const bool is_vector = s.spec.shape.size() == 1;
    const int64_t fan_in = s.spec.shape.back();
    // Norm-like vectors near 1, matrices with 1/sqrt(fan_in) scale (embedding: unit scale / sqrt(H)).
    const float mean = is_vector ? 1.0f : 0.0f;
    const float std = is_vector ? 0.05f : 1.0f / std::sqrt(static_cast<float>(fan_in));
    backend.fill_normal(t, seed * 1000003ull + index, mean, std);
    *s.tensor = t;
  }
  return w;
}

}  // namespace dgemma
