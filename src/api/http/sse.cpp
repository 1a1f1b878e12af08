#include "api/http/sse.h"

namespace dgemma {

std::string json_text(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse_data(const Json& j) {
  std::string out = "data: ";
  out += json_text(j);
  out += "\n\n";
  return out;
}

std::string sse_event(std::string_view name, const Json& j) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += json_text(j);
  out += "\n\n";
  return out;
}

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_comment(std::string_view text) {
  std::string out = ": ";
  out.reserve(text.size() + 4);
  for (char c : text) out.push_back(c == '\n' || c == '\r' ? ' ' : c);
  out += "\n\n";
  return out;
}

}  // namespace dgemma
