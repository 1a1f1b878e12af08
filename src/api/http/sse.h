#pragma once
// Server-sent events framing (text/event-stream) and JSON serialisation for responses.
#include <string>
#include <string_view>

#include "util/json.h"

namespace dgemma {

// Compact JSON; invalid UTF-8 in strings becomes U+FFFD instead of throwing.
std::string json_text(const Json& j);

// "data: <json>\n\n"
std::string sse_data(const Json& j);
// "event: <name>\ndata: <json>\n\n" (a named event, as the Responses API streams them)
std::string sse_event(std::string_view name, const Json& j);
// "data: [DONE]\n\n"
std::string sse_done();
// ": <text>\n\n" — a comment line every SSE client ignores (pings, opt-in previews). Newlines in the
// text would end the comment, so CR/LF become spaces.
std::string sse_comment(std::string_view text);

}  // namespace dgemma
