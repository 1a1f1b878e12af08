#include "api/openai/completion_json.h"

#include <fmt/format.h>

#include <cmath>

namespace dgemma {

Json tool_call_json(const std::string& id, const std::string& name, Json arguments) {
  return Json{{"id", id},
              {"type", "function"},
              {"function", Json{{"name", name}, {"arguments", std::move(arguments)}}}};
}

Json rejected_tool_calls_json(const std::vector<RejectedToolCall>& rejected) {
  Json out = Json::array();
  for (const auto& r : rejected) out.push_back(Json{{"name", r.name}, {"reason", r.reason}});
  return out;
}

Json usage_json(const UsageCounts& u) {
  // dgemma extension (docs/API.md): the diffusion cost that token counts hide.
  Json ext{
      {"canvases", u.canvases}, {"denoising_steps", u.denoising_steps}, {"canvas_length", u.canvas_length}};
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", Json{{"cached_tokens", u.cached_tokens}}},
              {"dgemma", std::move(ext)}};
}

Json preview_json(const PreviewJson& e) {
  Json p{{"index", e.index}, {"canvas", e.canvas}, {"step", e.step}, {"text", e.text}, {"tokens", e.pieces}};
  if (!e.entropy.empty()) {
    Json h = Json::array();
    for (float v : e.entropy) h.push_back(std::round(static_cast<double>(v) * 1e4) / 1e4);
    p["entropy"] = std::move(h);
  }
  if (!e.accepted.empty()) {
    Json a = Json::array();
    for (uint8_t v : e.accepted) a.push_back(v ? 1 : 0);
    p["accepted"] = std::move(a);
  }
  return p;
}

Json CompletionJson::base() const {
  return Json{{"id", opt_.id},
              {"object", opt_.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", opt_.created},
              {"model", opt_.model}};
}

Json CompletionJson::chunk(Json choice) const {
  Json c = base();
  c["choices"] = Json::array({std::move(choice)});
  return c;
}

Json CompletionJson::usage_chunk(Json usage) const {
  Json c = base();
  c["choices"] = Json::array();
  c["usage"] = std::move(usage);
  return c;
}

Json CompletionJson::role_choice(int index) const {
  return Json{{"index", index},
              {"delta", Json{{"role", opt_.response_role}, {"content", ""}}},
              {"logprobs", nullptr},
              {"finish_reason", nullptr}};
}

Json CompletionJson::echo_choice(int index, const std::string& echo) const {
  Json choice{{"index", index}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (opt_.chat)
    choice["delta"] = Json{{"content", echo}};
  else
    choice["text"] = echo;
  return choice;
}

Json CompletionJson::delta_json(const OutputDelta& d) {
  Json delta = Json::object();
  if (!d.reasoning.empty()) {
    delta["reasoning_content"] = d.reasoning;
    delta["reasoning"] = d.reasoning;
  }
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& tc : d.tool_calls) {
      Json call{{"index", tc.index}};
      Json fn = Json::object();
      if (!tc.id.empty()) {
        call["id"] = tc.id;
        call["type"] = "function";
        fn["name"] = tc.name;
      }
      fn["arguments"] = tc.arguments_delta;
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    delta["tool_calls"] = std::move(calls);
  }
  if (!d.rejected_tool_calls.empty())
    delta["dgemma"] = Json{{"rejected_tool_calls", rejected_tool_calls_json(d.rejected_tool_calls)}};
  return delta;
}

Json CompletionJson::delta_choice(int index, const OutputDelta& d, size_t text_offset) const {
  Json choice{{"index", index}};
  if (opt_.chat) {
    Json delta = delta_json(d);
    if (delta.empty() && d.logprobs.empty()) return nullptr;
    if (delta.empty()) delta["content"] = "";
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = d.content;
  }
  choice["logprobs"] = d.logprobs.empty() ? Json(nullptr) : logprobs_json(d.logprobs, text_offset);
  choice["finish_reason"] = nullptr;
  return choice;
}

Json CompletionJson::finish_choice(int index, const std::string& finish_reason,
                                   const Json& stop_reason) const {
  Json choice{{"index", index}};
  if (opt_.chat)
    choice["delta"] = Json::object();
  else
    choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  choice["stop_reason"] = stop_reason;
  return choice;
}

Json CompletionJson::finished_choice(const FinishedChoice& c, const OutputDelta& t) const {
  Json choice{{"index", c.index}};
  if (opt_.chat) {
    Json msg{{"role", opt_.response_role}};
    Json calls = Json::array();
    for (const auto& tc : t.tool_calls) calls.push_back(tool_call_json(tc.id, tc.name, tc.arguments_delta));
    // No answer text beside tool calls or a thought (e.g. one cut by max_tokens): null, as in vLLM.
    const bool no_text = t.content.empty() && c.echo.empty();
    msg["content"] =
        no_text && (!calls.empty() || !t.reasoning.empty()) ? Json(nullptr) : Json(c.echo + t.content);
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    if (!t.rejected_tool_calls.empty())
      msg["dgemma"] = Json{{"rejected_tool_calls", rejected_tool_calls_json(t.rejected_tool_calls)}};
    if (opt_.reasoning_parser) {
      msg["reasoning_content"] = t.reasoning.empty() ? Json(nullptr) : Json(t.reasoning);
      msg["reasoning"] = msg["reasoning_content"];
    }
    choice["message"] = std::move(msg);
  } else {
    choice["text"] = c.echo + t.content;
    // infill_template: each hole's text (the text above is the whole filled template).
    if (c.holes) choice["holes"] = *c.holes;
  }
  choice["logprobs"] = c.logprobs ? logprobs_json(t.logprobs, 0) : Json(nullptr);
  choice["finish_reason"] = c.finish_reason;
  choice["stop_reason"] = c.stop_reason;
  return choice;
}

Json CompletionJson::response(Json choices, Json usage) const {
  Json resp = base();
  resp["object"] = opt_.chat ? "chat.completion" : "text_completion";
  resp["choices"] = std::move(choices);
  resp["usage"] = std::move(usage);
  return resp;
}

Json CompletionJson::logprobs_json(const std::vector<TokenLogprob>& lps, size_t text_offset) const {
  // --return-tokens-as-token-ids: "token_id:N" instead of the token's text.
  const auto name = [&](int32_t id, const std::string& text) {
    return opt_.tokens_as_ids ? fmt::format("token_id:{}", id) : text;
  };
  if (opt_.chat) {
    Json content = Json::array();
    for (const auto& lp : lps) {
      Json top = Json::array();
      for (const auto& a : lp.top)
        top.push_back(Json{{"token", name(a.id, a.token)}, {"logprob", a.logprob}, {"bytes", a.bytes}});
      content.push_back(Json{{"token", name(lp.id, lp.token)},
                             {"logprob", lp.logprob},
                             {"bytes", lp.bytes},
                             {"top_logprobs", std::move(top)}});
    }
    return Json{{"content", std::move(content)}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  size_t off = text_offset;
  for (const auto& lp : lps) {
    tokens.push_back(name(lp.id, lp.token));
    token_logprobs.push_back(lp.logprob);
    // The returned token and its alternatives (vLLM's dict: the first of equal strings stays).
    Json t = Json::object();
    t[name(lp.id, lp.token)] = lp.logprob;
    for (const auto& a : lp.top)
      if (!t.contains(name(a.id, a.token))) t[name(a.id, a.token)] = a.logprob;
    top.push_back(std::move(t));
    offsets.push_back(off);
    off += lp.token.size();
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", token_logprobs},
              {"top_logprobs", top},
              {"text_offset", offsets}};
}

}  // namespace dgemma
