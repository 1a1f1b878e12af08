#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "model/fused_weights.h"
#include "model/linear_loader.h"
#include "model/shard_plan.h"
#include "model/safetensors.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/counter_rng.h"
#include "util/log.h"
#include "util/parallel.h"

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
  Tensor* tensor = nullptr;       // for vectors and bf16-only matrices
  Weight* weight = nullptr;       // for linear layers (any format)
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
          {"self_attn.q_norm.weight", &LayerWeights::q_norm},
          {"self_attn.k_norm.weight", &LayerWeights::k_norm},
          {"pre_feedforward_layernorm.weight", &LayerWeights::pre_ff_norm},
          {"post_feedforward_layernorm_1.weight", &LayerWeights::post_ff_norm1},
          {"router.proj.weight", &LayerWeights::router_proj},
          {"router.scale", &LayerWeights::router_scale},
          {"router.per_expert_scale", &LayerWeights::per_expert_scale},
          {"pre_feedforward_layernorm_2.weight", &LayerWeights::pre_ff_norm2},
          {"post_feedforward_layernorm_2.weight", &LayerWeights::post_ff_norm2},
          {"post_feedforward_layernorm.weight", &LayerWeights::post_ff_norm},
      };
      static const std::map<std::string, Weight LayerWeights::*> kLinears = {
          {"self_attn.q_proj.weight", &LayerWeights::q_proj},
          {"self_attn.k_proj.weight", &LayerWeights::k_proj},
          {"self_attn.v_proj.weight", &LayerWeights::v_proj},
          {"self_attn.o_proj.weight", &LayerWeights::o_proj},
          {"mlp.gate_proj.weight", &LayerWeights::mlp_gate},
          {"mlp.up_proj.weight", &LayerWeights::mlp_up},
          {"mlp.down_proj.weight", &LayerWeights::mlp_down},
          {"experts.gate_up_proj", &LayerWeights::experts_gate_up},
          {"experts.down_proj", &LayerWeights::experts_down},
      };
      if (rest == "layer_scalar") {
        slot.scalar_decoder = &L.layer_scalar_decoder;
        slot.scalar_encoder = &L.layer_scalar_encoder;
      } else if (kLinears.count(rest)) {
        slot.weight = &(L.*kLinears.at(rest));
      } else {
        slot.tensor = &(L.*kMembers.at(rest));
      }
    }
    slots.push_back(slot);
  }
  return slots;
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

// A linear slot from its per-expert or (possibly quantised) module tensors.
std::optional<Weight> read_linear(LinearLoader& linears, const WeightSpec& spec, const ModelConfig& c) {
  auto pick = [&](const std::string& rest, const std::string& probe) {
    for (const char* p : {kDecoderPrefix, kEncoderPrefix})
      if (linears.has_module(p + rest + probe)) return std::string(p) + rest;
    return std::string(kDecoderPrefix) + rest;
  };
  const bool gate_up = spec.name.ends_with("experts.gate_up_proj");
  if (gate_up || spec.name.ends_with("experts.down_proj")) {
    const std::string rest = spec.name.substr(0, spec.name.rfind('.'));  // layers.L.experts
    const std::string probe = gate_up ? ".0.gate_proj" : ".0.down_proj";
    const std::string prefix = pick(rest, probe);
    if (!linears.has_module(prefix + probe)) {  // neither the fused tensor nor per-expert modules
      linears.problem(fmt::format("missing tensor {}{} (expected shape {}; or per-expert {}.E.{}_proj modules)", kDecoderPrefix,
                                  spec.name, shape_str(spec.shape), prefix, gate_up ? "{gate,up}" : "down"));
      return std::nullopt;
    }
    return linears.read_experts(prefix, c.text.num_experts, c.text.moe_intermediate_size, c.text.hidden_size, gate_up);
  }
  const std::string rest = spec.name.substr(0, spec.name.size() - std::string(".weight").size());
  return linears.read(pick(rest, ""), spec.shape[0], spec.shape[1]);
}

// GGUF files are a different container (and quantisation family) altogether.
void refuse_gguf(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto is_gguf = [](const fs::path& p) { return p.extension() == ".gguf" || p.extension() == ".GGUF"; };
  if (is_gguf(path)) throw Error(ErrorKind::kUnsupported, path + ": GGUF checkpoints are not supported (safetensors expected)");
  if (!fs::is_directory(path, ec)) return;
  bool safetensors = false;
  std::string gguf;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (e.path().extension() == ".safetensors") safetensors = true;
    if (is_gguf(e.path())) gguf = e.path().string();
  }
  if (!gguf.empty() && !safetensors)
    throw Error(ErrorKind::kUnsupported, gguf + ": GGUF checkpoints are not supported (safetensors expected)");
}

