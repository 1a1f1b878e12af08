#pragma once
// Which tool calls the model wrote may reach the client as `tool_calls` (docs/API.md "Tool calls"):
// the function must be declared in the request's `tools`, its arguments must parse completely, and
// every parameter its schema lists in `required` must be present. Anything else is a rejected call.
#include <map>
#include <optional>
#include <string>

#include "text/parsers/tool_parser.h"
#include "util/json.h"

namespace dgemma {

class DeclaredTools {
 public:
  // `tools`: a request's validated `tools` array (function tools), or null.
  explicit DeclaredTools(const Json& tools);

  // nullopt when the call may be returned as a tool call; otherwise why it may not.
  std::optional<std::string> reject_reason(const ParsedToolCall& call) const;

 private:
  std::map<std::string, Json, std::less<>> parameters_;  // function name -> its parameters schema (or null)
};

}  // namespace dgemma
