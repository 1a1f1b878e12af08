#include "api/openai/tool_call_check.h"

#include <fmt/format.h>

namespace dgemma {
namespace {

std::string shown(const std::string& s) {
  return s.size() > 80 ? s.substr(0, 80) + "..." : s;
}

}  // namespace

DeclaredTools::DeclaredTools(const Json& tools) {
  if (!tools.is_array()) return;
  for (const Json& t : tools) {
    const Json& fn = t.at("function");
    parameters_[fn.at("name").get<std::string>()] = fn.value("parameters", Json(nullptr));
  }
}

std::optional<std::string> DeclaredTools::reject_reason(const ParsedToolCall& call) const {
  if (call.arguments == ParsedToolCall::Arguments::kNoBody)
    return std::string("not a tool call: no function name followed by '{' or '('");
  const auto it = parameters_.find(call.name);
  if (it == parameters_.end())
    return fmt::format("'{}' is not a function declared in 'tools'", shown(call.name));
  if (call.arguments == ParsedToolCall::Arguments::kMalformed)
    return std::string("the arguments are not valid argument syntax");
  if (call.arguments == ParsedToolCall::Arguments::kCutShort)
    return std::string("the output ended inside the arguments");
  const Json& params = it->second;
  if (!params.is_object()) return std::nullopt;
  const auto required = params.find("required");
  if (required == params.end() || !required->is_array()) return std::nullopt;
  const Json args = Json::parse(call.arguments_json, nullptr, false);
  for (const Json& key : *required) {
    if (!key.is_string()) continue;
    if (args.is_discarded() || !args.is_object() || !args.contains(key.get<std::string>()))
      return fmt::format("the required argument '{}' is missing", shown(key.get<std::string>()));
  }
  return std::nullopt;
}

}  // namespace dgemma
