// The DiffusionGemma chat templates (June and July 2026) re-implemented in C++, statement by
// statement, so that the output is byte-identical to jinja2 rendering the real template files
// (trim_blocks, lstrip_blocks, ImmutableSandboxedEnvironment as in transformers). Comments quote the
// template where the mapping is not obvious. Value semantics (Undefined, dict.get, dictsort, str())
// live in chat_template_values.cpp.
#include "text/chat_template.h"

#include <array>
#include <string>

#include "text/chat_template_internal.h"
#include "util/error.h"
#include "util/sha256.h"

namespace dgemma {

using chat_detail::Value;
using chat_detail::concat_str;
using chat_detail::py_strip;
using chat_detail::template_error;

namespace {

constexpr std::string_view kQuote = "<|\"|>";  // Gemma's string delimiter token

// `required:[<|"|>a<|"|>,<|"|>b<|"|>]` of a tool declaration's parameter schema.
void append_required(const Value& list, std::string& out) {
  out += "required:[";
  const auto reqs = list.iterate();
  for (size_t k = 0; k < reqs.size(); ++k) {
    out += kQuote;
    out += reqs[k].to_str();
    out += kQuote;
    if (k + 1 < reqs.size()) out += ',';
  }
  out += ']';
}

constexpr int kMaxNesting = 256;              // recursion guard for caller-built (unparsed) JSON

// The template's ns.prev_message_type.
enum class PrevType { kNone, kThink, kTool, kToolCall, kToolResponse, kMedia };

struct KnownTemplate {
  ChatTemplateKind kind;
  std::string_view sha256;  // of the template text, CRLF -> LF, trailing whitespace removed
};
// google/diffusiongemma-26B-A4B-it chat_template.jinja: launch version (June 2026) and the
// "Google Gemma 4 Canonical Chat Template" published 2026-07-09.
constexpr std::array<KnownTemplate, 2> kKnownTemplates = {{
    {ChatTemplateKind::kDiffusionGemma2026_07, "9aeb7eac68ad87bba7567e9d4597ff203e5609f1b427d9e823437d0142cc61bf"},
    {ChatTemplateKind::kDiffusionGemma2026_06, "36e3a42e5cf14cd0020e72d92e1fdd9970f59b82170e421f0cbe1bb42bead3f0"},
}};

class Renderer {
 public:
  Renderer(ChatTemplateKind kind, const Json& messages, const Json& tools, const ChatTemplateOptions& opts)
      : july_(kind == ChatTemplateKind::kDiffusionGemma2026_07), messages_(messages), tools_(tools), opts_(opts) {}

  std::string render();
  // The request parameter a template failure is attributed to: "tools" while declaring tools.
  std::string_view current_param() const { return current_param_; }

 private:
  void render_system_block(bool first_is_system);
  void render_message(size_t i);
  void render_tool_calls(const Value& message);
  bool render_tool_results(const Value& message, size_t i);
  std::string render_content(const Value& message, bool is_model);

  // Macros.
  void format_argument(const Value& argument, bool escape_keys, std::string& out, int depth) const;
  void format_parameters(const Value& properties, bool filter_keys, std::string& out, int depth) const;
  std::string format_function_declaration(const Value& tool) const;
  void format_tool_response_block(const std::string& tool_name, const Value& response, std::string& out) const;
  static std::string strip_thinking(const Value& text);

  Value msg(size_t i) const { return Value::borrow(messages_[first_ + i]); }
  size_t count() const { return messages_.size() - first_; }
  bool role_is(size_t i, std::string_view role) const { return msg(i)["role"].equals(role); }

