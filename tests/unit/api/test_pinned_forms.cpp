// The pinned chat forms: request -> pins + prompt (assistant prefill), the parsing of the guided forms
// (response_format, structured_outputs, guided_*, forced tool calls) and their refusals, and Generation
// against a fake engine that honours pins by overlaying them on its scripted replies.
#include <gtest/gtest.h>

#include <deque>

#include "api/api_error.h"
#include "api/generation.h"
#include "api/openai/openai_request.h"
#include "api/openai/structured_output.h"
#include "api_test_util.h"
#include "text/chat/prompt_builder.h"
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
  ASSERT_TRUE(r.guided);
  EXPECT_EQ(r.guided->spec.kind, guided::ConstraintKind::kJsonObject);
  const Json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "string"}}}}}, {"required", {"a"}}};
  r = parse_chat_request(
      chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", schema}}}}}}),
      policy());
  ASSERT_TRUE(r.guided);
  EXPECT_EQ(r.guided->spec.kind, guided::ConstraintKind::kJsonSchema);
  EXPECT_EQ(r.guided->param, "response_format.json_schema.schema");
  EXPECT_EQ(r.guided->schema_path, (std::vector<std::string>{"response_format", "json_schema", "schema"}));
  // vLLM's structured_outputs and guided_* forms, on both endpoints.
  r = parse_chat_request(chat({{"structured_outputs", {{"regex", "[a-z]+"}}}}), policy());
  ASSERT_TRUE(r.guided);
  EXPECT_EQ(r.guided->spec.kind, guided::ConstraintKind::kRegex);
  EXPECT_EQ(r.guided->spec.text, "[a-z]+");
  r = parse_completion_request({{"prompt", "x"}, {"guided_choice", {"yes", "no"}}}, policy());
  ASSERT_TRUE(r.guided);
  EXPECT_EQ(r.guided->spec.choices, (std::vector<std::string>{"yes", "no"}));
  r = parse_completion_request({{"prompt", "x"}, {"guided_json", R"({"type": "integer"})"}}, policy());
  ASSERT_TRUE(r.guided);
  EXPECT_EQ(r.guided->spec.text, R"({"type": "integer"})");
  r = parse_completion_request({{"prompt", "x"}, {"response_format", {{"type", "json_object"}}}}, policy());
  ASSERT_TRUE(r.guided);
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
  expect_error(chat({{"structured_outputs", {{"grammar", "root ::= \"a\""}}}}), U,
               "structured_outputs.grammar");
  expect_error(chat({{"guided_grammar", "root ::= \"a\""}}), U, "guided_grammar");
  expect_error(chat({{"guided_regex", "a"}, {"guided_choice", {"a"}}}), K, "guided_choice");
  expect_error(chat({{"guided_json", {{"type", "object"}, {"patternProperties", Json::object()}}}}), U,
               "guided_json");
  expect_error(chat({{"guided_regex", "(a"}}), K, "guided_regex");
  expect_error(chat({{"tool_choice", "required"}}), K, "tool_choice");
  expect_error(chat({{"response_format", {{"type", "json_schema"}}}}), K, "response_format.json_schema");
  expect_error(chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}), K,
               "response_format.json_schema.schema");
  expect_error(chat({{"response_format", {{"type", "regex"}}}}), U, "response_format");
}

// ---- layout and validation ----

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