// Whether a dummy weight of this slot is quantised under `q` (the published checkpoints' choices).
bool dummy_quantised(const QuantConfig& q, const WeightSpec& spec) {
  if (!q.quantized()) return false;
  if (spec.group == WeightGroup::kExperts) return true;
  if (spec.group == WeightGroup::kDenseMlp) return q.method == QuantMethod::kCompressedTensors;
  if (spec.group == WeightGroup::kAttention) return q.fp8;
  return false;
}

// Random quantised weight of spec's shape: NVFP4 random nibbles with block scale 1 and a row scale
// making the rms 1/sqrt(K) (uniform E2M1 codes have rms ~2.93); FP8 random codes of magnitude
// 2^-2 .. 2^2 (rms ~1.6).
Weight dummy_quant_weight(const QuantConfig& q, const WeightSpec& spec, uint64_t key) {
  const bool experts = spec.group == WeightGroup::kExperts;
  const int64_t E = experts ? spec.shape[0] : 1, N = spec.shape[experts ? 1 : 0], K = spec.shape[experts ? 2 : 1];
  Weight w;
  w.format = q.nvfp4 && !q.fp8 ? WeightFormat::kNvfp4 : WeightFormat::kFp8Channel;
  w.act = w.format == WeightFormat::kFp8Channel && q.fp8_act_token ? ActQuant::kFp8Token : ActQuant::kNone;
  const bool fp4 = w.format == WeightFormat::kNvfp4;
  const int64_t bytes_per_row = fp4 ? K / 2 : K;
  const ScalarType dt = fp4 ? ScalarType::kU8 : ScalarType::kF8E4M3;
  w.data = experts ? host_tensor(dt, {E, N, bytes_per_row}) : host_tensor(dt, {N, bytes_per_row});
  uint8_t* d = w.data.ptr<uint8_t>();
  const int64_t total = E * N * bytes_per_row;
  constexpr int64_t kChunk = 4096;
  parallel_for(static_cast<size_t>((total + kChunk - 1) / kChunk), [&](size_t b, size_t e) {
    for (size_t c = b; c < e; ++c) {
      const int64_t end = std::min(total, static_cast<int64_t>(c + 1) * kChunk);
      for (int64_t i = static_cast<int64_t>(c) * kChunk; i < end; i += 8) {
        uint64_t r = rng::splitmix64(key * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i));
        for (int64_t j = i; j < std::min(end, i + 8); ++j, r >>= 8) {
          uint8_t v = static_cast<uint8_t>(r);
          if (!fp4) v = static_cast<uint8_t>((v & 0x87) | ((5 + (v >> 3) % 5) << 3));  // sign, exp 5..9, mantissa
          d[j] = v;
        }
      }
    }
  });
  w.row_scale = experts ? host_tensor(ScalarType::kF32, {E, N}) : host_tensor(ScalarType::kF32, {N});
  const float rs = 1.0f / ((fp4 ? 2.93f : 1.6f) * std::sqrt(static_cast<float>(K)));
  std::fill_n(w.row_scale.ptr<float>(), E * N, rs);
  if (fp4) {
    const int64_t G = K / kNvfp4Group;
    w.block = experts ? host_tensor(ScalarType::kF8E4M3, {E, N, G}) : host_tensor(ScalarType::kF8E4M3, {N, G});
    std::fill_n(w.block.ptr<uint8_t>(), w.block.numel(), uint8_t{0x38});  // 1.0
  }
  return w;
}

// The fused group a part belongs to (fused_weights.h): its weight, its rows in all and the part's first row.
struct FusedSlot {
  Weight* fused = nullptr;
  Tensor* fused_tensor = nullptr;  // the self-conditioning MLP's (a bf16 tensor)
  int64_t rows = 0, first = 0;
};
FusedSlot fused_slot(const ModelConfig& c, ModelWeights& w, const WeightSpec& spec, FusedPart part) {
  const TextConfig& t = c.text;
  FusedSlot f;
  switch (part.group) {
    case FusedGroup::kNone: break;
    case FusedGroup::kScGateUp:
      f.fused_tensor = &w.sc_gate_up;
      f.rows = 2 * t.self_conditioning_size;
      f.first = part.index * t.self_conditioning_size;
      break;
    case FusedGroup::kGateUp:
      f.fused = &w.layers[spec.layer].mlp_gate_up;
      f.rows = 2 * t.intermediate_size;
      f.first = part.index * t.intermediate_size;
      break;
    case FusedGroup::kQkv: {
      const LayerSpec& L = t.layers[spec.layer];
      const int64_t nq = t.num_attention_heads * L.head_dim, nk = L.num_kv_heads * L.head_dim;
      f.fused = &w.layers[spec.layer].qkv_proj;
      f.rows = nq + (L.k_eq_v ? 1 : 2) * nk;
      f.first = part.index == 0 ? 0 : nq + (part.index - 1) * nk;
      break;
    }
  }
  return f;
}

