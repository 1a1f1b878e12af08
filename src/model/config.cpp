#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "model/json_fields.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mmap_file.h"

namespace dgemma {

const char* image_mask_name(ImageMask m) {
  switch (m) {
    case ImageMask::kGenerate:
      return "generate";
    case ImageMask::kGemma4:
      return "gemma4";
    case ImageMask::kCausal:
      return "causal";
  }
  return "?";
}

ImageMask parse_image_mask(const std::string& name, const std::string& what) {
  for (ImageMask m : {ImageMask::kGenerate, ImageMask::kGemma4, ImageMask::kCausal})
    if (name == image_mask_name(m)) return m;
  fail_arg("{} must be generate, gemma4 or causal (got '{}')", what, name);
}
namespace {

RopeParams parse_rope(const Json& j, const std::string& what, RopeParams def) {
  Fields f(j, what);
  RopeParams r = def;
  const std::string type = f.get_string("rope_type", def.type == RopeType::kDefault ? "default" : "proportional");
  if (type == "default") {
    r.type = RopeType::kDefault;
  } else if (type == "proportional") {
    r.type = RopeType::kProportional;
  } else {
    fail_file("{}: unsupported rope_type '{}' (supported: default, proportional)", what, type);
  }
  r.theta = f.get_double("rope_theta", def.theta, 1.0, 1e12);
  r.partial_rotary_factor = f.get_double("partial_rotary_factor", r.type == RopeType::kDefault ? 1.0 : def.partial_rotary_factor, 0.0, 1.0);
  if (f.has("factor") && f.get_double("factor", 1.0, 0.0, 1e6) != 1.0)
    fail_file("{}: rope 'factor' other than 1.0 is not supported", what);
  return r;
}

TextConfig parse_text_config(const Json& j, const std::string& what) {
  Fields f(j, what);
  TextConfig t;
  const std::string mt = f.get_string("model_type", "diffusion_gemma_text");
  if (mt != "diffusion_gemma_text" && mt != "gemma4_text")
    fail_file("{}: text_config.model_type '{}' is not diffusion_gemma_text", what, mt);
  t.vocab_size = f.get_int("vocab_size", t.vocab_size, 1, 1 << 24);
  t.hidden_size = f.get_int32("hidden_size", t.hidden_size, 1, 1 << 16);
  t.intermediate_size = f.get_int32("intermediate_size", t.intermediate_size, 1, 1 << 18);
  t.num_hidden_layers = f.get_int32("num_hidden_layers", t.num_hidden_layers, 1, 1024);
  t.num_attention_heads = f.get_int32("num_attention_heads", t.num_attention_heads, 1, 1024);
  t.num_key_value_heads = f.get_int32("num_key_value_heads", t.num_key_value_heads, 1, 1024);
  t.head_dim = f.get_int32("head_dim", t.head_dim, 2, 4096);
  t.global_head_dim = f.get_int32("global_head_dim", t.global_head_dim, 2, 4096);
  t.num_global_key_value_heads = f.get_int32("num_global_key_value_heads", 0, 0, 1024);
  t.max_position_embeddings = f.get_int("max_position_embeddings", t.max_position_embeddings, 1, int64_t{1} << 31);
  t.rms_norm_eps = f.get_double("rms_norm_eps", t.rms_norm_eps, 0.0, 1.0);
  t.sliding_window = f.get_int32("sliding_window", t.sliding_window, 2, 1 << 30);
  t.final_logit_softcapping = f.get_double("final_logit_softcapping", t.final_logit_softcapping, 0.0, 1e6);
  t.num_experts = f.get_int32("num_experts", 0, 0, 4096);
  t.top_k_experts = f.get_int32("top_k_experts", 0, 0, 4096);
  t.moe_intermediate_size = f.get_int32("moe_intermediate_size", 0, 0, 1 << 18);
  t.self_conditioning_size = f.get_int32("self_conditioning_size", t.intermediate_size, 1, 1 << 18);
  t.pad_token_id = static_cast<int32_t>(f.get_int("pad_token_id", 0, 0, std::numeric_limits<int32_t>::max()));
  t.bos_token_id = static_cast<int32_t>(f.get_int("bos_token_id", 2, 0, std::numeric_limits<int32_t>::max()));
  t.eos_token_ids = f.get_id_list("eos_token_id", {1});

  const std::string act = f.get_string("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh") fail_file("{}: hidden_activation '{}' is not supported (gelu_pytorch_tanh)", what, act);
  if (f.get_bool("attention_bias", false)) fail_file("{}: attention_bias=true is not supported", what);
  const std::string bidir = f.get_string("use_bidirectional_attention", "vision");
  if (bidir == "all") fail_file("{}: use_bidirectional_attention='all' is not supported (the encoder must be causal)", what);
  if (bidir != "vision") fail_file("{}: use_bidirectional_attention '{}' is not supported", what, bidir);
  for (const char* k : {"attn_logit_softcapping", "query_pre_attn_scalar"})
    if (f.has(k)) fail_file("{}: '{}' is not a DiffusionGemma feature and is not supported", what, k);
  if (f.has("num_kv_shared_layers") && f.get_int("num_kv_shared_layers", 0, 0, 1 << 20) != 0)
    fail_file("{}: KV-sharing layers are not supported", what);
  if (f.has("hidden_size_per_layer_input") && f.get_int("hidden_size_per_layer_input", 0, 0, 1 << 20) != 0)
    fail_file("{}: per-layer embeddings (PLE) are not supported", what);

  // Layer types: explicit list, or the default 5 sliding : 1 full pattern; the last layer is full.
  std::vector<LayerType> types;
  if (f.has("layer_types")) {
    const Json& lt = f.at("layer_types");
    if (!lt.is_array()) fail_file("{}: 'layer_types' must be a list", what);
    for (const auto& e : lt) {
      if (!e.is_string()) fail_file("{}: 'layer_types' entries must be strings", what);
      const std::string s = e.get<std::string>();
      if (s == "sliding_attention") types.push_back(LayerType::kSliding);
      else if (s == "full_attention") types.push_back(LayerType::kFull);
      else fail_file("{}: unknown layer type '{}'", what, s);
    }
    if (static_cast<int>(types.size()) != t.num_hidden_layers)
      fail_file("{}: 'layer_types' has {} entries but num_hidden_layers is {}", what, types.size(), t.num_hidden_layers);
  } else {
    for (int i = 0; i < t.num_hidden_layers; ++i)
      types.push_back(((i + 1) % 6) ? LayerType::kSliding : LayerType::kFull);
  }
  if (types.back() != LayerType::kFull) {
    DG_LOG_WARN("config", "{}: last layer must be full attention; forcing it (as the reference does)", what);
    types.back() = LayerType::kFull;
  }

  // RoPE per layer type.
  if (f.has("rope_parameters")) {
    const Json& rp = f.at("rope_parameters");
    if (!rp.is_object()) fail_file("{}: 'rope_parameters' must be an object", what);
    if (rp.contains("sliding_attention")) t.rope_sliding = parse_rope(rp.at("sliding_attention"), what + ": rope_parameters.sliding_attention", t.rope_sliding);
    if (rp.contains("full_attention")) t.rope_full = parse_rope(rp.at("full_attention"), what + ": rope_parameters.full_attention", t.rope_full);
  }

  // Per-layer geometry: sliding layers use head_dim / num_key_value_heads; full layers the global
  // values (older keys) or per_layer_config overrides (newer code), and K=V.
  const int full_kv = t.num_global_key_value_heads > 0 ? t.num_global_key_value_heads : t.num_key_value_heads;
  t.layers.resize(t.num_hidden_layers);
  for (int i = 0; i < t.num_hidden_layers; ++i) {
    LayerSpec& L = t.layers[i];
    L.type = types[i];
    if (L.type == LayerType::kSliding) {
      L.head_dim = t.head_dim;
      L.num_kv_heads = t.num_key_value_heads;
    } else {
      L.head_dim = t.global_head_dim;
      L.num_kv_heads = full_kv;
      L.k_eq_v = true;
    }
  }
  if (f.has("per_layer_config")) {
    const Json& pl = f.at("per_layer_config");
    if (!pl.is_object()) fail_file("{}: 'per_layer_config' must be an object of layer index -> overrides", what);
    for (auto it = pl.begin(); it != pl.end(); ++it) {
      int idx = -1;
      try {
        size_t pos = 0;
        idx = std::stoi(it.key(), &pos);
        if (pos != it.key().size()) idx = -1;
      } catch (...) {
        idx = -1;
      }
      if (idx < 0 || idx >= t.num_hidden_layers)
        fail_file("{}: per_layer_config key '{}' is not a layer index in [0, {})", what, it.key(), t.num_hidden_layers);
      Fields o(it.value(), what + ": per_layer_config." + it.key());
      LayerSpec& L = t.layers[idx];
      L.head_dim = o.get_int32("head_dim", L.head_dim, 2, 4096);
      L.num_kv_heads = o.get_int32("num_key_value_heads", L.num_kv_heads, 1, 1024);
    }
  }
  return t;
}

}  // namespace

const char* layer_type_name(LayerType t) { return t == LayerType::kSliding ? "sliding_attention" : "full_attention"; }

void validate_model_config(const ModelConfig& c, const std::string& what) {
  const TextConfig& t = c.text;
  if (t.num_experts <= 0 || t.top_k_experts <= 0 || t.moe_intermediate_size <= 0)
    fail_file("{}: num_experts, top_k_experts and moe_intermediate_size must be set (> 0) for DiffusionGemma", what);
  if (t.top_k_experts > t.num_experts)
    fail_file("{}: top_k_experts ({}) exceeds num_experts ({})", what, t.top_k_experts, t.num_experts);
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const LayerSpec& L = t.layers[i];
    if (L.head_dim % 2 != 0) fail_file("{}: layer {} head_dim {} must be even (RoPE)", what, i, L.head_dim);
    if (t.num_attention_heads % L.num_kv_heads != 0)
      fail_file("{}: layer {}: num_attention_heads ({}) is not a multiple of its KV heads ({})", what, i,
                t.num_attention_heads, L.num_kv_heads);
  }
  if (t.sliding_window < 2) fail_file("{}: sliding_window must be >= 2", what);
  if (c.canvas_length < 1 || c.canvas_length > 65536)
    fail_file("{}: canvas_length {} is out of range [1, 65536]", what, c.canvas_length);
  if (static_cast<int64_t>(c.canvas_length) >= t.max_position_embeddings)
    fail_file("{}: canvas_length {} must be smaller than max_position_embeddings {}", what, c.canvas_length,
              t.max_position_embeddings);
  auto check_id = [&](const char* name, int64_t id) {
    if (id < 0 || id >= t.vocab_size)
      fail_file("{}: {} {} is outside the vocabulary (size {})", what, name, id, t.vocab_size);
  };
  check_id("pad_token_id", t.pad_token_id);
  check_id("bos_token_id", t.bos_token_id);
  for (int32_t id : t.eos_token_ids) check_id("text_config.eos_token_id", id);
  for (int32_t id : c.eos_token_ids) check_id("eos_token_id", id);
}

