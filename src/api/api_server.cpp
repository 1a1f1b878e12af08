#include "api/api_server.h"

#include <ctime>

#include "api/api_error.h"
#include "api/generation.h"
#include "api/http/sse.h"
#include "api/http/webui.h"
#include "api/openai/structured_output.h"
#include "api/openapi.h"
#include "text/parsers/reasoning_parser.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timing.h"

namespace dgemma {
namespace {

constexpr size_t kMaxLoggedUnknownKeys = 256;
// How often a waiting stream looks at its connection for a client that left.
constexpr std::chrono::milliseconds kClientCheckInterval{250};

HttpResponse json_response(const Json& j, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = json_text(j);
  return r;
}

}  // namespace

ApiServer::ApiServer(ApiServerOptions options)
    : opt_(std::move(options)),
      auth_(opt_.api_keys),
      metrics_(std::make_unique<ServerMetrics>(opt_.served_names.empty() ? std::string("dgemma") : opt_.served_names[0],
                                               opt_.max_model_len_hint > 0 ? opt_.max_model_len_hint : 8192)) {
  if (opt_.served_names.empty()) opt_.served_names.push_back("dgemma");
}

ApiServer::~ApiServer() = default;

std::shared_ptr<const LoadedModel> ApiServer::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

void ApiServer::set_ready(LoadedModel model) {
  DG_CHECK(model.engine && model.tokenizer && model.prompts);
  if (!model.guided) model.guided = std::make_shared<GuidedCompiler>(model.tokenizer);
  auto m = std::make_shared<const LoadedModel>(std::move(model));
  std::lock_guard<std::mutex> lock(mu_);
  model_ = std::move(m);
}

void ApiServer::begin_shutdown(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_reason_ = reason;
  }
  shutting_down_ = true;
}
void ApiServer::cut_running() {
  shutting_down_ = true;
  cut_ = true;
}

HttpResponse ApiServer::not_ready() const {
  ApiError e;
  e.status = 503;
  e.type = "unavailable_error";
  e.message = shutting_down_ ? "The server is shutting down" : "Loading model";
  if (shutting_down_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!shutdown_reason_.empty()) e.message = "The server is shutting down: " + shutdown_reason_;
  }
  e.retry_after_s = 1;
  return error_response(e);
}

RequestPolicy ApiServer::policy(const LoadedModel& m) const {
  RequestPolicy p;
  p.served_names = opt_.served_names;
  p.enable_auto_tool_choice = opt_.enable_auto_tool_choice;
  p.tool_parser = opt_.tool_parser;
  p.vocab_size = m.engine->vocab_size();
  p.strict_params = opt_.strict_params;
  p.is_allowed_template_kwarg = [prompts = m.prompts](std::string_view k) {
    return prompts && prompts->chat_template().accepts_kwarg(k);
  };
  p.default_template_kwargs = opt_.default_template_kwargs;
  p.content_as_string = opt_.content_as_string;
  p.force_include_usage = opt_.force_include_usage;
  return p;
}

void ApiServer::log_unknown_keys(const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  std::lock_guard<std::mutex> lock(unknown_mu_);
  for (const auto& k : keys) {
    if (unknown_logged_.size() >= kMaxLoggedUnknownKeys || unknown_logged_.count(k)) continue;
    unknown_logged_.insert(k);
    std::string shown = k.size() > 80 ? k.substr(0, 80) + "..." : k;
    for (char& ch : shown)
      if (static_cast<unsigned char>(ch) < 0x20) ch = '?';  // no log-line injection
    DG_LOG_INFO("api", "ignoring unknown request field '{}' (logged once; --strict-params rejects such requests)", shown);
  }
}

void ApiServer::access_log(const HttpRequest& req, int status, double started, const std::string& note) const {
  if (!opt_.access_log) return;
  std::string path = req.path.size() > 200 ? req.path.substr(0, 200) + "..." : req.path;
  for (char& ch : path)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == ' ') ch = '?';  // no log-line injection
  DG_LOG_INFO("access", "{} {} {} {} {:.2f}ms{}{}", req.remote_addr.empty() ? "-" : req.remote_addr, req.method, path,
              status, (now_seconds() - started) * 1e3, note.empty() ? "" : " ", note);
}

