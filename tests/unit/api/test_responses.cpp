// The Responses API pieces without a server: a request as the chat request it runs as, a chat result as
// a Response object and as the Responses stream events, the bounded store of finished responses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/http/sse.h"
#include "api/responses/responses_output.h"
#include "api/responses/responses_request.h"
#include "api/responses/responses_store.h"
#include "util/error.h"

namespace dgemma {
namespace {

Json parse(const Json& body, const Json* previous = nullptr) {
  return parse_responses_request(body, previous).chat_body;
}

std::string param_of(const Json& body) {
  try {
    parse_responses_request(body, nullptr);
  } catch (const Error& e) {
    return e.param();
  }
  return "(accepted)";
}

TEST(ResponsesRequest, TextInputAndInstructions) {
  const Json chat = parse(Json{{"input", "Hi"},
                               {"instructions", "Be brief."},
                               {"max_output_tokens", 20},
                               {"temperature", 0.5},
                               {"model", "m"}});
  EXPECT_EQ(chat["messages"],
            Json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])"));
  EXPECT_EQ(chat["max_tokens"], 20);
  EXPECT_EQ(chat["temperature"], 0.5);
  EXPECT_EQ(chat["model"], "m");
  EXPECT_FALSE(chat.contains("stream"));
  EXPECT_EQ(parse(Json{{"input", "x"}, {"stream", true}})["stream_options"],
            Json::parse(R"({"include_usage":true})"));
}

TEST(ResponsesRequest, ItemsBecomeChatMessages) {
  const Json input = Json::parse(R"([
    {"role": "user", "content": [{"type": "input_text", "text": "Weather in "}, {"type": "input_text", "text": "Paris?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Call the tool."}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
    {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": ""},
    {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 18 C."}]}
  ])");
  const ResponsesRequest r = parse_responses_request(Json{{"input", input}}, nullptr);
  const Json expected = Json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "reasoning_content": "Call the tool.", "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C", "name": "get_weather"},
    {"role": "tool", "tool_call_id": "call_2", "content": "noon", "name": "get_time"},
    {"role": "assistant", "content": "It is 18 C."}
  ])");
  EXPECT_EQ(r.conversation, expected);
  EXPECT_EQ(r.chat_body["messages"], expected) << "no instructions: the conversation as it is";
}

TEST(ResponsesRequest, PreviousConversationGoesFirstInstructionsAreNotCarried) {
  const Json previous = Json::parse(R"([{"role":"user","content":"A"},{"role":"assistant","content":"B"}])");
  const ResponsesRequest r = parse_responses_request(
      Json{{"input", "C"}, {"instructions", "I"}, {"previous_response_id", "resp_1"}}, &previous);
  EXPECT_EQ(r.conversation, Json::parse(R"([{"role":"user","content":"A"},{"role":"assistant","content":"B"},
                                            {"role":"user","content":"C"}])"));
  EXPECT_EQ(r.chat_body["messages"][0], Json::parse(R"({"role":"system","content":"I"})"));
  EXPECT_EQ(r.chat_body["messages"].size(), 4u);
  EXPECT_EQ(r.shell["previous_response_id"], "resp_1");
}

TEST(ResponsesRequest, ToolsChoiceFormatReasoning) {
  const Json chat = parse(Json::parse(R"({"input": "x",
    "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "f"},
    "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": true}},
    "reasoning": {"effort": "high", "summary": "auto"}, "include": ["message.output_text.logprobs"], "top_logprobs": 2})"));
  EXPECT_EQ(
      chat["tools"],
      Json::parse(
          R"([{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}])"));
  EXPECT_EQ(chat["tool_choice"], Json::parse(R"({"type":"function","function":{"name":"f"}})"));
  EXPECT_EQ(
      chat["response_format"],
      Json::parse(
          R"({"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"},"strict":true}})"));
  EXPECT_EQ(chat["reasoning_effort"], "high");
  EXPECT_EQ(chat["logprobs"], true);
  EXPECT_EQ(chat["top_logprobs"], 2);
  // Empty tools with "auto": nothing for the chat request (it refuses an empty tools list).
  const Json none = parse(Json{{"input", "x"}, {"tools", Json::array()}, {"tool_choice", "auto"}});
  EXPECT_FALSE(none.contains("tools"));
  EXPECT_FALSE(none.contains("tool_choice"));
}

TEST(ResponsesRequest, InputImagePartsBecomeChatImageParts) {
  const Json chat = parse(Json::parse(R"({"input": [{"role": "user", "content": [
      {"type": "input_text", "text": "Compare "}, {"type": "input_text", "text": "these:"},
      {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
      {"type": "input_image", "image_url": {"url": "data:image/png;base64,BBBB"}},
      {"type": "input_text", "text": "Which is larger?"}]}]})"));
  EXPECT_EQ(chat["messages"], Json::parse(R"([{"role": "user", "content": [
      {"type": "text", "text": "Compare these:"},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,BBBB"}},
      {"type": "text", "text": "Which is larger?"}]}])"));
  // Without an image the content stays one string, as before.
  const Json text =
      parse(Json::parse(R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"},
      {"type": "input_text", "text": "b"}]}]})"));
  EXPECT_EQ(text["messages"][0]["content"], "ab");
}

