#include "api/openai/openai_request.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "api/api_error.h"
#include "api/openai/guided_request.h"
#include "api/openai/request_fields.h"
#include "api/openai/structured_output.h"
#include "engine/limits.h"
#include "image/image_processor.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

void parse_model(RequestFields& f, const RequestPolicy& policy, ParsedRequest& out) {
  out.model = policy.served_names.empty() ? std::string("dgemma") : policy.served_names.front();
  if (auto m = f.string("model", 4096)) {
    if (!policy.served_names.empty() &&
        std::find(policy.served_names.begin(), policy.served_names.end(), *m) == policy.served_names.end())
      throw Error(ErrorKind::kNotFound, fmt::format("The model `{}` does not exist.", *m), "model");
    out.model = *m;
  }
}

void parse_stream(RequestFields& f, const RequestPolicy& policy, ParsedRequest& out) {
  out.stream = f.boolean("stream").value_or(false);
  out.include_usage = out.stream && policy.force_include_usage;
  if (const Json* so = f.get("stream_options")) {
    if (!so->is_object()) fail_param("stream_options", "'stream_options' must be an object, not {}", type_name(*so));
    if (!out.stream) fail_param("stream_options", "Stream options can only be defined when `stream=True`.");
    RequestFields s(*so, "stream_options.");
    out.include_usage = s.boolean("include_usage").value_or(false) || policy.force_include_usage;
    out.continuous_usage = s.boolean("continuous_usage_stats").value_or(false);
    out.include_previews = s.boolean("include_previews").value_or(false);
    for (const auto& k : s.unknown()) fail_param("stream_options." + k, "unknown stream option '{}'", k);
  }
}

void parse_max_tokens(RequestFields& f, ParsedRequest& out) {
  auto a = f.integer("max_tokens", 1, INT64_MAX);
  auto b = f.integer("max_completion_tokens", 1, INT64_MAX);
  if (a && b && *a != *b)
    fail_param("max_completion_tokens", "'max_tokens' ({}) and 'max_completion_tokens' ({}) disagree", *a, *b);
  out.max_tokens = b ? b : a;
}

void parse_stop(RequestFields& f, const RequestPolicy& policy, ParsedRequest& out) {
  if (const Json* s = f.get("stop")) {
    std::vector<std::string> stops;
    if (s->is_string()) {
      stops.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > RequestLimits::kMaxStop)
        fail_param("stop", "'stop' has {} entries; at most {} are allowed", s->size(), RequestLimits::kMaxStop);
      for (const auto& e : *s) {
        if (!e.is_string()) fail_param("stop", "'stop' entries must be strings, not {}", type_name(e));
        stops.push_back(e.get<std::string>());
      }
    } else {
      fail_param("stop", "'stop' must be a string or an array of strings, not {}", type_name(*s));
    }
    for (const auto& st : stops) {
      if (st.empty()) fail_param("stop", "'stop' strings must not be empty");
      if (st.size() > RequestLimits::kMaxStopBytes)
        fail_param("stop", "'stop' strings must be at most {} bytes", RequestLimits::kMaxStopBytes);
    }
    out.stop = std::move(stops);
  }
  if (const Json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array()) fail_param("stop_token_ids", "'stop_token_ids' must be an array of integers");
    if (ids->size() > RequestLimits::kMaxStopTokenIds)
      fail_param("stop_token_ids", "'stop_token_ids' has more than {} entries", RequestLimits::kMaxStopTokenIds);
    for (const auto& e : *ids)
      out.stop_token_ids.push_back(static_cast<int32_t>(as_int64(e, "stop_token_ids", 0, policy.vocab_size - 1)));
  }
  out.include_stop_str_in_output = f.boolean("include_stop_str_in_output").value_or(false);
}

