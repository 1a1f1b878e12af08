#include "model/quant_config.h"

#include <filesystem>
#include <regex>

#include "util/error.h"
#include "util/log.h"
#include "util/mmap_file.h"

namespace dgemma {
namespace {

[[noreturn]] void unsupported(const std::string& what, const std::string& msg) {
  throw Error(ErrorKind::kUnsupported, what + ": " + msg);
}

std::vector<std::string> string_list(const Json& j, const char* key, const std::string& what) {
  std::vector<std::string> out;
  if (!j.contains(key) || j.at(key).is_null()) return out;
  const Json& v = j.at(key);
  if (!v.is_array()) fail_file("{}: '{}' must be a list of strings", what, key);
  for (const Json& s : v) {
    if (!s.is_string()) fail_file("{}: '{}' must be a list of strings", what, key);
    out.push_back(s.get<std::string>());
  }
  return out;
}

int64_t int_or(const Json& j, const char* key, int64_t def, const std::string& what) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  if (!j.at(key).is_number_integer()) fail_file("{}: '{}' must be an integer", what, key);
  return j.at(key).get<int64_t>();
}

std::string str_or(const Json& j, const char* key, const std::string& def, const std::string& what) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  if (!j.at(key).is_string()) fail_file("{}: '{}' must be a string", what, key);
  return j.at(key).get<std::string>();
}

bool bool_or(const Json& j, const char* key, bool def, const std::string& what) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  if (!j.at(key).is_boolean()) fail_file("{}: '{}' must be a boolean", what, key);
  return j.at(key).get<bool>();
}

// NVIDIA ModelOpt: {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules"/"ignore": [...]}.
QuantConfig parse_modelopt(const Json& body, const std::string& what) {
  if (!body.is_object()) fail_file("{}: the modelopt quantization section must be an object", what);
  QuantConfig q;
  q.method = QuantMethod::kModelopt;
  const std::string algo = str_or(body, "quant_algo", "", what);
  if (algo != "NVFP4")
    unsupported(what, fmt::format("modelopt quant_algo '{}' is not supported (dgemma serves NVFP4)", algo));
  int64_t group = int_or(body, "group_size", 16, what);
  if (body.contains("config_groups") && body.at("config_groups").is_object())
    for (const auto& [name, g] : body.at("config_groups").items())
      if (g.is_object() && g.contains("weights") && g.at("weights").is_object())
        group = int_or(g.at("weights"), "group_size", group, what);
  if (group != 16) unsupported(what, fmt::format("modelopt NVFP4 group_size {} is not supported (16 expected)", group));
  q.nvfp4 = true;
  q.ignore = string_list(body, "exclude_modules", what);
  for (auto& p : string_list(body, "ignore", what)) q.ignore.push_back(p);
  const std::string kv = str_or(body, "kv_cache_quant_algo", "", what);
  if (!kv.empty() && kv != "none")
    DG_LOG_INFO("weights", "{}: kv_cache_quant_algo {} declared; dgemma keeps the KV cache in bf16", what, kv);
  q.summary = "modelopt NVFP4 (E2M1, E4M3 scales per 16, fp32 global), run as W4A16";
  return q;
}

// One compressed-tensors config group's weights / input_activations.
void parse_ct_group(const Json& g, const std::string& what, QuantConfig& q) {
  if (!g.is_object() || !g.contains("weights") || !g.at("weights").is_object())
    fail_file("{}: a config group without 'weights'", what);
  const Json& w = g.at("weights");
  const int64_t bits = int_or(w, "num_bits", 0, what);
  const std::string type = str_or(w, "type", "int", what);
  const std::string strategy = str_or(w, "strategy", "tensor", what);
  if (bool_or(w, "dynamic", false, what)) unsupported(what, "dynamic weight quantisation is not supported");
  bool fp8 = false;
  if (bits == 8 && type == "float" && (strategy == "channel" || strategy == "tensor")) {
    q.fp8 = fp8 = true;
  } else if (bits == 4 && type == "float" && strategy == "tensor_group" && int_or(w, "group_size", 0, what) == 16) {
    q.nvfp4 = true;
  } else {
    unsupported(what, fmt::format("compressed-tensors weights {{num_bits {}, type {}, strategy {}}} are not supported "
                                  "(dgemma serves FP8 channel/tensor and NVFP4 tensor_group/16)",
                                  bits, type, strategy));
  }
  if (!g.contains("input_activations") || g.at("input_activations").is_null()) return;
  const Json& a = g.at("input_activations");
  if (!a.is_object()) fail_file("{}: 'input_activations' must be an object", what);
  const int64_t abits = int_or(a, "num_bits", 0, what);
  const std::string atype = str_or(a, "type", "int", what);
  if (fp8) {
    if (abits != 8 || atype != "float")
      unsupported(what, fmt::format("FP8 weights with {}-bit {} activations are not supported", abits, atype));
    if (!bool_or(a, "dynamic", false, what) || str_or(a, "strategy", "", what) != "token")
      unsupported(what, "FP8 activations must be dynamic per token (static activation scales are not supported)");
    q.fp8_act_token = true;
  } else if (!(abits == 4 && atype == "float")) {
    unsupported(what, fmt::format("NVFP4 weights with {}-bit {} activations are not supported", abits, atype));
  }
  // NVFP4 activations (W4A4): Hopper has no FP4 tensor cores; the weights run as W4A16.
}

