// Fuzz target: config.json / generation_config.json / hf_quant_config.json text -> typed configs. Only dgemma::Error may
// escape the parsers; anything else (a crash, another exception) is a bug.
#include <cstdint>
#include <string_view>

#include "model/config.h"
#include "model/quant_config.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const dgemma::Json j = dgemma::parse_json(text, "fuzz", true);
    try {
      dgemma::ModelConfig c = dgemma::parse_model_config(j, "fuzz");
      (void)c;
    } catch (const dgemma::Error&) {
    }
    try {
      dgemma::GenerationConfig g = dgemma::parse_generation_config(j, "fuzz");
      (void)g;
    } catch (const dgemma::Error&) {
    }
    try {  // the text as a quantization_config or hf_quant_config.json of its own
      dgemma::QuantConfig q = dgemma::parse_quant_config(j, "fuzz");
      (void)q;
    } catch (const dgemma::Error&) {
    }
  } catch (const dgemma::Error&) {
  }
  return 0;
}
