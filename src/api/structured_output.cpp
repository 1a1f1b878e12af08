#include "api/structured_output.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "api/api_error.h"
#include "text/parsers/tool_parser.h"
#include "util/error.h"

namespace dgemma {
namespace {

const std::set<std::string, std::less<>> kKeywords = {"type", "properties", "required", "enum", "const", "items",
                                                      "additionalProperties"};
const std::set<std::string, std::less<>> kAnnotations = {"title", "description", "$schema", "default", "examples"};
const std::set<std::string, std::less<>> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};

std::string type_of(const Json& s) {
  auto t = s.find("type");
  return t == s.end() ? std::string() : t->get<std::string>();
}

void check_schema(const Json& s, const std::string& path) {
  if (!s.is_object()) {
    if (s.is_boolean())
      fail_unsupported(path, "'{}': boolean schemas are not supported (write a schema object)", path);
    fail_param(path, "'{}' must be a JSON Schema object", path);
  }
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (kKeywords.count(it.key()) || kAnnotations.count(it.key())) continue;
    fail_unsupported(path, "'{}' uses the JSON Schema keyword '{}', which is not supported (supported: type, "
                     "properties, required, enum, const, items, additionalProperties; see docs/API.md)", path, it.key());
  }
  std::string type;
  if (auto t = s.find("type"); t != s.end()) {
    if (t->is_array()) fail_unsupported(path + ".type", "'{}.type': a list of types is not supported", path);
    if (!t->is_string() || !kTypes.count(t->get<std::string>()))
      fail_param(path + ".type", "'{}.type' must be one of object, array, string, number, integer, boolean, null", path);
    type = t->get<std::string>();
  }
  if (auto e = s.find("enum"); e != s.end()) {
    if (!e->is_array() || e->empty()) fail_param(path + ".enum", "'{}.enum' must be a non-empty array", path);
    if (!type.empty())
      for (const auto& v : *e)
        if (validate_against_schema(v, Json{{"type", type}}))
          fail_param(path + ".enum", "'{}.enum' holds {}, which is not of type {}", path, v.dump(), type);
  }
  if (auto c = s.find("const"); c != s.end() && !type.empty() && validate_against_schema(*c, Json{{"type", type}}))
    fail_param(path + ".const", "'{}.const' is not of type {}", path, type);
  const bool object_keys = s.contains("properties") || s.contains("required") || s.contains("additionalProperties");
  if (object_keys && type != "object")
    fail_unsupported(path, "'{}': properties, required and additionalProperties are supported only with type \"object\"",
                     path);
  if (s.contains("items") && type != "array")
    fail_unsupported(path, "'{}': items is supported only with type \"array\"", path);
  if (auto p = s.find("properties"); p != s.end()) {
    if (!p->is_object()) fail_param(path + ".properties", "'{}.properties' must be an object", path);
    for (auto it = p->begin(); it != p->end(); ++it) check_schema(it.value(), path + ".properties." + it.key());
  }
  if (auto r = s.find("required"); r != s.end()) {
    if (!r->is_array()) fail_param(path + ".required", "'{}.required' must be an array of strings", path);
    std::set<std::string> seen;
    for (const auto& k : *r) {
      if (!k.is_string()) fail_param(path + ".required", "'{}.required' must be an array of strings", path);
      if (!seen.insert(k.get<std::string>()).second)
        fail_param(path + ".required", "'{}.required' names '{}' twice", path, k.get<std::string>());
    }
  }
  if (auto a = s.find("additionalProperties"); a != s.end() && !a->is_boolean())
    fail_unsupported(path + ".additionalProperties", "'{}.additionalProperties': only true or false is supported", path);
  if (auto i = s.find("items"); i != s.end()) check_schema(*i, path + ".items");
}

bool is_integral(const Json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d);
}