QuantConfig parse_compressed_tensors(const Json& j, const std::string& what) {
  QuantConfig q;
  q.method = QuantMethod::kCompressedTensors;
  const std::string format = str_or(j, "format", "", what);
  static const char* kFormats[] = {"float-quantized", "nvfp4-pack-quantized", "mixed-precision"};
  bool known = false;
  for (const char* f : kFormats) known |= format == f;
  if (!known)
    unsupported(what, fmt::format("compressed-tensors format '{}' is not supported (float-quantized, "
                                  "nvfp4-pack-quantized)", format));
  const std::string status = str_or(j, "quantization_status", "compressed", what);
  if (status != "compressed" && status != "frozen")
    unsupported(what, fmt::format("quantization_status '{}' is not supported (a compressed checkpoint is expected)", status));
  if (!j.contains("config_groups") || !j.at("config_groups").is_object() || j.at("config_groups").empty())
    fail_file("{}: compressed-tensors quantization_config has no config_groups", what);
  for (const auto& [name, g] : j.at("config_groups").items()) {
    const std::string gf = g.is_object() ? str_or(g, "format", format, what) : format;
    if (gf != "float-quantized" && gf != "nvfp4-pack-quantized")
      unsupported(what, fmt::format("config group {} has format '{}' (not supported)", name, gf));
    parse_ct_group(g, what + ": config_groups." + name, q);
  }
  if (j.contains("sparsity_config") && j.at("sparsity_config").is_object() && !j.at("sparsity_config").empty())
    unsupported(what, "sparse compressed-tensors checkpoints are not supported");
  if (j.contains("transform_config") && j.at("transform_config").is_object() && !j.at("transform_config").empty())
    unsupported(what, "compressed-tensors transforms are not supported");
  q.ignore = string_list(j, "ignore", what);
  if (q.fp8 && q.nvfp4) q.summary = "compressed-tensors FP8 + NVFP4";
  else if (q.fp8) q.summary = std::string("compressed-tensors FP8 E4M3 per-channel") + (q.fp8_act_token ? ", dynamic per-token FP8 activations" : ", bf16 activations");
  else q.summary = "compressed-tensors NVFP4 (E2M1, E4M3 scales per 16, fp32 global), run as W4A16";
  return q;
}

}  // namespace

const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::kNone: return "none";
    case QuantMethod::kModelopt: return "modelopt";
    case QuantMethod::kCompressedTensors: return "compressed-tensors";
  }
  return "?";
}

