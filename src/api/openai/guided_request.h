#pragma once
// A request's guided form (docs/API.md "Guided decoding on the canvas"): OpenAI's response_format,
// vLLM's structured_outputs object and its older guided_* fields, each checked against the supported
// subset into ParsedRequest::guided (one form a request; a 400 naming the parameter otherwise).
#include "api/openai/openai_request.h"
#include "api/openai/request_fields.h"

namespace dgemma {

void parse_response_format(RequestFields& f, ParsedRequest& out);
void parse_structured_outputs(RequestFields& f, ParsedRequest& out);

}  // namespace dgemma
