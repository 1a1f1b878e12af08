// The pinned chat forms: request -> pins + prompt (assistant prefill, forced tool calls, JSON), the
// json_schema subset (layout, validation, refusals) and the check/retry logic of Generation against a
// fake engine that honours pins by overlaying them on its scripted replies.
#include <gtest/gtest.h>

#include <deque>

#include "api/api_error.h"
#include "api/generation.h"
#include "api/openai_request.h"
#include "api/prompt_builder.h"
#include "api/structured_output.h"
#include "api_test_util.h"
#include "util/error.h"

namespace dgemma {
namespace {

using Ids = std::vector<int32_t>;

RequestPolicy policy() {
  RequestPolicy p;
  p.served_names = {"dg"};
  p.vocab_size = 262144;
  p.is_allowed_template_kwarg = [](std::string_view k) { return k == "enable_thinking"; };
  return p;
}

const Json kTools = Json::array(
    {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}},
     {{"type", "function"}, {"function", {{"name", "get_time"}}}}});

Json chat(Json extra = Json::object()) {
  Json b = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

Json prefill_messages(const std::string& text) {
  return Json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", text}}});
}

void expect_error(const Json& body, ErrorKind kind, const std::string& param) {
  try {
    parse_chat_request(body, policy());
    ADD_FAILURE() << "accepted: " << body.dump();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << body.dump() << ": " << e.what();
    EXPECT_EQ(e.param(), param) << body.dump() << ": " << e.what();
  }
}

// ---- request parsing ----

TEST(PinnedForms, ParsesEachForm) {
  auto r = parse_chat_request(chat({{"tools", kTools}, {"tool_choice", "required"}}), policy());
  EXPECT_EQ(r.tool_choice, ToolChoiceMode::kRequired);
  EXPECT_EQ(r.tool_names, (std::vector<std::string>{"get_weather", "get_time"}));
  // A forced call needs no --enable-auto-tool-choice (vLLM: only "auto" does).
  r = parse_chat_request(chat({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}),
                         policy());
  EXPECT_EQ(r.tool_choice, ToolChoiceMode::kNamed);
  EXPECT_EQ(r.tool_choice_name, "get_time");
  r = parse_chat_request(chat({{"response_format", {{"type", "json_object"}}}}), policy());
  EXPECT_EQ(r.response_format, ResponseFormat::kJsonObject);
  const Json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "string"}}}}}, {"required", {"a"}}};
  r = parse_chat_request(
      chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", schema}}}}}}),
      policy());
  EXPECT_EQ(r.response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(r.response_schema, schema);
  r = parse_chat_request({{"messages", prefill_messages("Sure")}, {"continue_final_message", true}}, policy());
  EXPECT_TRUE(r.continue_final_message);
  EXPECT_FALSE(r.add_generation_prompt);  // vLLM: omitted add_generation_prompt + continue -> no generation prompt
  r = parse_chat_request(
      {{"messages", prefill_messages("Sure")}, {"continue_final_message", true}, {"add_generation_prompt", false}}, policy());
  EXPECT_TRUE(r.continue_final_message);
  r = parse_chat_request(chat({{"echo", true}}), policy());
  EXPECT_TRUE(r.echo);
}

