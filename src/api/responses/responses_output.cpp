#include "api/responses/responses_output.h"

#include "api/http/sse.h"
#include "api/openai/completion_json.h"
#include "api/responses/responses_request.h"

namespace dgemma {
namespace {

std::string string_field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

ResponseBuilder::ResponseBuilder(Json shell, std::function<int64_t(std::string_view)> count_tokens)
    : response_(std::move(shell)), count_tokens_(std::move(count_tokens)) {}

void ResponseBuilder::event(std::string_view type, Json payload, std::string* out) {
  if (!out) return;
  payload["type"] = type;
  payload["sequence_number"] = seq_++;
  *out += sse_event(type, payload);
}

Json ResponseBuilder::item_json(const Item& it, bool final) const {
  const char* status = final ? "completed" : "in_progress";
  if (final && it.kind != Kind::kReasoning && finish_reason_ == "length" && &it == &items_.back())
    status = "incomplete";
  switch (it.kind) {
    case Kind::kReasoning: {
      Json content = Json::array();
      if (final) content.push_back(Json{{"type", "reasoning_text"}, {"text", it.text}});
      return Json{{"id", it.id},
                  {"type", "reasoning"},
                  {"summary", Json::array()},
                  {"content", std::move(content)},
                  {"status", status}};
    }
    case Kind::kMessage: {
      Json content = Json::array();
      if (final)
        content.push_back(Json{{"type", "output_text"},
                               {"text", it.text},
                               {"annotations", Json::array()},
                               {"logprobs", it.logprobs}});
      return Json{{"id", it.id},
                  {"type", "message"},
                  {"status", status},
                  {"role", "assistant"},
                  {"content", std::move(content)}};
    }
    case Kind::kCall:
      return Json{{"id", it.id},      {"type", "function_call"},
                  {"status", status}, {"call_id", it.call_id},
                  {"name", it.name},  {"arguments", final ? it.text : std::string()}};
  }
  return nullptr;
}

void ResponseBuilder::close_current(std::string* out) {
  if (current_ < 0) return;
  Item& it = items_[static_cast<size_t>(current_)];
  const int index = current_;
  current_ = -1;
  it.done = true;
  if (!out) return;
  const Json final = item_json(it, true);
  // The item's one content part, finished (reasoning and message items).
  auto part_done = [&] {
    event("response.content_part.done",
          Json{{"item_id", it.id}, {"output_index", index}, {"content_index", 0}, {"part", final["content"][0]}},
          out);
  };
  switch (it.kind) {
    case Kind::kReasoning:
      event("response.reasoning_text.done",
            Json{{"item_id", it.id}, {"output_index", index}, {"content_index", 0}, {"text", it.text}}, out);
      part_done();
      break;
    case Kind::kMessage:
      event("response.output_text.done",
            Json{{"item_id", it.id},
                 {"output_index", index},
                 {"content_index", 0},
                 {"text", it.text},
                 {"logprobs", it.logprobs}},
            out);
      part_done();
      break;
    case Kind::kCall:
      event("response.function_call_arguments.done",
            Json{{"item_id", it.id}, {"output_index", index}, {"arguments", it.text}, {"name", it.name}},
            out);
      break;
  }
  event("response.output_item.done", Json{{"output_index", index}, {"item", final}}, out);
}

// Adds output text to the item it belongs to: the current one when it is of the same kind (and call),
// else the current item closes and a new one opens.
void ResponseBuilder::add(Kind kind, int call_index, std::string_view text, const Json& logprobs,
                          std::string* out, const std::string& call_id, const std::string& name) {
  if (kind == Kind::kCall) {
    // A call's later argument pieces go to that call, wherever it is (the chat stream sends each call's
    // pieces before the next call starts, so this is the current item in practice).
    for (size_t k = 0; k < items_.size(); ++k) {
      Item& it = items_[k];
      if (it.kind != Kind::kCall || it.call_index != call_index) continue;
      it.text += text;
      if (!it.done && !text.empty())
        event("response.function_call_arguments.delta",
              Json{{"item_id", it.id}, {"output_index", k}, {"delta", std::string(text)}}, out);
      return;
    }
  }
  if (current_ < 0 || items_[static_cast<size_t>(current_)].kind != kind || kind == Kind::kCall) {
    close_current(out);
    Item it;
    it.kind = kind;
    it.call_index = call_index;
    it.id = make_item_id(kind == Kind::kReasoning ? "rs_" : kind == Kind::kMessage ? "msg_" : "fc_");
    it.call_id = call_id;
    it.name = name;
    items_.push_back(std::move(it));
    current_ = static_cast<int>(items_.size()) - 1;
    const Item& added = items_.back();
    event("response.output_item.added", Json{{"output_index", current_}, {"item", item_json(added, false)}},
          out);
    if (kind == Kind::kReasoning)
      event("response.content_part.added",
            Json{{"item_id", added.id},
                 {"output_index", current_},
                 {"content_index", 0},
                 {"part", Json{{"type", "reasoning_text"}, {"text", ""}}}},
            out);
    if (kind == Kind::kMessage)
      event("response.content_part.added",
            Json{{"item_id", added.id},
                 {"output_index", current_},
                 {"content_index", 0},
                 {"part", Json{{"type", "output_text"},
                               {"text", ""},
                               {"annotations", Json::array()},
                               {"logprobs", Json::array()}}}},
            out);
  }
  Item& it = items_[static_cast<size_t>(current_)];
  it.text += text;
  for (const auto& lp : logprobs) it.logprobs.push_back(lp);
  if (text.empty() && logprobs.empty()) return;
  const Json common{{"item_id", it.id}, {"output_index", current_}};
  switch (kind) {
    case Kind::kReasoning: {
      Json e = common;
      e["content_index"] = 0;
      e["delta"] = std::string(text);
      event("response.reasoning_text.delta", std::move(e), out);
      break;
    }
    case Kind::kMessage: {
      Json e = common;
      e["content_index"] = 0;
      e["delta"] = std::string(text);
      e["logprobs"] = logprobs;
      event("response.output_text.delta", std::move(e), out);
      break;
    }
    case Kind::kCall: {
      if (text.empty()) break;
      Json e = common;
      e["delta"] = std::string(text);
      event("response.function_call_arguments.delta", std::move(e), out);
      break;
    }
  }
}

void ResponseBuilder::apply_delta(const Json& delta, const Json& logprobs, std::string* out) {
  const std::string reasoning = string_field(delta, "reasoning_content");
  if (!reasoning.empty()) add(Kind::kReasoning, -1, reasoning, Json::array(), out);
  for (const auto& lp : logprobs) pending_logprobs_.push_back(lp);
  if (auto c = delta.find("content");
      c != delta.end() && c->is_string() && !c->get_ref<const std::string&>().empty()) {
    add(Kind::kMessage, -1, c->get_ref<const std::string&>(), pending_logprobs_, out);
    pending_logprobs_ = Json::array();
  }
  for (const auto& tc : delta.value("tool_calls", Json::array())) {
    const Json fn = tc.value("function", Json::object());
    add(Kind::kCall, tc.value("index", 0), string_field(fn, "arguments"), Json::array(), out,
        string_field(tc, "id"), string_field(fn, "name"));
  }
}

void ResponseBuilder::start(std::string& out) {
  event("response.created", Json{{"response", response_}}, &out);
  event("response.in_progress", Json{{"response", response_}}, &out);
}

void ResponseBuilder::on_chunk(const Json& chunk, std::string& out) {
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) usage_ = *u;
  if (response_["model"].is_null() && chunk.contains("model")) response_["model"] = chunk["model"];
  for (const auto& choice : chunk.value("choices", Json::array())) {
    Json logprobs = Json::array();
    if (auto lp = choice.find("logprobs"); lp != choice.end() && lp->is_object())
      logprobs = lp->value("content", Json::array());
    if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) apply_delta(*d, logprobs, &out);
    if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string())
      finish_reason_ = f->get<std::string>();
  }
}

