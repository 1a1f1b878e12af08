#pragma once
// The OpenAI Responses API request (POST /v1/responses) as the chat completions request it runs as.
// `input` items become chat messages (message, function_call, function_call_output, reasoning), the
// conversation of `previous_response_id` is put before them and `instructions` becomes the system
// message; `tools`, `tool_choice`, `text.format`, `reasoning.effort`, `max_output_tokens` and the
// sampling fields map to their chat forms. What has no chat form here is a 400 naming the field.
// Ranges and the remaining checks are the chat parser's; rename_chat_param() maps the parameter
// names of its errors back to this API's. See docs/API.md "Responses API".
#include <string>
#include <vector>

#include "util/json.h"

namespace dgemma {

struct ResponsesRequest {
  Json chat_body = Json::object();    // the chat completions request body
  Json conversation = Json::array();  // chat messages: the previous response's conversation + `input`
  Json shell = Json::object();        // the Response object's echoed fields (id, model, tools, ...)
  bool stream = false;
  bool store = true;
  std::vector<std::string> unknown_keys;
};

// Throws Error(kInvalidArgument / kUnsupported, message, param) for a bad request. `previous`: the
// stored conversation (chat messages) of the body's previous_response_id (the caller looks it up and
// answers an unknown id itself); null when the body names none.
ResponsesRequest parse_responses_request(const Json& body, const Json* previous);

// The chat parameter name `param` in this API's terms ("max_tokens" -> "max_output_tokens",
// "messages[3]" -> "input", "tools[0].function.name" -> "tools[0].name", ...).
std::string rename_chat_param(const std::string& param);

// A fresh id with the given prefix ("resp_", "msg_", ...): prefix + 48 hex digits.
std::string make_item_id(const std::string& prefix);

}  // namespace dgemma