TEST(PinnedForms, BadRequestsAre400sNamingTheParameter) {
  const auto K = ErrorKind::kInvalidArgument;
  const auto U = ErrorKind::kUnsupported;
  const Json pre = prefill_messages("Sure");
  expect_error({{"messages", pre}, {"continue_final_message", true}, {"add_generation_prompt", true}}, K,
               "continue_final_message");
  expect_error(chat({{"continue_final_message", true}}), K, "continue_final_message");  // last is a user message
  expect_error({{"messages", prefill_messages("  ")}, {"continue_final_message", true}}, K, "messages[1].content");
  expect_error({{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}},
                                          {{"role", "assistant"}, {"content", "x"},
                                           {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{}"}}}}}}}})},
                {"continue_final_message", true}},
               U, "messages[1].tool_calls");
  expect_error({{"messages", pre}, {"continue_final_message", true}, {"response_format", {{"type", "json_object"}}}}, U,
               "continue_final_message");
  expect_error({{"messages", pre}, {"continue_final_message", true}, {"tools", kTools}, {"tool_choice", "required"}}, U,
               "continue_final_message");
  expect_error(chat({{"tools", kTools}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}), U,
               "response_format");
  expect_error(chat({{"tool_choice", "required"}}), K, "tool_choice");
  expect_error(chat({{"response_format", {{"type", "json_schema"}}}}), K, "response_format.json_schema");
  expect_error(chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}), K,
               "response_format.json_schema.schema");
  expect_error(chat({{"response_format", {{"type", "regex"}}}}), U, "response_format");
  // /v1/completions has no JSON forms.
  try {
    parse_completion_request({{"prompt", "x"}, {"response_format", {{"type", "json_object"}}}}, policy());
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), U);
    EXPECT_EQ(e.param(), "response_format");
  }
}

Json with_schema(const Json& schema) {
  return chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}});
}

TEST(PinnedForms, SchemasBeyondTheSubsetAreRefusedNamingTheKeyword) {
  const auto K = ErrorKind::kInvalidArgument;
  const auto U = ErrorKind::kUnsupported;
  const std::string root = "response_format.json_schema.schema";
  struct Case {
    Json schema;
    ErrorKind kind;
    std::string param;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{{"type", "string"}, {"pattern", "^a"}}, U, root, "'pattern'"},
      {{{"anyOf", {{{"type", "string"}}}}}, U, root, "'anyOf'"},
      {{{"$ref", "#/$defs/x"}}, U, root, "'$ref'"},
      {{{"type", {"string", "null"}}}, U, root + ".type", "list of types"},
      {{{"type", "object"}, {"properties", {{"a", {{"type", "string"}, {"format", "date"}}}}}}, U, root + ".properties.a",
       "'format'"},
      {{{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}, U, root + ".additionalProperties", "true or false"},
      {{{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}}}}, U, root + ".items", "'minimum'"},
      {{{"properties", {{"a", {{"type", "string"}}}}}}, U, root, "only with type"},
      {{{"type", "string"}, {"items", {{"type", "string"}}}}, U, root, "only with type"},
      {true, U, root, "boolean schemas"},
      {{{"type", "text"}}, K, root + ".type", "must be one of"},
      {{{"type", "object"}, {"required", "a"}}, K, root + ".required", "array of strings"},
      {{{"type", "object"}, {"required", {"a", "a"}}}, K, root + ".required", "twice"},
      {{{"enum", Json::array()}}, K, root + ".enum", "non-empty"},
      {{{"type", "integer"}, {"enum", {1, "two"}}}, K, root + ".enum", "not of type integer"},
  };
  for (const auto& c : cases) {
    try {
      parse_chat_request(with_schema(c.schema), policy());
      ADD_FAILURE() << "accepted " << c.schema.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << c.schema.dump();
      EXPECT_EQ(e.param(), c.param) << c.schema.dump();
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
  }
  // Annotations are accepted.
  EXPECT_NO_THROW(parse_chat_request(
      with_schema({{"type", "object"}, {"title", "T"}, {"description", "d"}, {"$schema", "x"},
                   {"properties", {{"a", {{"type", "integer"}, {"default", 1}, {"examples", {1}}}}}}}),
      policy()));
}

// ---- layout and validation ----

