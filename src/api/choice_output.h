#pragma once
// Turns one choice's committed canvases into client-visible deltas:
//   token ids -> stop token ids -> UTF-8-safe incremental text -> stop strings (cut inside a canvas)
//   -> reasoning parser (chat, --reasoning-parser gemma4) -> tool-call parser (tool_choice auto).
// Text that could still be the start of a stop string is held back until the next canvas decides it,
// so no stop string ever reaches the client. completion_tokens() counts exactly the tokens whose text
// was produced (up to and including the token that completed a stop string).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/detokenizer.h"
#include "text/reasoning_parser.h"
#include "text/tokenizer.h"
#include "text/tool_parser.h"
#include "util/json.h"

namespace dgemma {

struct ChoiceOutputOptions {
  std::vector<std::string> stop;
  bool include_stop_str = false;
  std::vector<int32_t> stop_token_ids;
  bool skip_special_tokens = true;  // ignored (false) when a parser is on: the parsers need the markers
  bool reasoning = false;           // split reasoning from content
  bool drop_reasoning = false;      // ... and drop the reasoning (no --reasoning-parser, markers visible)
  bool thinking_enabled = false;
  bool starts_in_reasoning = false;  // the prompt ended inside an open thought channel
  bool tools = false;               // extract tool calls
  bool parallel_tool_calls = true;  // false: only the first call is returned
  bool logprobs = false;
};

struct TokenLogprob {
  int32_t id = 0;
  std::string token;         // the token's own text (decoded alone)
  std::vector<uint8_t> bytes;
  float logprob = 0;
  struct Alternative {
    std::string token;
    std::vector<uint8_t> bytes;
    float logprob = 0;
  };
  std::vector<Alternative> top;  // the most likely tokens of the committing step, descending
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  std::vector<TokenLogprob> logprobs;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty() && logprobs.empty(); }
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

  // A stop string or stop token id ended the output (the engine request should be cancelled).
  bool stopped() const { return stopped_; }
  // The matched stop string or token id (vLLM's stop_reason), null when none.
  Json stop_reason() const;
  int64_t completion_tokens() const { return counted_tokens_; }
  bool saw_tool_calls() const { return saw_tool_calls_; }

 private:
  OutputDelta release(std::string_view text, bool final);
  size_t hold_back_bytes() const;

  const Tokenizer& tok_;
  ChoiceOutputOptions opt_;
  IncrementalDetokenizer detok_;
  std::unique_ptr<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
  std::string text_;                 // all raw text decoded so far
  size_t released_ = 0;              // bytes of text_ passed downstream
  std::vector<size_t> token_ends_;   // text_ size after each counted token (for stop-string accounting)
  int64_t counted_tokens_ = 0;
  size_t max_stop_ = 0;
  bool stopped_ = false;
  bool finished_ = false;
  bool saw_tool_calls_ = false;
  std::string stop_string_;
  std::optional<int32_t> stop_id_;
};

}  // namespace dgemma
