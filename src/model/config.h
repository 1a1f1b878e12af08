#pragma once
// config.json + generation_config.json -> typed, validated structs (docs/MODEL.md §1), with the
// reference's defaults. Accepts both the older global_head_dim / num_global_key_value_heads keys and
// the newer per_layer_config.
#include <cstdint>
#include <string>
#include <vector>

#include "model/quant_config.h"
#include "model/vision_config.h"
#include "util/json.h"

namespace dgemma {

enum class LayerType { kSliding, kFull };
const char* layer_type_name(LayerType t);

enum class RopeType { kDefault, kProportional };

struct RopeParams {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
};

// Attention geometry of one layer.
struct LayerSpec {
  LayerType type = LayerType::kSliding;
  int head_dim = 0;
  int num_kv_heads = 0;
  bool k_eq_v = false;  // full layers: V is taken from the raw K projection (no v_proj)
};

struct TextConfig {
  int64_t vocab_size = 262144;
  int hidden_size = 2304;
  int intermediate_size = 9216;  // dense MLP width (also the self-conditioning MLP width)
  int num_hidden_layers = 30;
  int num_attention_heads = 8;
  int num_key_value_heads = 4;   // sliding layers
  int head_dim = 256;            // sliding layers
  int global_head_dim = 512;     // full layers
  int num_global_key_value_heads = 0;  // full layers (0: same as num_key_value_heads)
  int64_t max_position_embeddings = 131072;
  double rms_norm_eps = 1e-6;
  int sliding_window = 512;
  double final_logit_softcapping = 30.0;
  int num_experts = 0;
  int top_k_experts = 0;
  int moe_intermediate_size = 0;
  int self_conditioning_size = 0;  // width of the SC MLP (defaults to intermediate_size)
  int32_t pad_token_id = 0;
  int32_t bos_token_id = 2;
  std::vector<int32_t> eos_token_ids{1};
  RopeParams rope_sliding;
  RopeParams rope_full{RopeType::kProportional, 1000000.0, 0.25};
  std::vector<LayerSpec> layers;  // one per layer, resolved
};

// How the encoder's mask treats the tokens of one image (docs/IMAGES.md "The attention mask"):
//   kGenerate: each image block sees itself whole in every layer, the sliding window not applied to it
//              (the reference's generate(); the default);
//   kGemma4:   the same in sliding layers only, within the window (Gemma 4's masks);
//   kCausal:   no exception: causal like text (the reference's plain forward()).
enum class ImageMask { kGenerate, kGemma4, kCausal };
const char* image_mask_name(ImageMask m);
// "generate" | "gemma4" | "causal"; Error(kInvalidArgument) naming `what` otherwise.
ImageMask parse_image_mask(const std::string& name, const std::string& what);

struct ModelConfig {
  TextConfig text;
  int canvas_length = 256;
  int32_t boi_token_id = 255999;
  int32_t eoi_token_id = 258882;
  int32_t image_token_id = 258880;
  std::vector<int32_t> eos_token_ids;  // top-level (may be empty)
  bool tie_word_embeddings = true;
  bool has_vision = false;
  VisionConfig vision;  // vision_config (meaningful when has_vision)
  ImageMask image_mask =
      ImageMask::kGenerate;  // a deployment choice (serve --image-attention), not config.json's
  std::string dtype = "bfloat16";
  QuantConfig quant;  // quantization_config / hf_quant_config.json (method none when absent)
};

// DiffusionGemmaGenerationConfig (docs/MODEL.md §1.4) with the reference's built-in defaults.
struct GenerationConfig {
  int64_t max_new_tokens = 256;
  int max_denoising_steps = 48;
  double entropy_bound = 0.1;
  double t_min = 0.4;
  double t_max = 0.8;
  int stability_threshold = 1;
  double confidence_threshold = 0.005;
  std::vector<int32_t> eos_token_ids;  // generation stops on any of these inside a committed canvas
  int32_t pad_token_id = 0;
  int32_t bos_token_id = 2;

  // Throws Error(kInvalidArgument) naming the field, with the reference's rules.
  void validate() const;
};

// Parses config.json text. `what` names the source in errors (usually the path).
ModelConfig parse_model_config(const Json& j, const std::string& what);
ModelConfig load_model_config(const std::string& model_dir);

// Parses generation_config.json on top of `base` (fields absent keep base's values).
GenerationConfig parse_generation_config(const Json& j, const std::string& what, GenerationConfig base = {});
// The reference's built-in defaults, with the model's EOS ids (plus <turn|> and <|tool_response>).
GenerationConfig default_generation_config(const ModelConfig& model);
// Loads model_dir/generation_config.json if present, else the built-in defaults; the EOS list falls
// back to config.json's ids plus 106 and 50 as the released checkpoint has it.
GenerationConfig load_generation_config(const std::string& model_dir, const ModelConfig& model);

// Cross-checks the model config (head counts, window, canvas, special ids vs vocab). Throws
// Error(kInvalidFile) with `what` in the message.
void validate_model_config(const ModelConfig& c, const std::string& what);

}  // namespace dgemma