TEST(PinnedForms, SchemaLayoutPinsKeysInRequiredOrder) {
  const Json schema = {
      {"type", "object"},
      {"properties",
       {{"name", {{"type", "string"}}},
        {"age", {{"type", "integer"}}},
        {"kind", {{"enum", {"cat", "dog"}}}},
        {"tags", {{"type", "array"}, {"items", {{"type", "string"}}}}},
        {"meta", {{"type", "object"}, {"properties", {{"ok", {{"type", "boolean"}}}}}, {"required", {"ok"}},
                  {"additionalProperties", false}}},
        {"v", {{"const", 2}}},
        {"z", {{"type", "null"}}}}},
      {"required", {"name", "age", "kind", "tags", "meta", "v", "z"}},
      {"additionalProperties", false}};
  const auto layout = schema_layout(schema);
  using P = LayoutPiece;
  const std::vector<P> want = {
      {"{\"name\": \"", SchemaRooms::kString},
      {"\", \"age\": ", SchemaRooms::kInteger},
      {", \"kind\": ", 7},  // longest enum value "\"cat\"" (5 bytes) + 2
      {", \"tags\": [", SchemaRooms::kArray},
      {"], \"meta\": {\"ok\": ", SchemaRooms::kBoolean},
      {"}, \"v\": 2, \"z\": null}", 0},
  };
  ASSERT_EQ(layout.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(layout[i].text, want[i].text) << i;
    EXPECT_EQ(layout[i].room, want[i].room) << i;
  }
  // Optional properties leave a gap before the closing brace; so does an open object without properties.
  const auto open = schema_layout({{"type", "object"}, {"properties", {{"a", {{"type", "number"}}}, {"b", {{"type", "number"}}}}},
                                   {"required", {"b"}}});
  ASSERT_EQ(open.size(), 2u);
  EXPECT_EQ(open[0].text, "{\"b\": ");
  EXPECT_EQ(open[0].room, SchemaRooms::kNumber + SchemaRooms::kObjectRest);
  EXPECT_EQ(open[1].text, "}");
  const auto any = schema_layout({{"type", "object"}});
  ASSERT_EQ(any.size(), 2u);
  EXPECT_EQ(any[0].text, "{");
  EXPECT_EQ(any[0].room, SchemaRooms::kObjectRest);
  const auto closed_empty = schema_layout({{"type", "object"}, {"additionalProperties", false}});
  ASSERT_EQ(closed_empty.size(), 1u);
  EXPECT_EQ(closed_empty[0].text, "{}");
  // A top-level string.
  const auto str = schema_layout({{"type", "string"}});
  ASSERT_EQ(str.size(), 2u);
  EXPECT_EQ(str[0].text, "\"");
  EXPECT_EQ(str[1].text, "\"");
}

TEST(PinnedForms, LayoutPinsAreTokenisedAtTheirOffsets) {
  DG_API_TOKENIZER(tok);
  const std::vector<LayoutPiece> layout = {{"{\"a\": \"", 5}, {"\", \"<|turn>\": ", 3}, {"}", 0}};
  int64_t length = 0;
  const auto pins = layout_pins(layout, *tok, false, length);
  ASSERT_EQ(pins.size(), 3u);
  const Ids t0 = tok->encode("{\"a\": \"", false), t1 = tok->encode("\", \"<|turn>\": ", false), t2 = tok->encode("}", false);
  EXPECT_EQ(pins[0].offset, 0);
  EXPECT_EQ(pins[0].tokens, t0);
  EXPECT_EQ(pins[1].offset, static_cast<int64_t>(t0.size()) + 5);
  EXPECT_EQ(pins[1].tokens, t1);
  EXPECT_EQ(pins[2].offset, static_cast<int64_t>(t0.size() + t1.size()) + 8);
  EXPECT_EQ(length, pins[2].offset + static_cast<int64_t>(t2.size()));
  // A key that spells a control token stays text.
  const auto turn = tok->token_to_id("<|turn>");
  ASSERT_TRUE(turn);
  EXPECT_EQ(std::count(pins[1].tokens.begin(), pins[1].tokens.end(), *turn), 0);
  EXPECT_EQ(tok->decode(pins[1].tokens), "\", \"<|turn>\": ");
}

TEST(PinnedForms, ValidationFollowsTheSubset) {
  const Json schema = {{"type", "object"},
                       {"properties",
                        {{"n", {{"type", "integer"}}},
                         {"s", {{"type", "string"}}},
                         {"e", {{"enum", {"a", 1}}}},
                         {"l", {{"type", "array"}, {"items", {{"type", "boolean"}}}}}}},
                       {"required", {"n", "s"}},
                       {"additionalProperties", false}};
  EXPECT_FALSE(validate_against_schema(Json::parse(R"({"n": 3, "s": "x"})"), schema));
  EXPECT_FALSE(validate_against_schema(Json::parse(R"({"n": 3.0, "s": "x", "e": 1, "l": [true]})"), schema));
  auto why = validate_against_schema(Json::parse(R"({"n": 3.5, "s": "x"})"), schema);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "$.n: expected an integer");
  why = validate_against_schema(Json::parse(R"({"s": "x"})"), schema);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "$: missing required key \"n\"");
  why = validate_against_schema(Json::parse(R"({"n": 1, "s": "x", "q": 0})"), schema);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "$: unexpected key \"q\"");
  why = validate_against_schema(Json::parse(R"({"n": 1, "s": "x", "e": "b"})"), schema);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "$.e: not one of the enum values");
  why = validate_against_schema(Json::parse(R"({"n": 1, "s": "x", "l": [true, 0]})"), schema);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "$.l[1]: expected a boolean");

  EXPECT_FALSE(check_json_output("  {\"a\": 1}\n", nullptr));
  EXPECT_TRUE(check_json_output("{\"a\": 1} and more", nullptr));
  EXPECT_TRUE(check_json_output("[1]", nullptr));  // json_object: an object
  EXPECT_TRUE(check_json_output("", nullptr));
  EXPECT_FALSE(check_json_output("{\"n\": 1, \"s\": \"\"}", &schema));

  const std::vector<std::string> names = {"get_weather"};
  EXPECT_FALSE(check_forced_tool_calls({{"get_weather"}}, " \n", names));
  EXPECT_TRUE(check_forced_tool_calls({}, "", names));
  EXPECT_TRUE(check_forced_tool_calls({{"get_time"}}, "", names));
  EXPECT_TRUE(check_forced_tool_calls({{"get_weather"}}, "junk", names));
}

// ---- prompts ----

// Expected text: python3-jinja2 rendering the reference template (add_generation_prompt=False,
// bos_token "<bos>"), cut after the final message as transformers' continue_final_message does.
TEST(PinnedForms, PrefillIsTheTemplatesContinuationSplitFromThePrompt) {
  DG_API_TOKENIZER(tok);
  {
    PromptBuilder pb(*tok, api_test::diffusiongemma_template());
    ChatTemplateOptions o;
    o.add_generation_prompt = false;
    // The template strips the trailing spaces: the continuation starts from "is".
    const auto c = pb.chat_continue(prefill_messages("Sure, here is  "), nullptr, o, "Sure, here is  ");
    EXPECT_EQ(tok->decode(c.prompt), "<bos><|turn>user\nHi<turn|>\n<|turn>model\n");
    EXPECT_EQ(tok->decode(c.prefill), "Sure, here is");
    Ids all = c.prompt;
    all.insert(all.end(), c.prefill.begin(), c.prefill.end());
    EXPECT_EQ(all, tok->encode("<bos><|turn>user\nHi<turn|>\n<|turn>model\nSure, here is", true));
  }
  PromptBuilder pb(*tok, api_test::diffusiongemma_template());
  ChatTemplateOptions o;
  o.add_generation_prompt = false;
  // The July template strips thought blocks from model turns: the text is not there to continue.
  const std::string thought = "<|channel>thought\nhmm<channel|>";
  try {
    pb.chat_continue(prefill_messages(thought), nullptr, o, thought);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.param(), "continue_final_message");
  }
}