  const bool july_;
  const Json& messages_;
  const Json& tools_;
  const ChatTemplateOptions& opts_;
  bool enable_thinking_ = false;
  bool preserve_thinking_ = false;
  size_t first_ = 0;            // loop_messages = messages[first_:]
  PrevType prev_ = PrevType::kNone;
  Value prev_non_tool_role_;    // July: ns.prev_non_tool_role (set for every message, tool or not)
  long last_user_idx_ = -1;
  std::string out_;
  std::string_view current_param_ = "messages";
};

// Structural checks for what the template cannot sensibly render. The template itself would print
// any role as a turn header and silently drop content of other types; we refuse instead.
}  // namespace

void validate_chat_messages(const Json& messages) {
  if (!messages.is_array()) throw Error(ErrorKind::kInvalidArgument, "'messages' must be an array", "messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object())
      throw Error(ErrorKind::kInvalidArgument, fmt::format("messages[{}] must be an object", i), "messages");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw Error(ErrorKind::kInvalidArgument, fmt::format("messages[{}].role must be a string", i), "messages");
    const std::string& r = role->get_ref<const std::string&>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("messages[{}].role '{}' is not supported (expected system, developer, user, "
                              "assistant or tool)", i, r),
                  "messages");
    auto content = m.find("content");
    if (content == m.end() || content->is_null() || content->is_string()) continue;
    if (!content->is_array())
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("messages[{}].content must be a string, an array of content parts or null", i),
                  "messages");
    for (size_t k = 0; k < content->size(); ++k)
      if (!(*content)[k].is_object())
        throw Error(ErrorKind::kInvalidArgument, fmt::format("messages[{}].content[{}] must be an object", i, k),
                    "messages");
  }
}

