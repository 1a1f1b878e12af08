#pragma once
// The quantisation a checkpoint declares (docs/QUANTIZATION.md): config.json's quantization_config and/or
// hf_quant_config.json (NVIDIA ModelOpt). Which tensors are quantised, and how, is decided per tensor
// by the loader from what the checkpoint holds; this says what the checkpoint is allowed to hold
// (method, formats, modules left in bf16) and how activations are treated.
#include <string>
#include <vector>

#include "util/json.h"

namespace dgemma {

enum class QuantMethod { kNone, kModelopt, kCompressedTensors };
const char* quant_method_name(QuantMethod m);  // "none", "modelopt", "compressed-tensors"

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  bool nvfp4 = false;        // NVFP4 weights (E2M1 + E4M3 per 16 + fp32 global) may appear
  bool fp8 = false;          // FP8 E4M3 per-channel weights may appear
  bool fp8_act_token = false;  // FP8 weights run with dynamic per-token FP8 activations
  std::vector<std::string> ignore;  // module patterns left in bf16: exact names, globs (*, ?), "re:REGEX"
  std::string source;        // the file(s) it was read from, for messages
  std::string summary;       // e.g. "modelopt NVFP4 (group 16), W4A16 on this build"

  bool quantized() const { return method != QuantMethod::kNone; }
  // True when `module` (a checkpoint module name, e.g. model.decoder.layers.0.mlp.gate_proj) matches
  // an ignore pattern.
  bool ignored(const std::string& module) const;
};

// Parses a quantization_config object (config.json form, or the {"quantization": {...}} form of
// hf_quant_config.json). Throws Error(kUnsupported) naming `what` for methods and schemes dgemma
// cannot serve (AWQ, GPTQ, GGUF, bitsandbytes, int formats, static activation scales, unknown methods)
// and Error(kInvalidFile) for malformed ones.
QuantConfig parse_quant_config(const Json& j, const std::string& what);
// config.json's quantization_config (may be absent) merged with model_dir/hf_quant_config.json
// (when present); both present must agree.
QuantConfig load_quant_config(const std::string& model_dir, const Json& config_json, const std::string& config_path);

// vLLM's --quantization: empty or "auto" accepts what the checkpoint declares; otherwise the value
// must name the detected method ("modelopt", "modelopt_fp4", "compressed-tensors", "fp8" for an FP8
// compressed-tensors checkpoint; "none" only for an unquantised one). Throws Error(kInvalidArgument).
void check_quantization_flag(const QuantConfig& q, const std::string& flag);

// The quantisation of one of the published checkpoints by its tools/quant/quantize.py format name
// ("nvfp4-modelopt", "nvfp4-ct", "fp8-dynamic"; "bf16": none), for dummy weights (benchmarks).
// Throws Error(kInvalidArgument) for other names.
QuantConfig quant_preset(const std::string& format);

// fnmatch-style glob: '*' any run of characters (dots included), '?' one character.
bool glob_match(const std::string& pattern, const std::string& text);

}  // namespace dgemma