// Completes the fused groups of a layer (-1: the global self-conditioning MLP) once its slots are read.
void finish_fusion(Backend& backend, ModelWeights& w, int layer, bool fuse) {
  if (layer < 0) finish_sc_fusion(backend, w, fuse);
  else finish_layer_fusion(backend, w.layers[static_cast<size_t>(layer)], fuse);
}

}  // namespace

std::optional<WeightFormat> check_linear_headers(const ModelConfig& config, const SafetensorsCheckpoint& ckpt,
                                                 const WeightSpec& spec, std::set<std::string>& used,
                                                 std::vector<std::string>& problems) {
  LinearLoader linears(ckpt, config.quant, problems, used);
  linears.set_headers_only(true);
  std::optional<Weight> w = read_linear(linears, spec, config);
  if (!w) return std::nullopt;
  return w->format;
}

bool is_linear_group(WeightGroup g) {
  return g == WeightGroup::kAttention || g == WeightGroup::kDenseMlp || g == WeightGroup::kExperts;
}

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
  p.vision = count_vision_parameters(c);
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

uint64_t device_weight_bytes(const ModelConfig& c, int tp_size) {
  uint64_t total = 0;
  for (const auto& s : expected_weights(c)) {
    uint64_t n = 1;
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    if (tp_size > 1) n = static_cast<uint64_t>(static_cast<double>(n) * rank_weight_share(c, s, tp_size) + 0.5);
    const size_t nd = s.shape.size();
    const bool kernel = dummy_quantised(c.quant, s) && nd >= 2 && s.shape[nd - 2] % 8 == 0 && s.shape[nd - 1] % 64 == 0;
    if (!kernel) {
      total += n * 2;
      continue;
    }
    const uint64_t rows = n / static_cast<uint64_t>(s.shape[nd - 1]);
    total += (c.quant.nvfp4 && !c.quant.fp8 ? n / 2 + n / 16 : n) + rows * 4;
  }
  return total;
}

