#pragma once
// POST /v1/responses, GET and DELETE /v1/responses/{id}: the OpenAI Responses API over the chat
// completions path. A request is translated (responses_request.h), run as a chat completion (streamed
// or not), and its result turned into a Response object or the Responses stream events
// (responses_output.h). Finished responses with `store` (the default) are kept in a ResponsesStore for
// `previous_response_id` and retrieval.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/http/http_server.h"
#include "api/responses/responses_store.h"

namespace dgemma {

struct ResponsesContext {
  // Runs a chat completions request (the body, headers and connection of the original request).
  std::function<HttpResponse(const HttpRequest&)> run_chat;
  // Unknown request fields: reported (logged once) unless strict_params makes them a 400.
  std::function<void(const std::vector<std::string>&)> log_unknown_keys;
  bool strict_params = false;
  // Tokens of a text (usage.output_tokens_details.reasoning_tokens); may be empty.
  std::function<int64_t(std::string_view)> count_tokens;
};

class ResponsesApi {
 public:
  explicit ResponsesApi(std::shared_ptr<ResponsesStore> store);

  HttpResponse create(const HttpRequest& req, const ResponsesContext& ctx);
  HttpResponse retrieve(const HttpRequest& req);  // GET /v1/responses/{id}
  HttpResponse remove(const HttpRequest& req);    // DELETE /v1/responses/{id}

 private:
  std::shared_ptr<ResponsesStore> store_;
};

}  // namespace dgemma