TEST(ResponsesRequest, BadInputNamesTheField) {
  EXPECT_EQ(param_of(Json::object()), "input");
  EXPECT_EQ(param_of(Json{{"input", 3}}), "input");
  EXPECT_EQ(param_of(Json{{"input", Json::array()}}), "input");
  EXPECT_EQ(param_of(Json{{"input", Json::array({"hi"})}}), "input[0]");
  EXPECT_EQ(param_of(Json::parse(R"({"input": [{"role": "robot", "content": "x"}]})")), "input[0].role");
  EXPECT_EQ(param_of(Json::parse(
                R"({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "u"}]}]})")),
            "input[0].content[0].type");
  EXPECT_EQ(param_of(Json::parse(
                R"({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "u"}]}]})")),
            "input[0].content[0].file_id");
  EXPECT_EQ(param_of(Json::parse(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})")),
            "input[0].content[0].image_url");
  EXPECT_EQ(
      param_of(Json::parse(
          R"({"input": [{"role": "assistant", "content": [{"type": "input_image", "image_url": "u"}]}]})")),
      "input[0].content[0].type");
  EXPECT_EQ(
      param_of(Json::parse(R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})")),
      "input[0].call_id");
  EXPECT_EQ(param_of(Json::parse(
                R"({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1"}]})")),
            "input[0].arguments");
  EXPECT_EQ(param_of(Json::parse(R"({"input": [{"type": "function_call_output", "call_id": "c"}]})")),
            "input[0].output");
  EXPECT_EQ(param_of(Json::parse(R"({"input": [{"type": "item_reference", "id": "x"}]})")), "input[0].type");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "tools": [{"type": "web_search"}]})")), "tools[0].type");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "tools": [{"type": "function"}]})")), "tools[0].name");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "tool_choice": {"type": "file_search"}})")),
            "tool_choice.type");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "instructions": 5})")), "instructions");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "stream": "yes"})")), "stream");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "stream_options": {}})")), "stream_options");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "background": true})")), "background");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "truncation": "auto"})")), "truncation");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "include": ["nope"]})")), "include");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "text": {"verbosity": "low"}})")), "text.verbosity");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "reasoning": {"bogus": 1}})")), "reasoning.bogus");
  EXPECT_EQ(param_of(Json::parse(R"({"input": "x", "previous_response_id": 7})")), "previous_response_id");
  EXPECT_EQ(param_of(Json::parse(
                R"({"input": "x", "truncation": "disabled", "store": false, "metadata": {"a": "b"}})")),
            "(accepted)");
  EXPECT_EQ(parse_responses_request(Json{{"input", "x"}, {"frobnicate", 1}}, nullptr).unknown_keys,
            std::vector<std::string>{"frobnicate"});
}

TEST(ResponsesRequest, ChatParamsRenamed) {
  EXPECT_EQ(rename_chat_param("max_tokens"), "max_output_tokens");
  EXPECT_EQ(rename_chat_param("messages[3].content"), "input");
  EXPECT_EQ(rename_chat_param("tools[2].function.parameters"), "tools[2].parameters");
  EXPECT_EQ(rename_chat_param("tool_choice.function.name"), "tool_choice.name");
  EXPECT_EQ(rename_chat_param("response_format.json_schema.schema"), "text.format");
  EXPECT_EQ(rename_chat_param("temperature"), "temperature");
}

Json shell() {
  return parse_responses_request(Json{{"input", "x"}, {"model", "m"}}, nullptr).shell;
}

// The events of a stream, parsed back: (event name, payload).
std::vector<std::pair<std::string, Json>> events_of(const std::string& sse) {
  std::vector<std::pair<std::string, Json>> out;
  size_t pos = 0, end;
  while ((end = sse.find("\n\n", pos)) != std::string::npos) {
    const std::string block = sse.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    out.emplace_back(block.substr(7, nl - 7), Json::parse(block.substr(nl + 7)));
  }
  return out;
}

