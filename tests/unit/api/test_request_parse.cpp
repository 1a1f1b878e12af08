// Request validation: a table of bad bodies (each must fail with the right kind and param) and what
// valid bodies turn into.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/api_error.h"
#include "api/openai/openai_request.h"
#include "util/error.h"

namespace dgemma {
namespace {

RequestPolicy policy() {
  RequestPolicy p;
  p.served_names = {"dg", "alias"};
  p.enable_auto_tool_choice = true;
  p.tool_parser = true;
  p.vocab_size = 1000;
  p.is_allowed_template_kwarg = [](std::string_view k) { return k == "enable_thinking" || k == "preserve_thinking"; };
  return p;
}

Json chat_body(Json extra = Json::object()) {
  Json b = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

struct BadCase {
  const char* name;
  bool chat;
  Json body;
  ErrorKind kind;
  std::string param;
};

const Json kTool = {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}};

std::vector<BadCase> bad_cases() {
  const auto K = ErrorKind::kInvalidArgument;
  const auto U = ErrorKind::kUnsupported;
  return {
      {"no messages", true, Json::object(), K, "messages"},
      {"messages not array", true, {{"messages", "x"}}, K, "messages"},
      {"empty messages", true, {{"messages", Json::array()}}, K, "messages"},
      {"message not object", true, {{"messages", {1}}}, K, "messages[0]"},
      {"no role", true, {{"messages", {Json::object()}}}, K, "messages[0].role"},
      {"bad role", true, {{"messages", {{{"role", "bot"}, {"content", "x"}}}}}, K, "messages[0].role"},
      {"user null content",
       true,
       {{"messages", {{{"role", "user"}, {"content", nullptr}}}}},
       K,
       "messages[0].content"},
      {"number content",
       true,
       {{"messages", {{{"role", "user"}, {"content", 3}}}}},
       K,
       "messages[0].content"},
      {"empty parts",
       true,
       {{"messages", {{{"role", "user"}, {"content", Json::array()}}}}},
       K,
       "messages[0].content"},
      {"image part without a url",
       true,
       {{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
       K,
       "messages[0].content[0].image_url"},
      {"audio part",
       true,
       {{"messages", {{{"role", "user"}, {"content", {{{"type", "input_audio"}}}}}}}},
       U,
       "messages[0].content[0]"},
      {"bad tool args json",
       true,
       {{"messages",
         {{{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{x"}}}}}}}}}},
       K,
       "messages[0].tool_calls[0].function.arguments"},
      {"args not object",
       true,
       {{"messages",
         {{{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "[1]"}}}}}}}}}},
       K,
       "messages[0].tool_calls[0].function.arguments"},
      {"unknown model", true, chat_body({{"model", "gpt"}}), ErrorKind::kNotFound, "model"},
      {"model number", true, chat_body({{"model", 1}}), K, "model"},
      {"max_tokens 0", true, chat_body({{"max_tokens", 0}}), K, "max_tokens"},
      {"max_tokens float", true, chat_body({{"max_tokens", 2.5}}), K, "max_tokens"},
      {"max_tokens huge unsigned", true, chat_body({{"max_tokens", 18446744073709551615ull}}), K,
       "max_tokens"},
      {"max_tokens bool", true, chat_body({{"max_tokens", true}}), K, "max_tokens"},
      {"conflict", true, chat_body({{"max_tokens", 1}, {"max_completion_tokens", 2}}), K,
       "max_completion_tokens"},
      {"n 17", true, chat_body({{"n", 17}}), K, "n"},
      {"temperature nan-ish", true, chat_body({{"temperature", "NaN"}}), K, "temperature"},
      {"temperature 2.5", true, chat_body({{"temperature", 2.5}}), K, "temperature"},
      {"top_p 0", true, chat_body({{"top_p", 0}}), K, "top_p"},
      {"repetition_penalty 0", true, chat_body({{"repetition_penalty", 0}}), K, "repetition_penalty"},
      {"top_k -2", true, chat_body({{"top_k", -2}}), K, "top_k"},
      {"seed float", true, chat_body({{"seed", 0.5}}), K, "seed"},
      {"seed too big", true, chat_body({{"seed", 9223372036854775808ull}}), K, "seed"},
      {"stop empty", true, chat_body({{"stop", ""}}), K, "stop"},
      {"stop 17", true, chat_body({{"stop", Json(std::vector<std::string>(17, "x"))}}), K, "stop"},
      {"stop long", true, chat_body({{"stop", std::string(2000, 'x')}}), K, "stop"},
      {"stop_token_ids range", true, chat_body({{"stop_token_ids", {1000}}}), K, "stop_token_ids"},
      {"stream string", true, chat_body({{"stream", "yes"}}), K, "stream"},
      {"stream_options no stream", true, chat_body({{"stream_options", {{"include_usage", true}}}}), K,
       "stream_options"},
      {"include_usage string", true,
       chat_body({{"stream", true}, {"stream_options", {{"include_usage", "y"}}}}), K,
       "stream_options.include_usage"},
      {"top_logprobs no logprobs", true, chat_body({{"top_logprobs", 1}}), K, "top_logprobs"},
      {"top_logprobs 21", true, chat_body({{"logprobs", true}, {"top_logprobs", 21}}), K, "top_logprobs"},
      {"top_k huge", true, chat_body({{"top_k", 4294967296ll}}), K, "top_k"},
      {"min_p -0.1", true, chat_body({{"min_p", -0.1}}), K, "min_p"},
      {"top_p string", true, chat_body({{"top_p", "0.9"}}), K, "top_p"},
      {"response_format grammar", true, chat_body({{"response_format", {{"type", "grammar"}}}}), U,
       "response_format"},
      {"response_format bad", true, chat_body({{"response_format", {{"type", "toml"}}}}), K,
       "response_format.type"},
      {"tools empty", true, chat_body({{"tools", Json::array()}}), K, "tools"},
      {"tool bad name", true,
       chat_body({{"tools", {{{"type", "function"}, {"function", {{"name", "bad name!"}}}}}}}), K,
       "tools[0].function.name"},
      {"tool_choice required no tools", true, chat_body({{"tool_choice", "required"}}), K, "tool_choice"},
      {"tool_choice missing", true,
       chat_body(
           {{"tools", {kTool}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}}),
       K, "tool_choice"},
      {"tool_choice no tools", true, chat_body({{"tool_choice", "auto"}}), K, "tool_choice"},
      {"kwargs nested", true, chat_body({{"chat_template_kwargs", {{"enable_thinking", {1}}}}}), K,
       "chat_template_kwargs.enable_thinking"},
      {"chat_template", true, chat_body({{"chat_template", "x"}}), U, "chat_template"},
      {"reasoning_effort bad", true, chat_body({{"reasoning_effort", "max"}}), K, "reasoning_effort"},
      {"entropy_bound 0", true, chat_body({{"entropy_bound", 0}}), K, "entropy_bound"},
      {"steps 2000", true, chat_body({{"max_denoising_steps", 2000}}), K, "max_denoising_steps"},
      {"t order", true, chat_body({{"t_min", 0.9}, {"t_max", 0.1}}), K, "t_max"},
      {"xargs unknown", true, chat_body({{"vllm_xargs", {{"temperature_boost", 1}}}}), K,
       "vllm_xargs.temperature_boost"},
      {"xargs bad value", true, chat_body({{"vllm_xargs", {{"entropy_bound", -1}}}}), K,
       "vllm_xargs.entropy_bound"},
      {"store true", true, chat_body({{"store", true}}), U, "store"},
      {"modalities audio", true, chat_body({{"modalities", {"audio"}}}), U, "modalities"},
      {"no prompt", false, Json::object(), K, "prompt"},
      {"prompt bool", false, {{"prompt", true}}, K, "prompt"},
      {"prompt ids range", false, {{"prompt", {1, 1000}}}, K, "prompt"},
      {"prompt negative", false, {{"prompt", {-1}}}, K, "prompt"},
      {"prompt list too long", false, {{"prompt", Json(std::vector<std::string>(65, "x"))}}, K, "prompt"},
      {"choices", false, {{"prompt", Json(std::vector<std::string>(5, "x"))}, {"n", 16}}, K, "n"},
      {"logprobs 6", false, {{"prompt", "x"}, {"logprobs", 6}}, K, "logprobs"},
      {"echo+logprobs", false, {{"prompt", "x"}, {"logprobs", 0}, {"echo", true}}, U, "echo"},
      {"suffix not a string", false, {{"prompt", "x"}, {"suffix", 3}}, K, "suffix"},
      {"infill with suffix",
       false,
       {{"prompt", "x"}, {"suffix", "y"}, {"infill_template", {"a", {{"max_tokens", 2}}}}},
       K,
       "infill_template"},
      {"infill not array", false, {{"prompt", "x"}, {"infill_template", "a"}}, K, "infill_template"},
      {"infill empty", false, {{"prompt", "x"}, {"infill_template", Json::array()}}, K, "infill_template"},
      {"infill no hole", false, {{"prompt", "x"}, {"infill_template", {"a", "b"}}}, K, "infill_template"},
      {"infill two holes in a row",
       false,
       {{"prompt", "x"}, {"infill_template", {"a", {{"max_tokens", 2}}, {{"max_tokens", 3}}}}},
       K,
       "infill_template"},
      {"infill hole without room",
       false,
       {{"prompt", "x"}, {"infill_template", {"a", Json::object()}}},
       K,
       "infill_template"},
      {"infill hole room 0",
       false,
       {{"prompt", "x"}, {"infill_template", {"a", {{"max_tokens", 0}}}}},
       K,
       "infill_template[1].max_tokens"},
      {"infill hole unknown key",
       false,
       {{"prompt", "x"}, {"infill_template", {"a", {{"max_tokens", 2}, {"n", 1}}}}},
       K,
       "infill_template"},
      {"infill empty text",
       false,
       {{"prompt", "x"}, {"infill_template", {"", {{"max_tokens", 2}}}}},
       K,
       "infill_template"},
      {"infill number piece", false, {{"prompt", "x"}, {"infill_template", {"a", 5}}}, K, "infill_template"},
      {"infill stream",
       false,
       {{"prompt", "x"}, {"stream", true}, {"infill_template", {"a", {{"max_tokens", 2}}}}},
       U,
       "infill_template"},
      {"infill with stop",
       false,
       {{"prompt", "x"}, {"stop", "q"}, {"infill_template", {"a", {{"max_tokens", 2}}}}},
       K,
       "stop"},
      {"messages on completions", false, {{"prompt", "x"}, {"messages", Json::array()}}, U, "messages"},
  };
}

TEST(RequestParse, BadRequestsNameTheirParameter) {
  const RequestPolicy p = policy();
  for (const auto& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    try {
      if (c.chat) parse_chat_request(c.body, p);
      else parse_completion_request(c.body, p);
      ADD_FAILURE() << "accepted: " << c.body.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << e.what();
      EXPECT_EQ(e.param(), c.param) << e.what();
      EXPECT_FALSE(std::string(e.what()).empty());
      const ApiError api = api_error_from(e);
      EXPECT_EQ(api.status, c.kind == ErrorKind::kNotFound ? 404 : 400);
    }
  }
}

TEST(RequestParse, ValidChatRequest) {
  const Json body = chat_body({{"model", "alias"},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}, {"include_previews", true}}},
                               {"max_completion_tokens", 77},
                               {"n", 2},
                               {"stop", "END"},
                               {"seed", -5},
                               {"temperature", 0},
                               {"top_p", 1},
                               {"top_k", -1},
                               {"ignore_eos", true},
                               {"logprobs", true},
                               {"top_logprobs", 0},
                               {"max_denoising_steps", 12},
                               {"vllm_xargs", {{"entropy_bound", 0.25}}},
                               {"t_min", 0.2},
                               {"t_max", 0.6},
                               {"tools", {kTool}},
                               {"parallel_tool_calls", false},
                               {"chat_template_kwargs", {{"enable_thinking", true}}},
                               {"user", "u"},
                               {"frobnicate", 1}});
  const ParsedRequest r = parse_chat_request(body, policy());
  EXPECT_EQ(r.model, "alias");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.include_previews);
  EXPECT_EQ(r.max_tokens, 77);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-5}));
  EXPECT_EQ(r.sampling.temperature, 0.0);
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_TRUE(r.logprobs);
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.max_denoising_steps, 12);
  EXPECT_EQ(r.sampling.entropy_bound, 0.25);
  EXPECT_EQ(r.sampling.t_min, 0.2);
  EXPECT_EQ(r.sampling.t_max, 0.6);
  EXPECT_EQ(r.tool_choice, ToolChoiceMode::kAuto);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(thinking_enabled(r.template_kwargs));
  EXPECT_EQ(r.unknown_keys, std::vector<std::string>{"frobnicate"});
}

