#pragma once
// JSON parsing of untrusted input: nlohmann::json with a nesting-depth limit (deep input would
// overflow the stack on copy/dump, nlohmann #5387) and clear errors.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dgemma {

using Json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;

// Parses text; throws Error(kind) with "what: message" on bad JSON or depth > max_depth.
// `kind` lets file parsers report kInvalidFile and request parsers kInvalidArgument.
Json parse_json(std::string_view text, std::string_view what, bool is_file, int max_depth = kMaxJsonDepth);

}  // namespace dgemma
