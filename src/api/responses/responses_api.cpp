#include "api/responses/responses_api.h"

#include "api/api_error.h"
#include "api/http/sse.h"
#include "api/openai/openai_request.h"
#include "api/responses/responses_output.h"
#include "api/responses/responses_request.h"
#include "util/log.h"

namespace dgemma {
namespace {

// The chat stream's SSE text in, the Responses events out. Pings pass through (they keep proxies open
// and reveal a client that left); the other comment lines (previews) are dropped.
class ChatStreamTranslator {
 public:
  ChatStreamTranslator(std::shared_ptr<ResponseBuilder> builder, std::function<void()> on_finished)
      : builder_(std::move(builder)), on_finished_(std::move(on_finished)) {}

  std::string feed(std::string_view sse) {
    std::string out;
    if (!started_) {
      started_ = true;
      builder_->start(out);
    }
    buf_.append(sse);
    size_t end;
    while ((end = buf_.find("\n\n")) != std::string::npos) {
      const std::string block = buf_.substr(0, end);
      buf_.erase(0, end + 2);
      if (block.rfind(":", 0) == 0) {
        if (block == ": ping") out += sse_comment("ping");
        continue;
      }
      if (block.rfind("data: ", 0) != 0) continue;
      const std::string_view payload = std::string_view(block).substr(6);
      if (payload == "[DONE]") {
        builder_->on_done(out);
        if (on_finished_) on_finished_();
        continue;
      }
      const Json j = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) continue;
      if (j.contains("error"))
        builder_->on_error(j, out);
      else
        builder_->on_chunk(j, out);
    }
    return out;
  }

 private:
  std::shared_ptr<ResponseBuilder> builder_;
  std::function<void()> on_finished_;
  std::string buf_;
  bool started_ = false;
};

class TranslatingWriter : public BodyWriter {
 public:
  TranslatingWriter(BodyWriter& inner, ChatStreamTranslator& t) : inner_(inner), t_(t) {}
  bool write(std::string_view data) override {
    const std::string out = t_.feed(data);
    return out.empty() || inner_.write(out);
  }
  bool peer_closed() override { return inner_.peer_closed(); }

 private:
  BodyWriter& inner_;
  ChatStreamTranslator& t_;
};

HttpResponse json_response(const Json& j) {
  HttpResponse r;
  r.body = json_text(j);
  return r;
}

// An error answered by the chat path, with its parameter named as this API names it.
void rename_error_param(HttpResponse& r) {
  Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"].is_object()) return;
  Json& e = j["error"];
  auto p = e.find("param");
  if (p == e.end() || !p->is_string()) return;
  const std::string chat = p->get<std::string>(), ours = rename_chat_param(chat);
  if (chat == ours) return;
  *p = ours;
  if (auto m = e.find("message"); m != e.end() && m->is_string() && ours != "input") {
    std::string text = m->get<std::string>();
    const std::string from = "'" + chat + "'", to = "'" + ours + "'";
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
    *m = std::move(text);
  }
  r.body = json_text(j);
}

std::string id_from_path(const HttpRequest& req) {
  return req.path.substr(std::string_view("/v1/responses/").size());
}

HttpResponse not_found(const std::string& id) {
  return error_response(404, "not_found_error",
                        fmt::format("Response with id '{}' not found.", id.substr(0, 200)), "response_id");
}

}  // namespace

ResponsesApi::ResponsesApi(std::shared_ptr<ResponsesStore> store) : store_(std::move(store)) {}

HttpResponse ResponsesApi::create(const HttpRequest& req, const ResponsesContext& ctx) {
  Json body = parse_request_body(req.body);
  std::optional<Json> previous;
  if (auto p = body.find("previous_response_id"); p != body.end() && p->is_string()) {
    previous = store_->conversation(p->get<std::string>());
    if (!previous) {
      ApiError e;
      e.status = 400;
      e.type = "invalid_request_error";
      e.message =
          fmt::format("Previous response with id '{}' not found.", p->get<std::string>().substr(0, 200));
      e.param = "previous_response_id";
      e.code = "previous_response_not_found";
      return error_response(e);
    }
  }
  ResponsesRequest rr = parse_responses_request(body, previous ? &*previous : nullptr);
  Json().swap(body);
  if (!rr.unknown_keys.empty()) {
    std::string keys;
    for (const auto& k : rr.unknown_keys) keys += (keys.empty() ? "" : ", ") + k;
    if (ctx.strict_params) fail_param(rr.unknown_keys.front(), "unknown request parameter(s): {}", keys);
    if (ctx.log_unknown_keys) ctx.log_unknown_keys(rr.unknown_keys);
  }

  HttpRequest chat;
  chat.method = "POST";
  chat.path = "/v1/chat/completions";
  chat.body = json_text(rr.chat_body);
  chat.http_version = req.http_version;
  chat.remote_addr = req.remote_addr;
  chat.headers = req.headers;
  chat.client_gone = req.client_gone;
  HttpResponse r;
  try {
    r = ctx.run_chat(chat);
  } catch (...) {
    r = error_response(api_error_from_exception(std::current_exception()));  // renamed below
  }
  if (r.status != 200) {
    rename_error_param(r);
    return r;
  }

  auto builder = std::make_shared<ResponseBuilder>(std::move(rr.shell), ctx.count_tokens);
  auto conversation = std::make_shared<Json>(std::move(rr.conversation));
  auto keep = [store = store_, builder, conversation, store_it = rr.store] {
    if (!store_it || builder->response()["status"] == "failed") return;
    Json conv = *conversation;
    conv.push_back(builder->assistant_message());
    const std::string id = builder->response()["id"];
    if (!store->put(id, builder->response(), std::move(conv)))
      DG_LOG_INFO("api", "response {} is larger than the responses store; not kept", id);
  };
  if (!r.stream) {
    const Json completion = Json::parse(r.body, nullptr, false);
    if (completion.is_discarded())
      return error_response(500, "server_error", "the chat completion was not JSON");
    builder->from_completion(completion);
    keep();
    HttpResponse out = json_response(builder->response());
    out.access_note = std::move(r.access_note);
    return out;
  }
  auto translator = std::make_shared<ChatStreamTranslator>(builder, keep);
  r.stream = [inner = std::move(r.stream), translator](BodyWriter& w) {
    TranslatingWriter tw(w, *translator);
    return inner(tw);
  };
  return r;
}

HttpResponse ResponsesApi::retrieve(const HttpRequest& req) {
  const std::string id = id_from_path(req);
  auto r = store_->response(id);
  if (!r) return not_found(id);
  return json_response(*r);
}

HttpResponse ResponsesApi::remove(const HttpRequest& req) {
  const std::string id = id_from_path(req);
  if (!store_->erase(id)) return not_found(id);
  return json_response(Json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
}

}  // namespace dgemma
