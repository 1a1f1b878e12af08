// libFuzzer target for the Jinja interpreter: the input is a template, optionally followed by a line
// "#DATA#" and a JSON object of variables (default: a small chat). It is parsed and rendered with
// small limits. A dgemma::Error is an expected rejection (a construct outside the subset, a template
// runtime error, a limit); any other exception, a crash, a hang or a sanitizer report is a bug.
#include <cstdint>
#include <string>
#include <string_view>

#include "text/jinja/template.h"
#include "util/error.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dgemma;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSep = "\n#DATA#\n";
  const size_t sep = input.find(kSep);
  const std::string_view source = input.substr(0, sep);

  std::vector<std::pair<std::string, jinja::Value>> context;
  try {
    const Json vars = sep == std::string_view::npos
                          ? Json::parse(R"({"messages": [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": "hi <b>"},
                                             {"role": "assistant", "content": "hello", "tool_calls": [
                                               {"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]}],
                                            "tools": [{"type": "function", "function": {"name": "f"}}],
                                            "bos_token": "<bos>", "add_generation_prompt": true})")
                          : parse_json(input.substr(sep + kSep.size()), "fuzz data", /*is_file=*/false);
    if (!vars.is_object()) return 0;
    for (auto it = vars.begin(); it != vars.end(); ++it) context.emplace_back(it.key(), jinja::Value::from_json(it.value()));
  } catch (const Error&) {
    return 0;
  }

  jinja::RenderLimits limits;
  limits.max_output_bytes = 1u << 20;
  limits.max_loop_iterations = 100'000;
  limits.max_call_depth = 64;
  try {
    const jinja::Template t = jinja::Template::parse(source);
    const std::string out = t.render(context, limits);
    if (out.size() > limits.max_output_bytes) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