namespace {

std::string Renderer::render() {
  validate_chat_messages(messages_);
  if (!opts_.extra_kwargs.is_object())
    throw Error(ErrorKind::kInvalidArgument, "chat_template_kwargs must be an object", "chat_template_kwargs");
  auto kwarg = [&](std::string_view key) {
    auto it = opts_.extra_kwargs.find(key);
    return it != opts_.extra_kwargs.end() && chat_detail::py_truthy(*it);
  };
  // June: `enable_thinking is defined and enable_thinking`; July: `enable_thinking | default(false)`.
  enable_thinking_ = kwarg("enable_thinking");
  preserve_thinking_ = july_ && kwarg("preserve_thinking");

  const Value messages = Value::borrow(messages_);
  out_ = "<bos>";
  bool first_is_system = false;
  if (july_) {
    // `messages and messages[0]['role'] in ['system', 'developer']`
    first_is_system = !messages_.empty() && (role_is(0, "system") || role_is(0, "developer"));
  } else {
    // June reads messages[0]['role'] unguarded: an empty list is an UndefinedError.
    if (messages_.empty()) template_error("chat template: 'messages' is empty");
    first_is_system = role_is(0, "system") || role_is(0, "developer");
  }
  const Value tools = tools_.is_null() ? Value::none() : Value::borrow(tools_);
  if (enable_thinking_ || tools.truthy() || first_is_system) render_system_block(first_is_system);

  for (size_t i = 0; i < count(); ++i)
    if (role_is(i, "user")) last_user_idx_ = static_cast<long>(i);

  for (size_t i = 0; i < count(); ++i) {
    if (!role_is(i, "tool")) render_message(i);
    if (july_) prev_non_tool_role_ = msg(i)["role"];
  }

  if (opts_.add_generation_prompt) {
    if (prev_ != PrevType::kToolResponse && prev_ != PrevType::kToolCall) {
      out_ += "<|turn>model\n";
      if (!july_ && !enable_thinking_) out_ += "<|channel>thought\n<channel|>";
    } else if (july_ && prev_ == PrevType::kToolResponse && enable_thinking_) {
      out_ += "<|channel>thought\n";
    }
  }
  return std::move(out_);
}

void Renderer::render_system_block(bool first_is_system) {
  out_ += "<|turn>system\n";
  if (enable_thinking_) {
    out_ += "<|think|>\n";
    prev_ = PrevType::kThink;
  }
  if (first_is_system) {
    const Value content = msg(0)["content"];
    if (content.is_string()) {
      out_ += py_strip(content.as_string());
    } else if (content.is_sequence()) {
      for (const Value& item : content.iterate()) {
        out_ += py_strip(item["text"].to_str());  // {{- item['text'] | trim + ' ' -}}
        out_ += ' ';
      }
    }
    first_ = 1;
  }
  const Value tools = tools_.is_null() ? Value::none() : Value::borrow(tools_);
  if (tools.truthy()) {
    current_param_ = "tools";
    for (const Value& tool : tools.iterate()) {
      out_ += "<|tool>";
      out_ += py_strip(format_function_declaration(tool));
      out_ += "<tool|>";
    }
    current_param_ = "messages";
    prev_ = PrevType::kTool;
  }
  out_ += "<turn|>\n";
}

void Renderer::render_message(size_t i) {
  const Value message = msg(i);
  prev_ = PrevType::kNone;
  const Value role_value = message["role"];
  const bool is_model = role_value.equals("assistant");
  const std::string role = is_model ? "model" : role_value.as_string();

  bool continue_same_model_turn = false;
  if (is_model) {
    if (july_) {
      continue_same_model_turn = prev_non_tool_role_.equals("assistant");
    } else {  // June scans back for the previous non-tool message
      for (size_t j = i; j-- > 0;) {
        if (!role_is(j, "tool")) {
          continue_same_model_turn = role_is(j, "assistant");
          break;
        }
      }
    }
  }
  if (!continue_same_model_turn) out_ += "<|turn>" + role + "\n";

  // {%- set thinking_text = message.get('reasoning') or message.get('reasoning_content') -%}
  Value thinking_text = message.get("reasoning");
  if (!thinking_text.truthy()) thinking_text = message.get("reasoning_content");
  const bool after_last_user = static_cast<long>(i) > last_user_idx_;
  const bool has_tool_calls = message.get("tool_calls").truthy();
  const bool gate = july_ ? (after_last_user || (preserve_thinking_ && has_tool_calls))
                          : (after_last_user && has_tool_calls);
  if (thinking_text.truthy() && gate)
    out_ += "<|channel>thought\n" + concat_str(thinking_text, "reasoning") + "\n<channel|>";

  render_tool_calls(message);
  const bool responded = render_tool_results(message, i);

  const std::string captured = render_content(message, is_model);
  out_ += captured;
  const bool has_content = !py_strip(captured).empty();

  // July: forward-scan for the next non-tool message.
  bool next_found = false;
  bool continues_into_next = false;
  if (july_) {
    for (size_t j = i + 1; j < count(); ++j) {
      if (!role_is(j, "tool")) {
        next_found = true;
        continues_into_next = is_model && role_is(j, "assistant") && (!has_tool_calls || responded);
        break;
      }
    }
  }

  if (prev_ == PrevType::kToolCall && !responded) {
    out_ += "<|tool_response>";
  } else if (continues_into_next) {
  } else if (!(responded && !has_content && !(july_ && next_found))) {
    out_ += "<turn|>\n";
  }
}

void Renderer::render_tool_calls(const Value& message) {
  // July reads message.get('tool_calls'), June message['tool_calls']: the same on a dict.
  const Value tool_calls = message.get("tool_calls");
  if (!tool_calls.truthy()) return;
  for (const Value& tool_call : tool_calls.iterate()) {
    const Value function = tool_call["function"];
    out_ += "<|tool_call>call:" + concat_str(function["name"], "tool_calls[].function.name") + "{";
    const Value arguments = function["arguments"];
    if (arguments.is_mapping()) {
      bool first = true;
      for (const auto& [key, value] : arguments.dictsort()) {
        if (!first) out_ += ',';
        first = false;
        out_ += *key;
        out_ += ':';
        format_argument(value, /*escape_keys=*/false, out_, 0);
      }
    } else if (july_) {
      if (!arguments.is_none())
        template_error(
            "chat_template: tool_calls[].function.arguments must be a JSON object (mapping), not a string. "
            "Deserialize arguments before passing to the template.");
    } else if (arguments.is_string()) {
      out_ += arguments.as_string();  // June passes a string through verbatim
    }
    out_ += "}<tool_call|>";
  }
  prev_ = PrevType::kToolCall;
}

// Legacy tool_responses on the assistant message, or the OpenAI role:tool messages that follow it.
// Returns the template's ns_tr_out.flag.
bool Renderer::render_tool_results(const Value& message, size_t i) {
  bool responded = false;
  const Value tool_responses = message.get("tool_responses");
  if (tool_responses.truthy()) {
    for (const Value& tool_response : tool_responses.iterate()) {
      Value name = tool_response["name"];
      // June: `| default('unknown')` (only when undefined); July: `| default('unknown', true)` (when falsy).
      if (july_ ? !name.truthy() : name.is_undefined()) name = Value::str("unknown");
      format_tool_response_block(concat_str(name, "tool_responses[].name"), tool_response["response"], out_);
      responded = true;
      prev_ = PrevType::kToolResponse;
    }
    return responded;
  }
  if (!message.get("tool_calls").truthy()) return false;
  for (size_t k = i + 1; k < count() && role_is(k, "tool"); ++k) {
    const Value follow = msg(k);
    // July: `follow.get('name') or 'unknown'`; June: `follow.get('name') | default('unknown')`, which
    // never applies (.get returns None, not Undefined).
    Value name = follow.get("name");
    if (july_ && !name.truthy()) name = Value::str("unknown");
    const Value call_id = follow.get("tool_call_id");
    for (const Value& tc : message.get("tool_calls").iterate())
      if (tc.get("id").equals(call_id)) name = tc["function"]["name"];
    const std::string tool_name = concat_str(name, "the tool message's name");

    const Value body = follow.get("content");
    if (body.is_string()) {
      format_tool_response_block(tool_name, body, out_);
    } else if (body.is_sequence()) {
      const auto parts = body.iterate();
      std::string text;
      for (const Value& part : parts) {
        // ns_txt.s + (part.get('text') | default('')): a missing text is None, and str + None fails.
        if (part.get("type").equals("text")) text += concat_str(part.get("text"), "a tool content part's text");
      }
      format_tool_response_block(tool_name, Value::str(std::move(text)), out_);
      for (const Value& part : parts) {
        const Value type = part.get("type");
        if (type.equals("image") || (july_ && type.equals("image_url"))) {
          out_ += "<|image|>";
        } else if (type.equals("audio") || (july_ && type.equals("input_audio"))) {
          out_ += "<|audio|>";
        } else if (type.equals("video")) {
          out_ += "<|video|>";
        }
      }
    } else {
      format_tool_response_block(tool_name, body, out_);
    }
    responded = true;
    prev_ = PrevType::kToolResponse;
  }
  return responded;
}

// {%- set captured_content -%} ... {%- endset -%}
std::string Renderer::render_content(const Value& message, bool is_model) {
  std::string captured;
  // July: message.get('content') (None when absent); June: message['content'] (Undefined when absent,
  // which is a "sequence" with no items): both render nothing.
  const Value content = message.get("content");
  if (content.is_string()) {
    captured = is_model ? strip_thinking(content) : py_strip(content.as_string());
  } else if (content.is_sequence()) {
    for (const Value& item : content.iterate()) {
      const Value type = july_ ? item.get("type") : item["type"];
      if (type.equals("text")) {
        captured += is_model ? strip_thinking(item["text"]) : py_strip(item["text"].to_str());
      } else if (type.equals("image") || (july_ && type.equals("image_url"))) {
        captured += "<|image|>";
        if (!july_) prev_ = PrevType::kMedia;  // June: ns.prev_message_type = 'image'
      } else if (type.equals("audio") || (july_ && type.equals("input_audio"))) {
        captured += "<|audio|>";
        if (!july_) prev_ = PrevType::kMedia;
      } else if (type.equals("video")) {
        captured += "<|video|>";
        if (!july_) prev_ = PrevType::kMedia;
      }
    }
  }
  return captured;
}

// {%- macro format_argument(argument, escape_keys=True) -%}
void Renderer::format_argument(const Value& argument, bool escape_keys, std::string& out, int depth) const {
  if (depth > kMaxNesting) template_error("chat template: value nested too deeply");
  if (july_ && argument.is_none()) {
    out += "null";
  } else if (argument.is_string()) {
    out += kQuote;
    out += argument.as_string();
    out += kQuote;
  } else if (argument.is_boolean()) {
    out += argument.json().get<bool>() ? "true" : "false";
  } else if (argument.is_mapping()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : argument.dictsort()) {
      if (!first) out += ',';
      first = false;
      if (escape_keys) {
        out += kQuote;
        out += *key;
        out += kQuote;
      } else {
        out += *key;
      }
      out += ':';
      format_argument(value, escape_keys, out, depth + 1);
    }
    out += '}';
  } else if (argument.is_sequence()) {  // lists, and Undefined (renders "[]")
    out += '[';
    const auto items = argument.iterate();
    for (size_t k = 0; k < items.size(); ++k) {
      format_argument(items[k], escape_keys, out, depth + 1);
      if (k + 1 < items.size()) out += ',';
    }
    out += ']';
  } else {
    out += argument.to_str();  // numbers; None in June prints "None"
  }
}

