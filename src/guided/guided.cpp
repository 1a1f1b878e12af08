#include "guided/guided.h"

#include "guided/json_schema.h"
#include "guided/nfa.h"
#include "guided/regex_parser.h"
#include "text/tokenizer/utf8.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

void check_choices(const std::vector<std::string>& choices, const CompileLimits& limits) {
  if (choices.empty()) fail_arg("choice: the list of choices is empty");
  if (static_cast<int64_t>(choices.size()) > limits.max_choices)
    fail_arg("choice: {} choices, more than the limit of {}", choices.size(), limits.max_choices);
  size_t total = 0;
  for (const std::string& c : choices) {
    if (!utf8::is_valid(c)) fail_arg("choice: a choice is not valid UTF-8");
    total += c.size();
  }
  if (total > limits.max_source_bytes)
    fail_arg("choice: the choices hold {} bytes, more than the limit of {}", total, limits.max_source_bytes);
}

Dfa compile_regex(const std::string& pattern, const CompileLimits& limits) {
  Ast ast(limits);
  const NodeId root = parse_regex(ast, pattern);
  Dfa dfa = determinize(build_nfa(ast, root), limits);
  if (dfa.empty_language()) fail_arg("regex: the pattern matches no text");
  return dfa;
}

Dfa compile_choices(const std::vector<std::string>& choices, const CompileLimits& limits) {
  check_choices(choices, limits);
  Ast ast(limits);
  std::vector<NodeId> alts;
  for (const std::string& c : choices) alts.push_back(ast.bytes(c));
  return determinize(build_nfa(ast, ast.alt(std::move(alts))), limits);
}

constexpr const char* kNoArguments = R"({"type": "object", "additionalProperties": false})";

void check_tool_call(const ConstraintSpec& spec, const CompileLimits& limits) {
  if (spec.choices.empty() || spec.choices.size() != spec.schemas.size())
    fail_arg("tool call: one parameter schema per function name is needed");
  check_choices(spec.choices, limits);
  for (const std::string& schema : spec.schemas)
    check_json_schema(parse_schema_text(schema.empty() ? kNoArguments : schema, limits), limits);
}

Dfa compile_tool_call(const ConstraintSpec& spec, const CompileLimits& limits) {
  check_tool_call(spec, limits);
  Ast ast(limits);
  std::vector<NodeId> alts;
  for (size_t i = 0; i < spec.choices.size(); ++i) {
    const std::string& schema = spec.schemas[i].empty() ? std::string(kNoArguments) : spec.schemas[i];
    auto args = std::make_shared<const Dfa>(compile_json_schema(parse_schema_text(schema, limits), limits));
    alts.push_back(ast.concat({ast.bytes(spec.choices[i]), ast.automaton(std::move(args))}));
  }
  return determinize(build_nfa(ast, ast.alt(std::move(alts))), limits);
}

}  // namespace

std::string limits_key(const CompileLimits& l) {
  return fmt::format("{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}", l.max_source_bytes, l.max_nesting, l.max_repeat,
                     l.max_choices, l.max_ast_nodes, l.max_nfa_states, l.max_dfa_states, l.max_work,
                     l.any_value_depth, l.json_object_depth, l.max_mask_work);
}

void check_constraint(const ConstraintSpec& spec, const CompileLimits& limits) {
  switch (spec.kind) {
    case ConstraintKind::kJsonSchema:
      check_json_schema(parse_schema_text(spec.text, limits), limits);
      return;
    case ConstraintKind::kJsonObject:
      return;
    case ConstraintKind::kRegex: {
      Ast ast(limits);
      parse_regex(ast, spec.text);
      return;
    }
    case ConstraintKind::kChoice:
      check_choices(spec.choices, limits);
      return;
    case ConstraintKind::kToolCall:
      check_tool_call(spec, limits);
      return;
  }
}

Dfa compile_constraint(const ConstraintSpec& spec, const CompileLimits& limits) {
  switch (spec.kind) {
    case ConstraintKind::kJsonSchema:
      return compile_json_schema(parse_schema_text(spec.text, limits), limits);
    case ConstraintKind::kJsonObject:
      return compile_json_object(limits);
    case ConstraintKind::kRegex:
      return compile_regex(spec.text, limits);
    case ConstraintKind::kChoice:
      return compile_choices(spec.choices, limits);
    case ConstraintKind::kToolCall:
      return compile_tool_call(spec, limits);
  }
  DG_CHECK(false);
}

std::shared_ptr<const TokenConstraint> compile_for_vocabulary(const ConstraintSpec& spec,
                                                              std::shared_ptr<const TokenVocabulary> vocab,
                                                              const CompileLimits& limits) {
  return TokenConstraint::build(std::make_shared<const Dfa>(compile_constraint(spec, limits)),
                                std::move(vocab), limits);
}

std::string constraint_key(const ConstraintSpec& spec, const CompileLimits& limits) {
  std::string key = limits_key(limits);
  switch (spec.kind) {
    case ConstraintKind::kJsonSchema:
      key += "|schema|";
      try {
        key += parse_schema_text(spec.text, limits).dump();
      } catch (const Error&) {
        key += spec.text;  // compiling it will fail and say why
      }
      break;
    case ConstraintKind::kJsonObject:
      key += "|object|";
      break;
    case ConstraintKind::kRegex:
      key += "|regex|" + spec.text;
      break;
    case ConstraintKind::kChoice:
      key += "|choice|";
      for (const std::string& c : spec.choices) key += std::to_string(c.size()) + ":" + c;
      break;
    case ConstraintKind::kToolCall:
      key += "|tool_call|";
      for (size_t i = 0; i < spec.choices.size() && i < spec.schemas.size(); ++i) {
        std::string schema = spec.schemas[i];
        try {
          if (!schema.empty()) schema = parse_schema_text(schema, limits).dump();
        } catch (const Error&) {
        }
        key += std::to_string(spec.choices[i].size()) + ":" + spec.choices[i] +
               std::to_string(schema.size()) + ":" + schema;
      }
      break;
  }
  return key;
}

}  // namespace dgemma::guided