TEST(PinnedForms, ForcedOpeningsArePinnedAtTheStart) {
  DG_API_TOKENIZER(tok);
  auto r = parse_chat_request(chat({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}),
                              policy());
  auto plan = plan_answer_pins(r, *tok, false);
  ASSERT_EQ(plan.pins.size(), 1u);
  EXPECT_EQ(plan.pins[0].offset, 0);
  EXPECT_EQ(plan.pins[0].tokens, tok->encode("<|tool_call>call:get_time{", true));
  EXPECT_EQ(plan.pins[0].tokens[0], *tok->token_to_id("<|tool_call>"));
  EXPECT_EQ(plan.min_tokens, static_cast<int64_t>(plan.pins[0].tokens.size()));
  r = parse_chat_request(chat({{"tools", kTools}, {"tool_choice", "required"}}), policy());
  plan = plan_answer_pins(r, *tok, false);
  ASSERT_EQ(plan.pins.size(), 1u);
  EXPECT_EQ(tok->decode(plan.pins[0].tokens), "<|tool_call>call:");
  // A prompt that ends inside an open thought channel: the channel is closed first.
  r = parse_chat_request(chat({{"response_format", {{"type", "json_object"}}}}), policy());
  plan = plan_answer_pins(r, *tok, true);
  ASSERT_EQ(plan.pins.size(), 2u);
  EXPECT_EQ(plan.pins[0].tokens, (Ids{*tok->token_to_id("<channel|>")}));
  EXPECT_EQ(plan.pins[1].offset, 1);
  EXPECT_EQ(tok->decode(plan.pins[1].tokens), "{");
  EXPECT_EQ(plan.min_tokens, 2);
  r = parse_chat_request(chat(), policy());
  EXPECT_TRUE(plan_answer_pins(r, *tok, false).pins.empty());
}

// ---- Generation: checks and retries ----

// Answers each submit with the next scripted reply (text with control tokens), overlaid with the
// request's pins, in one canvas, then kStop. Records what was submitted.
class PinFakeEngine : public EngineInterface {
 public:
  PinFakeEngine(const Tokenizer& tok, std::vector<std::string> replies) : tok_(tok), replies_(replies.begin(), replies.end()) {}
  std::shared_ptr<RequestStream> submit(GenerationRequest request) override {
    auto stream = std::make_shared<RequestStream>(submitted.size() + 1);
    Ids out = tok_.encode(replies_.empty() ? std::string("(no reply)") : replies_.front(), true);
    if (!replies_.empty()) replies_.pop_front();
    for (const auto& span : request.params.pins)
      for (size_t i = 0; i < span.tokens.size(); ++i) {
        const size_t at = static_cast<size_t>(span.offset) + i;
        if (out.size() <= at) out.resize(at + 1, 0);
        out[at] = span.tokens[i];
      }
    submitted.push_back(std::move(request));
    RequestEvent canvas;
    canvas.kind = RequestEvent::Kind::kCanvas;
    canvas.tokens = out;
    canvas.steps = 4;
    stream->push(std::move(canvas));
    RequestEvent fin;
    fin.kind = RequestEvent::Kind::kFinished;
    fin.reason = FinishReason::kStop;
    stream->push(std::move(fin));
    return stream;
  }
  EngineStats stats() const override {
    EngineStats s;
    s.canvas_length = 256;
    return s;
  }
  int64_t max_model_len() const override { return 8192; }
  int vocab_size() const override { return tok_.vocab_size(); }

  std::vector<GenerationRequest> submitted;

 private:
  const Tokenizer& tok_;
  std::deque<std::string> replies_;
};

struct FakeRun {
  std::unique_ptr<PinFakeEngine> engine;
  std::unique_ptr<Generation> gen;
};