TEST(RequestParse, Defaults) {
  const ParsedRequest r = parse_chat_request(chat_body(), policy());
  EXPECT_EQ(r.model, "dg");
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.sampling.temperature.has_value());
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_EQ(r.tool_choice, ToolChoiceMode::kNone);
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_TRUE(r.skip_special_tokens);
  // temperature 1 is the checkpoint schedule: nothing to pass on.
  EXPECT_FALSE(parse_chat_request(chat_body({{"temperature", 1}}), policy()).sampling.temperature.has_value());
}

TEST(RequestParse, ToolCallArgumentsStringsBecomeObjects) {
  const Json body = {{"messages",
                      {{{"role", "user"}, {"content", "x"}},
                       {{"role", "assistant"},
                        {"content", nullptr},
                        {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                                         {"function", {{"name", "f"}, {"arguments", "{\"a\": [1, 2]}"}}}}}}},
                       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}}}};
  const ParsedRequest r = parse_chat_request(body, policy());
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"], Json({{"a", {1, 2}}}));
  EXPECT_EQ(r.messages[2]["content"], "ok");
}

TEST(RequestParse, ReasoningEffortAndServerDefaults) {
  RequestPolicy p = policy();
  p.default_template_kwargs = {{"enable_thinking", true}};
  EXPECT_TRUE(thinking_enabled(parse_chat_request(chat_body(), p).template_kwargs));
  EXPECT_FALSE(thinking_enabled(parse_chat_request(chat_body({{"reasoning_effort", "none"}}), p).template_kwargs));
  EXPECT_TRUE(thinking_enabled(parse_chat_request(
      chat_body({{"reasoning_effort", "none"}, {"chat_template_kwargs", {{"enable_thinking", true}}}}), p)
                                   .template_kwargs));
  EXPECT_FALSE(thinking_enabled(
      parse_chat_request(chat_body({{"chat_template_kwargs", {{"enable_thinking", false}}}}), p).template_kwargs));
}

