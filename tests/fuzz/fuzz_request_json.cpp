// libFuzzer target: request body bytes -> JSON parse -> chat and completions validation, plus the
// output pipeline's pure pieces (SSE framing, metrics number formatting). Only dgemma::Error may
// escape the parsers; anything else (a nlohmann exception, a crash, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/api_error.h"
#include "api/http/sse.h"
#include "api/openai/openai_request.h"
#include "api/openai/structured_output.h"
#include "util/error.h"

namespace {

const dgemma::RequestPolicy& policy() {
  static const dgemma::RequestPolicy p = [] {
    dgemma::RequestPolicy q;
    q.served_names = {"dgemma"};
    q.enable_auto_tool_choice = true;
    q.tool_parser = true;
    q.vocab_size = 262144;
    q.is_allowed_template_kwarg = [](std::string_view k) { return k == "enable_thinking"; };
    return q;
  }();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  dgemma::Json body;
  try {
    body = dgemma::parse_request_body(text);
  } catch (const dgemma::Error& e) {
    (void)dgemma::api_error_from(e);
    return 0;
  }
  for (int endpoint = 0; endpoint < 2; ++endpoint) {
    try {
      const dgemma::ParsedRequest r = endpoint == 0 ? dgemma::parse_chat_request(body, policy())
                                                    : dgemma::parse_completion_request(body, policy());
      // Whatever was accepted serialises cleanly.
      (void)dgemma::sse_data(r.messages);
      (void)dgemma::json_text(r.template_kwargs);
      // An accepted guided form has a cache key.
      if (r.guided) (void)dgemma::guided::constraint_key(r.guided->spec, {});
    } catch (const dgemma::Error& e) {
      (void)dgemma::error_json(dgemma::api_error_from(e));
    }
  }
  return 0;
}