bool glob_match(const std::string& p, const std::string& s) {
  size_t i = 0, j = 0, star = std::string::npos, mark = 0;
  while (j < s.size()) {
    if (i < p.size() && (p[i] == '?' || p[i] == s[j])) {
      ++i;
      ++j;
    } else if (i < p.size() && p[i] == '*') {
      star = i++;
      mark = j;
    } else if (star != std::string::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

bool QuantConfig::ignored(const std::string& module) const {
  for (const auto& p : ignore) {
    if (p.rfind("re:", 0) == 0) {
      // compressed-tensors: re.match, i.e. anchored at the start only.
      try {
        if (std::regex_search(module, std::regex(p.substr(3)), std::regex_constants::match_continuous)) return true;
      } catch (const std::regex_error&) {
        fail_file("{}: ignore pattern '{}' is not a valid regular expression", source, p);
      }
    } else if (p.find_first_of("*?") != std::string::npos) {
      if (glob_match(p, module)) return true;
    } else if (p == module) {
      return true;
    }
  }
  return false;
}

QuantConfig parse_quant_config(const Json& j, const std::string& what) {
  if (!j.is_object()) fail_file("{}: quantization_config must be an object", what);
  QuantConfig q;
  if (j.contains("quantization") && j.at("quantization").is_object()) {
    q = parse_modelopt(j.at("quantization"), what);  // hf_quant_config.json
  } else {
    std::string method = str_or(j, "quant_method", "", what);
    for (auto& c : method) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (method == "modelopt" || method == "modelopt_fp4") {
      q = parse_modelopt(j, what);
    } else if (method == "compressed-tensors" || method == "compressed_tensors") {
      q = parse_compressed_tensors(j, what);
    } else if (method.empty()) {
      fail_file("{}: quantization_config has no quant_method", what);
    } else {
      unsupported(what, fmt::format("quant_method '{}' is not supported (dgemma serves modelopt NVFP4 and "
                                    "compressed-tensors FP8 / NVFP4 checkpoints)", method));
    }
  }
  if (q.ignore.size() > 100000) fail_file("{}: ignore list too long", what);
  q.source = what;
  return q;
}

QuantConfig load_quant_config(const std::string& model_dir, const Json& config_json, const std::string& config_path) {
  QuantConfig from_config, from_hf;
  const bool has_config = config_json.contains("quantization_config") && !config_json.at("quantization_config").is_null();
  if (has_config) from_config = parse_quant_config(config_json.at("quantization_config"), config_path + ": quantization_config");
  const std::filesystem::path hf = std::filesystem::path(model_dir) / "hf_quant_config.json";
  const bool has_hf = std::filesystem::exists(hf);
  if (has_hf) {
    const std::string p = hf.string();
    from_hf = parse_quant_config(parse_json(read_text_file(p, 16u << 20), p, true), p);
  }
  if (has_config && has_hf) {
    if (from_config.method != from_hf.method || from_config.nvfp4 != from_hf.nvfp4 || from_config.fp8 != from_hf.fp8)
      fail_file("{} declares {} but {} declares {}", config_path, from_config.summary, hf.string(), from_hf.summary);
    // The two ignore lists say the same in two spellings; honour both.
    for (auto& p : from_hf.ignore) from_config.ignore.push_back(p);
    from_config.source = config_path + " + " + hf.string();
    return from_config;
  }
  return has_hf ? from_hf : from_config;
}

QuantConfig quant_preset(const std::string& format) {
  auto parse = [](const char* text) { return parse_quant_config(parse_json(text, "preset", true), "preset"); };
  if (format == "bf16") return QuantConfig{};
  if (format == "nvfp4-modelopt")
    return parse(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
        "ignore": ["lm_head", "*mlp*", "*router*", "*self_attn*", "*self_conditioning*"]})");
  if (format == "nvfp4-ct")
    return parse(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
        "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}},
        "ignore": ["re:.*self_attn.*", "re:.*router.*", "re:.*self_conditioning.*", "lm_head"]})");
  if (format == "fp8-dynamic")
    return parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
          "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}},
        "ignore": ["re:.*router.*", "re:.*self_conditioning.*", "lm_head"]})");
  fail_arg("unknown quantisation format '{}' (bf16, nvfp4-modelopt, nvfp4-ct, fp8-dynamic)", format);
}

void check_quantization_flag(const QuantConfig& q, const std::string& flag) {
  if (flag.empty() || flag == "auto") return;
  bool ok = false;
  if (flag == "modelopt" || flag == "modelopt_fp4") ok = q.method == QuantMethod::kModelopt;
  else if (flag == "compressed-tensors" || flag == "compressed_tensors") ok = q.method == QuantMethod::kCompressedTensors;
  else if (flag == "fp8") ok = q.method == QuantMethod::kCompressedTensors && q.fp8;
  else if (flag == "none") ok = q.method == QuantMethod::kNone;
  else
    fail_arg("--quantization '{}' is not supported (auto, modelopt, modelopt_fp4, compressed-tensors, fp8, none)", flag);
  if (!ok)
    fail_arg("--quantization {} does not match the checkpoint, which is {}", flag,
             q.quantized() ? q.summary + " (" + q.source + ")" : std::string("not quantised"));
}

}  // namespace dgemma