// As vLLM: a chat_template_kwargs key the template does not read is dropped, not an error.
TEST(RequestParse, TemplateKwargsTheTemplateDoesNotReadAreIgnored) {
  const ParsedRequest r = parse_chat_request(
      chat_body({{"chat_template_kwargs", {{"x", 1}, {"enable_thinking", true}}}}), policy());
  EXPECT_FALSE(r.template_kwargs.contains("x"));
  EXPECT_EQ(r.template_kwargs["enable_thinking"], true);
}

// --chat-template-content-format string and --enable-force-include-usage.
TEST(RequestParse, ContentFormatStringAndForcedUsage) {
  RequestPolicy p = policy();
  const Json parts = {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}};
  const Json body = {{"messages", {{{"role", "user"}, {"content", parts}}}}};
  EXPECT_EQ(parse_chat_request(body, p).messages[0]["content"], parts);
  p.content_as_string = true;
  EXPECT_EQ(parse_chat_request(body, p).messages[0]["content"], "a\nb");
  EXPECT_FALSE(parse_chat_request(chat_body({{"stream", true}}), p).include_usage);
  p.force_include_usage = true;
  EXPECT_TRUE(parse_chat_request(chat_body({{"stream", true}}), p).include_usage);
  EXPECT_TRUE(
      parse_chat_request(chat_body({{"stream", true}, {"stream_options", {{"include_usage", false}}}}), p)
          .include_usage);
  EXPECT_FALSE(parse_chat_request(chat_body(), p).include_usage);
}

TEST(RequestParse, StrictParamsRejectsUnknownKeys) {
  RequestPolicy p = policy();
  p.strict_params = true;
  try {
    parse_chat_request(chat_body({{"guided_jsn", 1}}), p);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.param(), "guided_jsn");
  }
}

TEST(RequestParse, CompletionPrompts) {
  const RequestPolicy p = policy();
  auto r = parse_completion_request({{"prompt", "hello"}}, p);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "hello");
  r = parse_completion_request({{"prompt", {5, 6, 7}}}, p);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{5, 6, 7}));
  r = parse_completion_request({{"prompt", {"a", {1, 2}}}, {"n", 3}, {"logprobs", 0}, {"echo", false}}, p);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_TRUE(r.prompts[1].is_tokens);
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.logprobs);
}

TEST(RequestParse, GreedyWithoutSeedGetsAFixedSeed) {
  // temperature 0 without a seed is reproducible: seed 0; an explicit seed and other temperatures are kept.
  EXPECT_EQ(parse_chat_request(chat_body({{"temperature", 0}}), policy()).sampling.seed, std::optional<uint64_t>(0));
  EXPECT_EQ(parse_chat_request(chat_body({{"temperature", 0}, {"seed", 7}}), policy()).sampling.seed,
            std::optional<uint64_t>(7));
  EXPECT_FALSE(parse_chat_request(chat_body({{"temperature", 0.7}}), policy()).sampling.seed.has_value());
  EXPECT_FALSE(parse_chat_request(chat_body(), policy()).sampling.seed.has_value());
}