Json ResponseBuilder::usage_json() const {
  if (!usage_.is_object()) return nullptr;
  int64_t reasoning_tokens = 0;
  if (count_tokens_)
    for (const auto& it : items_)
      if (it.kind == Kind::kReasoning) reasoning_tokens += count_tokens_(it.text);
  const int64_t cached =
      usage_.value("prompt_tokens_details", Json::object()).value("cached_tokens", int64_t{0});
  Json u{{"input_tokens", usage_.value("prompt_tokens", int64_t{0})},
         {"input_tokens_details", Json{{"cached_tokens", cached}}},
         {"output_tokens", usage_.value("completion_tokens", int64_t{0})},
         {"output_tokens_details", Json{{"reasoning_tokens", reasoning_tokens}}},
         {"total_tokens", usage_.value("total_tokens", int64_t{0})}};
  if (usage_.contains("dgemma")) u["dgemma"] = usage_["dgemma"];
  return u;
}

void ResponseBuilder::finish(std::string* out) {
  close_current(out);
  Json output = Json::array();
  for (const auto& it : items_) output.push_back(item_json(it, true));
  response_["output"] = std::move(output);
  response_["usage"] = usage_json();
  if (finish_reason_ == "length") {
    response_["status"] = "incomplete";
    response_["incomplete_details"] = Json{{"reason", "max_output_tokens"}};
  } else {
    response_["status"] = "completed";
  }
  finished_ = true;
}

