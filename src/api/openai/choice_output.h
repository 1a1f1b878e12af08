#pragma once
// Turns one choice's committed canvases into client-visible deltas:
//   token ids -> markup text (MarkupDetokenizer: the Gemma 4 markup tokens found by id, the other special
//   tokens skipped unless skip_special_tokens is false) -> stop strings (cut inside a canvas)
//   -> reasoning parser (chat, --reasoning-parser gemma4) -> tool-call parser (tool_choice auto) and the
//   checks of its calls (api/openai/tool_call_check.h) -> client text (markup::render: what the parsers leave
//   of the markup is dropped, or spelled out when skip_special_tokens is false).
// The engine has already cut the canvas at EOS, stop token ids and max_tokens (engine/sequence.h).
// Text that could still be the start of a stop string is held back until the next canvas decides it,
// so no stop string ever reaches the client. completion_tokens() counts exactly the tokens the engine
// returned (pads and other special tokens included) up to and including the token that completed a
// stop string.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/openai/tool_call_check.h"
#include "text/parsers/reasoning_parser.h"
#include "text/parsers/tool_parser.h"
#include "text/tokenizer/detokenizer.h"
#include "text/tokenizer/tokenizer.h"
#include "util/json.h"

namespace dgemma {

struct ChoiceOutputOptions {
  std::vector<std::string> stop;
  bool include_stop_str = false;
  bool skip_special_tokens = true;
  bool reasoning = false;           // split reasoning from content
  bool drop_reasoning = false;      // ... and drop the reasoning (no --reasoning-parser, markers visible)
  bool thinking_enabled = false;
  bool starts_in_reasoning = false;  // the prompt ended inside an open thought channel
  bool tools = false;               // extract tool calls
  std::shared_ptr<const DeclaredTools> declared_tools;  // with tools: the calls that may be returned
  bool parallel_tool_calls = true;                      // false: only the first accepted call is returned
  bool logprobs = false;
};

struct TokenLogprob {
  int32_t id = 0;
  std::string token;         // the token's own text (decoded alone)
  std::vector<uint8_t> bytes;
  float logprob = 0;
  struct Alternative {
    int32_t id = 0;
    std::string token;
    std::vector<uint8_t> bytes;
    float logprob = 0;
  };
  std::vector<Alternative> top;  // the most likely tokens of the committing step, descending
};

// A tool call as the client sees it: whole (id, name and all its arguments in one delta).
struct ToolCallDelta {
  int index = 0;  // position among the choice's returned calls (0, 1, ...)
  std::string id;
  std::string name;
  std::string arguments_delta;  // the arguments JSON
};

// A call the model wrote that is not returned as a tool call (dgemma extension, docs/API.md): its text,
// without markup, is in the content.
struct RejectedToolCall {
  std::string name;
  std::string reason;
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  std::vector<RejectedToolCall> rejected_tool_calls;
  std::vector<TokenLogprob> logprobs;
  bool empty() const {
    return reasoning.empty() && content.empty() && tool_calls.empty() && rejected_tool_calls.empty() &&
           logprobs.empty();
  }
  void append(OutputDelta&& other);
};

class ChoiceOutput {
 public:
  ChoiceOutput(const Tokenizer& tok, ChoiceOutputOptions options);

  // One committed canvas (logprobs: empty or one per token; top_ids / top_logprobs: empty or top_n
  // per token, row-major). Returns what became final.
  // Throws Error(kInvalidArgument) on an out-of-range token id from the engine.
  OutputDelta feed(const std::vector<int32_t>& tokens, const std::vector<float>& logprobs, int top_n = 0,
                   const std::vector<int32_t>& top_ids = {}, const std::vector<float>& top_logprobs = {});
  // End of output: releases everything held back and closes the parsers. Idempotent.
  OutputDelta finish();

  // A stop string ended the output (the engine request should be cancelled).
  bool stopped() const { return stopped_; }
  // The matched stop string (vLLM's stop_reason), null when none (a stop token id is the engine's).
  Json stop_reason() const;
  int64_t completion_tokens() const { return counted_tokens_; }
  // A tool call was returned (finish_reason "tool_calls").
  bool saw_tool_calls() const { return accepted_calls_ > 0; }

 private:
  OutputDelta release(std::string_view text, bool final);
  void take_calls(ToolCallParser::Delta&& t, OutputDelta& d);
  std::string client_text(std::string_view markup_text) const;
  size_t hold_back_bytes() const;

  const Tokenizer& tok_;
  ChoiceOutputOptions opt_;
  MarkupDetokenizer detok_;
  std::unique_ptr<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
  std::string text_;                 // all markup text decoded so far
  size_t released_ = 0;              // bytes of text_ passed downstream
  std::vector<size_t> token_ends_;   // text_ size after each counted token (for stop-string accounting)
  int64_t counted_tokens_ = 0;
  size_t max_stop_ = 0;
  bool stopped_ = false;
  bool finished_ = false;
  int accepted_calls_ = 0;
  std::string stop_string_;
};

}  // namespace dgemma