HttpResponse ApiServer::guarded(const HttpRequest& req, HttpResponse (ApiServer::*handler)(const HttpRequest&)) {
  const double started = now_seconds();
  HttpResponse out;
  if (ApiKeyAuth::is_protected_path(req.path) && !auth_.check(req)) {
    ApiError e;
    e.status = 401;
    e.type = "authentication_error";
    e.message = presented_api_key(req).empty() ? "Missing API key: send 'Authorization: Bearer <key>'"
                                               : "Invalid API key";
    out = error_response(e);
    out.headers.emplace_back("WWW-Authenticate", "Bearer");
  } else {
    try {
      out = (this->*handler)(req);
    } catch (...) {
      out = error_response(api_error_from_exception(std::current_exception()));
    }
  }
  if (out.status >= 400 && (req.path == "/v1/chat/completions" || req.path == "/v1/completions" ||
                            req.path == "/v1/responses" || req.path == "/invocations"))
    metrics_->on_http_error();
  if (out.status >= 400 && out.status < 500)
    DG_LOG_DEBUG("api", "{} {} -> {}: {}", req.method, req.path.substr(0, 200), out.status, out.body.substr(0, 500));
  if (out.stream) {
    // A stream's line is written when it ends (its status is 200 by then; the note says how it went).
    auto close = std::move(out.on_close);
    auto note = out.access_note;
    HttpRequest head;
    head.method = req.method;
    head.path = req.path;
    head.remote_addr = req.remote_addr;
    out.on_close = [this, close = std::move(close), note = std::move(note), head = std::move(head), started,
                    status = out.status](bool completed) {
      if (close) close(completed);
      access_log(head, status, started, (note ? note() + " " : std::string()) + (completed ? "stream=done" : "stream=cut"));
    };
  } else {
    access_log(req, out.status, started, out.access_note ? out.access_note() : std::string());
  }
  return out;
}

void ApiServer::attach(HttpServer& http) {
  http.set_error_body([](int status, const std::string& message) {
    ApiError e;
    e.status = status;
    e.type = error_type_for_status(status);
    e.message = message;
    return json_text(error_json(e));
  });
  http.set_exception_mapper(
      [](std::exception_ptr ep) { return error_response(api_error_from_exception(std::move(ep))); });
  auto bind = [this](HttpResponse (ApiServer::*h)(const HttpRequest&)) {
    return [this, h](const HttpRequest& req) { return guarded(req, h); };
  };
  http.route("GET", "/health", bind(&ApiServer::health));
  http.route("HEAD", "/health", bind(&ApiServer::health));
  http.route("GET", "/ping", bind(&ApiServer::health));
  http.route("POST", "/ping", bind(&ApiServer::health));
  http.route("GET", "/openapi.json", bind(&ApiServer::openapi));
  add_webui_routes(http);
  http.route("GET", "/version", bind(&ApiServer::version));
  http.route("GET", "/metrics", bind(&ApiServer::metrics));
  http.route("GET", "/v1/models", bind(&ApiServer::models));
  http.route("GET", "/v1/models/*", bind(&ApiServer::model_by_id));
  http.route("POST", "/v1/chat/completions", bind(&ApiServer::chat_completions));
  http.route("POST", "/v1/completions", bind(&ApiServer::completions));
  http.route("POST", "/tokenize", bind(&ApiServer::tokenize));
  http.route("POST", "/detokenize", bind(&ApiServer::detokenize));
  http.route("POST", "/v1/responses", bind(&ApiServer::responses));
  http.route("GET", "/v1/responses/*", bind(&ApiServer::response_by_id));
  http.route("DELETE", "/v1/responses/*", bind(&ApiServer::response_by_id));
  http.route("POST", "/invocations", bind(&ApiServer::invocations));
  for (const char* path : {"/v1/embeddings", "/v1/audio/transcriptions", "/v1/rerank", "/v1/messages",
                           "/v1/score", "/v1/audio/translations", "/pooling", "/classify"}) {
    http.route("POST", path, bind(&ApiServer::not_supported));
  }
  routes_ = http.routes();
}

HttpResponse ApiServer::openapi(const HttpRequest&) {
  return json_response(openapi_document(routes_, opt_.version));
}

