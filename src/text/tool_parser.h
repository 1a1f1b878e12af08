#pragma once
// Extracts Gemma 4 tool calls from detokenized model output (control tokens as literal strings):
//   <|tool_call>call:NAME{ARGS}<tool_call|>   (several simply concatenated)
// Rules (identical for streaming and non-streaming):
//  - A call is "<|tool_call>", optional whitespace, "call:" (tolerated if missing), NAME ([A-Za-z0-9_.-],
//    at most 256 bytes), optional whitespace, then "{" or "(" (python-style keyword body), or directly
//    "<tool_call|>" (a call without arguments: "{}"). Anything else is not a call: the "<|tool_call>"
//    marker and the text after it stay in content verbatim.
//  - Once the body has opened it is a call. ARGS (see gemma4_args.h for the lenient syntax) are
//    converted up to the body's closing bracket; a control marker or the end of the output cuts the body
//    short and what was open is closed (so a missing "<tool_call|>" at the end of output is recovered).
//    On a syntax error the call keeps the members parsed before it, and the raw text from the bad member
//    up to "<tool_call|>" goes to content: nothing is silently lost.
//  - After the body, whitespace and stray closing brackets are dropped; "<tool_call|>" ends the call
//    (if it is missing, the next "<|tool_call>", "<|tool_response>" or the end of output does); other
//    text before "<tool_call|>" goes to content.
//  - Whitespace before the first call (when nothing else precedes it), between calls and after the last
//    call is dropped, and so is a trailing "<|tool_response>" (an EOS marker, normally already trimmed).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace dgemma {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments_json;  // a JSON object, serialised like json.dumps(ensure_ascii=False)
};

struct ToolCallDelta {
  int index = 0;               // position of the call in this output (0, 1, ...)
  std::string id;              // set on the call's first delta only
  std::string name;            // set on the call's first delta only
  std::string arguments_delta; // a piece of arguments_json; the pieces of one call concatenate to it
};

struct ToolParseResult {
  std::string content;
  std::vector<ToolCall> calls;
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

  struct Delta {
    std::string content;
    std::vector<ToolCallDelta> calls;  // at most one entry per call index per Delta
  };

  // Streaming: any split of the output. Never emits a raw "<|tool_call>" (or a prefix of it) in
  // content for a call that parses. A call's first delta carries id and name (and any arguments
  // already final); later deltas carry argument pieces. Arguments are emitted as soon as they are
  // final: a bare value when its terminator arrives, string text as it arrives.
  Delta feed(std::string_view text);
  // End of output: flushes everything held back. feed()* + finish() concatenated give the same
  // content and calls (names, arguments) as parse_tool_calls() on the whole text, for every split.
  Delta finish();

  bool saw_tool_call() const;  // for finish_reason "tool_calls"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgemma
