// The chat/completions JSON builders: each endpoint's shapes, and what a stream leaves out.
#include <gtest/gtest.h>

#include "api/openai/completion_json.h"

namespace dgemma {
namespace {

CompletionJsonOptions options(bool chat) {
  CompletionJsonOptions o;
  o.id = "chatcmpl-1";
  o.created = 7;
  o.model = "m";
  o.chat = chat;
  return o;
}

TokenLogprob logprob(int32_t id, const std::string& token, float lp) {
  TokenLogprob t;
  t.id = id;
  t.token = token;
  t.bytes.assign(token.begin(), token.end());
  t.logprob = lp;
  return t;
}

TEST(CompletionJson, ChunkCarriesTheSharedFieldsAndOneChoice) {
  const CompletionJson chat(options(true));
  const Json c = chat.chunk(chat.role_choice(2));
  EXPECT_EQ(c["id"], "chatcmpl-1");
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["created"], 7);
  EXPECT_EQ(c["model"], "m");
  ASSERT_EQ(c["choices"].size(), 1u);
  EXPECT_EQ(c["choices"][0]["index"], 2);
  EXPECT_EQ(c["choices"][0]["delta"], (Json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(CompletionJson(options(false)).base()["object"], "text_completion");
  const Json u = chat.usage_chunk(Json{{"total_tokens", 3}});
  EXPECT_TRUE(u["choices"].is_array() && u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 3);
}

TEST(CompletionJson, EmptyChatDeltaIsNotSentButLogprobsAloneAre) {
  const CompletionJson chat(options(true));
  OutputDelta d;
  EXPECT_TRUE(chat.delta_choice(0, d, 0).is_null());
  d.logprobs.push_back(logprob(5, "", -0.5f));
  const Json c = chat.delta_choice(0, d, 0);
  EXPECT_EQ(c["delta"], (Json{{"content", ""}}));
  EXPECT_EQ(c["logprobs"]["content"][0]["logprob"], -0.5f);
  // Completions always send their text, even empty.
  EXPECT_EQ(CompletionJson(options(false)).delta_choice(0, OutputDelta{}, 0)["text"], "");
}

TEST(CompletionJson, CompletionsLogprobsCountTextOffsetsFromTheStreamedText) {
  CompletionJsonOptions o = options(false);
  const Json lp = CompletionJson(o).logprobs_json({logprob(1, "ab", -1), logprob(2, "c", -2)}, 10);
  EXPECT_EQ(lp["tokens"], (Json{"ab", "c"}));
  EXPECT_EQ(lp["text_offset"], (Json{10, 12}));
  o.tokens_as_ids = true;
  EXPECT_EQ(CompletionJson(o).logprobs_json({logprob(1, "ab", -1)}, 0)["tokens"], (Json{"token_id:1"}));
}

TEST(CompletionJson, MessageContentIsNullBesideToolCallsOnly) {
  CompletionJsonOptions o = options(true);
  o.reasoning_parser = true;
  const CompletionJson chat(o);
  OutputDelta out;
  out.tool_calls.push_back(ToolCallDelta{0, "call_1", "f", "{}"});
  FinishedChoice f;
  f.finish_reason = "tool_calls";
  const Json c = chat.finished_choice(f, out);
  EXPECT_TRUE(c["message"]["content"].is_null());
  EXPECT_EQ(c["message"]["tool_calls"][0], tool_call_json("call_1", "f", "{}"));
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_TRUE(c["message"]["reasoning_content"].is_null());
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_TRUE(c["logprobs"].is_null());
  const Json r = chat.response(Json::array({c}), Json{{"total_tokens", 1}});
  EXPECT_EQ(r["object"], "chat.completion");
}

TEST(CompletionJson, UsageAddsTheDiffusionCost) {
  UsageCounts u;
  u.prompt_tokens = 3;
  u.completion_tokens = 4;
  u.cached_tokens = 2;
  u.canvases = 1;
  u.denoising_steps = 9;
  u.canvas_length = 32;
  const Json j = usage_json(u);
  EXPECT_EQ(j["total_tokens"], 7);
  EXPECT_EQ(j["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(j["dgemma"], (Json{{"canvases", 1}, {"denoising_steps", 9}, {"canvas_length", 32}}));
}

}  // namespace
}  // namespace dgemma