// Diffusion sampler extensions, accepted at the top level and inside vllm_xargs.
void parse_diffusion_params(RequestFields& f, SamplingParams& sp) {
  if (auto v = f.integer("max_denoising_steps", 1, limits::kMaxDenoisingSteps)) sp.max_denoising_steps = static_cast<int>(*v);
  if (auto v = f.number("entropy_bound", 0, limits::kMaxEntropyBound)) {
    if (*v <= 0) fail_param(f.name("entropy_bound"), "'{}' must be greater than 0", f.name("entropy_bound"));
    sp.entropy_bound = *v;
  }
  if (auto v = f.number("t_min", 0, limits::kMaxScheduleTemperature)) sp.t_min = *v;
  if (auto v = f.number("t_max", 0, limits::kMaxScheduleTemperature)) sp.t_max = *v;
  if (sp.t_min && sp.t_max && !(*sp.t_max > *sp.t_min))
    fail_param(f.name("t_max"), "'t_max' ({}) must be greater than 't_min' ({})", *sp.t_max, *sp.t_min);
  if (auto v = f.integer("stability_threshold", 0, limits::kMaxStabilityThreshold)) sp.stability_threshold = static_cast<int>(*v);
  if (auto v = f.number("confidence_threshold", 0, limits::kMaxConfidenceThreshold)) {
    if (*v <= 0)
      fail_param(f.name("confidence_threshold"), "'{}' must be greater than 0", f.name("confidence_threshold"));
    sp.confidence_threshold = *v;
  }
}

void parse_sampling(RequestFields& f, ParsedRequest& out) {
  SamplingParams& sp = out.sampling;
  if (auto t = f.number("temperature", limits::kMinTemperature, limits::kMaxTemperature)) {
    if (*t != 1.0) sp.temperature = *t;
  }
  // vLLM's filters restrict the support of each position's sample (docs/API.md); the penalties are
  // accepted (common UI defaults) with no effect, their ranges still checked so a typo is not taken.
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v <= 0) fail_param("top_p", "'top_p' must be in (0, 1], got {}", *v);
    sp.top_p = *v;
  }
  if (auto v = f.integer("top_k", -1, INT32_MAX)) sp.top_k = static_cast<int>(*v);
  if (auto v = f.number("min_p", 0, 1)) sp.min_p = *v;
  if (f.number("presence_penalty", -2, 2)) out.ignored_sampling.push_back("presence_penalty");
  if (f.number("frequency_penalty", -2, 2)) out.ignored_sampling.push_back("frequency_penalty");
  if (auto v = f.number("repetition_penalty", 0, 1e6)) {
    if (*v <= 0) fail_param("repetition_penalty", "'repetition_penalty' must be greater than 0, got {}", *v);
    out.ignored_sampling.push_back("repetition_penalty");
  }
  if (const Json* lb = f.get("logit_bias")) {
    if (!lb->is_object()) fail_param("logit_bias", "'logit_bias' must be an object, not {}", type_name(*lb));
    if (!lb->empty()) fail_unsupported("logit_bias", "'logit_bias' is not supported by the diffusion sampler");
  }
  if (auto v = f.integer("min_tokens", 0, INT64_MAX)) {
    if (*v > 0) fail_unsupported("min_tokens", "'min_tokens' is not supported (only 0 is accepted)");
  }
  if (const Json* s = f.get("seed")) {
    if (s->is_number_unsigned() && s->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail_param("seed", "'seed' must be between -9223372036854775808 and 9223372036854775807");
    sp.seed = static_cast<uint64_t>(as_int64(*s, "seed", INT64_MIN, INT64_MAX));
  }
  // A greedy request is reproducible: without a seed of its own it gets seed 0 (docs/API.md).
  if (sp.temperature && *sp.temperature == 0 && !sp.seed) sp.seed = 0;
  sp.ignore_eos = f.boolean("ignore_eos").value_or(false);
  out.skip_special_tokens = f.boolean("skip_special_tokens").value_or(true);
  if (auto v = f.boolean("spaces_between_special_tokens")) {
    if (!*v)
      fail_unsupported("spaces_between_special_tokens",
                       "'spaces_between_special_tokens' = false is not supported (the Gemma decoder adds no spaces)");
  }
  if (auto v = f.integer("n", 1, RequestLimits::kMaxN)) out.n = static_cast<int>(*v);
  if (auto v = f.integer("best_of", 1, INT32_MAX)) {
    if (*v != out.n) fail_unsupported("best_of", "'best_of' is not supported (only best_of == n)");
  }
  if (auto v = f.integer("priority", INT32_MIN, INT32_MAX)) {
    if (*v != 0) fail_unsupported("priority", "'priority' is not supported (requests are served first come, first served)");
  }
  if (auto v = f.integer("truncate_prompt_tokens", 1, INT64_MAX)) out.truncate_prompt_tokens = *v;

  f.unsupported("prompt_logprobs", "prompt log-probabilities are not computed");
  f.unsupported("allowed_token_ids", "token restrictions are not implemented for the diffusion sampler");
  f.unsupported("bad_words", "token restrictions are not implemented for the diffusion sampler");
  f.unsupported("logits_processors", "custom logits processors are not supported");
  f.unsupported("kv_transfer_params", "KV transfer is not supported");
  if (auto v = f.string("user", 1u << 16)) (void)v;  // accepted: end-user id, metadata only
  if (auto v = f.string("request_id", 256)) (void)v;  // accepted: a client-side id (not echoed)

  parse_diffusion_params(f, sp);
  if (const Json* x = f.get("vllm_xargs")) {
    if (!x->is_object()) fail_param("vllm_xargs", "'vllm_xargs' must be an object, not {}", type_name(*x));
    RequestFields xf(*x, "vllm_xargs.");
    parse_diffusion_params(xf, sp);
    for (const auto& k : xf.unknown())
      fail_param("vllm_xargs." + k, "unknown key '{}' in vllm_xargs (accepted: max_denoising_steps, entropy_bound, "
                 "t_min, t_max, stability_threshold, confidence_threshold)", k);
  }
}

// Checks a message's content parts; image_url parts are collected into `images` (in order) and become
// {"type": "image"}, the part every chat template renders as the image placeholder.
Json normalize_parts(const Json& parts, const std::string& param, std::vector<ImageRef>& images) {
  if (parts.empty()) fail_param(param, "'{}' must not be an empty array", param);
  Json out = Json::array();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Json& p = parts[i];
    const std::string pp = fmt::format("{}[{}]", param, i);
    if (!p.is_object()) fail_param(pp, "'{}' must be an object, not {}", pp, type_name(p));
    auto t = p.find("type");
    if (t == p.end() || !t->is_string()) fail_param(pp + ".type", "'{}.type' must be a string", pp);
    const std::string type = t->get<std::string>();
    if (type == "text") {
      auto tx = p.find("text");
      if (tx == p.end() || !tx->is_string()) fail_param(pp + ".text", "'{}.text' must be a string", pp);
      out.push_back(p);
    } else if (type == "image_url") {
      auto iu = p.find("image_url");
      const Json* url = nullptr;
      if (iu != p.end() && iu->is_string()) url = &*iu;
      if (iu != p.end() && iu->is_object())
        if (auto u = iu->find("url"); u != iu->end() && u->is_string()) url = &*u;
      if (!url) fail_param(pp + ".image_url", "'{}.image_url' must be an object with a string 'url'", pp);
      if (images.size() >= RequestLimits::kMaxImages)
        fail_param(pp, "more than {} images in one request", RequestLimits::kMaxImages);
      images.push_back({url->get<std::string>(), pp + ".image_url.url"});
      out.push_back(Json{{"type", "image"}});
    } else if (type == "input_image" || type == "image" || type == "input_audio" || type == "audio_url" ||
               type == "video_url" || type == "file" || type == "image_embeds" || type == "image_pil") {
      fail_unsupported(pp, "content part type '{}' is not supported: images come as 'image_url' parts", type);
    } else {
      fail_param(pp + ".type", "unknown content part type '{}'", type);
    }
  }
  return out;
}

Json normalize_tool_calls(const Json& calls, const std::string& param) {
  if (!calls.is_array()) fail_param(param, "'{}' must be an array, not {}", param, type_name(calls));
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string pp = fmt::format("{}[{}]", param, i);
    const Json& c = calls[i];
    if (!c.is_object()) fail_param(pp, "'{}' must be an object", pp);
    Json copy = c;
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) fail_param(pp + ".function", "'{}.function' must be an object", pp);
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      fail_param(pp + ".function.name", "'{}.function.name' must be a non-empty string", pp);
    auto t = c.find("type");
    if (t != c.end() && !t->is_null() && *t != "function")
      fail_param(pp + ".type", "'{}.type' must be \"function\"", pp);
    auto id = c.find("id");
    if (id != c.end() && !id->is_null() && !id->is_string()) fail_param(pp + ".id", "'{}.id' must be a string", pp);
    auto args = fn->find("arguments");
    if (args != fn->end() && args->is_string()) {
      // OpenAI clients send arguments as a JSON string; the template renders a mapping.
      Json parsed;
      try {
        parsed = parse_json(args->get_ref<const std::string&>(), "arguments", false);
      } catch (const Error&) {
        fail_param(pp + ".function.arguments", "'{}.function.arguments' is not valid JSON", pp);
      }
      if (!parsed.is_object()) fail_param(pp + ".function.arguments", "'{}.function.arguments' must encode a JSON object", pp);
      copy["function"]["arguments"] = std::move(parsed);
    } else if (args != fn->end() && !args->is_object() && !args->is_null()) {
      fail_param(pp + ".function.arguments", "'{}.function.arguments' must be a JSON string or an object", pp);
    }
    out.push_back(std::move(copy));
  }
  return out;
}

Json normalize_messages(const Json& messages, std::vector<ImageRef>& images) {
  if (!messages.is_array()) fail_param("messages", "'messages' must be an array, not {}", type_name(messages));
  if (messages.empty()) fail_param("messages", "'messages' must not be empty");
  if (messages.size() > RequestLimits::kMaxMessages)
    fail_param("messages", "'messages' has more than {} entries", RequestLimits::kMaxMessages);
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string pm = fmt::format("messages[{}]", i);
    const Json& m = messages[i];
    if (!m.is_object()) fail_param(pm, "'{}' must be an object, not {}", pm, type_name(m));
    auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) fail_param(pm + ".role", "'{}.role' must be a string", pm);
    const std::string role = role_it->get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool") {
      if (role == "function") fail_unsupported(pm + ".role", "role 'function' is not supported; use tools");
      fail_param(pm + ".role", "unknown role '{}' (expected system, developer, user, assistant or tool)", role);
    }
    Json copy = m;
    auto content = m.find("content");
    const bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (content == m.end() || content->is_null()) {
      if (!(role == "assistant" && has_calls)) {
        if (role != "assistant") fail_param(pm + ".content", "'{}.content' is required for role '{}'", pm, role);
      }
    } else if (content->is_array()) {
      copy["content"] = normalize_parts(*content, pm + ".content", images);
    } else if (!content->is_string()) {
      fail_param(pm + ".content", "'{}.content' must be a string or an array of content parts, not {}", pm,
                 type_name(*content));
    }
    if (auto n = m.find("name"); n != m.end() && !n->is_null() && !n->is_string())
      fail_param(pm + ".name", "'{}.name' must be a string", pm);
    if (has_calls) {
      if (role != "assistant") fail_param(pm + ".tool_calls", "only assistant messages may carry tool_calls");
      copy["tool_calls"] = normalize_tool_calls(m["tool_calls"], pm + ".tool_calls");
    }
    if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null() && !id->is_string())
      fail_param(pm + ".tool_call_id", "'{}.tool_call_id' must be a string", pm);
    for (const char* rk : {"reasoning_content", "reasoning"})
      if (auto r = m.find(rk); r != m.end() && !r->is_null() && !r->is_string())
        fail_param(pm + "." + rk, "'{}.{}' must be a string", pm, rk);
    out.push_back(std::move(copy));
  }
  return out;
}

bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

void parse_tools(RequestFields& f, const RequestPolicy& policy, ParsedRequest& out) {
  std::vector<std::string> names;
  if (const Json* tools = f.get("tools")) {
    if (!tools->is_array()) fail_param("tools", "'tools' must be an array, not {}", type_name(*tools));
    if (tools->empty()) fail_param("tools", "'tools' must not be an empty array; omit it instead");
    if (tools->size() > RequestLimits::kMaxTools)
      fail_param("tools", "'tools' has more than {} entries", RequestLimits::kMaxTools);
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string pt = fmt::format("tools[{}]", i);
      const Json& t = (*tools)[i];
      if (!t.is_object()) fail_param(pt, "'{}' must be an object", pt);
      auto type = t.find("type");
      if (type == t.end() || *type != "function") fail_param(pt + ".type", "'{}.type' must be \"function\"", pt);
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) fail_param(pt + ".function", "'{}.function' must be an object", pt);
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || !valid_function_name(name->get<std::string>()))
        fail_param(pt + ".function.name", "'{}.function.name' must be 1-64 characters of a-z, A-Z, 0-9, _ . -", pt);
      if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
        fail_param(pt + ".function.description", "'{}.function.description' must be a string", pt);
      if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object())
        fail_param(pt + ".function.parameters", "'{}.function.parameters' must be a JSON Schema object", pt);
      names.push_back(name->get<std::string>());
    }
    out.tools = *tools;
  }
  std::string choice = names.empty() ? "none" : "auto";
  if (const Json* tc = f.get("tool_choice")) {
    if (tc->is_string()) {
      choice = tc->get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required")
        fail_param("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function");
    } else if (tc->is_object()) {
      auto fn = tc->find("function");
      if (fn == tc->end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
        fail_param("tool_choice", "'tool_choice' object must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
      const std::string name = (*fn)["name"].get<std::string>();
      if (names.empty()) fail_param("tool_choice", "When using `tool_choice`, `tools` must be set.");
      if (std::find(names.begin(), names.end(), name) == names.end())
        fail_param("tool_choice", "Tool '{}' named in tool_choice was not found in 'tools'", name);
      choice = "named";
    } else {
      fail_param("tool_choice", "'tool_choice' must be a string or an object, not {}", type_name(*tc));
    }
    if (choice != "none" && names.empty()) fail_param("tool_choice", "When using `tool_choice`, `tools` must be set.");
  }
  out.tool_names = names;
  if (choice == "required") {
    out.tool_choice = ToolChoiceMode::kRequired;
  } else if (choice == "named") {
    out.tool_choice = ToolChoiceMode::kNamed;
    out.tool_choice_name = (*f.get("tool_choice"))["function"]["name"].get<std::string>();
  } else if (choice == "auto") {
    if (!policy.enable_auto_tool_choice || !policy.tool_parser)
      fail_param("tool_choice", "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
    out.tool_choice = ToolChoiceMode::kAuto;
  } else {
    out.tool_choice = ToolChoiceMode::kNone;
  }
  out.parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  f.unsupported("functions", "the legacy 'functions' API is not supported; use 'tools'");
  f.unsupported("function_call", "the legacy 'function_call' API is not supported; use 'tool_choice'");
}

void check_kwarg_value(const Json& v, const std::string& param) {
  if (!(v.is_boolean() || v.is_number() || v.is_string() || v.is_null()))
    fail_param(param, "'{}' must be a boolean, number or string", param);
  if (v.is_string() && v.get_ref<const std::string&>().size() > RequestLimits::kMaxKwargBytes)
    fail_param(param, "'{}' is longer than {} bytes", param, RequestLimits::kMaxKwargBytes);
}

// The message continue_final_message continues: an assistant message with text and no tool calls.
void check_continued_message(const Json& messages) {
  const Json& last = messages.back();
  const std::string p = fmt::format("messages[{}]", messages.size() - 1);
  if (last.value("role", "") != "assistant")
    fail_param("continue_final_message",
               "Cannot set `continue_final_message` to True when the last message is not from the assistant.");
  if (last.contains("tool_calls") && !last["tool_calls"].is_null())
    fail_unsupported(p + ".tool_calls", "'continue_final_message' cannot continue a message with tool_calls");
  const std::string text = message_text(last);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    fail_param(p + ".content", "'continue_final_message' needs text to continue: '{}.content' is empty", p);
}

void parse_template_options(RequestFields& f, const RequestPolicy& policy, ParsedRequest& out) {
  out.template_kwargs = policy.default_template_kwargs.is_object() ? policy.default_template_kwargs : Json::object();
  bool explicit_thinking = false;
  if (const Json* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object()) fail_param("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      const std::string p = "chat_template_kwargs." + it.key();
      if (!policy.is_allowed_template_kwarg || !policy.is_allowed_template_kwarg(it.key())) {
        // As vLLM: a key the template does not read is dropped, not an error.
        DG_LOG_DEBUG("api", "chat_template_kwargs: ignoring '{}' (not read by the chat template)",
                     p.substr(0, 200));
        continue;
      }
      check_kwarg_value(it.value(), p);
      out.template_kwargs[it.key()] = it.value();
      if (it.key() == "enable_thinking") explicit_thinking = true;
    }
  }
  if (auto effort = f.string("reasoning_effort", 64)) {
    // Gemma 4 thinking is on/off: "none"/"minimal" turn it off, the other levels turn it on (an explicit
    // chat_template_kwargs.enable_thinking wins).
    bool on;
    if (*effort == "none" || *effort == "minimal") on = false;
    else if (*effort == "low" || *effort == "medium" || *effort == "high") on = true;
    else fail_param("reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high");
    if (!explicit_thinking) out.template_kwargs["enable_thinking"] = on;
  }
  const auto add_prompt = f.boolean("add_generation_prompt");
  out.continue_final_message = f.boolean("continue_final_message").value_or(false);
  if (out.continue_final_message && add_prompt && *add_prompt)
    fail_param("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  // vLLM: continue_final_message without an explicit add_generation_prompt renders no generation prompt.
  out.add_generation_prompt = out.continue_final_message ? false : add_prompt.value_or(true);
  if (out.continue_final_message) check_continued_message(out.messages);
  if (auto v = f.boolean("add_special_tokens"); v && *v)
    fail_unsupported("add_special_tokens", "'add_special_tokens' must be false for chat (the template adds <bos>)");
  out.echo = f.boolean("echo").value_or(false);
  f.unsupported("chat_template", "request-supplied chat templates are not accepted (start the server with --chat-template)");
  f.unsupported("documents", "'documents' are not supported by the DiffusionGemma chat template");
  if (const Json* mk = f.get("mm_processor_kwargs")) {
    if (!mk->is_object()) fail_param("mm_processor_kwargs", "'mm_processor_kwargs' must be an object");
    for (auto it = mk->begin(); it != mk->end(); ++it) {
      const std::string p = "mm_processor_kwargs." + it.key().substr(0, 100);
      if (it.key() != "max_soft_tokens")
        fail_param(p, "'{}' is not a setting of the image processor (max_soft_tokens)", p);
      if (!it->is_number_integer() || !is_supported_soft_tokens(it->get<int>()))
        fail_param(p, "'{}' must be one of 70, 140, 280, 560, 1120", p);
      out.max_soft_tokens = it->get<int>();
    }
  }
  f.unsupported("media_io_kwargs",
                "'media_io_kwargs' is not supported (set --media-io-kwargs at the server)");
}

// The fields both endpoints read the same way: streaming, the length, stop strings, sampling and the
// guided forms.
void parse_generation_fields(RequestFields& f, const RequestPolicy& policy, ParsedRequest& out) {
  parse_stream(f, policy, out);
  parse_max_tokens(f, out);
  parse_stop(f, policy, out);
  parse_sampling(f, out);
  parse_response_format(f, out);
  parse_structured_outputs(f, out);
}

void parse_misc_openai(RequestFields& f) {
  if (const Json* md = f.get("metadata"); md && !md->is_object()) fail_param("metadata", "'metadata' must be an object");
  if (auto v = f.boolean("store"); v && *v) fail_unsupported("store", "'store' = true is not supported (nothing is stored)");
  if (auto v = f.string("service_tier", 64)) (void)v;  // a single tier: any value is served the same way
  f.unsupported("prediction", "predicted outputs are not supported");
  f.unsupported("audio", "audio output is not supported");
  f.unsupported("web_search_options", "web search is not supported");
  if (const Json* mod = f.get("modalities")) {
    if (!mod->is_array()) fail_param("modalities", "'modalities' must be an array");
    for (const auto& m : *mod)
      if (m != "text") fail_unsupported("modalities", "only the \"text\" modality is supported");
  }
}

// Each pinned form owns the start of the answer: at most one per request.
void check_pinned_forms(const ParsedRequest& out) {
  const bool forced_call = out.tool_choice == ToolChoiceMode::kRequired || out.tool_choice == ToolChoiceMode::kNamed;
  const bool json = out.guided.has_value();
  if (out.continue_final_message && (forced_call || json))
    fail_unsupported("continue_final_message", "'continue_final_message' cannot be combined with {}",
                     forced_call ? "a forced tool_choice" : "guided decoding ('" + out.guided->param + "')");
  if (forced_call && json)
    fail_unsupported(out.guided->param, "'{}' cannot be combined with a forced tool_choice",
                     out.guided->param);
}

void finish_unknown(RequestFields& f, const RequestPolicy& policy, ParsedRequest& out) {
  out.unknown_keys = f.unknown();
  if (policy.strict_params && !out.unknown_keys.empty())
    fail_param(out.unknown_keys.front(), "unknown request parameter(s): {}", join(out.unknown_keys));
}

std::vector<int32_t> token_list(const Json& arr, const std::string& param, int vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const auto& e : arr) {
    if (!e.is_number()) fail_param(param, "'{}' token ids must be integers", param);
    const int64_t v = as_int64(e, param, INT64_MIN, INT64_MAX);
    if (v < 0 || v >= vocab_size)
      fail_param(param, "Prompt contains invalid tokens: id {} is outside the vocabulary [0, {})", v, vocab_size);
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) fail_param(param, "'{}' must not be empty", param);
  return ids;
}

std::vector<PromptInput> parse_prompts(const Json* p, const RequestPolicy& policy) {
  if (!p) fail_param("prompt", "'prompt' is required");
  std::vector<PromptInput> out;
  auto text = [&](const Json& s) {
    PromptInput in;
    in.text = s.get<std::string>();
    out.push_back(std::move(in));
  };
  if (p->is_string()) {
    text(*p);
  } else if (p->is_array()) {
    if (p->empty()) fail_param("prompt", "'prompt' must not be empty");
    if ((*p)[0].is_number()) {
      PromptInput in;
      in.is_tokens = true;
      in.tokens = token_list(*p, "prompt", policy.vocab_size);
      out.push_back(std::move(in));
    } else {
      if (p->size() > RequestLimits::kMaxPrompts)
        fail_param("prompt", "'prompt' has more than {} entries", RequestLimits::kMaxPrompts);
      for (const auto& e : *p) {
        if (e.is_string()) {
          text(e);
        } else if (e.is_array()) {
          PromptInput in;
          in.is_tokens = true;
          in.tokens = token_list(e, "prompt", policy.vocab_size);
          out.push_back(std::move(in));
        } else {
          fail_param("prompt", "'prompt' entries must be strings or arrays of token ids, not {}", type_name(e));
        }
      }
    }
  } else {
    fail_param("prompt", "'prompt' must be a string, an array of strings or an array of token ids, not {}",
               type_name(*p));
  }
  return out;
}

// Completions infilling: OpenAI's `suffix`, or dgemma's `infill_template` (fixed pieces and holes).
void parse_infill(RequestFields& f, ParsedRequest& out) {
  if (auto s = f.string("suffix")) out.infill.suffix = *s;
  const Json* t = f.get("infill_template");
  if (!t) return;
  if (!out.infill.suffix.empty()) fail_param("infill_template", "'infill_template' and 'suffix' cannot be combined");
  if (!t->is_array() || t->empty())
    fail_param("infill_template", "'infill_template' must be a non-empty array of strings (fixed text) and "
               "{{\"max_tokens\": N}} objects (holes)");
  if (t->size() > RequestLimits::kMaxInfillPieces)
    fail_param("infill_template", "'infill_template' has {} pieces; at most {} are allowed", t->size(),
               RequestLimits::kMaxInfillPieces);
  bool previous_hole = false;
  size_t holes = 0;
  for (size_t i = 0; i < t->size(); ++i) {
    const Json& e = (*t)[i];
    const std::string name = fmt::format("infill_template[{}]", i);
    InfillRequest::Piece piece;
    if (e.is_string()) {
      piece.text = e.get<std::string>();
      if (piece.text.empty()) fail_param("infill_template", "{}: fixed text must not be empty", name);
      previous_hole = false;
    } else if (e.is_object()) {
      RequestFields h(e, name + ".");
      const auto n = h.integer("max_tokens", 1, RequestLimits::kMaxInfillHole);
      if (!n) fail_param("infill_template", "{}: a hole needs \"max_tokens\" (its room in tokens)", name);
      for (const auto& k : h.unknown()) fail_param("infill_template", "{}: unknown key '{}' (a hole has only max_tokens)", name, k);
      // Two holes in a row would be one gap whose split nobody could tell: the texts of holes are told
      // apart by the fixed text between them.
      if (previous_hole) fail_param("infill_template", "{}: two holes in a row; holes must be separated by fixed text", name);
      piece.hole = true;
      piece.max_tokens = *n;
      previous_hole = true;
      ++holes;
    } else {
      fail_param("infill_template", "{} must be a string (fixed text) or an object (a hole), not {}", name, type_name(e));
    }
    out.infill.pieces.push_back(std::move(piece));
  }
  if (holes == 0) fail_param("infill_template", "'infill_template' has no hole to fill");
  if (out.stream)
    fail_unsupported("infill_template", "'infill_template' with stream: true is not supported (each hole's text is "
                     "part of the complete response)");
  if (!out.stop.empty()) fail_param("stop", "'stop' cannot be combined with 'infill_template' (it could cut a fixed piece)");
}

// --chat-template-content-format string: a list of text parts reaches the template as one string, the
// parts joined with "\n" (as vLLM's "string" format renders them).
void join_text_parts(Json& messages) {
  for (Json& m : messages) {
    auto c = m.find("content");
    if (c == m.end() || !c->is_array()) continue;
    std::string text;
    for (size_t i = 0; i < c->size(); ++i) text += (i ? "\n" : "") + (*c)[i].value("text", std::string());
    *c = text;
  }
}

}  // namespace

