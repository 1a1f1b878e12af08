#pragma once
// The chat forms that pinned spans make possible (docs/API.md "Pinned chat forms"): forced tool calls
// (tool_choice "required" or a named function) and JSON output (response_format json_object /
// json_schema). Each is a layout of pinned text and free gaps at the start of the answer, plus a
// check of the committed output; a reply that fails the check is retried with another seed.
//
// json_schema support is a subset, checked up front (anything else is a 400 naming the keyword):
//   type (one of object, array, string, number, integer, boolean, null), properties, required, enum,
//   const, items, additionalProperties (a boolean), and the annotations title, description, $schema,
//   default, examples.
// Layout of a value (pinned text in quotes, gaps as [room]):
//   const / one-value enum / null: the value itself, pinned;   enum: [max value length + 2]
//   string: "\"" [64] "\"";   integer: [12];   number: [24];   boolean: [3];   array: "[" [128] "]"
//   object: "{" then, for each required key in the order of `required`, "\"key\": " (", \"key\": " after
//     the first) and the key's layout; then [128] if the object may hold other keys (optional
//     properties, or no `additionalProperties: false` without properties); then "}"
//   a schema without type, enum or const: [64]
// Free positions the model leaves empty (EOS / pad before the last pinned position) are dropped by the
// engine, so a value shorter than its gap closes up against the next pinned text.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/openai_request.h"
#include "engine/request.h"
#include "text/tokenizer/tokenizer.h"
#include "util/json.h"

namespace dgemma {

// Retries: a reply that fails its check is generated again, up to this many attempts in all. With a
// seed, attempt a (0-based) of choice j runs with seed + j + a * kRetrySeedStride (mod 2^64), so a
// seeded request is reproducible and its first attempt is the unconstrained seed + j.
constexpr int kMaxStructuredAttempts = 3;
constexpr uint64_t kRetrySeedStride = 0x9E3779B97F4A7C15ULL;

// Gap sizes of the layout above (answer positions).
struct SchemaRooms {
  static constexpr int kString = 64;
  static constexpr int kInteger = 12;
  static constexpr int kNumber = 24;
  static constexpr int kBoolean = 3;
  static constexpr int kArray = 128;
  static constexpr int kObjectRest = 128;
  static constexpr int kAny = 64;
};

// Throws Error(kUnsupported, ..., param) naming the first keyword or construct outside the subset, and
// Error(kInvalidArgument) for a malformed schema (required not an array of strings, ...).
void check_schema_supported(const Json& schema, const std::string& param);

// nullopt when `value` satisfies `schema` (a schema that passed check_schema_supported); else what is
// wrong, with a JSON-pointer-like path ("$.items[2].name: expected a string").
std::optional<std::string> validate_against_schema(const Json& value, const Json& schema);

// One piece of a layout: pinned text (may be empty), then `room` free positions.
struct LayoutPiece {
  std::string text;
  int room = 0;
};
std::vector<LayoutPiece> schema_layout(const Json& schema);

// Pinned spans from a layout: each non-empty text tokenised (control-token strings stay plain text
// unless allow_special) at its offset. `length` receives the layout's answer positions in all.
std::vector<PinnedSpan> layout_pins(const std::vector<LayoutPiece>& layout, const Tokenizer& tok, bool allow_special,
                                    int64_t& length);

// The pins a chat request's forced form puts at the start of its answer (none for free text) and the
// answer positions they take (max_tokens must leave room for them). When the prompt ends inside an open
// thought channel, "<channel|>" is pinned first so the forced text is the answer, not a thought.
struct AnswerPlan {
  std::vector<PinnedSpan> pins;
  int64_t min_tokens = 0;
};
AnswerPlan plan_answer_pins(const ParsedRequest& req, const Tokenizer& tok, bool starts_in_reasoning);

// The checks of the committed output. Each returns nullopt when it passes, else why not.
struct ToolCallSummary {
  std::string name;
};
std::optional<std::string> check_forced_tool_calls(const std::vector<ToolCallSummary>& calls, const std::string& content,
                                                   const std::vector<std::string>& allowed_names);
std::optional<std::string> check_json_output(const std::string& content, const Json* schema);

}  // namespace dgemma
