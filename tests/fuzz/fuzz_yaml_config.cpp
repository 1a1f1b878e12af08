// Fuzz target: a `serve --config` YAML file -> JSON. Only dgemma::Error may escape the reader; anything
// else (a crash, a hang, another exception) is a bug. Invariants, abort() on violation: the result is a
// JSON object, and it serialises to valid JSON (valid UTF-8 included).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "util/error.h"
#include "util/yaml_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const dgemma::Json j = dgemma::parse_yaml_config(text, "fuzz");
    if (!j.is_object()) {
      std::fprintf(stderr, "fuzz_yaml_config: the result is not a mapping\n");
      std::abort();
    }
    const std::string dumped = j.dump(-1, ' ', false, dgemma::Json::error_handler_t::replace);
    (void)dgemma::parse_json(dumped, "fuzz", false, 1 << 10);
  } catch (const dgemma::Error&) {
  }
  return 0;
}