std::optional<std::string> validate(const Json& v, const Json& s, const std::string& path) {
  auto bad = [&](const std::string& why) { return std::optional<std::string>(path + ": " + why); };
  if (auto c = s.find("const"); c != s.end() && v != *c) return bad("expected " + c->dump());
  if (auto e = s.find("enum"); e != s.end() && std::find(e->begin(), e->end(), v) == e->end())
    return bad("not one of the enum values");
  const std::string type = type_of(s);
  if (type == "object" && !v.is_object()) return bad("expected an object");
  if (type == "array" && !v.is_array()) return bad("expected an array");
  if (type == "string" && !v.is_string()) return bad("expected a string");
  if (type == "number" && !v.is_number()) return bad("expected a number");
  if (type == "integer" && !is_integral(v)) return bad("expected an integer");
  if (type == "boolean" && !v.is_boolean()) return bad("expected a boolean");
  if (type == "null" && !v.is_null()) return bad("expected null");
  if (type == "object") {
    const auto props = s.find("properties");
    if (auto r = s.find("required"); r != s.end())
      for (const auto& k : *r)
        if (!v.contains(k.get<std::string>())) return bad("missing required key \"" + k.get<std::string>() + "\"");
    const bool closed = s.value("additionalProperties", true) == false;
    for (auto it = v.begin(); it != v.end(); ++it) {
      const bool declared = props != s.end() && props->contains(it.key());
      if (!declared) {
        if (closed) return bad("unexpected key \"" + it.key() + "\"");
        continue;
      }
      if (auto why = validate(it.value(), (*props)[it.key()], path + "." + it.key())) return why;
    }
  }
  if (type == "array") {
    if (auto items = s.find("items"); items != s.end())
      for (size_t i = 0; i < v.size(); ++i)
        if (auto why = validate(v[i], *items, path + "[" + std::to_string(i) + "]")) return why;
  }
  return std::nullopt;
}

class Layout {
 public:
  void pin(const std::string& text) {
    if (out_.empty() || out_.back().room > 0) out_.push_back(LayoutPiece{text, 0});
    else out_.back().text += text;
  }
  void gap(int room) {
    if (out_.empty()) out_.push_back(LayoutPiece{"", room});
    else out_.back().room += room;
  }
  void value(const Json& s) {
    if (auto c = s.find("const"); c != s.end()) return pin(c->dump());
    if (auto e = s.find("enum"); e != s.end()) {
      if (e->size() == 1) return pin((*e)[0].dump());
      size_t longest = 0;
      for (const auto& v : *e) longest = std::max(longest, v.dump().size());
      return gap(static_cast<int>(longest) + 2);  // bytes bound tokens from above
    }
    const std::string type = type_of(s);
    if (type == "null") return pin("null");
    if (type == "string") {
      pin("\"");
      gap(SchemaRooms::kString);
      return pin("\"");
    }
    if (type == "integer") return gap(SchemaRooms::kInteger);
    if (type == "number") return gap(SchemaRooms::kNumber);
    if (type == "boolean") return gap(SchemaRooms::kBoolean);
    if (type == "array") {
      pin("[");
      gap(SchemaRooms::kArray);
      return pin("]");
    }
    if (type == "object") return object(s);
    gap(SchemaRooms::kAny);
  }
  std::vector<LayoutPiece> take() { return std::move(out_); }

 private:
  void object(const Json& s) {
    pin("{");
    const Json props = s.value("properties", Json::object());
    const Json required = s.value("required", Json::array());
    bool first = true;
    for (const auto& k : required) {
      pin(std::string(first ? "" : ", ") + k.dump() + ": ");
      first = false;
      const std::string key = k.get<std::string>();
      value(props.contains(key) ? props[key] : Json::object());
    }
    bool more = false;
    for (auto it = props.begin(); it != props.end(); ++it)
      if (std::find(required.begin(), required.end(), it.key()) == required.end()) more = true;
    if (props.empty() && s.value("additionalProperties", true) != false) more = true;
    if (more) gap(SchemaRooms::kObjectRest);
    pin("}");
  }