Json parse_request_body(std::string_view body) {
  Json j = parse_json(body, "request body", false);
  if (!j.is_object()) fail_param("", "the request body must be a JSON object, not {}", type_name(j));
  return j;
}

std::string message_text(const Json& message) {
  auto c = message.find("content");
  if (c == message.end() || c->is_null()) return {};
  if (c->is_string()) return c->get<std::string>();
  std::string out;
  if (c->is_array())
    for (const auto& part : *c)
      if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string())
        out += part["text"].get<std::string>();
  return out;
}

bool thinking_enabled(const Json& kwargs) {
  if (!kwargs.is_object()) return false;
  auto it = kwargs.find("enable_thinking");
  if (it == kwargs.end()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number()) return it->get<double>() != 0;
  if (it->is_string()) return !it->get_ref<const std::string&>().empty();
  return false;
}

ParsedRequest parse_chat_request(const Json& body, const RequestPolicy& policy) {
  if (!body.is_object()) fail_param("", "the request body must be a JSON object");
  ParsedRequest out;
  out.endpoint = Endpoint::kChat;
  RequestFields f(body, "");
  parse_model(f, policy, out);
  const Json* messages = f.get("messages");
  if (!messages) fail_param("messages", "'messages' is required");
  out.messages = normalize_messages(*messages, out.images);
  if (policy.content_as_string && !out.images.empty())
    fail_unsupported("messages",
                     "image parts need the content-part chat format (--chat-template-content-format "
                     "string renders text only)");
  if (policy.content_as_string) join_text_parts(out.messages);
  parse_generation_fields(f, policy, out);
  parse_tools(f, policy, out);
  parse_template_options(f, policy, out);
  parse_misc_openai(f);
  check_pinned_forms(out);
  out.logprobs = f.boolean("logprobs").value_or(false);
  if (auto tl = f.integer("top_logprobs", 0, limits::kMaxTopLogprobs)) {
    if (!out.logprobs) fail_param("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.");
    out.sampling.top_logprobs = static_cast<int>(*tl);
  }
  out.sampling.logprobs = out.logprobs;
  finish_unknown(f, policy, out);
  return out;
}