// {%- macro format_parameters(properties, required, filter_keys=false) -%}
// (the `required` argument is never used by the macro, so it is not modelled)
void Renderer::format_parameters(const Value& properties, bool filter_keys, std::string& out, int depth) const {
  if (depth > kMaxNesting) template_error("chat template: tool parameters nested too deeply");
  static constexpr std::string_view kStandardKeys[] = {"description", "type", "properties", "required", "nullable"};
  bool found_first = false;
  for (const auto& [key, value] : properties.dictsort()) {
    if (filter_keys && std::find(std::begin(kStandardKeys), std::end(kStandardKeys), *key) != std::end(kStandardKeys))
      continue;
    bool add_comma = false;
    // {%- if add_comma %},{%- else -%} {%- set add_comma = true -%} {% endif -%}
    auto comma = [&] {
      if (add_comma) {
        out += ',';
      } else {
        add_comma = true;
      }
    };
    if (found_first) out += ',';
    found_first = true;
    out += *key;
    out += ":{";
    const Value description = value["description"];
    if (description.truthy()) {
      out += "description:";
      out += kQuote;
      out += description.to_str();
      out += kQuote;
      add_comma = true;
    }
    const std::string type = value["type"].upper();
    if (type == "STRING") {
      const Value enumeration = value["enum"];
      if (enumeration.truthy()) {
        comma();
        out += "enum:";
        format_argument(enumeration, true, out, depth + 1);
      }
    } else if (type == "ARRAY") {
      const Value items = value["items"];
      if (items.is_mapping() && items.truthy()) {
        comma();
        out += "items:{";
        bool items_first = true;
        for (const auto& [item_key, item_value] : items.dictsort()) {
          if (item_value.is_none()) continue;
          if (!items_first) out += ',';
          items_first = false;
          if (*item_key == "properties") {
            out += "properties:{";
            if (item_value.is_mapping()) format_parameters(item_value, false, out, depth + 1);
            out += '}';
          } else if (*item_key == "required") {
            append_required(item_value, out);
          } else if (*item_key == "type") {
            out += "type:";
            if (item_value.is_string()) {
              format_argument(Value::str(item_value.upper()), true, out, depth + 1);
            } else {  // item_value | map('upper') | list
              Json upper_list = Json::array();
              for (const Value& t : item_value.iterate()) upper_list.push_back(t.upper());
              format_argument(Value::own(std::move(upper_list)), true, out, depth + 1);
            }
          } else {
            out += *item_key;
            out += ':';
            format_argument(item_value, true, out, depth + 1);
          }
        }
        out += '}';
      }
    }
    if (value["nullable"].truthy()) {
      comma();
      out += "nullable:true";
    }
    if (type == "OBJECT") {
      const Value nested = value["properties"];
      if (!nested.is_undefined() && nested.is_mapping()) {
        comma();
        out += "properties:{";
        format_parameters(nested, false, out, depth + 1);
        out += '}';
      } else if (value.is_mapping()) {
        comma();
        out += "properties:{";
        format_parameters(value, true, out, depth + 1);
        out += '}';
      }
      const Value required = value["required"];
      if (required.truthy()) {
        comma();
        append_required(required, out);
      }
    }
    comma();
    out += "type:";
    out += kQuote;
    out += type;
    out += kQuote;
    out += '}';
  }
}

// {%- macro format_function_declaration(tool_data) -%}
std::string Renderer::format_function_declaration(const Value& tool) const {
  std::string out;
  const Value function = tool["function"];
  out += "declaration:";
  out += function["name"].to_str();
  out += "{description:";
  out += kQuote;
  out += function["description"].to_str();
  out += kQuote;
  const Value params = function["parameters"];
  if (params.truthy()) {
    out += ",parameters:{";
    const Value properties = params["properties"];
    if (properties.truthy()) {
      out += "properties:{";
      format_parameters(properties, false, out, 0);
      out += "},";
    }
    const Value required = params["required"];
    if (required.truthy()) {
      out += "required:[";
      const auto reqs = required.iterate();
      for (size_t k = 0; k < reqs.size(); ++k) {
        out += kQuote;
        out += reqs[k].to_str();
        out += kQuote;
        if (k + 1 < reqs.size()) out += ',';
      }
      out += "],";
    }
    const Value type = params["type"];
    if (type.truthy()) {
      out += "type:";
      out += kQuote;
      out += type.upper();
      out += kQuote;
      out += '}';  // the template closes parameters:{ only here
    }
  }
  if (function.contains("response")) {
    const Value response = function["response"];
    out += ",response:{";
    const Value description = response["description"];
    if (description.truthy()) {
      out += "description:";
      out += kQuote;
      out += description.to_str();
      out += kQuote;
      out += ',';
    }
    const std::string type = response["type"].upper();
    if (type == "OBJECT") {
      out += "type:";
      out += kQuote;
      out += type;
      out += kQuote;
      out += '}';
    }
  }
  out += '}';
  return out;
}