  std::vector<LayoutPiece> out_;
};

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string excerpt(const std::string& s) { return s.size() > 80 ? s.substr(0, 80) + "..." : s; }

}  // namespace

void check_schema_supported(const Json& schema, const std::string& param) { check_schema(schema, param); }

std::optional<std::string> validate_against_schema(const Json& value, const Json& schema) {
  return validate(value, schema, "$");
}

std::vector<LayoutPiece> schema_layout(const Json& schema) {
  Layout l;
  l.value(schema);
  return l.take();
}

std::vector<PinnedSpan> layout_pins(const std::vector<LayoutPiece>& layout, const Tokenizer& tok, bool allow_special,
                                    int64_t& length) {
  std::vector<PinnedSpan> pins;
  int64_t offset = 0;
  for (const auto& piece : layout) {
    if (!piece.text.empty()) {
      PinnedSpan span;
      span.offset = offset;
      span.tokens = tok.encode(piece.text, allow_special);
      offset += static_cast<int64_t>(span.tokens.size());
      if (!span.tokens.empty()) pins.push_back(std::move(span));
    }
    offset += piece.room;
  }
  length = offset;
  return pins;
}

AnswerPlan plan_answer_pins(const ParsedRequest& req, const Tokenizer& tok, bool starts_in_reasoning) {
  std::vector<LayoutPiece> layout;
  bool specials = false;
  if (req.tool_choice == ToolChoiceMode::kRequired || req.tool_choice == ToolChoiceMode::kNamed) {
    // Names are [A-Za-z0-9_.-] (checked with the tools), so only the markup can become control tokens.
    layout.push_back(LayoutPiece{tool_call_opening(req.tool_choice == ToolChoiceMode::kNamed ? req.tool_choice_name : ""), 0});
    specials = true;
  } else if (req.response_format == ResponseFormat::kJsonObject) {
    layout.push_back(LayoutPiece{"{", 0});
  } else if (req.response_format == ResponseFormat::kJsonSchema) {
    layout = schema_layout(req.response_schema);
  } else {
    return {};
  }
  AnswerPlan plan;
  int64_t shift = 0;
  if (starts_in_reasoning) {
    PinnedSpan closer{0, tok.encode("<channel|>", true)};
    shift = static_cast<int64_t>(closer.tokens.size());
    plan.pins.push_back(std::move(closer));
  }
  int64_t length = 0;
  for (auto& span : layout_pins(layout, tok, specials, length)) {
    span.offset += shift;
    plan.pins.push_back(std::move(span));
  }
  plan.min_tokens = shift + length;
  return plan;
}

std::optional<std::string> check_forced_tool_calls(const std::vector<ToolCallSummary>& calls, const std::string& content,
                                                   const std::vector<std::string>& allowed_names) {
  if (calls.empty()) return std::string("the reply holds no tool call");
  for (const auto& c : calls)
    if (std::find(allowed_names.begin(), allowed_names.end(), c.name) == allowed_names.end())
      return "the reply calls '" + excerpt(c.name) + "', which is not an allowed function";
  if (const std::string rest = trimmed(content); !rest.empty())
    return "the reply holds text outside its tool calls: \"" + excerpt(rest) + "\"";
  return std::nullopt;
}

std::optional<std::string> check_json_output(const std::string& content, const Json* schema) {
  const std::string text = trimmed(content);
  Json value;
  try {
    value = parse_json(text, "the reply", false);
  } catch (const Error& e) {
    return std::string("the reply is not valid JSON (") + e.what() + ")";
  }
  if (!schema) {
    if (!value.is_object()) return std::string("the reply is not a JSON object");
    return std::nullopt;
  }
  if (auto why = validate_against_schema(value, *schema)) return "the reply does not match the schema: " + *why;
  return std::nullopt;
}

}  // namespace dgemma
