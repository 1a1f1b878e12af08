// quantization_config / hf_quant_config.json parsing, ignore-list matching and --quantization.
#include <gtest/gtest.h>

#include "model/quant_config.h"
#include "util/error.h"

namespace dgemma {
namespace {

QuantConfig parse(const char* text) { return parse_quant_config(parse_json(text, "test", true), "config.json"); }

ErrorKind kind_of(const char* text, std::string* msg = nullptr) {
  try {
    parse(text);
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.kind();
  }
  return ErrorKind::kInternal;  // did not throw
}

TEST(QuantConfig, ModelOptBothSpellings) {
  const QuantConfig a = parse(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["*mlp*", "lm_head"],
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}}})");
  EXPECT_EQ(a.method, QuantMethod::kModelopt);
  EXPECT_TRUE(a.nvfp4);
  EXPECT_FALSE(a.fp8);
  const QuantConfig b = parse(R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4",
      "kv_cache_quant_algo": "FP8", "group_size": 16, "exclude_modules": ["*mlp*", "*router*"]}})");
  EXPECT_EQ(b.method, QuantMethod::kModelopt);
  EXPECT_TRUE(b.ignored("model.decoder.layers.3.router.proj"));
  // *mlp* hits the dense MLP, never the experts (docs/QUANT.md A.2).
  EXPECT_TRUE(a.ignored("model.decoder.layers.0.mlp.gate_proj"));
  EXPECT_FALSE(a.ignored("model.decoder.layers.0.experts.5.gate_proj"));
  EXPECT_TRUE(a.ignored("lm_head"));
  EXPECT_FALSE(a.ignored("lm_head2"));
}

TEST(QuantConfig, CompressedTensorsFp8DynamicAndNvfp4) {
  const QuantConfig f = parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "quantization_status": "compressed", "sparsity_config": {}, "transform_config": {},
      "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": false},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}},
      "ignore": ["model.decoder.layers.0.router.proj", "re:.*self_conditioning.*"]})");
  EXPECT_EQ(f.method, QuantMethod::kCompressedTensors);
  EXPECT_TRUE(f.fp8 && f.fp8_act_token && !f.nvfp4);
  EXPECT_TRUE(f.ignored("model.decoder.layers.0.router.proj"));
  EXPECT_FALSE(f.ignored("model.decoder.layers.1.router.proj"));  // exact names are exact
  EXPECT_TRUE(f.ignored("model.decoder.self_conditioning.up_proj"));
  const QuantConfig n = parse(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
        "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local"}}}})");
  EXPECT_TRUE(n.nvfp4 && !n.fp8);
}

TEST(QuantConfig, RefusesWhatItCannotServeNamingTheFile) {
  std::string msg;
  EXPECT_EQ(kind_of(R"({"quant_method": "awq", "bits": 4})", &msg), ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'awq'"), std::string::npos) << msg;
  EXPECT_EQ(kind_of(R"({"quant_method": "gptq"})"), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(R"({"quant_method": "gguf"})"), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(R"({"quant_method": "bitsandbytes"})"), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(R"({"quant_method": "something_new"})"), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(R"({"bits": 4})"), ErrorKind::kInvalidFile);  // no quant_method at all
  EXPECT_EQ(kind_of(R"({"quant_method": "modelopt", "quant_algo": "FP8"})"), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32})"), ErrorKind::kUnsupported);
  // int4 pack-quantized (the W4A16 int format) and static FP8 activation scales.
  EXPECT_EQ(kind_of(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}})"),
            ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false}}}})"),
            ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "block"}}}})"),
            ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of(R"({"quant_method": "compressed-tensors", "format": "float-quantized"})"), ErrorKind::kInvalidFile);
  EXPECT_EQ(kind_of(R"({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": [3],
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})"),
            ErrorKind::kInvalidFile);
}

TEST(QuantConfig, QuantizationFlagMustMatchTheCheckpoint) {
  QuantConfig none;
  const QuantConfig mo = parse(R"({"quant_method": "modelopt", "quant_algo": "NVFP4"})");
  const QuantConfig fp8 = parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})");
  for (const char* f : {"", "auto"}) {
    EXPECT_NO_THROW(check_quantization_flag(none, f));
    EXPECT_NO_THROW(check_quantization_flag(mo, f));
  }
  EXPECT_NO_THROW(check_quantization_flag(mo, "modelopt"));
  EXPECT_NO_THROW(check_quantization_flag(mo, "modelopt_fp4"));
  EXPECT_NO_THROW(check_quantization_flag(fp8, "compressed-tensors"));
  EXPECT_NO_THROW(check_quantization_flag(fp8, "fp8"));
  EXPECT_NO_THROW(check_quantization_flag(none, "none"));
  EXPECT_THROW(check_quantization_flag(mo, "fp8"), Error);
  EXPECT_THROW(check_quantization_flag(none, "modelopt"), Error);  // no online quantisation
  EXPECT_THROW(check_quantization_flag(fp8, "awq"), Error);
}

TEST(QuantConfig, GlobMatching) {
  EXPECT_TRUE(glob_match("*mlp*", "a.mlp.b"));
  EXPECT_TRUE(glob_match("*mlp*", "mlp"));
  EXPECT_TRUE(glob_match("a?c", "abc"));
  EXPECT_FALSE(glob_match("a?c", "ac"));
  EXPECT_TRUE(glob_match("*.experts.*", "x.experts.3.up"));
  EXPECT_FALSE(glob_match("*router", "router.proj"));
  EXPECT_TRUE(glob_match("*", ""));
}

}  // namespace
}  // namespace dgemma