HttpResponse ApiServer::responses(const HttpRequest& req) {
  auto m = model();
  if (!m || shutting_down_) return not_ready();
  ResponsesContext ctx;
  ctx.run_chat = [this](const HttpRequest& r) { return chat_completions(r); };
  ctx.log_unknown_keys = [this](const std::vector<std::string>& keys) { log_unknown_keys(keys); };
  ctx.strict_params = opt_.strict_params;
  ctx.count_tokens = [tok = m->tokenizer](std::string_view text) {
    return static_cast<int64_t>(tok->encode(text, true).size());
  };
  return responses_.create(req, ctx);
}

HttpResponse ApiServer::response_by_id(const HttpRequest& req) {
  if (!model()) return not_ready();
  return req.method == "DELETE" ? responses_.remove(req) : responses_.retrieve(req);
}

// SageMaker's one inference route: a body with `messages` is a chat completion, one with `prompt` a
// completion (vLLM's rule); anything else is a 400.
HttpResponse ApiServer::invocations(const HttpRequest& req) {
  if (!model() || shutting_down_) return not_ready();
  const Json body = parse_request_body(req.body);
  if (body.contains("messages")) return chat_completions(req);
  if (body.contains("prompt")) return completions(req);
  fail_param(
      "messages",
      "/invocations takes a chat completions body (with 'messages') or a completions body (with 'prompt')");
}

HttpResponse ApiServer::not_supported(const HttpRequest& req) {
  return error_response(501, "not_supported_error", fmt::format("{} is not supported by this server", req.path));
}

HttpResponse ApiServer::health(const HttpRequest&) {
  auto m = model();
  if (!m || shutting_down_) return not_ready();
  if (std::string why = m->engine->failure(); !why.empty())
    return error_response(503, "unavailable_error", "The engine has stopped: " + why);
  HttpResponse r;
  r.content_type = "text/plain";
  return r;
}

HttpResponse ApiServer::version(const HttpRequest&) { return json_response(Json{{"version", opt_.version}}); }

HttpResponse ApiServer::metrics(const HttpRequest&) {
  auto m = model();
  EngineStats stats;
  if (m) stats = m->engine->stats();
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_->render(stats);
  return r;
}

HttpResponse ApiServer::models(const HttpRequest&) {
  auto m = model();
  if (!m) return not_ready();
  Json data = Json::array();
  for (const auto& name : opt_.served_names) data.push_back(model_card(name, *m));
  return json_response(Json{{"object", "list"}, {"data", std::move(data)}});
}

Json ApiServer::model_card(const std::string& name, const LoadedModel& m) const {
  static const int64_t created = static_cast<int64_t>(std::time(nullptr));
  return Json{{"id", name},
              {"object", "model"},
              {"created", created},
              {"owned_by", "dgemma"},
              {"root", opt_.model_path},
              {"parent", nullptr},
              {"max_model_len", m.engine->max_model_len()},
              {"permission", Json::array()}};
}

// GET /v1/models/{id} (the official client's models.retrieve); ids may contain '/' (org/name).
HttpResponse ApiServer::model_by_id(const HttpRequest& req) {
  auto m = model();
  if (!m) return not_ready();
  const std::string id = req.path.substr(std::string_view("/v1/models/").size());
  for (const auto& name : opt_.served_names)
    if (name == id) return json_response(model_card(name, *m));
  std::string shown = id.substr(0, 200);
  return error_response(404, "not_found_error", fmt::format("The model `{}` does not exist.", shown), "model");
}

HttpResponse ApiServer::chat_completions(const HttpRequest& req) { return generate(req, Endpoint::kChat); }
HttpResponse ApiServer::completions(const HttpRequest& req) { return generate(req, Endpoint::kCompletion); }