ModelConfig parse_model_config(const Json& j, const std::string& what) {
  Fields f(j, what);
  ModelConfig c;
  const std::string mt = f.get_string("model_type", "");
  if (mt != "diffusion_gemma")
    fail_file("{}: model_type '{}' is not supported (expected 'diffusion_gemma')", what, mt);
  if (!f.has("text_config")) fail_file("{}: 'text_config' is missing", what);
  c.text = parse_text_config(f.at("text_config"), what + ": text_config");
  c.canvas_length = f.get_int32("canvas_length", 256, 1, 65536);
  c.boi_token_id = static_cast<int32_t>(f.get_int("boi_token_id", 255999, 0, std::numeric_limits<int32_t>::max()));
  c.eoi_token_id = static_cast<int32_t>(f.get_int("eoi_token_id", 258882, 0, std::numeric_limits<int32_t>::max()));
  c.image_token_id = static_cast<int32_t>(f.get_int("image_token_id", 258880, 0, std::numeric_limits<int32_t>::max()));
  c.eos_token_ids = f.get_id_list("eos_token_id", {});
  c.tie_word_embeddings = f.get_bool("tie_word_embeddings", true);
  if (!c.tie_word_embeddings) fail_file("{}: tie_word_embeddings=false is not supported (the LM head is the embedding)", what);
  c.has_vision = f.has("vision_config");
  if (c.has_vision) c.vision = parse_vision_config(f.at("vision_config"), what + ": vision_config");
  c.dtype = f.get_string("dtype", f.get_string("torch_dtype", "bfloat16"));
  if (f.has("quantization_config")) c.quant = parse_quant_config(f.at("quantization_config"), what + ": quantization_config");
  validate_model_config(c, what);
  return c;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  const std::string text = read_text_file(path, 16u << 20);
  const Json j = parse_json(text, path, /*is_file=*/true);
  ModelConfig c = parse_model_config(j, path);
  c.quant = load_quant_config(model_dir, j, path);
  return c;
}