FakeRun start(const Tokenizer& tok, const Json& body, std::vector<std::string> replies, std::vector<PinnedSpan> pins,
          int64_t prefill = 0) {
  FakeRun r;
  r.engine = std::make_unique<PinFakeEngine>(tok, std::move(replies));
  GenerationContext ctx;
  ctx.engine = r.engine.get();
  ctx.tokenizer = &tok;
  PreparedPrompt p;
  p.tokens = tok.encode("<bos><|turn>user\nhi<turn|>\n<|turn>model\n", true);
  p.max_tokens = 64;
  p.pins = std::move(pins);
  p.prefill_tokens = prefill;
  std::vector<PreparedPrompt> prompts;
  prompts.push_back(std::move(p));
  r.gen = std::make_unique<Generation>(ctx, parse_chat_request(body, policy()), std::move(prompts), "chatcmpl-test", 0.0);
  r.gen->start();
  return r;
}

TEST(PinnedForms, ARejectedReplyIsRetriedWithTheNextSeed) {
  DG_API_TOKENIZER(tok);
  const Json body = chat({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                          {"seed", 7}, {"n", 2}});
  auto plan = plan_answer_pins(parse_chat_request(body, policy()), *tok, false);
  const std::string call = "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";
  // Choice 0: a reply that leaves text outside the call, then a valid one. Choice 1: valid at once.
  // (Replies are taken in submit order: choice 0, choice 1, then choice 0's retry.)
  FakeRun r = start(*tok, body, {"<|tool_call>call:get_weather{city:1}<tool_call|> and more", call, call}, plan.pins);
  ASSERT_TRUE(r.gen->wait_done(std::chrono::milliseconds(2000)));
  ASSERT_FALSE(r.gen->failed()) << r.gen->error_message();
  ASSERT_EQ(r.engine->submitted.size(), 3u);
  EXPECT_EQ(*r.engine->submitted[0].params.seed, 7u);
  EXPECT_EQ(*r.engine->submitted[1].params.seed, 8u);
  EXPECT_EQ(*r.engine->submitted[2].params.seed, 7u + kRetrySeedStride);
  for (const auto& g : r.engine->submitted) {
    ASSERT_EQ(g.params.pins.size(), 1u);
    EXPECT_EQ(tok->decode(g.params.pins[0].tokens), "<|tool_call>call:get_weather{");
  }
  const Json resp = r.gen->response_json();
  for (int i = 0; i < 2; ++i) {
    const Json& m = resp["choices"][i]["message"];
    EXPECT_TRUE(m["content"].is_null()) << resp.dump();
    ASSERT_EQ(m["tool_calls"].size(), 1u) << resp.dump();
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
    EXPECT_EQ(resp["choices"][i]["finish_reason"], "tool_calls");
  }
  EXPECT_EQ(resp["usage"]["dgemma"]["retries"], 1);
  EXPECT_EQ(resp["usage"]["dgemma"]["canvases"], 3);
}

TEST(PinnedForms, AReplyThatNeverPassesIsAModelError) {
  DG_API_TOKENIZER(tok);
  const Json body = chat({{"response_format", {{"type", "json_object"}}}});
  FakeRun r = start(*tok, body, {"{oops", "{\"a\": ", "{} trailing"}, {PinnedSpan{0, tok->encode("{")}});
  ASSERT_TRUE(r.gen->wait_done(std::chrono::milliseconds(2000)));
  ASSERT_TRUE(r.gen->failed());
  EXPECT_EQ(r.gen->error_status(), 422) << "not a status the official clients retry";
  EXPECT_EQ(r.gen->error_type(), "model_error");
  EXPECT_EQ(r.gen->error_code(), "invalid_model_output");
  EXPECT_NE(r.gen->error_message().find("after 3 attempts"), std::string::npos) << r.gen->error_message();
  EXPECT_NE(r.gen->error_message().find("not valid JSON"), std::string::npos) << r.gen->error_message();
  EXPECT_EQ(r.engine->submitted.size(), static_cast<size_t>(kMaxStructuredAttempts));
  // Unseeded attempts leave the seed to the engine (fresh noise each time).
  for (const auto& g : r.engine->submitted) EXPECT_FALSE(g.params.seed.has_value());
}

