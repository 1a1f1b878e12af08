#include "api/responses/responses_request.h"

#include <ctime>
#include <mutex>
#include <random>
#include <set>

#include "api/api_error.h"
#include "api/openai/completion_json.h"

namespace dgemma {
namespace {

// Fields passed to the chat request unchanged: same name, same meaning (docs/API.md).
const std::set<std::string, std::less<>> kChatFields = {"model",
                                                        "temperature",
                                                        "top_p",
                                                        "top_k",
                                                        "min_p",
                                                        "seed",
                                                        "presence_penalty",
                                                        "frequency_penalty",
                                                        "repetition_penalty",
                                                        "max_denoising_steps",
                                                        "entropy_bound",
                                                        "t_min",
                                                        "t_max",
                                                        "stability_threshold",
                                                        "confidence_threshold",
                                                        "vllm_xargs",
                                                        "chat_template_kwargs",
                                                        "parallel_tool_calls",
                                                        "user",
                                                        "service_tier",
                                                        "top_logprobs"};
// Accepted as metadata (echoed where the Response object has them).
const std::set<std::string, std::less<>> kMetadataFields = {"metadata", "safety_identifier",
                                                            "prompt_cache_key", "prompt_cache_retention"};
// `include` values: logprobs are honoured; the others name outputs this server never produces.
const std::set<std::string, std::less<>> kIncludeValues = {"message.output_text.logprobs",
                                                           "reasoning.encrypted_content",
                                                           "file_search_call.results",
                                                           "web_search_call.results",
                                                           "web_search_call.action.sources",
                                                           "message.input_image.image_url",
                                                           "computer_call_output.output.image_url",
                                                           "code_interpreter_call.outputs"};

std::string kind_of(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

const std::string& need_string(const Json& obj, const char* key, const std::string& param,
                               bool non_empty = true) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string())
    fail_param(param, "'{}' must be a string, not {}", param, it == obj.end() ? "missing" : kind_of(*it));
  if (non_empty && it->get_ref<const std::string&>().empty())
    fail_param(param, "'{}' must not be empty", param);
  return it->get_ref<const std::string&>();
}

// An `input_image` part as the chat `image_url` part it stands for: `image_url` a string (a data: URL, or
// whatever chat's image rules then accept or refuse), or an object with `url`; `detail` is ignored.
Json image_part(const Json& part, const std::string& param) {
  if (part.contains("file_id"))
    fail_unsupported(param + ".file_id", "'{}' is not supported: give the image as image_url",
                     param + ".file_id");
  auto it = part.find("image_url");
  if (it != part.end() && it->is_object()) return Json{{"type", "image_url"}, {"image_url", *it}};
  return Json{{"type", "image_url"},
              {"image_url", {{"url", need_string(part, "image_url", param + ".image_url")}}}};
}

// One text part's text ('pp' its parameter path). Media parts other than images are refused; an
// input_image here (a tool output, an assistant turn) is refused too.
std::string part_text(const Json& part, const std::string& pp) {
  if (!part.is_object()) fail_param(pp, "'{}' must be an object, not {}", pp, kind_of(part));
  const std::string& type = need_string(part, "type", pp + ".type");
  if (type == "input_text" || type == "output_text" || type == "text" || type == "summary_text" ||
      type == "reasoning_text")
    return need_string(part, "text", pp + ".text", false);
  if (type == "refusal") return need_string(part, "refusal", pp + ".refusal", false);
  if (type == "input_image")
    fail_unsupported(pp + ".type", "'input_image' is only supported in the content of user messages");
  if (type == "input_file" || type == "input_audio")
    fail_unsupported(pp + ".type", "'{}' is not supported: this server takes text and images", type);
  fail_param(pp + ".type", "unknown content part type '{}'", type.substr(0, 64));
}

// A content: a string or a list of text parts, as one string.
std::string content_text(const Json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    fail_param(param, "'{}' must be a string or an array of parts, not {}", param, kind_of(content));
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) text += part_text(content[k], fmt::format("{}[{}]", param, k));
  return text;
}

// A user message's content for chat: as content_text, except that `input_image` parts make it a list of
// chat parts (text and image_url, in order).
Json message_content(const Json& content, const std::string& param) {
  if (!content.is_array()) return content_text(content, param);
  Json parts = Json::array();
  std::string text;  // the text since the last image
  bool images = false;
  for (size_t k = 0; k < content.size(); ++k) {
    const Json& part = content[k];
    const std::string pp = fmt::format("{}[{}]", param, k);
    if (part.is_object() && part.value("type", Json()) == "input_image") {
      if (!text.empty()) parts.push_back(Json{{"type", "text"}, {"text", std::move(text)}});
      text.clear();
      parts.push_back(image_part(part, pp));
      images = true;
    } else {
      text += part_text(part, pp);
    }
  }
  if (!images) return text;
  if (!text.empty()) parts.push_back(Json{{"type", "text"}, {"text", std::move(text)}});
  return parts;
}