void GenerationConfig::validate() const {
  auto bad = [](const char* param, const std::string& msg) { throw Error(ErrorKind::kInvalidArgument, msg, param); };
  if (max_denoising_steps <= 0) bad("max_denoising_steps", fmt::format("max_denoising_steps must be a positive integer (got {})", max_denoising_steps));
  if (!(entropy_bound > 0) || !std::isfinite(entropy_bound)) bad("entropy_bound", fmt::format("entropy_bound must be a float > 0 (got {})", entropy_bound));
  if (!(t_min >= 0) || !std::isfinite(t_min)) bad("t_min", fmt::format("t_min must be >= 0 (got {})", t_min));
  if (!(t_max >= 0) || !std::isfinite(t_max)) bad("t_max", fmt::format("t_max must be >= 0 (got {})", t_max));
  if (t_max <= t_min) bad("t_max", fmt::format("t_max must be greater than t_min (got t_max={} <= t_min={})", t_max, t_min));
  if (stability_threshold < 0) bad("stability_threshold", fmt::format("stability_threshold must be an integer >= 0 (got {})", stability_threshold));
  if (!(confidence_threshold > 0) || !std::isfinite(confidence_threshold)) bad("confidence_threshold", fmt::format("confidence_threshold must be a float > 0 (got {})", confidence_threshold));
  if (max_new_tokens <= 0) bad("max_new_tokens", fmt::format("max_new_tokens must be a positive integer (got {})", max_new_tokens));
}

