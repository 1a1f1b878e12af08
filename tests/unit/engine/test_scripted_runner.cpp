// The scripted model runner behind the real engine core: a reply becomes a token stream cut into
// canvases of the engine's canvas length, trimmed by the sequence's own rules; scripted steps end a
// canvas through the real stop rule; pinned positions show their tokens in every step and in the
// commit; a failing item ends only its request and frees its pages; a runner that throws fails only
// the sequences of that step; preemption replays the same canvases.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "backend/caching_allocator.h"
#include "engine/engine_core.h"
#include "support/scripted_runner.h"
#include "util/error.h"

namespace dgemma {
namespace {

constexpr int kC = 4;
constexpr int kVocab = 512;
constexpr int32_t kEos = 1;

// A byte-level stand-in tokenizer: byte b <-> id 256 + b (clear of the EOS ids 1, 106, 50).
ScriptTokenizer bytes_tokenizer() {
  ScriptTokenizer t;
  t.encode = [](std::string_view s) {
    std::vector<int32_t> ids;
    for (unsigned char c : s) ids.push_back(256 + c);
    return ids;
  };
  t.decode = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s.push_back(id >= 256 ? static_cast<char>(id - 256) : '?');
    return s;
  };
  return t;
}
std::vector<int32_t> ids(const std::string& s) { return bytes_tokenizer().encode(s); }
std::string text(const std::vector<int32_t>& v) { return bytes_tokenizer().decode(v); }

Json script() {
  return Json::parse(R"({
    "canvas_delay_ms": 0, "steps": 3,
    "replies": [
      {"when": "hello", "canvases": ["Hello", {"text": " world", "steps": 5}]},
      {"when": "fail", "canvases": ["abcdefgh", "ij", {"error": "device lost"}]},
      {"when": "eos", "canvases": [{"tokens": [300, 301, 1, 302]}]}
    ],
    "default": {"random_canvases": 2}
  })");
}

std::unique_ptr<ScriptedRunner> runner(const Json& s = script()) {
  ScriptedRunnerOptions o;
  o.canvas_length = kC;
  o.vocab_size = kVocab;
  o.eos_ids = {kEos, 106, 50};
  o.tokenizer = bytes_tokenizer();
  return ScriptedRunner::from_json(s, std::move(o));
}

SequenceParams params(int64_t max_tokens = 100) {
  SequenceParams p;
  p.diffusion.max_denoising_steps = 48;
  p.diffusion.stability_threshold = 1;
  p.max_tokens = max_tokens;
  p.eos_ids = {kEos, 106, 50};
  p.seed = 7;
  return p;
}

BlockManagerConfig pool(int64_t full_pages) {
  BlockManagerConfig b;
  b.page_size = kC;
  b.num_pages = {full_pages, 64};
  b.sliding_keep = 5;
  return b;
}

SchedulerConfig sched(int max_seqs = 4) {
  SchedulerConfig s;
  s.max_num_seqs = max_seqs;
  s.max_num_batched_tokens = 64;
  s.prefill_chunk = 16;
  s.canvas_length = kC;
  return s;
}

struct Run {
  std::vector<std::vector<int32_t>> canvases;  // committed, as returned
  std::vector<int> steps;
  std::vector<std::vector<int32_t>> previews;
  std::string error;
};

// Steps the core until it is idle; collects each sequence's events.
std::map<uint64_t, Run> run_all(EngineCore& core, const std::vector<Sequence*>& seqs) {
  for (Sequence* s : seqs) core.add(s);
  std::map<uint64_t, Run> out;
  for (int i = 0; i < 1000 && core.has_work(); ++i) {
    std::vector<CoreEvent> events;
    core.step(events);
    for (auto& ev : events) {
      Run& r = out[ev.seq_id];
      if (ev.event.kind == RequestEvent::Kind::kCanvas) {
        r.canvases.push_back(ev.event.tokens);
        r.steps.push_back(ev.event.steps);
      } else if (ev.event.kind == RequestEvent::Kind::kPreview) {
        r.previews.push_back(ev.event.tokens);
      } else {
        r.error = ev.event.message;
      }
    }
  }
  EXPECT_FALSE(core.has_work()) << "did not finish";
  return out;
}

