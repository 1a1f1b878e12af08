#pragma once
// One chat/completions request in flight: its choices (n per prompt) as engine requests, their output
// pipelines, and when each piece is sent (a whole response, or SSE chunks; the JSON is
// api/openai/completion_json's). Used from one HTTP worker thread at a time; cancel_all() may be called
// from any thread.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/metrics.h"
#include "api/openai/choice_output.h"
#include "api/openai/completion_json.h"
#include "api/openai/infill.h"
#include "api/openai/openai_request.h"
#include "engine/request.h"
#include "text/tokenizer/tokenizer.h"
#include "util/json.h"

namespace dgemma {

struct GenerationContext {
  EngineInterface* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ServerMetrics* metrics = nullptr;
  const std::atomic<bool>* shutting_down = nullptr;
  bool reasoning_parser = false;  // --reasoning-parser gemma4 (chat only)
  std::string response_role = "assistant";  // --response-role
  bool tokens_as_ids = false;               // --return-tokens-as-token-ids: logprobs name tokens "token_id:N"
};

struct PreparedPrompt {
  std::vector<int32_t> tokens;
  std::string echo_text;  // completions with echo: the prompt text; chat with echo: the last message's text
  // Pinned spans of the answer (docs/API.md "Pinned chat forms"). The first prefill_tokens answer tokens are
  // an assistant prefill: pinned, counted as prompt tokens, not returned and not in max_tokens.
  std::vector<PinnedSpan> pins;
  int64_t prefill_tokens = 0;
  int64_t max_tokens = 0; // decided from the context budget
  bool starts_in_reasoning = false;  // chat: the prompt ends inside an open thought channel
  InfillLayout infill;  // completions infilling: the answer's pinned spans (none: no infilling)
  std::vector<PromptImage> images;  // chat: the images whose soft tokens the prompt holds
  std::shared_ptr<const GuidedAnswer> guided;  // guided decoding (api/openai/structured_output.h)
};

class Generation {
 public:
  Generation(GenerationContext ctx, ParsedRequest req, std::vector<PreparedPrompt> prompts, std::string id,
             double arrival_s);
  ~Generation();

  // Submits every choice. On failure cancels what was submitted and rethrows (queue full -> 503, ...).
  void start();
  // Cancels every unfinished choice (client gone, server stopping). Idempotent, thread-safe.
  void cancel_all();
  // The client went away: cancels and counts every unfinished choice as aborted (metrics). Call from
  // the thread that drives the generation. Idempotent.
  void abandon();

  enum class Status { kProgress, kIdle, kDone };
  // Waits up to `timeout` for engine events and turns them into SSE text appended to `out` (stream
  // mode). kIdle: nothing happened within the timeout (send a ping); kDone: everything, including the
  // final chunks and "data: [DONE]", has been appended.
  Status stream_step(std::chrono::milliseconds timeout, std::string& out);
  // The opening chunks of a stream (role chunks / echo text).
  std::string stream_prologue();
  // Non-stream mode: waits up to `timeout`; true once every choice is finished.
  bool wait_done(std::chrono::milliseconds timeout);
  // The complete response JSON (after wait_done() returned true), or the error that ended it.
  Json response_json() const;
  bool failed() const { return !error_.empty(); }
  const std::string& error_message() const { return error_; }
  // The request was cut because the server stops (answer 503, not 500).
  bool cut_by_shutdown() const { return cut_; }
  // The status, error type and code of a failed request (500 server_error unless said otherwise).
  int error_status() const { return error_status_; }
  const std::string& error_type() const { return error_type_; }
  const std::string& error_code() const { return error_code_; }

  const std::string& id() const { return id_; }
  // "prompt_tokens=.. completion_tokens=.. canvases=.. steps=.." for the access log.
  std::string access_note() const;

 private:
  struct Choice;
  struct Event;
  Status pump(std::chrono::milliseconds timeout, std::vector<Event>& events);
  void handle(Choice& c, RequestEvent&& ev, std::vector<Event>& events);
  void finish_choice(Choice& c, const std::string& reason, std::vector<Event>& events, const RequestEvent* engine_ev);
  void fail_request(Choice& c, std::vector<Event>& events);
  std::unique_ptr<ChoiceOutput> make_output(size_t prompt_index) const;
  void submit(Choice& c);
  void emit(Choice& c, OutputDelta&& d, std::vector<Event>& events);
  int64_t prompt_tokens(size_t prompt_index) const;
  UsageCounts usage_counts() const;
  // A chunk as SSE, with the usage so far when the client asked for continuous usage.
  std::string sse_chunk(Json chunk) const;
  bool all_done() const;

  GenerationContext ctx_;
  ParsedRequest req_;
  std::vector<PreparedPrompt> prompts_;
  std::string id_;
  double arrival_s_;
  CompletionJson json_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::shared_ptr<StreamWaker> waker_;
  std::string error_;
  bool error_sent_ = false;
  bool cut_ = false;
  int error_status_ = 500;
  std::string error_type_ = "server_error";
  std::string error_code_;  // empty: the status is the code
  ChoiceOutputOptions base_options_;
  int64_t canvases_ = 0, steps_ = 0;
  bool epilogue_sent_ = false;
  std::atomic<bool> cancelled_{false};
};

// A fresh id with the given prefix ("chatcmpl-", "cmpl-"): prefix + 32 hex digits.
std::string make_request_id(const std::string& prefix);

}  // namespace dgemma
