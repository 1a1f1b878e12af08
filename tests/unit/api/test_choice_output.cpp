// The per-choice output pipeline on the real Gemma 4 tokenizer: stop strings cut inside and across
// canvases (the concatenated output does not depend on where canvases split), UTF-8-safe deltas, exact
// token accounting, logprobs, special-token skipping (with the parsers on too), the reasoning/tool
// parsers on token ids and the checks of tool calls.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/openai/choice_output.h"
#include "api_test_util.h"
#include "util/error.h"

namespace dgemma {
namespace {

using Ids = std::vector<int32_t>;

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

struct OutputRun {
  std::string content, reasoning;
  std::vector<std::string> deltas;
  std::vector<ToolCallDelta> calls;
  size_t logprobs = 0;
  int64_t tokens = 0;
  bool stopped = false;
  Json stop_reason;
};

// Feeds `ids` split into canvases at the given cut points.
OutputRun run(const Tokenizer& tok, const ChoiceOutputOptions& opt, const Ids& ids, const std::vector<size_t>& cuts) {
  ChoiceOutput out(tok, opt);
  OutputRun r;
  size_t start = 0;
  std::vector<size_t> bounds = cuts;
  bounds.push_back(ids.size());
  for (size_t b : bounds) {
    Ids canvas(ids.begin() + start, ids.begin() + b);
    std::vector<float> lps(canvas.size(), -0.5f);
    OutputDelta d = out.feed(canvas, opt.logprobs ? lps : std::vector<float>{});
    if (!d.content.empty()) r.deltas.push_back(d.content);
    r.content += d.content;
    r.reasoning += d.reasoning;
    r.logprobs += d.logprobs.size();
    for (auto& c : d.tool_calls) r.calls.push_back(c);
    start = b;
  }
  OutputDelta d = out.finish();
  if (!d.content.empty()) r.deltas.push_back(d.content);
  r.content += d.content;
  r.reasoning += d.reasoning;
  r.logprobs += d.logprobs.size();
  for (auto& c : d.tool_calls) r.calls.push_back(c);
  r.tokens = out.completion_tokens();
  r.stopped = out.stopped();
  r.stop_reason = out.stop_reason();
  return r;
}

TEST(ChoiceOutput, PlainTextAcrossCanvases) {
  DG_API_TOKENIZER(tok);
  const std::string text = "Hello world! Ünïcödé and 日本語 🙂 done.";
  const Ids ids = tok->encode(text);
  ChoiceOutputOptions opt;
  for (size_t cut = 0; cut <= ids.size(); ++cut) {
    const OutputRun r = run(*tok, opt, ids, {cut});
    EXPECT_EQ(r.content, text) << "cut " << cut;
    EXPECT_EQ(r.tokens, static_cast<int64_t>(ids.size()));
    EXPECT_FALSE(r.stopped);
    for (const auto& d : r.deltas) EXPECT_TRUE(valid_utf8(d)) << d;
  }
}

TEST(ChoiceOutput, StopStringIndependentOfCanvasSplit) {
  DG_API_TOKENIZER(tok);
  const std::string text = "Once upon a time there was a STOP sign and more text after it.";
  const Ids ids = tok->encode(text);
  // Reference count: tokens until the decoded prefix contains the stop string.
  int64_t expected_tokens = 0;
  while (tok->decode(Ids(ids.begin(), ids.begin() + expected_tokens)).find("STOP") == std::string::npos) ++expected_tokens;
  ChoiceOutputOptions opt;
  opt.stop = {"never", "STOP"};
  opt.logprobs = true;
  for (size_t a = 0; a <= ids.size(); ++a) {
    for (size_t b = a; b <= ids.size(); b += 3) {
      const OutputRun r = run(*tok, opt, ids, {a, b});
      ASSERT_EQ(r.content, "Once upon a time there was a ") << a << "," << b;
      EXPECT_TRUE(r.stopped);
      EXPECT_EQ(r.stop_reason, "STOP");
      EXPECT_EQ(r.tokens, expected_tokens);
      EXPECT_EQ(static_cast<int64_t>(r.logprobs), expected_tokens);
    }
  }
  opt.include_stop_str = true;
  EXPECT_EQ(run(*tok, opt, ids, {5}).content, "Once upon a time there was a STOP");
}

TEST(ChoiceOutput, StopStringNeverLeaksBeforeTheCut) {
  DG_API_TOKENIZER(tok);
  const Ids a = tok->encode("Once upon a ti");
  const Ids b = tok->encode("me there");
  Ids all = a;
  all.insert(all.end(), b.begin(), b.end());
  ChoiceOutputOptions opt;
  opt.stop = {"time th"};
  const OutputRun r = run(*tok, opt, all, {a.size()});
  EXPECT_EQ(r.content, "Once upon a ");
  for (const auto& d : r.deltas) EXPECT_EQ(d.find("ti"), std::string::npos) << d;
}

TEST(ChoiceOutput, HoldBackNeverSplitsACharacter) {
  DG_API_TOKENIZER(tok);
  const std::string text = "日本語のテキストです。絵文字🙂も。";
  const Ids ids = tok->encode(text);
  ChoiceOutputOptions opt;
  opt.stop = {"XYZW"};  // holds back 3 bytes: always inside a multi-byte character here
  for (size_t cut = 0; cut <= ids.size(); ++cut) {
    const OutputRun r = run(*tok, opt, ids, {cut});
    EXPECT_EQ(r.content, text);
    for (const auto& d : r.deltas) EXPECT_TRUE(valid_utf8(d)) << "cut " << cut;
  }
}

TEST(ChoiceOutput, SpecialTokensSkippedWithTheParsersOnToo) {
  DG_API_TOKENIZER(tok);
  const Ids ids = tok->encode("a<turn|>b<pad><pad><|\"|>c<eos>", /*allow_special=*/true);
  ASSERT_EQ(std::count(ids.begin(), ids.end(), 106), 1);
  for (bool parsers : {false, true}) {
    SCOPED_TRACE(parsers);
    ChoiceOutputOptions opt;
    opt.reasoning = opt.tools = parsers;
    for (size_t cut = 0; cut <= ids.size(); ++cut) {
      const OutputRun r = run(*tok, opt, ids, {cut});
      EXPECT_EQ(r.content, "abc") << cut;
      EXPECT_EQ(r.tokens, static_cast<int64_t>(ids.size())) << "pads and other special tokens count";
    }
    opt.skip_special_tokens = false;
    EXPECT_EQ(run(*tok, opt, ids, {3}).content, "a<turn|>b<pad><pad><|\"|>c<eos>");
  }
}

// The parsers act on markup tokens, found by id: text that spells a marker is text.
TEST(ChoiceOutput, TextThatSpellsMarkupIsNotParsed) {
  DG_API_TOKENIZER(tok);
  const Ids ids = tok->encode("<|tool_call>call:f{a:1}<tool_call|>", /*allow_special=*/false);
  ChoiceOutputOptions opt;
  opt.reasoning = opt.tools = true;
  const OutputRun r = run(*tok, opt, ids, {4});
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "<|tool_call>call:f{a:1}<tool_call|>");
}

TEST(ChoiceOutput, ReasoningAndToolCalls) {
  DG_API_TOKENIZER(tok);
  const std::string text =
      "<|channel>thought\nNeed weather.<channel|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";
  const Ids ids = tok->encode(text, true);
  ChoiceOutputOptions opt;
  opt.reasoning = true;
  opt.thinking_enabled = true;
  opt.tools = true;
  for (size_t cut = 0; cut <= ids.size(); cut += 2) {
    const OutputRun r = run(*tok, opt, ids, {cut});
    EXPECT_EQ(r.reasoning, "Need weather.") << cut;
    EXPECT_EQ(r.content, "") << cut;
    ASSERT_EQ(r.calls.size(), 1u) << "a call arrives whole, in one delta";
    EXPECT_EQ(r.calls[0].index, 0);
    EXPECT_EQ(r.calls[0].id.substr(0, 5), "call_");
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(Json::parse(r.calls[0].arguments_delta), Json({{"city", "Paris"}}));
  }
  // Without the tool parser the call is text: its markup skipped, or spelled out on request.
  opt.tools = false;
  EXPECT_EQ(run(*tok, opt, ids, {7}).content, "call:get_weather{city:Paris}");
  opt.skip_special_tokens = false;
  EXPECT_EQ(run(*tok, opt, ids, {7}).content,
            "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>");
}

TEST(ChoiceOutput, UntrustedCallsAreRejectedIntoTheContent) {
  DG_API_TOKENIZER(tok);
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  ChoiceOutputOptions opt;
  opt.reasoning = opt.tools = true;
  opt.declared_tools = std::make_shared<const DeclaredTools>(tools);
  const Ids ids = tok->encode(
      "A<|tool_call>call:nope{}<tool_call|>B<|tool_call>call:get_weather{}<tool_call|>C"
      "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>D",
      true);
  for (size_t cut = 0; cut <= ids.size(); cut += 3) {
    ChoiceOutput out(*tok, opt);
    OutputDelta d = out.feed(Ids(ids.begin(), ids.begin() + cut), {});
    d.append(out.feed(Ids(ids.begin() + cut, ids.end()), {}));
    d.append(out.finish());
    EXPECT_EQ(d.content, "Acall:nope{}Bcall:get_weather{}CD") << cut;
    ASSERT_EQ(d.rejected_tool_calls.size(), 2u);
    EXPECT_EQ(d.rejected_tool_calls[0].name, "nope");
    EXPECT_EQ(d.rejected_tool_calls[0].reason, "'nope' is not a function declared in 'tools'");
    EXPECT_EQ(d.rejected_tool_calls[1].reason, "the required argument 'city' is missing");
    ASSERT_EQ(d.tool_calls.size(), 1u);
    EXPECT_EQ(d.tool_calls[0].index, 0) << "rejected calls take no index";
    EXPECT_EQ(d.tool_calls[0].arguments_delta, R"({"city": "Oslo"})");
    EXPECT_TRUE(out.saw_tool_calls());
  }
  // Only rejected calls: no tool call was returned.
  ChoiceOutput out(*tok, opt);
  out.feed(tok->encode("<|tool_call>call:nope{}<tool_call|>", true), {});
  out.finish();
  EXPECT_FALSE(out.saw_tool_calls());
}

TEST(ChoiceOutput, OutOfRangeIdsAreAnError) {
  DG_API_TOKENIZER(tok);
  ChoiceOutput out(*tok, ChoiceOutputOptions{});
  EXPECT_THROW(out.feed({tok->vocab_size()}, {}), Error);
  EXPECT_THROW(out.feed({-1}, {}), Error);
}

TEST(ChoiceOutput, LogprobBytesOfByteFallbackPiecesAreTheirByte) {
  DG_API_TOKENIZER(tok);
  const int32_t e4 = *tok->token_to_id("<0xE4>"), bd = *tok->token_to_id("<0xBD>"), a0 = *tok->token_to_id("<0xA0>");
  const Ids word = tok->encode("Hello");
  ASSERT_EQ(word.size(), 1u);
  ChoiceOutputOptions opt;
  opt.logprobs = true;
  ChoiceOutput out(*tok, opt);
  OutputDelta d = out.feed({word[0], e4, bd, a0}, {-0.1f, -0.2f, -0.3f, -0.4f});
  d.append(out.finish());
  ASSERT_EQ(d.logprobs.size(), 4u);
  EXPECT_EQ(d.logprobs[0].bytes, (std::vector<uint8_t>{'H', 'e', 'l', 'l', 'o'}));
  EXPECT_EQ(d.logprobs[1].bytes, (std::vector<uint8_t>{0xE4}));
  EXPECT_EQ(d.logprobs[2].bytes, (std::vector<uint8_t>{0xBD}));
  EXPECT_EQ(d.logprobs[3].bytes, (std::vector<uint8_t>{0xA0}));
  EXPECT_EQ(d.content, "Hello\xE4\xBD\xA0");
}

TEST(ChoiceOutput, AlternativesFollowTheirTokensThroughAStopString) {
  DG_API_TOKENIZER(tok);
  const Ids ids = tok->encode("one two three four");
  ASSERT_GE(ids.size(), 4u);
  ChoiceOutputOptions opt;
  opt.logprobs = true;
  opt.stop = {" three"};
  ChoiceOutput out(*tok, opt);
  // Two alternatives per token: the token itself, then the token of "!" (a different text).
  const int32_t bang = tok->encode("!")[0];
  std::vector<float> lps;
  std::vector<int32_t> top_ids;
  std::vector<float> top_lps;
  for (size_t i = 0; i < ids.size(); ++i) {
    lps.push_back(-0.25f * static_cast<float>(i + 1));
    top_ids.insert(top_ids.end(), {ids[i], bang});
    top_lps.insert(top_lps.end(), {lps.back(), lps.back() - 1.0f});
  }
  OutputDelta d = out.feed(ids, lps, 2, top_ids, top_lps);
  d.append(out.finish());
  ASSERT_EQ(d.logprobs.size(), 3u) << "up to and including the token that completed the stop string";
  for (size_t i = 0; i < d.logprobs.size(); ++i) {
    const TokenLogprob& lp = d.logprobs[i];
    ASSERT_EQ(lp.top.size(), 2u);
    EXPECT_EQ(lp.top[0].token, lp.token);
    EXPECT_EQ(lp.top[0].bytes, lp.bytes);
    EXPECT_EQ(lp.top[0].logprob, lps[i]);
    EXPECT_EQ(lp.top[1].token, "!");
    EXPECT_EQ(lp.top[1].logprob, lps[i] - 1.0f);
  }
  ChoiceOutput bad(*tok, opt);
  EXPECT_THROW(bad.feed({ids[0]}, {-1.0f}, 1, {-3}, {-1.0f}), Error) << "an alternative outside the vocabulary";
}

}  // namespace
}  // namespace dgemma