TEST(RequestParse, SampleFiltersAreCarriedAndPenaltiesListedAsIgnored) {
  const ParsedRequest r = parse_chat_request(
      chat_body({{"top_p", 0.9}, {"top_k", 40}, {"min_p", 0.05}, {"presence_penalty", 0.5}, {"frequency_penalty", -0.5},
                 {"repetition_penalty", 1.1}}),
      policy());
  EXPECT_EQ(r.sampling.top_p, std::optional<double>(0.9));
  EXPECT_EQ(r.sampling.top_k, std::optional<int>(40));
  EXPECT_EQ(r.sampling.min_p, std::optional<double>(0.05));
  EXPECT_EQ(r.ignored_sampling, (std::vector<std::string>{"presence_penalty", "frequency_penalty", "repetition_penalty"}));
  const ParsedRequest none = parse_chat_request(chat_body(), policy());
  EXPECT_TRUE(none.ignored_sampling.empty());
  EXPECT_FALSE(none.sampling.top_k || none.sampling.top_p || none.sampling.min_p);
}

TEST(RequestParse, TopLogprobsCountsAlternatives) {
  EXPECT_EQ(parse_chat_request(chat_body({{"logprobs", true}, {"top_logprobs", 20}}), policy()).sampling.top_logprobs, 20);
  EXPECT_EQ(parse_chat_request(chat_body({{"logprobs", true}}), policy()).sampling.top_logprobs, 0);
  const ParsedRequest c = parse_completion_request({{"prompt", "x"}, {"logprobs", 5}}, policy());
  EXPECT_TRUE(c.sampling.logprobs);
  EXPECT_EQ(c.sampling.top_logprobs, 5);
  EXPECT_EQ(parse_completion_request({{"prompt", "x"}, {"logprobs", 0}}, policy()).sampling.top_logprobs, 0);
}

TEST(RequestParse, BodyMustBeAnObject) {
  for (const char* text : {"null", "[]", "\"s\"", "1", "", "{", "{} x", "{\"a\":1}}"}) {
    SCOPED_TRACE(text);
    EXPECT_THROW(parse_request_body(text), Error);
  }
  EXPECT_EQ(parse_request_body("{\"a\": 1}")["a"], 1);
  // Deep nesting fails cleanly instead of recursing.
  EXPECT_THROW(parse_request_body(std::string(100000, '[') + std::string(100000, ']')), Error);
}

TEST(ApiError, ContextLengthWordingMatchesVllm) {
  const ApiError e = context_length_error(4096, 4000, 200);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 4096 tokens. However, you requested 4200 tokens (4000 in the "
            "messages, 200 in the completion). Please reduce the length of the messages or completion.");
  const Json j = error_json(e);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(j["error"]["param"], "messages");
}

TEST(ApiError, CompletionOverflowNamesThePrompt) {
  const ApiError e = context_length_error(4096, 5000, std::nullopt, "prompt", /*at_least=*/true);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 4096 tokens. However, your request has at least 5000 input tokens. "
            "Please reduce the length of the input prompt.");
  EXPECT_EQ(context_length_error(4096, 4000, 200, "prompt").param, "prompt");
  EXPECT_EQ(
      context_length_error(4096, 5000, std::nullopt).message,
      "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. "
      "Please reduce the length of the input messages.");
}

TEST(ApiError, KindsMapToStatuses) {
  EXPECT_EQ(api_error_from(Error(ErrorKind::kInvalidArgument, "x")).status, 400);
  EXPECT_EQ(api_error_from(Error(ErrorKind::kUnsupported, "x")).status, 400);
  EXPECT_EQ(api_error_from(Error(ErrorKind::kNotFound, "x")).status, 404);
  const ApiError busy = api_error_from(Error(ErrorKind::kResourceExhausted, "x"));
  EXPECT_EQ(busy.status, 503);
  EXPECT_GT(busy.retry_after_s, 0);
  EXPECT_EQ(api_error_from(Error(ErrorKind::kInternal, "x")).status, 500);
  EXPECT_EQ(api_error_from(Error(ErrorKind::kInvalidFile, "x")).type, "server_error");
  const HttpResponse r = error_response(busy);
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  // Non-dgemma exceptions never escape as crashes.
  EXPECT_EQ(api_error_from_exception(std::make_exception_ptr(std::runtime_error("boom"))).status, 500);
  EXPECT_EQ(api_error_from_exception(std::make_exception_ptr(std::bad_alloc())).status, 503);
  try {
    Json j = Json::parse("{\"a\":1}");
    (void)j.at("b");
  } catch (...) {
    EXPECT_EQ(api_error_from_exception(std::current_exception()).status, 400);
  }
}

}  // namespace
}  // namespace dgemma
