#include "api/openai/guided_request.h"

#include "api/api_error.h"
#include "util/error.h"

namespace dgemma {
namespace {

// One guided form: the constraint checked against the supported subset (a 400 naming the parameter).
void set_guided(ParsedRequest& out, std::string param, guided::ConstraintSpec spec,
                std::vector<std::string> schema_path = {}) {
  if (out.guided)
    fail_param(param, "'{}' cannot be combined with '{}': a request takes one guided form", param,
               out.guided->param);
  try {
    guided::check_constraint(spec);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("'{}': {}", param, e.what()), param);
  }
  out.guided = GuidedForm{std::move(spec), std::move(param), std::move(schema_path)};
}

// A JSON Schema given as an object (its text is re-read in member order, GuidedForm) or as a string.
void set_schema(ParsedRequest& out, const std::string& param, const Json& schema,
                std::vector<std::string> path) {
  if (schema.is_string())
    return set_guided(out, param, guided::ConstraintSpec::json_schema(schema.get<std::string>()));
  if (!schema.is_object() && !schema.is_boolean())
    fail_param(param, "'{}' must be a JSON Schema (an object or its text), not {}", param, type_name(schema));
  set_guided(out, param, guided::ConstraintSpec::json_schema(schema.dump()), std::move(path));
}

}  // namespace

void parse_response_format(RequestFields& f, ParsedRequest& out) {
  const Json* rf = f.get("response_format");
  if (!rf || rf->is_null()) return;
  if (!rf->is_object()) fail_param("response_format", "'response_format' must be an object, not {}", type_name(*rf));
  auto t = rf->find("type");
  if (t == rf->end() || !t->is_string()) fail_param("response_format.type", "'response_format.type' must be a string");
  const std::string type = t->get<std::string>();
  if (type == "text") return;
  if (type == "json_object") return set_guided(out, "response_format", guided::ConstraintSpec::json_object());
  if (type == "json_schema") {
    auto js = rf->find("json_schema");
    if (js == rf->end() || !js->is_object())
      fail_param("response_format.json_schema", "When response_format type is 'json_schema', the 'json_schema' field "
                 "must be provided.");
    if (auto n = js->find("name"); n != js->end() && !n->is_null() && !n->is_string())
      fail_param("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
    if (auto st = js->find("strict"); st != js->end() && !st->is_null() && !st->is_boolean())
      fail_param("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
    auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null())
      fail_param("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
    return set_schema(out, "response_format.json_schema.schema", *schema,
                      {"response_format", "json_schema", "schema"});
  }
  if (type == "structural_tag" || type == "grammar" || type == "regex")
    fail_unsupported("response_format",
                     "response_format type '{}' is not supported (only text, json_object and "
                     "json_schema; a regex goes in structured_outputs.regex)",
                     type);
  fail_param("response_format.type", "unknown response_format type '{}'", type);
}

// vLLM's structured_outputs object and its older guided_* fields (docs/API.md "Guided decoding").
void parse_structured_outputs(RequestFields& f, ParsedRequest& out) {
  if (const Json* so = f.get("structured_outputs"); so && !so->is_null()) {
    if (!so->is_object())
      fail_param("structured_outputs", "'structured_outputs' must be an object, not {}", type_name(*so));
    for (auto it = so->begin(); it != so->end(); ++it) {
      const std::string param = "structured_outputs." + it.key();
      const Json& v = it.value();
      if (v.is_null()) continue;
      if (it.key() == "json") {
        set_schema(out, param, v, {"structured_outputs", "json"});
      } else if (it.key() == "regex") {
        if (!v.is_string()) fail_param(param, "'{}' must be a string", param);
        set_guided(out, param, guided::ConstraintSpec::regex(v.get<std::string>()));
      } else if (it.key() == "choice") {
        set_guided(out, param, guided::ConstraintSpec::choice(string_list(v, param)));
      } else if (it.key() == "json_object") {
        if (!v.is_boolean()) fail_param(param, "'{}' must be a boolean", param);
        if (v.get<bool>()) set_guided(out, param, guided::ConstraintSpec::json_object());
      } else if (it.key() == "grammar" || it.key() == "structural_tag") {
        fail_unsupported(param, "'{}': grammars are not supported (use json, regex or choice)", param);
      } else if (it.key() == "disable_any_whitespace" || it.key() == "disable_additional_properties" ||
                 it.key() == "whitespace_pattern") {
        fail_unsupported(param, "'{}' is not supported: the JSON text form is fixed (docs/API.md)", param);
      } else {
        fail_param(param,
                   "unknown key '{}' in structured_outputs (accepted: json, regex, choice, json_object)",
                   it.key());
      }
    }
  }
  if (const Json* v = f.get("guided_json"); v && !v->is_null())
    set_schema(out, "guided_json", *v, {"guided_json"});
  if (auto v = f.string("guided_regex")) set_guided(out, "guided_regex", guided::ConstraintSpec::regex(*v));
  if (const Json* v = f.get("guided_choice"); v && !v->is_null())
    set_guided(out, "guided_choice", guided::ConstraintSpec::choice(string_list(*v, "guided_choice")));
  if (const Json* v = f.get("guided_grammar"); v && !v->is_null())
    fail_unsupported("guided_grammar",
                     "'guided_grammar': grammars are not supported (use guided_json, guided_regex "
                     "or guided_choice)");
  if (const Json* v = f.get("guided_whitespace_pattern"); v && !v->is_null())
    fail_unsupported("guided_whitespace_pattern",
                     "'guided_whitespace_pattern' is not supported: the JSON text form is "
                     "fixed (docs/API.md)");
  if (auto v = f.string("guided_decoding_backend")) (void)v;  // accepted: there is one implementation
}

}  // namespace dgemma
