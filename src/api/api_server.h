#pragma once
// The OpenAI-compatible API: routes, readiness (503 while the model loads), API-key checks, request
// parsing, prompt building, generation and metrics. HTTP-library-agnostic: it registers plain
// handlers on an HttpServer; handlers can also be called directly in tests.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/http/auth.h"
#include "api/http/http_server.h"
#include "api/metrics.h"
#include "api/openai/image_input.h"
#include "api/openai/openai_request.h"
#include "api/responses/responses_api.h"
#include "engine/request.h"
#include "text/chat/prompt_builder.h"
#include "text/tokenizer/tokenizer.h"

namespace dgemma {

struct ApiServerOptions {
  std::vector<std::string> served_names{"dgemma"};
  std::string model_path;  // shown as "root" in /v1/models
  std::string version = "0.0.0";
  std::vector<std::string> api_keys;
  bool enable_auto_tool_choice = false;
  bool tool_parser = false;       // --tool-call-parser gemma4
  bool reasoning_parser = false;  // --reasoning-parser gemma4
  bool strict_params = false;
  Json default_template_kwargs = Json::object();
  std::optional<int64_t> default_max_tokens;  // --override-generation-config max_new_tokens
  int64_t max_model_len_hint = 0;             // for metric buckets before the engine is up
  std::chrono::milliseconds ping_interval{10000};
  bool access_log = true;                 // one info line per request
  std::string response_role = "assistant";
  bool content_as_string = false;           // --chat-template-content-format string
  bool force_include_usage = false;         // --enable-force-include-usage
  bool return_tokens_as_token_ids = false;  // --return-tokens-as-token-ids
  ImageInputPolicy images;                  // image_url parts: sources and limits
};

// What becomes available once the model has loaded.
class GuidedCompiler;
struct LoadedModel {
  std::shared_ptr<EngineInterface> engine;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const PromptBuilder> prompts;
  std::shared_ptr<GuidedCompiler> guided;  // set by set_ready: the tokenizer's compiled constraints
};

class ApiServer {
 public:
  explicit ApiServer(ApiServerOptions options);
  ~ApiServer();

  // Registers every route, the error body format and the exception mapper on `http`.
  void attach(HttpServer& http);
  // Until this is called every endpoint but /health, /version and /metrics answers 503.
  void set_ready(LoadedModel model);
  // Refuses new work (503, /health too); requests already running go on (graceful drain). `reason`,
  // when given, is the 503's message (else "The server is shutting down").
  void begin_shutdown(const std::string& reason = {});
  // Ends every running request: streams get an error event, waiting ones a 503 (drain time is up).
  void cut_running();
  // Generation requests not yet answered in full.
  int active_requests() const { return active_.load(); }

  // The handlers (public for tests).
  HttpResponse health(const HttpRequest& req);  // also HEAD /health and SageMaker's /ping
  HttpResponse version(const HttpRequest& req);
  HttpResponse metrics(const HttpRequest& req);
  HttpResponse models(const HttpRequest& req);
  HttpResponse chat_completions(const HttpRequest& req);
  HttpResponse completions(const HttpRequest& req);
  HttpResponse tokenize(const HttpRequest& req);
  HttpResponse detokenize(const HttpRequest& req);
  HttpResponse not_supported(const HttpRequest& req);
  HttpResponse model_by_id(const HttpRequest& req);
  HttpResponse responses(const HttpRequest& req);       // POST /v1/responses
  HttpResponse response_by_id(const HttpRequest& req);  // GET / DELETE /v1/responses/{id}
  HttpResponse invocations(const HttpRequest& req);     // SageMaker: chat or completions by the body
  HttpResponse openapi(const HttpRequest& req);         // GET /openapi.json

  const ServerMetrics& server_metrics() const { return *metrics_; }

 private:
  std::shared_ptr<const LoadedModel> model() const;
  HttpResponse generate(const HttpRequest& req, Endpoint endpoint);
  HttpResponse not_ready() const;
  void log_unknown_keys(const std::vector<std::string>& keys);
  RequestPolicy policy(const LoadedModel& m) const;
  Json model_card(const std::string& name, const LoadedModel& m) const;
  void access_log(const HttpRequest& req, int status, double started, const std::string& note) const;
  HttpResponse guarded(const HttpRequest& req, HttpResponse (ApiServer::*handler)(const HttpRequest&));

  ApiServerOptions opt_;
  ApiKeyAuth auth_;
  std::unique_ptr<ServerMetrics> metrics_;
  mutable std::mutex mu_;
  std::shared_ptr<const LoadedModel> model_;
  std::atomic<bool> shutting_down_{false};
  std::string shutdown_reason_;  // under mu_
  std::atomic<bool> cut_{false};
  std::atomic<int> active_{0};
  std::mutex unknown_mu_;
  std::set<std::string> unknown_logged_;
  ResponsesApi responses_{std::make_shared<ResponsesStore>()};
  std::vector<std::pair<std::string, std::string>> routes_;  // what attach() registered (/openapi.json)
};

}  // namespace dgemma