Json chunk(Json delta, Json finish = nullptr) {
  return Json{
      {"object", "chat.completion.chunk"},
      {"model", "m"},
      {"choices",
       Json::array({Json{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", std::move(finish)}}})}};
}

TEST(ResponseBuilder, StreamEventsInOrderWithSequenceNumbers) {
  ResponseBuilder b(shell(), [](std::string_view t) { return static_cast<int64_t>(t.size()); });
  std::string out;
  b.start(out);
  b.on_chunk(chunk(Json{{"role", "assistant"}, {"content", ""}}), out);
  b.on_chunk(chunk(Json{{"reasoning_content", "think"}}), out);
  b.on_chunk(chunk(Json{{"content", "Hel"}}), out);
  b.on_chunk(chunk(Json{{"content", "lo"}}), out);
  b.on_chunk(
      chunk(Json{
          {"tool_calls",
           Json::parse(
               R"([{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\""}}])")}}),
      out);
  b.on_chunk(chunk(Json{{"tool_calls", Json::parse(R"([{"index":0,"function":{"arguments":":1}"}}])")}}),
             out);
  b.on_chunk(chunk(Json::object(), "tool_calls"), out);
  b.on_chunk(Json{{"choices", Json::array()},
                  {"usage", Json{{"prompt_tokens", 7},
                                 {"completion_tokens", 9},
                                 {"total_tokens", 16},
                                 {"prompt_tokens_details", Json{{"cached_tokens", 4}}}}}},
             out);
  b.on_done(out);
  const auto ev = events_of(out);
  std::vector<std::string> names;
  for (size_t i = 0; i < ev.size(); ++i) {
    names.push_back(ev[i].first);
    EXPECT_EQ(ev[i].second["type"], ev[i].first);
    EXPECT_EQ(ev[i].second["sequence_number"], static_cast<int64_t>(i)) << "consecutive from 0";
  }
  EXPECT_EQ(names, (std::vector<std::string>{"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.completed"}));
  const Json& r = b.response();
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "think");
  EXPECT_EQ(r["output"][1]["type"], "message");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(r["output"][2]["type"], "function_call");
  EXPECT_EQ(r["output"][2]["call_id"], "call_a");
  EXPECT_EQ(r["output"][2]["arguments"], "{\"x\":1}");
  EXPECT_EQ(r["usage"]["input_tokens"], 7);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(r["usage"]["output_tokens"], 9);
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 5) << "the counter given (bytes here)";
  EXPECT_EQ(ev.back().second["response"], r);
  // Item ids tie the deltas to their items.
  EXPECT_EQ(ev[10].second["item_id"], r["output"][1]["id"]);
  EXPECT_EQ(ev[10].second["output_index"], 1);
  EXPECT_EQ(b.assistant_message(),
            Json::parse(R"({"role":"assistant","content":"Hello","reasoning_content":"think",
      "tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]})"));
}

TEST(ResponseBuilder, NonStreamedCompletionGivesTheSameOutput) {
  ResponseBuilder b(shell(), nullptr);
  b.from_completion(Json::parse(R"({"model":"m","choices":[{"index":0,"finish_reason":"length",
      "message":{"role":"assistant","content":"cut sho","reasoning_content":null}}],
      "usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}})"));
  const Json& r = b.response();
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], Json::parse(R"({"reason":"max_output_tokens"})"));
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0],
            Json::parse(R"({"type":"output_text","text":"cut sho","annotations":[],"logprobs":[]})"));
  EXPECT_EQ(r["model"], "m");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["id"].get<std::string>().rfind("resp_", 0), 0u);
}

TEST(ResponseBuilder, AStreamErrorFailsTheResponse) {
  ResponseBuilder b(shell(), nullptr);
  std::string out;
  b.start(out);
  b.on_chunk(chunk(Json{{"content", "par"}}), out);
  b.on_error(
      Json::parse(R"({"error":{"message":"engine error: device lost","type":"server_error","code":500}})"),
      out);
  const auto ev = events_of(out);
  EXPECT_EQ(ev.back().first, "response.failed");
  EXPECT_EQ(b.response()["status"], "failed");
  EXPECT_EQ(b.response()["error"]["message"], "engine error: device lost");
  EXPECT_EQ(ev[ev.size() - 2].first, "response.output_item.done") << "the open item is closed first";
}

TEST(ResponsesStore, LeastRecentlyUsedGoFirstWithinCountAndBytes) {
  ResponsesStore s(3, 1 << 20);
  for (const char* id : {"a", "b", "c"}) EXPECT_TRUE(s.put(id, Json{{"id", id}}, Json::array()));
  EXPECT_TRUE(s.response("a").has_value());  // a is now the most recent
  EXPECT_TRUE(s.put("d", Json{{"id", "d"}}, Json::array()));
  EXPECT_FALSE(s.response("b").has_value()) << "b was the least recently used";
  EXPECT_TRUE(s.conversation("a").has_value());
  EXPECT_EQ(s.size(), 3u);
  EXPECT_TRUE(s.erase("a"));
  EXPECT_FALSE(s.erase("a"));
  EXPECT_EQ(s.size(), 2u);

  ResponsesStore small(100, 200);
  const Json big = Json{{"text", std::string(150, 'x')}};
  EXPECT_TRUE(small.put("x", big, Json::array()));
  EXPECT_TRUE(small.put("y", big, Json::array())) << "x makes room";
  EXPECT_FALSE(small.response("x").has_value());
  EXPECT_LE(small.bytes(), 200u);
  EXPECT_FALSE(small.put("z", Json{{"text", std::string(300, 'x')}}, Json::array()))
      << "larger than the whole budget";
  EXPECT_TRUE(small.response("y").has_value());
}

}  // namespace
}  // namespace dgemma