// Turns `input` into chat messages appended to `messages`.
void convert_input(const Json& input, Json& messages) {
  if (input.is_string()) {
    messages.push_back(Json{{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array())
    fail_param("input", "'input' must be a string or an array of items, not {}", kind_of(input));
  if (input.empty()) fail_param("input", "'input' must not be empty");
  std::string reasoning;               // a reasoning item's text, given to the next assistant message
  std::ptrdiff_t open_assistant = -1;  // the assistant message function_call items join
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string p = fmt::format("input[{}]", i);
    if (!item.is_object()) fail_param(p, "'{}' must be an object, not {}", p, kind_of(item));
    std::string type = "message";
    if (auto t = item.find("type"); t != item.end() && !t->is_null())
      type = need_string(item, "type", p + ".type");
    auto assistant = [&](Json msg) {
      if (!reasoning.empty()) msg["reasoning_content"] = std::move(reasoning);
      reasoning.clear();
      messages.push_back(std::move(msg));
      open_assistant = static_cast<std::ptrdiff_t>(messages.size()) - 1;
    };
    if (type == "message") {
      const std::string& role = need_string(item, "role", p + ".role");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        fail_param(p + ".role", "'{}' must be user, assistant, system or developer (got '{}')", p + ".role",
                   role.substr(0, 64));
      auto c = item.find("content");
      if (c == item.end()) fail_param(p + ".content", "'{}' is required", p + ".content");
      Json msg{{"role", role},
               {"content", role == "user" ? message_content(*c, p + ".content")
                                          : Json(content_text(*c, p + ".content"))}};
      if (role == "assistant") {
        assistant(std::move(msg));
      } else {
        messages.push_back(std::move(msg));
        open_assistant = -1;
      }
    } else if (type == "function_call") {
      const std::string& call_id = need_string(item, "call_id", p + ".call_id");
      const std::string& name = need_string(item, "name", p + ".name");
      const std::string& args = need_string(item, "arguments", p + ".arguments", false);
      Json parsed;
      try {
        parsed = parse_json(args.empty() ? std::string_view("{}") : std::string_view(args), p + ".arguments",
                            false);
      } catch (const Error&) {
        fail_param(p + ".arguments", "'{}' must be a JSON object", p + ".arguments");
      }
      if (!parsed.is_object()) fail_param(p + ".arguments", "'{}' must be a JSON object", p + ".arguments");
      Json call = tool_call_json(call_id, name, std::move(parsed));
      if (open_assistant < 0 || !reasoning.empty())
        assistant(Json{{"role", "assistant"}, {"content", nullptr}});
      Json& msg = messages[static_cast<size_t>(open_assistant)];
      if (!msg.contains("tool_calls")) msg["tool_calls"] = Json::array();
      msg["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const std::string& call_id = need_string(item, "call_id", p + ".call_id");
      auto o = item.find("output");
      if (o == item.end()) fail_param(p + ".output", "'{}' is required", p + ".output");
      Json msg{{"role", "tool"}, {"tool_call_id", call_id}, {"content", content_text(*o, p + ".output")}};
      // The templates name the function a result belongs to: the call with this id.
      for (auto m = messages.rbegin(); m != messages.rend() && !msg.contains("name"); ++m)
        for (const auto& tc : m->value("tool_calls", Json::array()))
          if (tc.value("id", "") == call_id) msg["name"] = tc["function"]["name"];
      messages.push_back(std::move(msg));
      open_assistant = -1;
    } else if (type == "reasoning") {
      for (const char* key : {"content", "summary"}) {
        auto c = item.find(key);
        if (c == item.end() || c->is_null()) continue;
        const std::string text = content_text(*c, p + "." + key);
        if (!text.empty() && reasoning.empty()) reasoning = text;
      }
    } else {
      fail_unsupported(p + ".type",
                       "input items of type '{}' are not supported: this server takes message, "
                       "function_call, function_call_output and reasoning items",
                       type.substr(0, 64));
    }
  }
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) fail_param("tools", "'tools' must be an array, not {}", kind_of(tools));
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string p = fmt::format("tools[{}]", i);
    if (!t.is_object()) fail_param(p, "'{}' must be an object, not {}", p, kind_of(t));
    const std::string& type = need_string(t, "type", p + ".type");
    if (type != "function")
      fail_unsupported(p + ".type",
                       "tools of type '{}' are not supported: this server runs function tools only",
                       type.substr(0, 64));
    Json fn{{"name", need_string(t, "name", p + ".name")}};
    for (const char* key : {"description", "parameters"})
      if (auto v = t.find(key); v != t.end() && !v->is_null()) fn[key] = *v;
    if (auto s = t.find("strict"); s != t.end() && !s->is_null() && !s->is_boolean())
      fail_param(p + ".strict", "'{}' must be a boolean", p + ".strict");
    out.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

Json convert_tool_choice(const Json& choice) {
  if (choice.is_string()) return choice;
  if (!choice.is_object())
    fail_param("tool_choice", "'tool_choice' must be a string or an object, not {}", kind_of(choice));
  const std::string& type = need_string(choice, "type", "tool_choice.type");
  if (type != "function")
    fail_unsupported("tool_choice.type", "'tool_choice' of type '{}' is not supported", type.substr(0, 64));
  return Json{{"type", "function"},
              {"function", Json{{"name", need_string(choice, "name", "tool_choice.name")}}}};
}

Json convert_format(const Json& format) {
  if (!format.is_object())
    fail_param("text.format", "'text.format' must be an object, not {}", kind_of(format));
  const std::string& type = need_string(format, "type", "text.format.type");
  if (type != "json_schema") return Json{{"type", type}};
  Json schema{{"name", "response"}};
  for (const char* key : {"name", "schema", "strict", "description"})
    if (auto v = format.find(key); v != format.end()) schema[key] = *v;
  return Json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

}  // namespace

std::string make_item_id(const std::string& prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t a, b, c;
  {
    std::lock_guard<std::mutex> lock(mu);
    a = rng();
    b = rng();
    c = rng();
  }
  return prefix + fmt::format("{:016x}{:016x}{:016x}", a, b, c);
}

ResponsesRequest parse_responses_request(const Json& body, const Json* previous) {
  ResponsesRequest r;
  Json& chat = r.chat_body;
  Json& shell = r.shell;
  std::set<std::string, std::less<>> seen;
  auto get = [&](const char* key) -> const Json* {
    seen.insert(key);
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  auto boolean = [&](const char* key, bool dflt) {
    const Json* v = get(key);
    if (!v) return dflt;
    if (!v->is_boolean()) fail_param(key, "'{}' must be a boolean, not {}", key, kind_of(*v));
    return v->get<bool>();
  };

  for (auto it = body.begin(); it != body.end(); ++it)
    if (kChatFields.count(it.key()) && !it->is_null()) chat[it.key()] = *it;
  for (const auto& k : kChatFields) seen.insert(k);
  for (const auto& k : kMetadataFields) seen.insert(k);

  r.stream = boolean("stream", false);
  r.store = boolean("store", true);
  if (r.stream) {
    chat["stream"] = true;
    chat["stream_options"] = Json{{"include_usage", true}};
  }
  if (const Json* so = get("stream_options")) {
    if (!r.stream) fail_param("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (!so->is_object()) fail_param("stream_options", "'stream_options' must be an object");
    for (auto it = so->begin(); it != so->end(); ++it)
      if (it.key() != "include_obfuscation")
        fail_param("stream_options." + it.key(), "unknown stream option '{}'", it.key().substr(0, 64));
  }

  // The conversation: the previous response's, then this input. Instructions are not carried over.
  if (const Json* prev = get("previous_response_id"); prev && !prev->is_string())
    fail_param("previous_response_id", "'previous_response_id' must be a string, not {}", kind_of(*prev));
  if (previous) r.conversation = *previous;
  const Json* input = get("input");
  if (!input) fail_param("input", "'input' is required");
  convert_input(*input, r.conversation);
  Json messages = Json::array();
  if (const Json* ins = get("instructions")) {
    if (!ins->is_string())
      fail_param("instructions", "'instructions' must be a string, not {}", kind_of(*ins));
    if (!ins->get_ref<const std::string&>().empty())
      messages.push_back(Json{{"role", "system"}, {"content", *ins}});
  }
  for (const auto& m : r.conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);

  if (const Json* m = get("max_output_tokens")) chat["max_tokens"] = *m;
  Json tools_echo = Json::array();
  if (const Json* t = get("tools")) {
    Json tools = convert_tools(*t);
    tools_echo = *t;
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  Json choice_echo = chat.contains("tools") ? Json("auto") : Json("none");
  if (const Json* c = get("tool_choice")) {
    Json choice = convert_tool_choice(*c);
    choice_echo = *c;
    // With no tools, "auto" and "none" mean the same as leaving it out.
    if (chat.contains("tools") || !(choice == "auto" || choice == "none"))
      chat["tool_choice"] = std::move(choice);
  }
  Json format_echo{{"type", "text"}};
  if (const Json* text = get("text")) {
    if (!text->is_object()) fail_param("text", "'text' must be an object, not {}", kind_of(*text));
    for (auto it = text->begin(); it != text->end(); ++it) {
      if (it.key() == "format") {
        if (it->is_null()) continue;
        chat["response_format"] = convert_format(*it);
        format_echo = *it;
      } else if (it.key() == "verbosity") {
        if (!it->is_null() && *it != "medium")
          fail_unsupported("text.verbosity", "'text.verbosity' other than 'medium' is not supported");
      } else {
        fail_param("text." + it.key(), "unknown field 'text.{}'", it.key().substr(0, 64));
      }
    }
  }
  Json reasoning_echo{{"effort", nullptr}, {"summary", nullptr}};
  if (const Json* rs = get("reasoning")) {
    if (!rs->is_object()) fail_param("reasoning", "'reasoning' must be an object, not {}", kind_of(*rs));
    for (auto it = rs->begin(); it != rs->end(); ++it) {
      if (it.key() == "effort") {
        if (!it->is_null()) chat["reasoning_effort"] = *it;
        reasoning_echo["effort"] = *it;
      } else if (it.key() == "summary" || it.key() == "generate_summary") {
        // Accepted: reasoning items carry the whole reasoning text; no summary is written.
        if (!it->is_null() && !it->is_string())
          fail_param("reasoning." + it.key(), "'reasoning.{}' must be a string", it.key());
        reasoning_echo["summary"] = *it;
      } else {
        fail_param("reasoning." + it.key(), "unknown field 'reasoning.{}'", it.key().substr(0, 64));
      }
    }
  }
  bool logprobs = false;
  if (const Json* inc = get("include")) {
    if (!inc->is_array()) fail_param("include", "'include' must be an array, not {}", kind_of(*inc));
    for (const auto& v : *inc) {
      if (!v.is_string() || !kIncludeValues.count(v.get_ref<const std::string&>()))
        fail_param("include", "unknown 'include' value {}", v.dump().substr(0, 80));
      if (v == "message.output_text.logprobs") logprobs = true;
    }
  }
  if (chat.contains("top_logprobs")) logprobs = true;
  if (logprobs) chat["logprobs"] = true;

  if (const Json* tr = get("truncation"); tr && *tr != "disabled")
    fail_unsupported("truncation",
                     "only 'truncation': 'disabled' is supported (a prompt longer than the context "
                     "is a 400)");
  if (boolean("background", false))
    fail_unsupported("background", "'background' responses are not supported");
  for (const char* key : {"prompt", "conversation", "max_tool_calls"})
    if (get(key)) fail_unsupported(key, "'{}' is not supported by this server", key);
  if (const Json* md = get("metadata"); md && !md->is_object())
    fail_param("metadata", "'metadata' must be an object, not {}", kind_of(*md));

  for (auto it = body.begin(); it != body.end(); ++it)
    if (!seen.count(it.key())) r.unknown_keys.push_back(it.key());

  auto echo = [&](const char* key) {
    auto it = body.find(key);
    return it == body.end() ? Json(nullptr) : *it;
  };
  shell = Json{
      {"id", make_item_id("resp_")},
      {"object", "response"},
      {"created_at", static_cast<int64_t>(std::time(nullptr))},
      {"status", "in_progress"},
      {"background", false},
      {"error", nullptr},
      {"incomplete_details", nullptr},
      {"instructions", echo("instructions")},
      {"max_output_tokens", echo("max_output_tokens")},
      {"max_tool_calls", nullptr},
      {"model", echo("model")},
      {"output", Json::array()},
      {"parallel_tool_calls", !chat.contains("parallel_tool_calls") || chat["parallel_tool_calls"] != false},
      {"previous_response_id", echo("previous_response_id")},
      {"reasoning", std::move(reasoning_echo)},
      {"service_tier", echo("service_tier").is_null() ? Json("auto") : echo("service_tier")},
      {"store", r.store},
      {"temperature", echo("temperature")},
      {"text", Json{{"format", std::move(format_echo)}}},
      {"tool_choice", std::move(choice_echo)},
      {"tools", std::move(tools_echo)},
      {"top_logprobs", echo("top_logprobs")},
      {"top_p", echo("top_p")},
      {"truncation", "disabled"},
      {"usage", nullptr},
      {"user", echo("user")},
      {"metadata", echo("metadata").is_null() ? Json::object() : echo("metadata")}};
  return r;
}

std::string rename_chat_param(const std::string& param) {
  auto starts = [&](std::string_view p) { return param.compare(0, p.size(), p) == 0; };
  if (starts("messages")) return "input";
  if (param == "max_tokens" || param == "max_completion_tokens") return "max_output_tokens";
  if (starts("response_format")) return "text.format";
  if (param == "reasoning_effort") return "reasoning.effort";
  if (param == "logprobs") return "include";
  if (param == "tool_choice.function.name") return "tool_choice.name";
  if (starts("tools[")) {
    const size_t f = param.find(".function");
    if (f != std::string::npos) return param.substr(0, f) + param.substr(f + 9);
  }
  return param;
}

}  // namespace dgemma