void ResponseBuilder::on_done(std::string& out) {
  if (finished_) return;
  finish(&out);
  event(response_["status"] == "incomplete" ? "response.incomplete" : "response.completed",
        Json{{"response", response_}}, &out);
}

void ResponseBuilder::on_error(const Json& error, std::string& out) {
  if (finished_) return;
  close_current(&out);
  Json output = Json::array();
  for (const auto& it : items_) output.push_back(item_json(it, true));
  response_["output"] = std::move(output);
  response_["status"] = "failed";
  const Json e = error.value("error", Json::object());
  const int status = e.value("code", Json(500)).is_number_integer() ? e.value("code", 500) : 500;
  response_["error"] = Json{{"code", status == 503 ? "server_is_overloaded" : "server_error"},
                            {"message", e.value("message", std::string("the request failed"))}};
  finished_ = true;
  event("response.failed", Json{{"response", response_}}, &out);
}

void ResponseBuilder::from_completion(const Json& completion) {
  if (response_["model"].is_null() && completion.contains("model")) response_["model"] = completion["model"];
  if (auto u = completion.find("usage"); u != completion.end()) usage_ = *u;
  const Json choices = completion.value("choices", Json::array());
  if (!choices.empty()) {
    const Json& choice = choices[0];
    const Json message = choice.value("message", Json::object());
    Json delta = Json::object();
    for (const char* key : {"reasoning_content", "content"})
      if (auto v = message.find(key); v != message.end() && v->is_string()) delta[key] = *v;
    Json calls = Json::array();
    int index = 0;
    for (const auto& tc : message.value("tool_calls", Json::array())) {
      Json c = tc;
      c["index"] = index++;
      calls.push_back(std::move(c));
    }
    delta["tool_calls"] = std::move(calls);
    Json logprobs = Json::array();
    if (auto lp = choice.find("logprobs"); lp != choice.end() && lp->is_object())
      logprobs = lp->value("content", Json::array());
    apply_delta(delta, logprobs, nullptr);
    if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string())
      finish_reason_ = f->get<std::string>();
  }
  finish(nullptr);
}

Json ResponseBuilder::assistant_message() const {
  Json msg{{"role", "assistant"}, {"content", nullptr}};
  std::string text, reasoning;
  Json calls = Json::array();
  for (const auto& it : items_) {
    if (it.kind == Kind::kReasoning) reasoning += it.text;
    if (it.kind == Kind::kMessage) text += it.text;
    if (it.kind == Kind::kCall)
      calls.push_back(tool_call_json(it.call_id, it.name, it.text));
  }
  if (!text.empty() || calls.empty()) msg["content"] = text;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  return msg;
}

}  // namespace dgemma
