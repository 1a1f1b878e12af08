#pragma once
// The JSON of /v1/chat/completions and /v1/completions answers, built from what a choice produced: the
// whole response (chat.completion / text_completion), the stream's chunks (chat.completion.chunk /
// text_completion), usage with the dgemma extension, log-probabilities in each endpoint's form, tool
// calls and the denoising previews. Builders only: what to send and when is the caller's.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/openai/choice_output.h"
#include "util/json.h"

namespace dgemma {

// One tool call as an assistant message carries it: {"id", "type": "function", "function": {"name",
// "arguments"}}.
Json tool_call_json(const std::string& id, const std::string& name, Json arguments);
// dgemma's extension: the calls the model wrote that were not returned as tool calls.
Json rejected_tool_calls_json(const std::vector<RejectedToolCall>& rejected);

// A request's token counts over all its choices, for `usage`.
struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache served
  int64_t canvases = 0;
  int64_t denoising_steps = 0;
  int64_t canvas_length = 0;
};
Json usage_json(const UsageCounts& u);

// One denoising preview of a stream (the `dgemma.preview` comment's payload).
struct PreviewJson {
  int index = 0;
  int canvas = 0;
  int step = 0;
  std::string text;
  std::vector<std::string> pieces;  // each position's token text
  std::vector<float> entropy;       // each position's entropy (may be empty)
  std::vector<uint8_t> accepted;    // each position accepted by the step (may be empty)
};
Json preview_json(const PreviewJson& p);

struct CompletionJsonOptions {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool chat = true;                         // chat/completions (else completions)
  std::string response_role = "assistant";  // --response-role
  bool tokens_as_ids = false;               // logprobs name tokens "token_id:N"
  bool reasoning_parser = false;            // chat messages carry reasoning_content / reasoning
};

// A finished choice of a whole (non-streamed) response.
struct FinishedChoice {
  int index = 0;
  std::string echo;       // the echoed prompt text (empty: none)
  bool logprobs = false;  // the request asked for logprobs
  std::string finish_reason;
  Json stop_reason = nullptr;
  std::optional<std::vector<std::string>> holes;  // completions infilling: each hole's text
};

class CompletionJson {
 public:
  explicit CompletionJson(CompletionJsonOptions opt) : opt_(std::move(opt)) {}

  // The fields every chunk and the response share: id, object, created, model.
  Json base() const;
  // A chunk holding one choice.
  Json chunk(Json choice) const;
  // The stream's usage chunk (no choices).
  Json usage_chunk(Json usage) const;
  // The stream's opening choice of a chat: the role and empty content.
  Json role_choice(int index) const;
  // A stream choice carrying echoed prompt text.
  Json echo_choice(int index, const std::string& echo) const;
  // A stream choice carrying a delta; null when a chat delta has nothing to send. `text_offset`: the
  // bytes of text streamed before it (completions' logprobs text_offset).
  Json delta_choice(int index, const OutputDelta& d, size_t text_offset) const;
  // The stream's last choice of a choice: its finish_reason and stop_reason.
  Json finish_choice(int index, const std::string& finish_reason, const Json& stop_reason) const;

  // The whole response: a choice from everything it produced, and the response around the choices.
  Json finished_choice(const FinishedChoice& c, const OutputDelta& output) const;
  Json response(Json choices, Json usage) const;

  // Log-probabilities: chat's `content` list or completions' parallel arrays from `text_offset` on.
  Json logprobs_json(const std::vector<TokenLogprob>& lps, size_t text_offset) const;
  // A chat delta object (reasoning, content, tool calls, rejected calls); empty when there is none.
  static Json delta_json(const OutputDelta& d);

 private:
  CompletionJsonOptions opt_;
};

}  // namespace dgemma