TEST(PinnedForms, SchemaRepliesAreValidatedAndStreamedOnlyOnceTheyPass) {
  DG_API_TOKENIZER(tok);
  const Json schema = {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}, {"required", {"n"}}};
  Json body = with_schema(schema);
  body["stream"] = true;
  FakeRun r = start(*tok, body, {"{\"n\": \"seven\"}", "{\"n\": 7}"}, {PinnedSpan{0, tok->encode("{\"n\": ")}});
  std::string sse = r.gen->stream_prologue();
  for (int i = 0; i < 100; ++i) {
    std::string out;
    const auto st = r.gen->stream_step(std::chrono::milliseconds(100), out);
    sse += out;
    if (st == Generation::Status::kDone) break;
  }
  EXPECT_EQ(sse.find("seven"), std::string::npos) << sse;  // the rejected attempt never reaches the client
  EXPECT_NE(sse.find(R"("content":"{\"n\": 7}")"), std::string::npos) << sse;
  EXPECT_NE(sse.find("data: [DONE]"), std::string::npos) << sse;
  EXPECT_EQ(r.engine->submitted.size(), 2u);
}

TEST(PinnedForms, APrefillIsPinnedButNotReturned) {
  DG_API_TOKENIZER(tok);
  const Json body = {{"messages", prefill_messages("Sure, here")}, {"continue_final_message", true}, {"logprobs", true}};
  const Ids prefill = tok->encode("Sure, here");
  FakeRun r = start(*tok, body, {"Sure, here is the answer."}, {PinnedSpan{0, prefill}}, static_cast<int64_t>(prefill.size()));
  ASSERT_TRUE(r.gen->wait_done(std::chrono::milliseconds(2000)));
  ASSERT_FALSE(r.gen->failed()) << r.gen->error_message();
  // The engine may generate max_tokens after the prefill.
  EXPECT_EQ(r.engine->submitted[0].params.max_tokens, 64 + static_cast<int64_t>(prefill.size()));
  const Json resp = r.gen->response_json();
  EXPECT_EQ(resp["choices"][0]["message"]["content"], " is the answer.");
  const int64_t answer = static_cast<int64_t>(tok->encode(" is the answer.").size());
  EXPECT_EQ(resp["usage"]["completion_tokens"], answer);
  EXPECT_EQ(resp["choices"][0]["logprobs"]["content"].size(), static_cast<size_t>(answer));
  const int64_t prompt = static_cast<int64_t>(tok->encode("<bos><|turn>user\nhi<turn|>\n<|turn>model\n", true).size());
  EXPECT_EQ(resp["usage"]["prompt_tokens"], prompt + static_cast<int64_t>(prefill.size()));
}

TEST(PinnedForms, ChatEchoPrependsTheLastMessageOfTheSameRole) {
  DG_API_TOKENIZER(tok);
  const Json body = {{"messages", prefill_messages("Sure, here")}, {"continue_final_message", true}, {"echo", true}};
  const Ids prefill = tok->encode("Sure, here");
  FakeRun r;
  r.engine = std::make_unique<PinFakeEngine>(*tok, std::vector<std::string>{"Sure, here it is."});
  GenerationContext ctx;
  ctx.engine = r.engine.get();
  ctx.tokenizer = tok;
  PreparedPrompt p;
  p.tokens = tok->encode("<bos><|turn>user\nHi<turn|>\n<|turn>model\n", true);
  p.max_tokens = 32;
  p.pins = {PinnedSpan{0, prefill}};
  p.prefill_tokens = static_cast<int64_t>(prefill.size());
  p.echo_text = "Sure, here";
  std::vector<PreparedPrompt> prompts;
  prompts.push_back(std::move(p));
  r.gen = std::make_unique<Generation>(ctx, parse_chat_request(body, policy()), std::move(prompts), "chatcmpl-e", 0.0);
  r.gen->start();
  ASSERT_TRUE(r.gen->wait_done(std::chrono::milliseconds(2000)));
  EXPECT_EQ(r.gen->response_json()["choices"][0]["message"]["content"], "Sure, here it is.");
}

}  // namespace
}  // namespace dgemma