// {%- macro format_tool_response_block(tool_name, response) -%}
void Renderer::format_tool_response_block(const std::string& tool_name, const Value& response,
                                          std::string& out) const {
  out += "<|tool_response>";
  if (response.is_mapping()) {
    out += "response:" + tool_name + "{";
    const auto items = response.dictsort();
    for (size_t k = 0; k < items.size(); ++k) {
      out += *items[k].first;
      out += ':';
      format_argument(items[k].second, false, out, 0);
      if (k + 1 < items.size()) out += ',';
    }
    out += '}';
  } else {
    out += "response:" + tool_name + "{value:";
    format_argument(response, false, out, 0);
    out += '}';
  }
  out += "<tool_response|>";
}

// {%- macro strip_thinking(text) -%}: drops every <|channel>...<channel|> span, then trims.
std::string Renderer::strip_thinking(const Value& text) {
  if (!text.is_string()) template_error("chat template: assistant text content must be a string");
  const std::string& s = text.as_string();
  static constexpr std::string_view kOpen = "<|channel>", kClose = "<channel|>";
  std::string result;
  size_t pos = 0;
  while (true) {  // for part in text.split('<channel|>')
    const size_t close = s.find(kClose, pos);
    const std::string_view part =
        std::string_view(s).substr(pos, close == std::string::npos ? std::string::npos : close - pos);
    const size_t open = part.find(kOpen);
    result += part.substr(0, open);  // part.split('<|channel>')[0], or the whole part
    if (close == std::string::npos) break;
    pos = close + kClose.size();
  }
  return py_strip(result);
}

}  // namespace

std::string normalise_template_text(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    s.push_back(text[i]);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

ChatTemplate::ChatTemplate(ChatTemplateKind kind) : kind_(kind), native_(true) {}

std::optional<ChatTemplateKind> recognise_template(std::string_view jinja_text) {
  const std::string digest = sha256_hex(normalise_template_text(jinja_text));
  for (const KnownTemplate& known : kKnownTemplates)
    if (digest == known.sha256) return known.kind;
  return std::nullopt;
}

std::string ChatTemplate::render(const Json& messages, const Json& tools, const ChatTemplateOptions& opts) const {
  if (!native_) return render_jinja(messages, tools, opts);
  Renderer renderer(*kind_, messages, tools, opts);
  try {
    return renderer.render();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument || !e.param().empty()) throw;
    // A template runtime failure: attribute it to the request part being rendered.
    throw Error(ErrorKind::kInvalidArgument, e.what(), std::string(renderer.current_param()));
  } catch (const Json::exception& e) {  // a type assumption about the JSON that did not hold: our bug
    throw Error(ErrorKind::kInternal, fmt::format("chat template: unexpected JSON shape: {}", e.what()));
  }
}

bool ChatTemplate::is_allowed_kwarg(std::string_view key) {
  return key == "enable_thinking" || key == "preserve_thinking";
}

std::string_view ChatTemplate::name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kDiffusionGemma2026_07:
      return "diffusiongemma-2026-07";
    case ChatTemplateKind::kDiffusionGemma2026_06:
      return "diffusiongemma-2026-06";
  }
  return "unknown";
}

}  // namespace dgemma