std::unique_ptr<Sequence> seq(uint64_t id, const std::string& prompt, SequenceParams p = params()) {
  return std::make_unique<Sequence>(id, ids(prompt), std::move(p), kC, kVocab);
}

TEST(ScriptedRunner, ReplyIsCutIntoCanvasesAndTrimmedAtEos) {
  EngineCore core(sched(), pool(64), runner());
  auto s = seq(1, "say hello");
  auto r = run_all(core, {s.get()});
  // "Hello world" + EOS = 12 tokens: canvases "Hell", "o wo", "rld" (the EOS trims the last).
  ASSERT_EQ(r[s->id()].canvases.size(), 3u);
  EXPECT_EQ(text(r[s->id()].canvases[0]), "Hell");
  EXPECT_EQ(text(r[s->id()].canvases[1]), "o wo");
  EXPECT_EQ(text(r[s->id()].canvases[2]), "rld");
  EXPECT_EQ(text(s->output()), "Hello world");
  EXPECT_EQ(s->finish_reason(), FinishReason::kStop);
  // A canvas takes the steps of the segment its first position belongs to ("o wo" starts in "Hello").
  EXPECT_EQ(r[s->id()].steps, (std::vector<int>{3, 3, 5}));
  EXPECT_EQ(core.blocks().used_pages(KvGroup::kFull), 0);
}

TEST(ScriptedRunner, TheSequenceRulesTrim) {
  EngineCore core(sched(), pool(64), runner());
  auto a = seq(1, "hello", params(6));            // max_tokens
  auto b = seq(2, "eos please");                  // an EOS id inside a canvas
  SequenceParams pi = params(10);
  pi.ignore_eos = true;
  auto c = seq(3, "eos please", pi);              // ignore_eos: the EOS is a token, filler follows
  SequenceParams ps = params();
  ps.stop_ids = {ids("o")[0]};
  auto d = seq(4, "hello", ps);                   // a stop id
  run_all(core, {a.get(), b.get(), c.get(), d.get()});
  EXPECT_EQ(text(a->output()), "Hello ");
  EXPECT_EQ(a->finish_reason(), FinishReason::kLength);
  EXPECT_EQ(b->output(), (std::vector<int32_t>{300, 301}));
  EXPECT_EQ(b->finish_reason(), FinishReason::kStop);
  ASSERT_EQ(c->output().size(), 10u);
  EXPECT_EQ(std::vector<int32_t>(c->output().begin(), c->output().begin() + 4), (std::vector<int32_t>{300, 301, 1, 302}));
  EXPECT_EQ(c->finish_reason(), FinishReason::kLength);
  EXPECT_EQ(text(d->output()), "Hell");
  EXPECT_EQ(d->stop_token_id(), ids("o")[0]);
}

TEST(ScriptedRunner, StepsAreCappedAndPreviewsConverge) {
  EngineCore core(sched(), pool(64), runner());
  SequenceParams p = params();
  p.previews = true;
  p.diffusion.max_denoising_steps = 2;  // below the script's 3 and 5
  auto s = seq(1, "hello", p);
  auto r = run_all(core, {s.get()});
  EXPECT_EQ(r[s->id()].steps, (std::vector<int>{2, 2, 2}));
  ASSERT_EQ(r[s->id()].previews.size(), 6u);  // one per step
  // The last step's argmax is the committed canvas.
  EXPECT_EQ(text(r[s->id()].previews[1]), "Hell");
  EXPECT_EQ(text(r[s->id()].previews[3]), "o wo");
}