GenerationConfig parse_generation_config(const Json& j, const std::string& what, GenerationConfig g) {
  Fields f(j, what);
  static const char* kKnown[] = {"max_new_tokens", "max_length", "max_denoising_steps", "sampler_config", "t_min", "t_max",
                                 "stability_threshold", "confidence_threshold", "cache_implementation", "cache_config",
                                 "bos_token_id", "pad_token_id", "eos_token_id", "_commit_hash", "_from_model_config",
                                 "transformers_version", "return_dict_in_generate", "disable_compile"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKnown) known = known || it.key() == k;
    if (!known) fail_file("{}: unexpected key '{}' (the reference rejects it too)", what, it.key());
  }
  g.max_new_tokens = f.get_int("max_new_tokens", g.max_new_tokens, 1, int64_t{1} << 40);
  g.max_denoising_steps = f.get_int32("max_denoising_steps", g.max_denoising_steps, 1, 1 << 20);
  g.t_min = f.get_double("t_min", g.t_min, 0.0, 1e6);
  g.t_max = f.get_double("t_max", g.t_max, 0.0, 1e6);
  g.stability_threshold = f.get_int32("stability_threshold", g.stability_threshold, 0, 1 << 20);
  g.confidence_threshold = f.get_double("confidence_threshold", g.confidence_threshold, 0.0, 1e6);
  g.eos_token_ids = f.get_id_list("eos_token_id", g.eos_token_ids);
  g.pad_token_id = static_cast<int32_t>(f.get_int("pad_token_id", g.pad_token_id, 0, std::numeric_limits<int32_t>::max()));
  g.bos_token_id = static_cast<int32_t>(f.get_int("bos_token_id", g.bos_token_id, 0, std::numeric_limits<int32_t>::max()));
  if (f.has("sampler_config")) {
    Fields s(f.at("sampler_config"), what + ": sampler_config");
    const std::string cls = s.get_string("_cls_name", "EntropyBoundSamplerConfig");
    if (cls != "EntropyBoundSamplerConfig")
      fail_file("{}: sampler '{}' is not supported: DiffusionGemma requires an EntropyBound sampler_config", what, cls);
    if (!s.has("entropy_bound")) fail_file("{}: sampler_config.entropy_bound is missing", what);
    g.entropy_bound = s.get_double("entropy_bound", g.entropy_bound, 0.0, 1e6);
  }
  try {
    g.validate();
  } catch (const Error& e) {
    fail_file("{}: {}", what, e.what());
  }
  return g;
}

GenerationConfig default_generation_config(const ModelConfig& model) {
  GenerationConfig g;
  // EOS fallback: the model's ids plus <turn|> and <|tool_response> as the released checkpoint lists.
  g.eos_token_ids = model.eos_token_ids.empty() ? model.text.eos_token_ids : model.eos_token_ids;
  for (int32_t id : {106, 50})
    if (id < model.text.vocab_size && std::find(g.eos_token_ids.begin(), g.eos_token_ids.end(), id) == g.eos_token_ids.end())
      g.eos_token_ids.push_back(id);
  return g;
}

GenerationConfig load_generation_config(const std::string& model_dir, const ModelConfig& model) {
  GenerationConfig g = default_generation_config(model);
  const std::filesystem::path path = std::filesystem::path(model_dir) / "generation_config.json";
  if (std::filesystem::exists(path)) {
    const std::string text = read_text_file(path.string(), 1u << 20);
    g = parse_generation_config(parse_json(text, path.string(), true), path.string(), g);
  }
  for (int32_t id : g.eos_token_ids)
    if (id >= model.text.vocab_size)
      fail_file("{}: eos_token_id {} is outside the vocabulary (size {})", path.string(), id, model.text.vocab_size);
  return g;
}

}  // namespace dgemma