HttpResponse ApiServer::generate(const HttpRequest& req, Endpoint endpoint) {
  const double arrival = now_seconds();
  auto m = model();
  if (!m || shutting_down_) return not_ready();
  Json body = parse_request_body(req.body);
  ParsedRequest pr = endpoint == Endpoint::kChat ? parse_chat_request(body, policy(*m))
                                                 : parse_completion_request(body, policy(*m));
  Json().swap(body);  // the parsed request holds what is needed (a large prompt is not kept twice)
  log_unknown_keys(pr.unknown_keys);
  for (const auto& k : pr.ignored_sampling) {
    std::lock_guard<std::mutex> lock(unknown_mu_);
    if (unknown_logged_.insert("sampling:" + k).second)
      DG_LOG_INFO("api", "'{}' accepted but has no effect: the entropy-bound diffusion sampler has no such setting "
                  "(logged once)", k);
  }

  const int64_t max_len = m->engine->max_model_len();
  const std::string prompt_param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  // Tokenising stops once a prompt is certainly too long (unless it is to be truncated anyway).
  const int64_t limit = pr.truncate_prompt_tokens ? 0 : max_len - 1;
  std::vector<PreparedPrompt> prompts;
  // Guided decoding (docs/API.md "Guided decoding on the canvas"): the answer's constraint, compiled
  // (or found in the cache) before anything is generated; a bad one is a 400 here.
  std::shared_ptr<const guided::TokenConstraint> constraint;
  std::string guided_param = pr.guided ? pr.guided->param : std::string("tools");
  if (auto spec = answer_constraint(pr, req.body)) constraint = m->guided->compile(*spec, guided_param);
  AnswerPlan plan;
  int64_t min_answer = 0;  // answer positions the guided layout needs at least
  try {
    if (endpoint == Endpoint::kChat) {
      ChatTemplateOptions o;
      o.add_generation_prompt = pr.add_generation_prompt;
      o.extra_kwargs = pr.template_kwargs;
      PreparedPrompt p;
      const Json& last = pr.messages.back();
      if (pr.continue_final_message) {
        auto cont = m->prompts->chat_continue(pr.messages, pr.tools, o, message_text(last), limit);
        p.tokens = std::move(cont.prompt);
        p.prefill_tokens = static_cast<int64_t>(cont.prefill.size());
        p.pins.push_back(PinnedSpan{0, std::move(cont.prefill)});
      } else {
        p.tokens = m->prompts->chat(pr.messages, pr.tools, o, limit);
      }
      if (!pr.images.empty()) {
        const ImageSupport images = m->engine->image_support();
        p.images = load_prompt_images(pr.images, opt_.images, images, pr.max_soft_tokens);
        expand_image_placeholders(p.tokens, p.images, images);
      }
      const size_t tail = std::min<size_t>(p.tokens.size(), 8);
      p.starts_in_reasoning = prompt_opens_reasoning(
          m->tokenizer->decode(std::span<const int32_t>(p.tokens.data() + p.tokens.size() - tail, tail), false));
      if (pr.echo && last.value("role", "") == opt_.response_role) p.echo_text = message_text(last);
      plan = plan_answer(pr, *m->tokenizer, p.starts_in_reasoning, constraint);
      p.pins.insert(p.pins.end(), plan.pins.begin(), plan.pins.end());
      min_answer = plan.min_tokens;
      prompts.push_back(std::move(p));
    } else {
      for (auto& in : pr.prompts) {
        PreparedPrompt p;
        if (in.is_tokens) {
          p.tokens = std::move(in.tokens);
          if (pr.echo) p.echo_text = m->tokenizer->decode(p.tokens, false);
        } else {
          p.tokens = m->prompts->text(in.text, limit);
          p.echo_text = std::move(in.text);
        }
        plan = plan_answer(pr, *m->tokenizer, false, constraint);
        p.pins = plan.pins;
        min_answer = plan.min_tokens;
        prompts.push_back(std::move(p));
      }
    }
  } catch (const PromptTooLong& e) {
    return error_response(
        context_length_error(max_len, e.at_least, std::nullopt, prompt_param, /*at_least=*/true));
  }
  for (auto& p : prompts) {
    if (pr.truncate_prompt_tokens && static_cast<int64_t>(p.tokens.size()) > *pr.truncate_prompt_tokens) {
      if (!p.images.empty())
        fail_param("truncate_prompt_tokens",
                   "a prompt with images cannot be truncated (an image would be cut)");
    }
    if (pr.truncate_prompt_tokens && static_cast<int64_t>(p.tokens.size()) > *pr.truncate_prompt_tokens)
      p.tokens.erase(p.tokens.begin(), p.tokens.end() - *pr.truncate_prompt_tokens);
    if (p.tokens.empty()) fail_param(prompt_param, "the prompt is empty");
    const int64_t plen = static_cast<int64_t>(p.tokens.size()) + p.prefill_tokens;  // a prefill is prompt
    if (plen >= max_len)
      return error_response(context_length_error(max_len, plen, std::nullopt, prompt_param));
    if (pr.max_tokens) {
      if (*pr.max_tokens > max_len - plen)
        return error_response(context_length_error(max_len, plen, *pr.max_tokens, prompt_param));
      p.max_tokens = *pr.max_tokens;
    } else {
      p.max_tokens = max_len - plen;
      if (opt_.default_max_tokens) p.max_tokens = std::min(p.max_tokens, *opt_.default_max_tokens);
    }
    if (min_answer > p.max_tokens)
      fail_param(
          pr.max_tokens ? "max_tokens" : prompt_param,
          "the shortest reply that '{}' allows takes up to {} answer tokens (one per byte), but at most {} "
          "may be generated",
          guided_param, min_answer, p.max_tokens);
    p.guided = guided_answer_for(plan, p.max_tokens);
    if (pr.infill.active()) {
      p.infill = layout_infill(pr.infill, [&](std::string_view text) { return m->prompts->text(text); },
                               m->engine->stats().canvas_length, p.max_tokens, max_len - plen, pr.max_tokens.has_value());
      p.max_tokens = p.infill.max_tokens;
    }
  }

  GenerationContext ctx;
  ctx.engine = m->engine.get();
  ctx.tokenizer = m->tokenizer.get();
  ctx.metrics = metrics_.get();
  ctx.shutting_down = &cut_;
  ctx.reasoning_parser = opt_.reasoning_parser;
  ctx.response_role = opt_.response_role;
  ctx.tokens_as_ids = opt_.return_tokens_as_token_ids;
  const bool stream = pr.stream;
  const std::string id = make_request_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  // The generation keeps the engine and tokenizer alive through `m` for as long as it runs.
  struct Holder {
    std::shared_ptr<const LoadedModel> model;
    std::unique_ptr<Generation> gen;
    std::atomic<int>* active;
    explicit Holder(std::atomic<int>* a) : active(a) { ++*active; }
    ~Holder() { --*active; }
  };
  auto holder = std::make_shared<Holder>(&active_);
  holder->model = m;
  holder->gen = std::make_unique<Generation>(ctx, std::move(pr), std::move(prompts), id, arrival);
  holder->gen->start();
  DG_LOG_DEBUG("api", "{} accepted ({} choice(s), stream={})", id, holder->gen->id(), stream);

  const auto ping = opt_.ping_interval;
  HttpResponse r;
  r.access_note = [holder] { return holder->gen->id() + " " + holder->gen->access_note(); };
  if (stream) {
    r.content_type = "text/event-stream";
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.headers.emplace_back("X-Accel-Buffering", "no");
    auto started = std::make_shared<bool>(false);
    auto last_write = std::make_shared<double>(now_seconds());
    r.stream = [holder, started, last_write, ping](BodyWriter& w) {
      Generation& g = *holder->gen;
      if (!*started) {
        *started = true;
        const std::string prologue = g.stream_prologue();
        if (!prologue.empty() && !w.write(prologue)) {
          g.abandon();
          return false;
        }
      }
      std::string out;
      // Short waits: a client that closed its connection (say, while its request is queued) is noticed
      // within a second rather than at the next ping. Its FIN is seen without writing; the ping written
      // then fails on a closed connection and is harmless to one that only half-closed.
      const auto st = g.stream_step(std::min(ping, kClientCheckInterval), out);
      const double now = now_seconds();
      if (st == Generation::Status::kIdle && (now - *last_write >= ping.count() / 1e3 || w.peer_closed()))
        out = sse_comment("ping");  // keeps proxies open, reveals gone clients
      if (!out.empty()) *last_write = now;
      if (!out.empty() && !w.write(out)) {
        g.abandon();
        return false;
      }
      return st != Generation::Status::kDone;
    };
    r.on_close = [holder](bool completed) {
      if (!completed) holder->gen->abandon();
    };
    return r;
  }

  // Non-streaming: wait for the whole answer without writing anything, so the status stays the real
  // one (a failure after minutes is still a 500, not a 200 with an error body). A client that hangs
  // up is noticed on its socket meanwhile, and its request is cancelled.
  Generation& g = *holder->gen;
  const auto check = std::min<std::chrono::milliseconds>(ping, std::chrono::milliseconds(200));
  while (!g.wait_done(check)) {
    if (req.client_gone && req.client_gone()) {
      DG_LOG_DEBUG("api", "{}: client went away; cancelled", id);
      g.abandon();
      HttpResponse gone = error_response(499, "client_closed_request", "The client closed the connection");
      gone.access_note = r.access_note;
      return gone;
    }
  }
  HttpResponse done;
  if (g.failed()) {
    ApiError e;
    e.status = g.cut_by_shutdown() ? 503 : g.error_status();
    e.type = g.cut_by_shutdown() ? "unavailable_error" : g.error_type();
    if (!g.cut_by_shutdown() && !g.error_code().empty()) e.code = g.error_code();
    e.message = g.error_message();
    if (e.status == 503) e.retry_after_s = 1;
    done = error_response(e);
  } else {
    done = json_response(g.response_json());
  }
  done.access_note = r.access_note;
  return done;
}

