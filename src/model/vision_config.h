#pragma once
// The vision side of a checkpoint: config.json's vision_config (Gemma 4's vision encoder, with the
// reference's class defaults for absent keys) and the image processor's settings from
// processor_config.json (or the older preprocessor_config.json), validated against each other.
#include <string>

#include "util/json.h"

namespace dgemma {

struct VisionConfig {
  int hidden_size = 768;
  int intermediate_size = 3072;
  int num_hidden_layers = 16;
  int num_attention_heads = 12;
  int num_key_value_heads = 12;
  int head_dim = 64;
  int patch_size = 16;
  int pooling_kernel_size = 3;
  int position_embedding_size = 10240;
  int default_output_length = 280;   // soft tokens per image the server plans memory for
  bool standardize = false;          // std_bias / std_scale applied to the pooled features
  bool use_clipped_linears = false;  // refused: the checkpoints carry no clipping bounds
  double rms_norm_eps = 1e-6;
  double rope_theta = 100.0;  // the 2-D RoPE of the patches
};

// Throws Error(kInvalidFile) naming `what` and the key.
VisionConfig parse_vision_config(const Json& j, const std::string& what);

// The image processor's settings (Gemma4ImageProcessor) that change what the model sees.
struct ProcessorConfig {
  int patch_size = 16;
  int pooling_kernel_size = 3;
  int max_soft_tokens = 280;  // one of 70, 140, 280, 560, 1120
};

// Parses an image processor object (the "image_processor" section of processor_config.json, or a whole
// preprocessor_config.json). Settings the image path does not implement (another resampler, a rescale
// factor other than 1/255, a normalisation that is not the identity, no resize) are refused.
ProcessorConfig parse_processor_config(const Json& j, const std::string& what);
// model_dir/processor_config.json, else model_dir/preprocessor_config.json, else the defaults; checked
// against the vision config (patch and pooling sizes must agree).
ProcessorConfig load_processor_config(const std::string& model_dir, const VisionConfig& vision);

}  // namespace dgemma
