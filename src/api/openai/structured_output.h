#pragma once
// The guided answers of the API (docs/API.md "Guided decoding on the canvas"): a request's guided form
// (response_format json_object / json_schema, structured_outputs, guided_*) or forced tool call
// (tool_choice "required" or a named function) becomes one constraint over the answer's value, decoded
// on the canvas by the engine (engine/guided_answer.h), so the reply is valid by construction.
// Layout of the answer: ["<channel|>" when the prompt ends inside an open thought] [a forced call's
// "<|tool_call>call:"] then the value, whose fixed opening (the text every value starts with, e.g.
// {"name": ") is pinned; the rest of the value is one gap reaching to max_tokens (less a call's closing
// "<tool_call|>", appended after the value).
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/openai/openai_request.h"
#include "engine/request.h"
#include "guided/constraint_cache.h"
#include "text/tokenizer/tokenizer.h"

namespace dgemma {

// The constraint of the request's answer: its guided form, or the forced call (the declared names and
// their parameter schemas); nullopt for free text. `body`: the request body's text, from which a
// schema given as an object is read again in member order.
std::optional<guided::ConstraintSpec> answer_constraint(const ParsedRequest& req, std::string_view body);

// The text of the JSON value at `path` (object keys) in `body`, members in their order in the body.
std::string ordered_member_text(std::string_view body, const std::vector<std::string>& path);

// Compiles constraints for one tokenizer's vocabulary (fillers: <pad> and <eos>; built at the first
// compilation), cached. Thread-safe. The tokenizer must outlive it.
class GuidedCompiler {
 public:
  explicit GuidedCompiler(std::shared_ptr<const Tokenizer> tokenizer);
  // Throws Error(kInvalidArgument / kUnsupported, ..., param) when the constraint cannot be compiled.
  std::shared_ptr<const guided::TokenConstraint> compile(const guided::ConstraintSpec& spec,
                                                         const std::string& param);

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::mutex mu_;
  std::shared_ptr<const guided::TokenVocabulary> vocab_;
  guided::ConstraintCache cache_;
};

// The answer's pins and its guided value. `guided` has begin and suffix set; its end is the prompt's
// (guided_answer_for). min_tokens: the answer positions the layout needs at least (the pins, the
// shortest value at one token per byte, the suffix).
struct AnswerPlan {
  std::vector<PinnedSpan> pins;
  int64_t min_tokens = 0;
  std::shared_ptr<const GuidedAnswer> guided;
};
AnswerPlan plan_answer(const ParsedRequest& req, const Tokenizer& tok, bool starts_in_reasoning,
                       std::shared_ptr<const guided::TokenConstraint> constraint);

// The plan's guided value for an answer of max_tokens positions (nullptr without one).
std::shared_ptr<const GuidedAnswer> guided_answer_for(const AnswerPlan& plan, int64_t max_tokens);

}  // namespace dgemma