HttpResponse ApiServer::tokenize(const HttpRequest& req) {
  auto m = model();
  if (!m) return not_ready();
  Json body = parse_request_body(req.body);
  bool want_strs = false;
  if (auto it = body.find("return_token_strs"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) fail_param("return_token_strs", "'return_token_strs' must be a boolean");
    want_strs = it->get<bool>();
  }
  std::vector<int32_t> tokens;
  if (body.contains("messages")) {
    body.erase("return_token_strs");
    if (auto it = body.find("add_special_tokens"); it != body.end() && !it->is_boolean())
      fail_param("add_special_tokens", "'add_special_tokens' must be a boolean");
    body.erase("add_special_tokens");
    ParsedRequest pr = parse_chat_request(body, policy(*m));
    ChatTemplateOptions o;
    o.add_generation_prompt = pr.add_generation_prompt;
    o.extra_kwargs = pr.template_kwargs;
    try {
      if (pr.continue_final_message) {
        // The prompt and its prefill: what the request would send through the model.
        auto cont = m->prompts->chat_continue(pr.messages, pr.tools, o, message_text(pr.messages.back()),
                                              m->engine->max_model_len());
        tokens = std::move(cont.prompt);
        tokens.insert(tokens.end(), cont.prefill.begin(), cont.prefill.end());
      } else {
        tokens = m->prompts->chat(pr.messages, pr.tools, o, m->engine->max_model_len());
      }
    } catch (const PromptTooLong& e) {
      return error_response(
          context_length_error(m->engine->max_model_len(), e.at_least, std::nullopt, "messages", true));
    }
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string()) fail_param("prompt", "'prompt' (a string) or 'messages' is required");
    if (auto a = body.find("add_special_tokens"); a != body.end() && !a->is_null() && !a->is_boolean())
      fail_param("add_special_tokens", "'add_special_tokens' must be a boolean");
    if (auto mo = body.find("model"); mo != body.end() && !mo->is_null()) {
      if (!mo->is_string() ||
          std::find(opt_.served_names.begin(), opt_.served_names.end(), mo->get<std::string>()) == opt_.served_names.end())
        throw Error(ErrorKind::kNotFound, fmt::format("The model `{}` does not exist.", mo->dump()), "model");
    }
    try {
      tokens = m->prompts->text(it->get<std::string>(), m->engine->max_model_len());
    } catch (const PromptTooLong& e) {
      return error_response(
          context_length_error(m->engine->max_model_len(), e.at_least, std::nullopt, "prompt", true));
    }
  }
  Json out{{"count", tokens.size()}, {"max_model_len", m->engine->max_model_len()}, {"tokens", tokens}};
  if (want_strs) {
    Json strs = Json::array();
    for (int32_t id : tokens) strs.push_back(m->tokenizer->id_to_token(id));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return json_response(out);
}

HttpResponse ApiServer::detokenize(const HttpRequest& req) {
  auto m = model();
  if (!m) return not_ready();
  const Json body = parse_request_body(req.body);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) fail_param("tokens", "'tokens' must be an array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(it->size());
  const int vocab = m->tokenizer->vocab_size();
  for (const auto& t : *it) {
    if (!t.is_number_integer()) fail_param("tokens", "'tokens' must contain integers only");
    const int64_t v = t.is_number_unsigned() && t.get<uint64_t>() > INT64_MAX ? INT64_MAX : t.get<int64_t>();
    if (v < 0 || v >= vocab) fail_param("tokens", "invalid token id {} (vocabulary size {})", v, vocab);
    ids.push_back(static_cast<int32_t>(v));
  }
  return json_response(Json{{"prompt", m->tokenizer->decode(ids, false)}});
}

}  // namespace dgemma