ParsedRequest parse_completion_request(const Json& body, const RequestPolicy& policy) {
  if (!body.is_object()) fail_param("", "the request body must be a JSON object");
  ParsedRequest out;
  out.endpoint = Endpoint::kCompletion;
  RequestFields f(body, "");
  parse_model(f, policy, out);
  out.prompts = parse_prompts(f.get("prompt"), policy);
  parse_generation_fields(f, policy, out);
  parse_misc_openai(f);
  if (out.prompts.size() * static_cast<size_t>(out.n) > static_cast<size_t>(RequestLimits::kMaxChoices))
    fail_param("n", "{} prompts x n={} exceeds the limit of {} choices per request", out.prompts.size(), out.n,
               RequestLimits::kMaxChoices);
  if (auto lp = f.integer("logprobs", 0, 5)) {
    out.logprobs = true;
    out.sampling.top_logprobs = static_cast<int>(*lp);
  }
  out.sampling.logprobs = out.logprobs;
  out.echo = f.boolean("echo").value_or(false);
  if (out.echo && out.logprobs)
    fail_unsupported("echo", "'echo' together with 'logprobs' is not supported (prompt log-probabilities are not computed)");
  parse_infill(f, out);
  if (out.infill.active() && out.guided)
    fail_unsupported(out.guided->param, "'{}' cannot be combined with infilling", out.guided->param);
  if (auto v = f.boolean("add_special_tokens")) (void)v;  // Gemma 4 adds no BOS/EOS when tokenising either way
  for (const char* key : {"tools", "tool_choice", "messages", "chat_template", "chat_template_kwargs"})
    f.unsupported(key, "only valid for /v1/chat/completions");
  finish_unknown(f, policy, out);
  return out;
}

}  // namespace dgemma
