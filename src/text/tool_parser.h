#pragma once
// Extracts Gemma 4 tool calls from detokenized model output (control tokens as literal strings):
//   <|tool_call>call:NAME{ARGS}<tool_call|>   (several simply concatenated)
// NAME: letters, digits, '_', '-', '.'; ARGS: see gemma4_args.h. Text outside calls is content; a
// trailing "<|tool_response>" (EOS id, normally already trimmed) is dropped from content. Recovered
// malformed forms (SERVING.md §2.1): paren bodies "call:fn(a='x', n=3)", JSON/single quotes, '=' for
// ':', and a missing "<tool_call|>" at the end of output when the body is complete. Text that cannot be
// parsed as a call stays in content verbatim: nothing is silently lost.
#include <cstdint>
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

// Call ids: "call_" + 24 alphanumerics. Deterministic per process sequence (a counter mixed through a
// hash), unique within a process; tests can compare ids only for shape.
std::string make_tool_call_id();

// Non-streaming: content (text outside calls) + calls in order.
ToolParseResult parse_tool_calls(std::string_view text);

class ToolCallParser {
 public:
  ToolCallParser();

  struct Delta {
    std::string content;
    std::vector<ToolCallDelta> calls;
  };

  // Streaming: any split of the output. Never emits a raw "<|tool_call>" (or a prefix of it) in
  // content. For each call the first delta carries id and name, later ones argument pieces.
  Delta feed(std::string_view text);
  // End of output: flushes everything held back. The concatenated deltas of feed()* + finish() give
  // the same content and calls (names, arguments) as parse_tool_calls() on the whole text.
  Delta finish();

  bool saw_tool_call() const { return !calls_.empty(); }  // for finish_reason "tool_calls"

 private:
  struct CallState {
    std::string id;
    std::string name;
    std::string sent_args;  // arguments JSON already emitted
  };
  void process(Delta& out, bool final);
  void emit_args(Delta& out, int index, const std::string& full_args, bool final);

  std::string buf_;               // unconsumed text
  std::vector<CallState> calls_;
  bool finished_ = false;
};

}  // namespace dgemma
