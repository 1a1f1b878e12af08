#pragma once
// Builds a Responses API Response object from what a chat completion produced: reasoning becomes a
// `reasoning` item, content a `message` item with one `output_text` part, each tool call a
// `function_call` item. Fed a whole chat.completion (non-streamed), or the chunks of a chat stream one
// by one, when it also writes the Responses stream events (response.created, output_item.added,
// output_text.delta, ..., response.completed) with consecutive sequence numbers.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace dgemma {

class ResponseBuilder {
 public:
  // `shell`: the Response object with its echoed request fields (parse_responses_request). `count_tokens`
  // counts the tokens of a text (usage.output_tokens_details.reasoning_tokens); may be empty.
  ResponseBuilder(Json shell, std::function<int64_t(std::string_view)> count_tokens);

  // Streaming. Appends SSE events to `out`.
  void start(std::string& out);                        // response.created, response.in_progress
  void on_chunk(const Json& chunk, std::string& out);  // one chat.completion.chunk
  void on_done(std::string& out);                      // the chat stream's [DONE]: response.completed
  void on_error(const Json& error, std::string& out);  // the chat stream's error event: response.failed

  // Non-streamed: the whole chat.completion (one choice).
  void from_completion(const Json& completion);

  // The Response object (final once on_done / on_error / from_completion ran).
  const Json& response() const { return response_; }
  bool finished() const { return finished_; }
  // The assistant chat message the output amounts to (for the conversation a later request continues).
  Json assistant_message() const;

 private:
  enum class Kind { kReasoning, kMessage, kCall };
  struct Item {
    Kind kind;
    int call_index = -1;
    std::string id;
    std::string text;  // reasoning or message text, or a call's arguments
    std::string call_id, name;
    Json logprobs = Json::array();
    bool done = false;
  };
  void add(Kind kind, int call_index, std::string_view text, const Json& logprobs, std::string* out,
           const std::string& call_id = {}, const std::string& name = {});
  void close_current(std::string* out);
  Json item_json(const Item& it, bool final) const;
  void event(std::string_view type, Json payload, std::string* out);
  void apply_delta(const Json& delta, const Json& logprobs, std::string* out);
  void finish(std::string* out);
  Json usage_json() const;

  Json response_;
  std::function<int64_t(std::string_view)> count_tokens_;
  std::vector<Item> items_;
  int current_ = -1;
  int64_t seq_ = 0;
  std::string finish_reason_;
  Json usage_ = nullptr;
  Json pending_logprobs_ = Json::array();  // logprobs of tokens that brought no text yet
  bool finished_ = false;
};

}  // namespace dgemma
