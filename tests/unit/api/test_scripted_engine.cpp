// The scripted test engine honours the engine contract the API relies on: EOS / max_tokens trimming,
// ignore_eos, stop ids, FIFO admission under max_num_seqs, a bounded queue, cancellation, seeds.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/scripted_engine.h"
#include "util/error.h"

namespace dgemma {
namespace {

using Ids = std::vector<int32_t>;
using namespace std::chrono_literals;

// A byte-level stand-in tokenizer: byte b <-> id 1000 + b (clear of the EOS ids 1, 106, 50).
ScriptedEngineOptions options(int seqs = 2, int queue = 4) {
  ScriptedEngineOptions o;
  o.max_num_seqs = seqs;
  o.max_queue = queue;
  o.max_model_len = 512;
  o.vocab_size = 2000;
  o.encode = [](std::string_view s) {
    Ids ids;
    for (unsigned char c : s) ids.push_back(1000 + c);
    return ids;
  };
  o.decode = [](const Ids& ids) {
    std::string s;
    for (int32_t id : ids) s.push_back(id >= 1000 ? static_cast<char>(id - 1000) : '?');
    return s;
  };
  return o;
}

Json script() {
  return Json::parse(R"({
    "canvas_length": 8, "canvas_delay_ms": 1, "steps": 3,
    "replies": [
      {"when": "eos", "canvases": ["abc", {"tokens": [1001, 1, 1002]}, "never"]},
      {"when": "slow", "canvases": [{"text": "s", "delay_ms": 300}, {"text": "t", "delay_ms": 300}]},
      {"when": "two", "canvases": ["hello", " world"]}
    ],
    "default": {"random_canvases": 2}
  })");
}

GenerationRequest req(const std::string& prompt, int64_t max_tokens = 100) {
  GenerationRequest r;
  for (unsigned char c : prompt) r.prompt.push_back(1000 + c);
  r.params.max_tokens = max_tokens;
  return r;
}

struct Result {
  std::vector<Ids> canvases;
  std::vector<int> steps;
  RequestEvent finished;
};

Result collect(RequestStream& s) {
  Result r;
  for (;;) {
    RequestEvent ev;
    if (!s.pop(ev, 5000ms)) {
      ADD_FAILURE() << "engine did not finish";
      return r;
    }
    if (ev.kind == RequestEvent::Kind::kCanvas) {
      r.canvases.push_back(ev.tokens);
      r.steps.push_back(ev.steps);
    }
    if (ev.kind == RequestEvent::Kind::kFinished || ev.kind == RequestEvent::Kind::kError) {
      r.finished = ev;
      return r;
    }
  }
}

TEST(ScriptedEngine, TrimsAtEosAndCounts) {
  auto e = ScriptedEngine::from_json(script(), options());
  Result r = collect(*e->submit(req("eos please")));
  ASSERT_EQ(r.canvases.size(), 2u);
  EXPECT_EQ(r.canvases[0], (Ids{1097, 1098, 1099}));
  EXPECT_EQ(r.canvases[1], (Ids{1001}));
  EXPECT_EQ(r.steps, (std::vector<int>{3, 3}));
  EXPECT_EQ(r.finished.reason, FinishReason::kStop);
  EXPECT_EQ(r.finished.completion_tokens, 4);
  EXPECT_EQ(r.finished.prompt_tokens, 10);
  EXPECT_EQ(r.finished.stop_token_id, -1);
}

TEST(ScriptedEngine, MaxTokensIsExact) {
  auto e = ScriptedEngine::from_json(script(), options());
  Result r = collect(*e->submit(req("two", 7)));
  ASSERT_EQ(r.canvases.size(), 2u);
  EXPECT_EQ(r.canvases[1].size(), 2u);
  EXPECT_EQ(r.finished.reason, FinishReason::kLength);
  EXPECT_EQ(r.finished.completion_tokens, 7);
}

TEST(ScriptedEngine, IgnoreEosKeepsGoingToMaxTokens) {
  auto e = ScriptedEngine::from_json(script(), options());
  GenerationRequest g = req("eos", 30);
  g.params.ignore_eos = true;
  Result r = collect(*e->submit(g));
  size_t total = 0;
  for (const auto& c : r.canvases) total += c.size();
  EXPECT_EQ(total, 30u);
  EXPECT_EQ(r.canvases[1], (Ids{1001, 1, 1002}));
  EXPECT_EQ(r.finished.reason, FinishReason::kLength);
}

TEST(ScriptedEngine, StopTokenIdsApplyEvenWithIgnoreEos) {
  auto e = ScriptedEngine::from_json(script(), options());
  GenerationRequest g = req("two");
  g.params.ignore_eos = true;
  g.params.stop_token_ids = {1000 + 'o'};
  Result r = collect(*e->submit(g));
  ASSERT_EQ(r.canvases.size(), 1u);
  EXPECT_EQ(r.canvases[0], (Ids{1104, 1101, 1108, 1108}));  // "hell"
  EXPECT_EQ(r.finished.stop_token_id, 1000 + 'o');
}

TEST(ScriptedEngine, SeedsReproduce) {
  auto e = ScriptedEngine::from_json(script(), options());
  auto seeded = [&](uint64_t seed) {
    GenerationRequest g = req("anything");
    g.params.seed = seed;
    return collect(*e->submit(g)).canvases;
  };
  EXPECT_EQ(seeded(5), seeded(5));
  EXPECT_NE(seeded(5), seeded(6));
  EXPECT_EQ(seeded(5)[0].size(), 8u);
}

TEST(ScriptedEngine, QueueLimitFifoAndCancel) {
  auto e = ScriptedEngine::from_json(script(), options(/*seqs=*/1, /*queue=*/2));
  auto a = e->submit(req("slow"));
  for (int i = 0; i < 200 && e->stats().running == 0; ++i) std::this_thread::sleep_for(5ms);  // admitted
  auto b = e->submit(req("slow"));
  auto c = e->submit(req("slow"));
  try {
    e->submit(req("slow"));
    ADD_FAILURE() << "queue overflow accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kResourceExhausted);
  }
  std::this_thread::sleep_for(50ms);
  EngineStats s = e->stats();
  EXPECT_EQ(s.running, 1);
  EXPECT_EQ(s.waiting, 2);
  c->cancel();  // queued: dropped without running
  Result rc = collect(*c);
  EXPECT_EQ(rc.finished.reason, FinishReason::kAbort);
  EXPECT_TRUE(rc.canvases.empty());
  a->cancel();  // running: its slot goes to b
  EXPECT_EQ(collect(*a).finished.reason, FinishReason::kAbort);
  Result rb = collect(*b);
  EXPECT_EQ(rb.finished.reason, FinishReason::kStop);
  EXPECT_GT(rb.finished.queue_ms, 0);
  s = e->stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.requests_cancelled, 2);
}

TEST(ScriptedEngine, RejectsImpossibleRequests) {
  auto e = ScriptedEngine::from_json(script(), options());
  EXPECT_THROW(e->submit(req("", 5)), Error);
  EXPECT_THROW(e->submit(req("x", 600)), Error);
  GenerationRequest g = req("x");
  g.prompt.push_back(5000);
  EXPECT_THROW(e->submit(g), Error);
}

TEST(ScriptedEngine, BadScriptsAreFileErrors) {
  for (const char* bad : {R"([])", R"({"replies": 5})", R"({"replies": [{"canvases": []}]})",
                          R"({"replies": [{"canvases": [{"tokens": [99999]}]}]})", R"({"canvas_length": 0})",
                          R"({"default": {"random_canvases": 0}})", R"({"replies": [{"when": 3, "canvases": ["a"]}]})"}) {
    SCOPED_TRACE(bad);
    try {
      ScriptedEngine::from_json(Json::parse(bad), options());
      ADD_FAILURE() << "accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::kInvalidFile) << err.what();
    }
  }
}

// Pins as the model engine honours them: pinned positions show their tokens, EOS / pad in a free
// position before the last pin is dropped, the reply is extended up to the last pin, and EOS after it ends.
TEST(ScriptedEngine, HonoursPinnedSpans) {
  auto e = ScriptedEngine::from_json(script(), options());
  // "eos" reply: "abc" | 1001 EOS 1002 | "never"; answer positions 0-2 | 3-5 | 6-10.
  GenerationRequest g = req("eos", 20);
  g.params.pins = {PinnedSpan{1, {1200}}, PinnedSpan{8, {1300, 1301}}};
  Result r = collect(*e->submit(g));
  ASSERT_EQ(r.canvases.size(), 3u);
  EXPECT_EQ(r.canvases[0], (Ids{1097, 1200, 1099}));
  // The EOS is free and before the last pin: dropped, so the reply goes on to its third canvas.
  EXPECT_EQ(r.canvases[1], (Ids{1001, 1002}));
  EXPECT_EQ(r.canvases[2], (Ids{1000 + 'n', 1000 + 'e', 1300, 1301, 1000 + 'r'}));
  EXPECT_EQ(r.finished.reason, FinishReason::kStop);
  // The last scripted canvas ends the reply: pins beyond it are committed, the EOS filler between dropped.
  g = req("two", 20);
  g.params.pins = {PinnedSpan{0, {1300}}, PinnedSpan{12, {1301}}};
  r = collect(*e->submit(g));
  ASSERT_EQ(r.canvases.size(), 2u);
  EXPECT_EQ(r.canvases[0], (Ids{1300, 1000 + 'e', 1000 + 'l', 1000 + 'l', 1000 + 'o'}));
  EXPECT_EQ(r.canvases[1], (Ids{1000 + ' ', 1000 + 'w', 1000 + 'o', 1000 + 'r', 1000 + 'l', 1000 + 'd', 1301}));
  EXPECT_EQ(r.finished.completion_tokens, 12);
  // Pins must lie inside max_tokens and be sorted.
  g = req("two", 5);
  g.params.pins = {PinnedSpan{4, {1300, 1301}}};
  EXPECT_THROW(e->submit(g), Error);
  g = req("two", 20);
  g.params.pins = {PinnedSpan{4, {1300}}, PinnedSpan{2, {1301}}};
  EXPECT_THROW(e->submit(g), Error);
}

}  // namespace
}  // namespace dgemma