TEST(ScriptedRunner, PinnedPositionsShowTheirTokensInEveryStep) {
  EngineCore core(sched(), pool(64), runner());
  SequenceParams p = params();
  p.previews = true;
  // Answer positions 3..5 span canvases 0 and 1.
  p.pins = {PinnedSpan{3, ids("XYZ")}};
  auto s = seq(1, "hello", p);
  auto r = run_all(core, {s.get()});
  EXPECT_EQ(text(s->output()), "HelXYZworld");
  const auto& prev = r[s->id()].previews;
  ASSERT_EQ(prev.size(), 3u + 3u + 5u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(prev[i][3], ids("X")[0]) << "canvas 0, step " << i;
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(prev[i][0], ids("Y")[0]) << "canvas 1, step " << i - 3;
    EXPECT_EQ(prev[i][1], ids("Z")[0]) << "canvas 1, step " << i - 3;
  }
}

TEST(ScriptedRunner, AFailingItemEndsOnlyItsRequest) {
  EngineCore core(sched(), pool(64), runner());
  auto bad = seq(1, "fail now");
  auto good = seq(2, "hello");
  auto r = run_all(core, {bad.get(), good.get()});
  // "abcdefghij": canvases "abcd", "efgh" commit; the error sits in canvas 2.
  ASSERT_EQ(r[bad->id()].canvases.size(), 2u);
  EXPECT_EQ(r[bad->id()].error, "device lost");
  EXPECT_EQ(bad->finish_reason(), FinishReason::kError);
  EXPECT_EQ(text(good->output()), "Hello world");
  EXPECT_EQ(good->finish_reason(), FinishReason::kStop);
  EXPECT_EQ(core.blocks().used_pages(KvGroup::kFull), 0);
  EXPECT_TRUE(core.scheduler().running().empty());
}

// Delegates to a scripted runner; throws from run() at one step, as a device error would.
class ThrowingRunner final : public ModelRunner {
 public:
  explicit ThrowingRunner(int throw_at, std::function<void()> thrower = [] {
    throw Error(ErrorKind::kInternal, "CUDA error: an illegal memory access");
  })
      : inner_(runner()), throw_at_(throw_at), thrower_(std::move(thrower)) {}
  int canvas_length() const override { return inner_->canvas_length(); }
  int vocab_size() const override { return inner_->vocab_size(); }
  StepResult run(const StepPlan& plan) override {
    if (step_++ == throw_at_) thrower_();
    return inner_->run(plan);
  }
  void release(const Sequence& s) override {
    ++released;
    inner_->release(s);
  }
  int released = 0;

 private:
  std::unique_ptr<ScriptedRunner> inner_;
  int throw_at_, step_ = 0;
  std::function<void()> thrower_;
};

TEST(ScriptedRunner, AThrowingStepFailsItsSequencesAndTheEngineGoesOn) {
  auto r = std::make_unique<ThrowingRunner>(/*throw_at=*/2);
  ThrowingRunner* tr = r.get();
  EngineCore core(sched(/*max_seqs=*/1), pool(64), std::move(r));
  auto a = seq(1, "hello");
  auto b = seq(2, "hello");  // waits: one running place
  auto out = run_all(core, {a.get(), b.get()});
  EXPECT_EQ(a->finish_reason(), FinishReason::kError);
  EXPECT_NE(out[a->id()].error.find("illegal memory access"), std::string::npos);
  EXPECT_EQ(tr->released, 2);  // a at its failure, b at its end
  // The waiting one was not in the failed step: it runs afterwards.
  EXPECT_EQ(b->finish_reason(), FinishReason::kStop);
  EXPECT_EQ(text(b->output()), "Hello world");
  EXPECT_EQ(core.blocks().used_pages(KvGroup::kFull), 0);
}

// Host memory behind the caching allocator (backend/caching_allocator.h), as the device would be.
class HostBlocks final : public BlockSource {
 public:
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void free(void* p) override { std::free(p); }
};

// A step whose allocations go over the memory plan's ceiling: the allocator's out-of-memory error
// fails that step's sequences (their pages and places freed) and the engine goes on.
TEST(ScriptedRunner, AStepOverTheAllocatorCeilingFailsItsSequencesAndTheEngineGoesOn) {
  HostBlocks host;
  CachingAllocator allocator(host, "test device");
  allocator.set_ceiling(size_t{4} << 20);
  auto r = std::make_unique<ThrowingRunner>(/*throw_at=*/1, [&] {
    size_t a = 0, b = 0;
    void* live = allocator.allocate(size_t{3} << 20, &a);  // 4 MiB block: the ceiling is reached
    struct Release {
      CachingAllocator& al;
      void* p;
      size_t n;
      ~Release() { al.release(p, n); }  // the step's tensors go back as it unwinds
    } guard{allocator, live, a};
    (void)allocator.allocate(size_t{1} << 20, &b);  // 2 MiB more: over it
  });
  EngineCore core(sched(/*max_seqs=*/1), pool(64), std::move(r));
  auto a = seq(1, "hello");
  auto b = seq(2, "hello");
  auto out = run_all(core, {a.get(), b.get()});
  EXPECT_EQ(a->finish_reason(), FinishReason::kError);
  EXPECT_NE(
      out[a->id()].error.find("engine error: test device: out of memory under the memory plan's ceiling"),
      std::string::npos)
      << out[a->id()].error;
  EXPECT_EQ(b->finish_reason(), FinishReason::kStop);
  EXPECT_EQ(text(b->output()), "Hello world");
  EXPECT_EQ(core.blocks().used_pages(KvGroup::kFull), 0);
  EXPECT_EQ(allocator.stats().in_use, 0u) << "nothing of the failed step stays in use";
}

TEST(ScriptedRunner, PreemptionReplaysTheSameCanvases) {
  // 5 full pages of 4 tokens: each sequence (2 prompt tokens, 3 canvases) needs 3 as it grows.
  EngineCore core(sched(), pool(5), runner());
  SequenceParams p = params(12);
  p.ignore_eos = true;
  auto a = seq(1, "hi", p);
  auto b = seq(2, "hi", p);
  run_all(core, {a.get(), b.get()});
  EXPECT_GT(core.scheduler().stats().preemptions, 0);
  EngineCore alone(sched(), pool(64), runner());
  auto c = seq(2, "hi", p);
  run_all(alone, {c.get()});
  EXPECT_EQ(b->output(), c->output());
  EXPECT_EQ(a->output().size(), 12u);
  EXPECT_EQ(core.blocks().used_pages(KvGroup::kFull), 0);
}

TEST(ScriptedRunner, SeedsReproduceFiller) {
  EngineCore core(sched(), pool(64), runner());
  SequenceParams p7 = params(), p8 = params();
  p8.seed = 8;
  auto a = seq(1, "anything", p7), b = seq(2, "anything", p7), c = seq(3, "anything", p8);
  run_all(core, {a.get(), b.get(), c.get()});
  EXPECT_EQ(a->output().size(), 2u * kC);  // random_canvases 2, then EOS
  EXPECT_EQ(a->output(), b->output());
  EXPECT_NE(a->output(), c->output());
}

TEST(ScriptedRunner, BadScriptsAreFileErrors) {
  for (const char* bad : {R"([])", R"({"steps": 0})", R"({"replies": [{"when": 3, "canvases": ["x"]}]})",
                          R"({"replies": [{"canvases": [{"tokens": [999999]}]}]})", R"({"default": {}})",
                          R"({"preview_steps": 2})", R"({"replies": [{"canvases": [{"text": "x", "delay": 1}]}]})",
                          R"({"canvas_length": 0})"}) {
    try {
      const Json j = Json::parse(bad);
      ScriptedRunner::canvas_length_of(j);
      runner(j);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidFile) << bad;
    }
  }
}

}  // namespace
}  // namespace dgemma
