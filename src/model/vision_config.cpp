#include "model/vision_config.h"

#include <cmath>
#include <filesystem>

#include "model/json_fields.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace dgemma {
namespace {

constexpr int kSupportedSoftTokens[] = {70, 140, 280, 560, 1120};

}  // namespace

VisionConfig parse_vision_config(const Json& j, const std::string& what) {
  Fields f(j, what);
  VisionConfig v;
  const std::string mt = f.get_string("model_type", "gemma4_vision");
  if (mt != "gemma4_vision") fail_file("{}: vision_config.model_type '{}' is not gemma4_vision", what, mt);
  v.hidden_size = f.get_int32("hidden_size", v.hidden_size, 1, 1 << 16);
  v.intermediate_size = f.get_int32("intermediate_size", v.intermediate_size, 1, 1 << 18);
  v.num_hidden_layers = f.get_int32("num_hidden_layers", v.num_hidden_layers, 1, 1024);
  v.num_attention_heads = f.get_int32("num_attention_heads", v.num_attention_heads, 1, 1024);
  v.num_key_value_heads = f.get_int32("num_key_value_heads", v.num_key_value_heads, 1, 1024);
  v.head_dim = f.get_int32("head_dim", v.head_dim, 4, 4096);
  v.patch_size = f.get_int32("patch_size", v.patch_size, 1, 256);
  v.pooling_kernel_size = f.get_int32("pooling_kernel_size", v.pooling_kernel_size, 1, 64);
  v.position_embedding_size = f.get_int32("position_embedding_size", v.position_embedding_size, 1, 1 << 20);
  v.default_output_length = f.get_int32("default_output_length", v.default_output_length, 1, 1 << 20);
  v.standardize = f.get_bool("standardize", v.standardize);
  v.use_clipped_linears = f.get_bool("use_clipped_linears", v.use_clipped_linears);
  v.rms_norm_eps = f.get_double("rms_norm_eps", v.rms_norm_eps, 0.0, 1.0);
  const std::string act = f.get_string("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh")
    fail_file("{}: vision_config.hidden_activation '{}' is not supported (gelu_pytorch_tanh)", what, act);
  if (f.get_bool("attention_bias", false))
    fail_file("{}: vision_config.attention_bias=true is not supported", what);
  if (v.use_clipped_linears)
    fail_file("{}: vision_config.use_clipped_linears=true is not supported (no clipping bounds are read)",
              what);
  if (f.has("rope_parameters")) {
    Fields rope(f.at("rope_parameters"), what + ": vision_config.rope_parameters");
    const std::string type = rope.get_string("rope_type", "default");
    if (type != "default" && type != "axial")
      fail_file("{}: vision_config rope_type '{}' is not supported (default / axial)", what, type);
    v.rope_theta = rope.get_double("rope_theta", v.rope_theta, 1.0, 1e12);
  }
  if (v.head_dim % 4 != 0)
    fail_file("{}: vision_config.head_dim {} must be a multiple of 4 (2-D RoPE: two rotated halves)", what,
              v.head_dim);
  if (v.num_attention_heads % v.num_key_value_heads != 0)
    fail_file("{}: vision_config.num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
              what, v.num_attention_heads, v.num_key_value_heads);
  return v;
}

ProcessorConfig parse_processor_config(const Json& j, const std::string& what) {
  Fields f(j, what);
  ProcessorConfig p;
  const std::string type = f.get_string("image_processor_type", "Gemma4ImageProcessor");
  if (type.rfind("Gemma4ImageProcessor", 0) != 0)
    fail_file("{}: image_processor_type '{}' is not supported (Gemma4ImageProcessor)", what, type);
  p.patch_size = f.get_int32("patch_size", p.patch_size, 1, 256);
  p.pooling_kernel_size = f.get_int32("pooling_kernel_size", p.pooling_kernel_size, 1, 64);
  p.max_soft_tokens = f.get_int32("max_soft_tokens", p.max_soft_tokens, 1, 1 << 20);
  bool supported = false;
  for (int s : kSupportedSoftTokens) supported = supported || s == p.max_soft_tokens;
  if (!supported)
    fail_file("{}: max_soft_tokens {} is not one of 70, 140, 280, 560, 1120", what, p.max_soft_tokens);
  if (!f.get_bool("do_resize", true)) fail_file("{}: do_resize=false is not supported", what);
  if (f.get_int("resample", 3, 0, 5) != 3) fail_file("{}: only resample=3 (bicubic) is supported", what);
  if (!f.get_bool("do_rescale", true)) fail_file("{}: do_rescale=false is not supported", what);
  const double rescale = f.get_double("rescale_factor", 1.0 / 255.0, 0.0, 1.0);
  if (static_cast<float>(rescale) != static_cast<float>(1.0 / 255.0))
    fail_file("{}: rescale_factor {} is not supported (1/255)", what, rescale);
  if (f.get_bool("do_normalize", false)) {
    auto identity = [&](const char* key, double want) {
      if (!f.has(key)) return;
      const Json& list = f.at(key);
      if (!list.is_array()) fail_file("{}: '{}' must be a list", what, key);
      for (const auto& e : list)
        if (!e.is_number() || e.get<double>() != want)
          fail_file("{}: do_normalize with {} other than {} is not supported", what, key, want);
    };
    identity("image_mean", 0.0);
    identity("image_std", 1.0);
  }
  return p;
}

ProcessorConfig load_processor_config(const std::string& model_dir, const VisionConfig& vision) {
  namespace fs = std::filesystem;
  ProcessorConfig p;
  p.patch_size = vision.patch_size;
  p.pooling_kernel_size = vision.pooling_kernel_size;
  // processor_config.json holds the image processor's settings in its "image_processor" section; the
  // older preprocessor_config.json holds them at the top level.
  for (const bool nested : {true, false}) {
    const fs::path path =
        fs::path(model_dir) / (nested ? "processor_config.json" : "preprocessor_config.json");
    if (!fs::exists(path)) continue;
    const Json j = parse_json(read_text_file(path.string(), 4u << 20), path.string(), true);
    if (nested && !(j.is_object() && j.contains("image_processor"))) continue;
    p = parse_processor_config(nested ? j.at("image_processor") : j, path.string());
    if (p.patch_size != vision.patch_size || p.pooling_kernel_size != vision.pooling_kernel_size)
      fail_file("{}: patch_size {} / pooling_kernel_size {} disagree with the vision config's {} / {}",
                path.string(), p.patch_size, p.pooling_kernel_size, vision.patch_size,
                vision.pooling_kernel_size);
    break;
  }
  return p;
}

}  // namespace dgemma