ModelWeights load_weights(const ModelConfig& config, const std::string& path, Backend& backend,
                          const LoadProgress& progress, const WeightLoadOptions& options) {
  refuse_gguf(path);
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
  const bool vision = options.vision && config.has_vision;
  uint64_t vision_bytes = 0;
  if (vision)
    for (const VisionTensorSpec& v : expected_vision_tensors(config))
      if (const TensorInfo* t = ckpt->find(v.name)) vision_bytes += t->nbytes;
  total += vision_bytes;
  if (progress) progress(0, total);
  LinearLoader linears(*ckpt, config.quant, problems, used);
  std::map<std::string, int> formats;  // "group format" -> count, for the log

  // The parts of a fused projection (fused_weights.h) stay on the host until their layer's slots are
  // all read (slots come layer by layer, the global ones first); then they are fused and uploaded.
  int layer = -1;
  for (Slot& s : slots) {
    if (s.spec.layer != layer) {
      if (problems.empty()) finish_fusion(backend, w, layer, options.fuse_projections);
      layer = s.spec.layer;
    }
    const bool part = fused_part(s.spec).group != FusedGroup::kNone;
    const bool fused_experts = s.spec.group == WeightGroup::kExperts &&
                               (ckpt->find(kDecoderPrefix + s.spec.name) || ckpt->find(kEncoderPrefix + s.spec.name));
    if (s.weight && !fused_experts) {
      // Linear layers in any format (the fused bf16 experts take the plain path below).
      std::optional<Weight> got = read_linear(linears, s.spec, config);
      if (!got) continue;
      formats[std::string(weight_group_name(s.spec.group)) + " " + weight_format_name(got->format)]++;
      *s.weight = part ? *got : backend.upload_weight(*got);
      continue;
    }
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
    if (s.weight) {
      formats[std::string(weight_group_name(s.spec.group)) + " bf16"]++;
      *s.weight = backend.upload_weight(Weight(checkpoint_bf16_tensor(*t, s.spec.shape)));
    } else {
      *s.tensor = part ? checkpoint_bf16_tensor(*t, s.spec.shape) : backend.upload(checkpoint_bf16_tensor(*t, s.spec.shape));
    }
    done += t->nbytes;
    if (progress && done < total) progress(done, total);
  }
  if (problems.empty()) finish_fusion(backend, w, layer, options.fuse_projections);
  if (vision) {
    w.vision = load_vision_weights(config, *ckpt, backend, problems, used);
    done += vision_bytes;
    if (progress && done < total) progress(done, total);
  }
  if (config.quant.quantized()) {
    std::string list;
    for (const auto& [k, n] : formats) list += (list.empty() ? "" : ", ") + fmt::format("{} x{}", k, n);
    DG_LOG_INFO("weights", "{}: {}; linears: {}", path, config.quant.summary, list);
  }
  if (progress && problems.empty()) progress(total, total);  // before the notes below, so a bar ends first
  // Anything left: the tied lm_head and vision tensors are expected; report the rest.
  int unused_vision = 0;
  std::vector<std::string> unknown;
  for (const TensorInfo* t : ckpt->tensors()) {
    if (used.count(t->name)) continue;
    if (is_vision_tensor(t->name)) {
      ++unused_vision;
    } else if (t->name == "lm_head.weight") {
      DG_LOG_INFO("weights", "lm_head.weight present; the LM head is tied to the embedding, ignoring it");
    } else {
      unknown.push_back(t->name);
    }
  }
  if (unused_vision > 0)
    DG_LOG_INFO("weights", "{}: ignoring {} vision tensors ({})", path, unused_vision,
                vision ? "not used by the vision tower" : "text-only: the vision tower is not loaded");
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

ModelWeights dummy_weights(const ModelConfig& config, Backend& backend, uint64_t seed,
                           const WeightLoadOptions& options) {
  ModelWeights w;
  std::vector<Slot> slots = bind_slots(config, w);
  uint64_t index = 0;
  int layer = -1;
  for (Slot& s : slots) {
    ++index;
    if (s.spec.layer != layer) {
      finish_fusion(backend, w, layer, options.fuse_projections);
      layer = s.spec.layer;
    }
    if (s.scalar_decoder) {
      *s.scalar_decoder = *s.scalar_encoder = 1.0f;
      continue;
    }
    const FusedPart part = fused_part(s.spec);
    if (s.weight && dummy_quantised(config.quant, s.spec)) {
      // Fused parts stay on the host until their group is complete (then concatenated and uploaded).
      Weight q = dummy_quant_weight(config.quant, s.spec, seed * 1000003ull + index);
      *s.weight = part.group != FusedGroup::kNone ? q : backend.upload_weight(q);
      continue;
    }
    Tensor t;
    if (part.group != FusedGroup::kNone && options.fuse_projections) {
      // A bf16 part is generated in its rows of the fused tensor (the same values: fill_normal keys
      // each element by its index in the tensor it is given).
      const FusedSlot f = fused_slot(config, w, s.spec, part);
      Tensor& all = f.fused ? f.fused->data : *f.fused_tensor;
      if (all.empty()) all = backend.alloc(ScalarType::kBF16, {f.rows, s.spec.shape[1]});
      t = all.rows(f.first, f.first + s.spec.shape[0]);
    } else {
      switch (s.spec.shape.size()) {
        case 1: t = backend.alloc(ScalarType::kBF16, {s.spec.shape[0]}); break;
        case 2: t = backend.alloc(ScalarType::kBF16, {s.spec.shape[0], s.spec.shape[1]}); break;
        default: t = backend.alloc(ScalarType::kBF16, {s.spec.shape[0], s.spec.shape[1], s.spec.shape[2]}); break;
      }
    }
    const bool is_vector = s.spec.shape.size() == 1;
    const int64_t fan_in = s.spec.shape.back();
    // Norm-like vectors near 1, matrices with 1/sqrt(fan_in) scale (embedding: unit scale / sqrt(H)).
    const float mean = is_vector ? 1.0f : 0.0f;
    const float std = is_vector ? 0.05f : 1.0f / std::sqrt(static_cast<float>(fan_in));
    backend.fill_normal(t, seed * 1000003ull + index, mean, std);
    if (s.weight) *s.weight = Weight(t);
    else *s.tensor = t;
  }
  finish_fusion(backend, w, layer, options.fuse_projections);
  if (options.vision && config.has_vision) w.vision = dummy_vision_weights(config, backend, seed);
  return w;
}

}  // namespace dgemma
