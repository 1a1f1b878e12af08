#pragma once
// Extracts Gemma 4 tool calls from model output in markup text (text/parsers/markup_scan.h; the markup tokens
// are written below as their token text):
//   <|tool_call>call:NAME{ARGS}<tool_call|>   (several simply concatenated)
// Rules (identical for streaming and non-streaming):
//  - A call is "<|tool_call>", optional whitespace, "call:" (tolerated if missing), NAME ([A-Za-z0-9_.-],
//    at most 256 bytes), optional whitespace, then "{" or "(" (python-style keyword body), or directly
//    "<tool_call|>" (a call without arguments: "{}"). Anything else is a call without a body
//    (Arguments::kNoBody, NAME as far as it was read): its text runs to where a call's would end.
//  - Once the body has opened it is a call. ARGS (see gemma4_args.h for the lenient syntax) are
//    converted up to the body's closing bracket; a control marker cuts the body short and what was open
//    is closed (so a call whose "<tool_call|>" comes early is recovered).
//  - A call's arguments are not trusted (ParsedToolCall::arguments) when the body has a syntax error
//    (the JSON then holds the members before it) or when the output ends inside a body that has
//    argument text (cut short by max_tokens: a value may be truncated). "NAME{" at the very end is "{}".
//  - After the body, whitespace and stray closing brackets are dropped; "<tool_call|>" ends the call
//    (if it is missing, the next "<|tool_call>", "<|tool_response>" or the end of output does); other
//    text before "<tool_call|>" is the call's `stray` text.
//  - Whitespace before the first call (when nothing else precedes it), between calls and after the last
//    call is dropped, and so is a trailing "<|tool_response>" (an EOS marker, normally already trimmed).
//  - Nothing is lost: every byte of the output is content, part of a call's `text`, or dropped
//    whitespace / markup.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace dgemma {

// One call as the parser read it, emitted whole once its end is known.
struct ParsedToolCall {
  enum class Arguments {
    kComplete,   // the body parsed
    kMalformed,  // a syntax error: arguments_json holds the members before it
    kCutShort,   // the output ended inside the body: arguments_json closes what was open
    kNoBody,     // no call header (no NAME, or no '{' / '(' after it): arguments_json "{}"
  };
  std::string name;
  std::string arguments_json;  // a JSON object, serialised like json.dumps(ensure_ascii=False)
  Arguments arguments = Arguments::kComplete;
  std::string text;           // the call's markup text, from its "<|tool_call>" to where it ended
  std::string stray;          // markup text between the body and "<tool_call|>" (usually empty)
  size_t content_offset = 0;  // where the call sits in the content of the delta (or result) holding it
};

struct ToolParseResult {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

// Call ids: "call_" + 24 alphanumerics, a process-wide counter mixed through a hash: unique within a
// process and deterministic for a given call sequence (tests compare ids only for shape).
std::string make_tool_call_id();

// The opening a forced call is pinned with (docs/API.md "Pinned chat forms"): "<|tool_call>call:", and
// NAME "{" after it when the function is named. NAME must be a valid tool name ([A-Za-z0-9_.-]), so
// only the markup holds control tokens.
std::string tool_call_opening(std::string_view name);

// Non-streaming: content (text outside calls) + calls in order.
ToolParseResult parse_tool_calls(std::string_view text);

class ToolCallParser {
 public:
  ToolCallParser();
  ~ToolCallParser();
  ToolCallParser(ToolCallParser&&) noexcept;
  ToolCallParser& operator=(ToolCallParser&&) noexcept;

  using Delta = ToolParseResult;

  // Streaming: any split of the output. Content is emitted as soon as it cannot be part of a call; a
  // call is emitted whole once it has ended (its text is held until then).
  Delta feed(std::string_view text);
  // End of output: flushes everything held back. feed()* + finish() concatenated give the same
  // content and calls as parse_tool_calls() on the whole text, for every split.
  Delta finish();

  bool saw_tool_call() const;  // a call was read (whether or not it is then accepted)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgemma
