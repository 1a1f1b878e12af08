// Which parsed tool calls a client may be given: declared in `tools`, arguments complete, every
// `required` parameter present. Anything else is rejected with a reason that names the problem.
#include <gtest/gtest.h>

#include "api/openai/tool_call_check.h"

namespace dgemma {
namespace {

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time"}},
  {"type": "function", "function": {"name": "odd", "parameters": {"type": "object", "required": "city"}}}
])");

ParsedToolCall call(std::string name, std::string args,
                    ParsedToolCall::Arguments state = ParsedToolCall::Arguments::kComplete) {
  ParsedToolCall c;
  c.name = std::move(name);
  c.arguments_json = std::move(args);
  c.arguments = state;
  return c;
}

TEST(ToolCallCheck, AcceptsDeclaredCompleteCalls) {
  const DeclaredTools d(kTools);
  EXPECT_EQ(d.reject_reason(call("get_weather", R"({"city": "Paris"})")), std::nullopt);
  EXPECT_EQ(d.reject_reason(call("get_weather", R"({"city": "Paris", "days": 3, "extra": 1})")),
            std::nullopt);
  EXPECT_EQ(d.reject_reason(call("get_time", "{}")), std::nullopt);  // no parameters schema
  EXPECT_EQ(d.reject_reason(call("odd", "{}")), std::nullopt);       // a malformed `required` checks nothing
}

TEST(ToolCallCheck, RejectsWithAReason) {
  const DeclaredTools d(kTools);
  EXPECT_EQ(d.reject_reason(call("calculateather", R"({"city": "Paris"})")),
            "'calculateather' is not a function declared in 'tools'");
  EXPECT_EQ(d.reject_reason(call("get_weather", "{}")), "the required argument 'city' is missing");
  EXPECT_EQ(d.reject_reason(call("get_weather", R"({"city": "P"})", ParsedToolCall::Arguments::kMalformed)),
            "the arguments are not valid argument syntax");
  EXPECT_EQ(d.reject_reason(call("get_weather", R"({"city": "P"})", ParsedToolCall::Arguments::kCutShort)),
            "the output ended inside the arguments");
  EXPECT_EQ(d.reject_reason(call("get_weather", "{}", ParsedToolCall::Arguments::kNoBody)),
            "not a tool call: no function name followed by '{' or '('");
  // No tools at all: nothing is declared.
  EXPECT_NE(DeclaredTools(Json(nullptr)).reject_reason(call("get_time", "{}")), std::nullopt);
}

}  // namespace
}  // namespace dgemma
