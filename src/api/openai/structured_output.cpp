#include "api/openai/structured_output.h"

#include <array>

#include "api/api_error.h"
#include "guided/json_text.h"
#include "guided/token_constraint.h"
#include "text/parsers/tool_parser.h"
#include "text/tokenizer/utf8.h"
#include "util/error.h"

namespace dgemma {
namespace {

// Compiled constraints kept per tokenizer (a schema is compiled once while it stays in use).
constexpr size_t kCacheEntries = 256;
constexpr size_t kCacheBytes = size_t{512} << 20;

// The text every value of the automaton starts with: from the start state, as long as the state is not
// accepting and exactly one byte leads on; cut back to whole UTF-8 characters.
std::string forced_opening(const guided::Dfa& d) {
  std::array<int, 256> per_class{};
  std::array<uint8_t, 256> byte_of{};
  for (int b = 0; b < 256; ++b) {
    per_class[d.byte_class[static_cast<size_t>(b)]] += 1;
    byte_of[d.byte_class[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
  }
  std::string out;
  int32_t s = d.start;
  while (s >= 0 && !d.accepting[static_cast<size_t>(s)] && out.size() < 4096) {
    int live = -1, count = 0;
    for (int32_t k = 0; k < d.num_classes; ++k)
      if (d.next[static_cast<size_t>(s) * static_cast<size_t>(d.num_classes) + static_cast<size_t>(k)] >= 0) {
        live = k;
        ++count;
      }
    if (count != 1 || per_class[static_cast<size_t>(live)] != 1) break;
    out.push_back(static_cast<char>(byte_of[static_cast<size_t>(live)]));
    s = d.next[static_cast<size_t>(s) * static_cast<size_t>(d.num_classes) + static_cast<size_t>(live)];
  }
  while (!out.empty() && !utf8::is_valid(out)) out.pop_back();
  return out;
}

// The function names and parameter schemas (text in body order) of a forced call.
guided::ConstraintSpec tool_call_spec(const ParsedRequest& req, std::string_view body) {
  std::vector<std::string> names, schemas;
  for (size_t i = 0; i < req.tools.size(); ++i) {
    const Json& fn = req.tools[i]["function"];
    const std::string name = fn["name"].get<std::string>();
    if (req.tool_choice == ToolChoiceMode::kNamed && name != req.tool_choice_name) continue;
    names.push_back(name);
    auto p = fn.find("parameters");
    schemas.push_back(p == fn.end() || p->is_null() ? std::string()
                                                    : ordered_member_text(body, {"tools", std::to_string(i),
                                                                                 "function", "parameters"}));
  }
  return guided::ConstraintSpec::tool_call(std::move(names), std::move(schemas));
}

}  // namespace

std::string ordered_member_text(std::string_view body, const std::vector<std::string>& path) {
  // The body already parsed as Json (depth-limited), so this parse is bounded the same way.
  const guided::OrderedJson doc = guided::OrderedJson::parse(body.begin(), body.end());
  const guided::OrderedJson* v = &doc;
  for (const std::string& key : path) {
    if (v->is_array()) {
      v = &v->at(static_cast<size_t>(std::stoul(key)));
    } else {
      v = &v->at(key);
    }
  }
  return v->dump();
}

std::optional<guided::ConstraintSpec> answer_constraint(const ParsedRequest& req, std::string_view body) {
  if (req.tool_choice == ToolChoiceMode::kRequired || req.tool_choice == ToolChoiceMode::kNamed) {
    guided::ConstraintSpec spec = tool_call_spec(req, body);
    try {
      guided::check_constraint(spec);
    } catch (const Error& e) {
      throw Error(e.kind(), fmt::format("'tools': a function's parameters: {}", e.what()), "tools");
    }
    return spec;
  }
  if (!req.guided) return std::nullopt;
  guided::ConstraintSpec spec = req.guided->spec;
  if (!req.guided->schema_path.empty()) spec.text = ordered_member_text(body, req.guided->schema_path);
  return spec;
}

GuidedCompiler::GuidedCompiler(std::shared_ptr<const Tokenizer> tokenizer)
    : tokenizer_(std::move(tokenizer)), cache_(kCacheEntries, kCacheBytes) {}

std::shared_ptr<const guided::TokenConstraint> GuidedCompiler::compile(const guided::ConstraintSpec& spec,
                                                                       const std::string& param) {
  std::shared_ptr<const guided::TokenVocabulary> vocab;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!vocab_) {
      std::vector<int32_t> fillers;
      for (const char* name : {"<pad>", "<eos>"})
        if (auto id = tokenizer_->token_to_id(name)) fillers.push_back(*id);
      vocab_ = guided::TokenVocabulary::from_tokenizer(*tokenizer_, fillers);
    }
    vocab = vocab_;
  }
  try {
    return cache_.get(spec, vocab);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument && e.kind() != ErrorKind::kUnsupported) throw;
    throw Error(e.kind(), fmt::format("'{}': {}", param, e.what()), param);
  }
}

AnswerPlan plan_answer(const ParsedRequest& req, const Tokenizer& tok, bool starts_in_reasoning,
                       std::shared_ptr<const guided::TokenConstraint> constraint) {
  AnswerPlan plan;
  if (!constraint) return plan;
  int64_t at = 0;
  if (starts_in_reasoning) {
    PinnedSpan closer{0, tok.encode("<channel|>", true)};
    at += static_cast<int64_t>(closer.tokens.size());
    plan.pins.push_back(std::move(closer));
  }
  auto guided = std::make_shared<GuidedAnswer>();
  if (req.tool_choice == ToolChoiceMode::kRequired || req.tool_choice == ToolChoiceMode::kNamed) {
    // The call's markup: "<|tool_call>call:" pinned, the value NAME{arguments}, then "<tool_call|>".
    PinnedSpan opening{at, tok.encode(tool_call_opening(""), true)};
    at += static_cast<int64_t>(opening.tokens.size());
    plan.pins.push_back(std::move(opening));
    guided->suffix = tok.encode("<tool_call|>", true);
  }
  guided->begin = at;
  // The value's fixed opening, pinned when its tokens walk the automaton (they do: the same bytes).
  const std::string opening = forced_opening(constraint->dfa());
  int32_t state = constraint->start();
  int64_t opening_tokens = 0;
  if (!opening.empty()) {
    std::vector<int32_t> tokens = tok.encode(opening, false);
    int32_t s = state;
    for (int32_t t : tokens) s = s >= 0 ? constraint->step(s, t) : s;
    if (s >= 0 && !tokens.empty()) {
      state = s;
      opening_tokens = static_cast<int64_t>(tokens.size());
      plan.pins.push_back(PinnedSpan{at, std::move(tokens)});
    }
  }
  plan.min_tokens =
      at + opening_tokens + constraint->completion_length(state) + static_cast<int64_t>(guided->suffix.size());
  guided->constraint = std::move(constraint);
  plan.guided = std::move(guided);
  return plan;
}

std::shared_ptr<const GuidedAnswer> guided_answer_for(const AnswerPlan& plan, int64_t max_tokens) {
  if (!plan.guided) return nullptr;
  auto g = std::make_shared<GuidedAnswer>(*plan.guided);
  g->end = max_tokens - static_cast<int64_t>(g->suffix.size());
  return g;
}

}  // namespace dgemma
