// The scheduler as pure policy, with a fake model runner and no model: FIFO admission against the KV
// pool, denoise-first batch composition, prefill chunks under the token budget, the fused last chunk,
// preemption when pages run out (and recompute), fairness under a full pool, prefix-cache hits.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>

#include "engine/engine_core.h"
#include "engine/scheduler.h"

namespace dgemma {
namespace {

constexpr int kC = 4;  // canvas = page = 4 tokens

// Canvases settle after two steps; the committed canvas of sequence s, canvas k is 4 tokens
// 10*s + k (never an EOS id).
class FakeRunner final : public ModelRunner {
 public:
  int canvas_length() const override { return kC; }
  int vocab_size() const override { return 1000; }
  StepResult run(const StepPlan& plan) override {
    plans.push_back(plan);
    StepResult out;
    std::map<const Sequence*, int64_t> encoded;
    for (const auto& it : plan.items) {
      if (it.kind == PlannedItem::Kind::kEncode) {
        // What a real runner would read: the history range must be inside the history, in order.
        EXPECT_EQ(it.begin, it.seq->encoded);
        EXPECT_LE(it.end, static_cast<int64_t>(it.seq->history().size()));
        encoded[it.seq] = it.end;
        continue;
      }
      const int64_t done = encoded.count(it.seq) ? encoded[it.seq] : it.seq->encoded;
      EXPECT_EQ(done, static_cast<int64_t>(it.seq->history().size()))
          << "a denoising step needs the whole history encoded (by the items before it)";
      CanvasResult r;
      r.flags = {it.seq->step() > 0, true};
      r.argmax.assign(kC, static_cast<int32_t>(10 * it.seq->id() + it.seq->canvas_index()));
      if (it.seq->params().logprobs) r.logprobs.assign(kC, 0.f);
      out.canvases.push_back(std::move(r));
    }
    return out;
  }
  void release(const Sequence& s) override { ++released[s.id()]; }

  std::vector<StepPlan> plans;
  std::map<uint64_t, int> released;
};

SequenceParams params(int64_t max_tokens) {
  SequenceParams p;
  p.diffusion.max_denoising_steps = 8;
  p.max_tokens = max_tokens;
  p.eos_ids = {1};
  return p;
}

std::unique_ptr<Sequence> seq(uint64_t id, int prompt_len, int64_t max_tokens, int32_t base = 100) {
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  std::iota(prompt.begin(), prompt.end(), base);
  return std::make_unique<Sequence>(id, prompt, params(max_tokens), kC, 1000);
}

BlockManagerConfig pool(int64_t full_pages, bool prefix = true) {
  BlockManagerConfig b;
  b.page_size = kC;
  b.num_pages = {full_pages, 64};
  b.sliding_keep = 5;
  b.prefix_caching = prefix;
  return b;
}

SchedulerConfig sched(int max_seqs, int64_t budget, int64_t chunk) {
  SchedulerConfig s;
  s.max_num_seqs = max_seqs;
  s.max_num_batched_tokens = budget;
  s.prefill_chunk = chunk;
  s.canvas_length = kC;
  return s;
}

struct Harness {
  FakeRunner* runner;
  std::unique_ptr<EngineCore> core;
  Harness(SchedulerConfig s, BlockManagerConfig b) {
    auto r = std::make_unique<FakeRunner>();
    runner = r.get();
    core = std::make_unique<EngineCore>(s, b, std::move(r));
  }
  // Steps until every sequence finished; returns the steps taken.
  int run(const std::vector<Sequence*>& seqs, int max_steps = 1000) {
    for (auto* s : seqs) core->add(s);
    std::vector<CoreEvent> ev;
    for (int i = 0; i < max_steps; ++i) {
      if (!core->has_work()) return i;
      core->step(ev);
      EXPECT_LE(static_cast<int>(core->scheduler().running().size()), core->scheduler().config().max_num_seqs);
    }
    ADD_FAILURE() << "did not finish";
    return max_steps;
  }
};

std::vector<int32_t> expected_output(uint64_t id, int64_t max_tokens) {
  std::vector<int32_t> out;
  for (int k = 0; static_cast<int64_t>(out.size()) < max_tokens; ++k)
    for (int i = 0; i < kC && static_cast<int64_t>(out.size()) < max_tokens; ++i) out.push_back(static_cast<int32_t>(10 * id + k));
  return out;
}

TEST(Scheduler, AdmitsInFifoOrderUpToMaxNumSeqs) {
  Harness h(sched(2, 64, 8), pool(64));
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> seqs;
  for (int i = 1; i <= 5; ++i) {
    owned.push_back(seq(i, 3 + i, 2 * kC));
    seqs.push_back(owned.back().get());
  }
  h.run(seqs);
  std::vector<uint64_t> order;
  for (const auto& p : h.runner->plans)
    for (const Sequence* s : p.admitted) order.push_back(s->id());
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  for (auto* s : seqs) {
    EXPECT_EQ(s->finish_reason(), FinishReason::kLength);
    EXPECT_EQ(s->output(), expected_output(s->id(), 2 * kC));
    EXPECT_EQ(h.runner->released[s->id()], 1) << "device state released once, at the end";
  }
  EXPECT_EQ(h.core->blocks().used_pages(KvGroup::kFull), 0) << "every page back in the pool";
}

TEST(Scheduler, PrefillChunksAndTheFusedFirstStep) {
  BlockManager bm(pool(64));
  Scheduler s(sched(4, 20, 8), bm);
  auto a = seq(1, 30, kC);
  s.add(a.get());
  std::vector<std::pair<int64_t, int64_t>> chunks;
  bool fused = false;
  for (int step = 0; step < 10 && a->state != Sequence::State::kDenoise; ++step) {
    StepPlan p = s.schedule(0);
    for (const auto& it : p.items) {
      if (it.kind == PlannedItem::Kind::kEncode) chunks.push_back({it.begin, it.end});
      else fused = true;
    }
    s.on_step_done(p, 0);
  }
  EXPECT_EQ(chunks, (std::vector<std::pair<int64_t, int64_t>>{{0, 8}, {8, 16}, {16, 24}, {24, 30}}));
  EXPECT_TRUE(fused) << "the last chunk (6 tokens) left 14 of the budget: room for the first denoising step";
}

// fuse_prefill_tail off (benchmarks): the same chunks, the last one alone; the first denoising step
// is the next step's, and it carries no prefill.
TEST(Scheduler, PrefillTailNotFusedWhenAskedNot) {
  BlockManager bm(pool(64));
  SchedulerConfig cfg = sched(4, 20, 8);
  cfg.fuse_prefill_tail = false;
  Scheduler s(cfg, bm);
  auto a = seq(1, 30, kC);
  s.add(a.get());
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int step = 0; step < 10 && a->state != Sequence::State::kDenoise; ++step) {
    StepPlan p = s.schedule(0);
    for (const auto& it : p.items) {
      EXPECT_EQ(it.kind, PlannedItem::Kind::kEncode) << "a prefill step holds no denoising item";
      if (it.kind == PlannedItem::Kind::kEncode) chunks.push_back({it.begin, it.end});
    }
    s.on_step_done(p, 0);
  }
  EXPECT_EQ(chunks, (std::vector<std::pair<int64_t, int64_t>>{{0, 8}, {8, 16}, {16, 24}, {24, 30}}));
  ASSERT_EQ(a->state, Sequence::State::kDenoise) << "the prompt is encoded";
  StepPlan next = s.schedule(0);
  ASSERT_EQ(next.items.size(), 1u);
  EXPECT_EQ(next.items[0].kind, PlannedItem::Kind::kDenoise);
}

// The request's prefill time ends when the step that encoded the prompt's last token has run (the time
// given to on_step_done), fused with the first denoising step or not; never at scheduling.
TEST(Scheduler, PrefillDoneWhenItsLastChunkHasRun) {
  for (const bool fuse : {true, false}) {
    BlockManager bm(pool(64));
    SchedulerConfig cfg = sched(4, 20, 8);
    cfg.fuse_prefill_tail = fuse;
    Scheduler s(cfg, bm);
    auto a = seq(1, 30, kC);
    s.add(a.get());
    double t = 1.0;
    for (int step = 0; step < 10 && a->state != Sequence::State::kDenoise; ++step) {
      StepPlan p = s.schedule(t);
      EXPECT_EQ(a->prefill_done_time, 0.0) << "fuse " << fuse << ": not at scheduling (step " << step << ")";
      t += 1.0;
      s.on_step_done(p, t);
      if (a->encoded < 30) {
        EXPECT_EQ(a->prefill_done_time, 0.0) << "fuse " << fuse << ": prompt not encoded yet";
      }
    }
    EXPECT_EQ(a->admit_time, 1.0);
    EXPECT_EQ(a->prefill_done_time, 5.0)
        << "fuse " << fuse << ": four chunks, the last one's step ended at t = 5";
    StepPlan p = s.schedule(t);
    s.on_step_done(p, t + 1.0);
    EXPECT_EQ(a->prefill_done_time, 5.0) << "later steps keep it";
  }
}

TEST(Scheduler, DenoiseFirstThenPrefillWithWhatIsLeftButAlwaysOneChunk) {
  BlockManager bm(pool(64));
  Scheduler s(sched(4, 10, 8), bm);
  auto a = seq(1, 3, 4 * kC), b = seq(2, 40, kC, 300);
  s.add(a.get());
  StepPlan p0 = s.schedule(0);  // a: chunk of 3 fused with its first step
  s.on_step_done(p0, 0);
  ASSERT_EQ(a->state, Sequence::State::kDenoise);
  a->on_step(false, false);
  s.add(b.get());
  StepPlan p1 = s.schedule(0);
  ASSERT_EQ(p1.items.size(), 2u);
  EXPECT_EQ(p1.items[0].seq, a.get());
  EXPECT_EQ(p1.items[0].kind, PlannedItem::Kind::kDenoise) << "denoising work first";
  EXPECT_EQ(p1.items[1].seq, b.get());
  EXPECT_EQ(p1.items[1].end - p1.items[1].begin, 6) << "budget 10 - one canvas of 4";

  BlockManager bm2(pool(64));
  Scheduler tight(sched(4, kC, 8), bm2);  // the budget is spent by the canvas alone
  auto c = seq(3, 2, 4 * kC), d = seq(4, 40, kC, 300);
  tight.add(c.get());
  StepPlan q0 = tight.schedule(0);
  tight.on_step_done(q0, 0);
  c->on_step(false, false);
  tight.add(d.get());
  StepPlan q1 = tight.schedule(0);
  ASSERT_EQ(q1.items.size(), 2u);
  EXPECT_EQ(q1.items[1].end - q1.items[1].begin, 8) << "with no budget left, prefill still progresses by one chunk";
}

TEST(Scheduler, PreemptsTheNewestWhenPagesRunOutAndRecomputesIdentically) {
  // 12 pages: three sequences of prompt 8 (2 pages) that each grow by 6 canvases (1 page each).
  Harness h(sched(3, 64, 8), pool(12, /*prefix=*/false));
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> seqs;
  for (int i = 1; i <= 3; ++i) {
    owned.push_back(seq(i, 8, 7 * kC, 100 * i));
    seqs.push_back(owned.back().get());
  }
  h.run(seqs);
  EXPECT_GT(h.core->scheduler().stats().preemptions, 0);
  for (auto* s : seqs) EXPECT_EQ(s->output(), expected_output(s->id(), 7 * kC)) << "sequence " << s->id();
  // The victim was the most recently admitted running sequence, never the one that needed pages.
  for (const auto& p : h.runner->plans)
    for (const Sequence* v : p.preempted) EXPECT_NE(v->id(), 1u) << "the oldest is never preempted";
  EXPECT_EQ(h.core->blocks().used_pages(KvGroup::kFull), 0);
}

TEST(Scheduler, TheHeadOfTheQueueIsNotOvertakenUnderAFullPool) {
  BlockManager bm(pool(6));
  Scheduler s(sched(4, 64, 64), bm);
  auto a = seq(1, 16, kC), b = seq(2, 12, kC, 300), c = seq(3, 2, kC, 500);
  s.add(a.get());
  StepPlan p = s.schedule(0);  // a takes 4 of 6 pages
  ASSERT_EQ(p.admitted.size(), 1u);
  s.on_step_done(p, 0);
  s.add(b.get());  // needs 3 pages: does not fit
  s.add(c.get());  // needs 1 page: would fit, but must wait behind b
  StepPlan q = s.schedule(0);
  EXPECT_TRUE(q.admitted.empty());
  EXPECT_EQ(s.waiting().size(), 2u);
  EXPECT_EQ(s.waiting().front(), b.get());
  s.remove(a.get());  // a leaves: b, then c, are admitted in order
  StepPlan r = s.schedule(0);
  ASSERT_EQ(r.admitted.size(), 2u);
  EXPECT_EQ(r.admitted[0], b.get());
  EXPECT_EQ(r.admitted[1], c.get());
}

TEST(Scheduler, PrefixCacheHitAtAdmissionSkipsTheCachedPages) {
  Harness h(sched(2, 64, 64), pool(64));
  auto a = seq(1, 13, kC), b = seq(2, 13, kC);
  h.run({a.get()});
  h.run({b.get()});
  EXPECT_EQ(a->cached_tokens, 0);
  EXPECT_EQ(b->cached_tokens, 12) << "three whole pages of the 13-token prompt";
  // b's only prefill chunk started after the cached pages.
  bool seen = false;
  for (const auto& p : h.runner->plans)
    for (const auto& it : p.items)
      if (it.seq == b.get() && it.kind == PlannedItem::Kind::kEncode && it.end <= 13) {
        EXPECT_EQ(it.begin, 12);
        seen = true;
      }
  EXPECT_TRUE(seen);
  EXPECT_EQ(h.core->scheduler().stats().prefix_queries, 26);
  EXPECT_EQ(h.core->scheduler().stats().prefix_hits, 12);
  EXPECT_EQ(a->output(), expected_output(1, kC));
}

TEST(Scheduler, KnowsWhatCanNeverFit) {
  BlockManager bm(pool(5));
  Scheduler s(sched(1, 64, 64), bm);
  // prompt 10 + 3 canvases of which 2 are encoded: 18 tokens = 5 pages.
  EXPECT_EQ(s.max_pages_needed(10, 3 * kC), 5);
  EXPECT_TRUE(s.can_ever_fit(10, 3 * kC));
  EXPECT_FALSE(s.can_ever_fit(10, 4 * kC));
}

// A sequence whose prompt holds image blocks [first, first + n) (image token 900) with these digests.
std::unique_ptr<Sequence> image_seq(uint64_t id, int prompt_len, std::vector<std::pair<int, int>> blocks,
                                    std::vector<uint8_t> digest_bytes) {
  auto s = seq(id, prompt_len, kC);
  std::vector<int32_t> prompt(s->history());
  std::vector<PromptImage> images;
  std::vector<int64_t> soft;
  for (size_t b = 0; b < blocks.size(); ++b) {
    for (int j = blocks[b].first; j < blocks[b].first + blocks[b].second; ++j)
      prompt[static_cast<size_t>(j)] = 900;
    PromptImage im;
    im.first = blocks[b].first;
    im.digest.fill(digest_bytes[b]);
    images.push_back(im);
    soft.push_back(blocks[b].second);
  }
  auto out = std::make_unique<Sequence>(id, prompt, params(kC), kC, 1000);
  out->set_images(std::move(images), std::move(soft));
  return out;
}

TEST(Scheduler, PrefillChunksNeverCutAnImageBlock) {
  // A budget of 6 tokens a step, chunks of 8: [0, 6) would cut the block [5, 12), so the first chunk stops
  // at 5; the next starts at the block and takes it whole (7 tokens, past the budget, as the step's only
  // chunk); then [12, 13) stops before the block [13, 21), which the next chunk takes whole.
  Harness h(sched(2, 6, 8), pool(64));
  auto a = image_seq(1, 30, {{5, 7}, {13, 8}}, {1, 2});
  h.run({a.get()});
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (const auto& p : h.runner->plans)
    for (const auto& it : p.items)
      if (it.kind == PlannedItem::Kind::kEncode && it.end <= 30) chunks.push_back({it.begin, it.end});
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 5},   {5, 12},  {12, 13},
                                                         {13, 21}, {21, 27}, {27, 30}};
  EXPECT_EQ(chunks, want);
  EXPECT_EQ(a->output(), expected_output(1, kC));
}

TEST(Scheduler, PrefixCacheKeysImageBlocksByTheirPixels) {
  Harness h(sched(2, 64, 64), pool(64));
  // The image block [2, 10) of a 21-token prompt; pages of 4 tokens.
  auto a = image_seq(1, 21, {{2, 8}}, {7});
  auto same = image_seq(2, 21, {{2, 8}}, {7});
  auto other = image_seq(3, 21, {{2, 8}}, {8});
  h.run({a.get()});
  h.run({same.get()});
  h.run({other.get()});
  EXPECT_EQ(same->cached_tokens, 20) << "the same pixels: every whole page is shared";
  EXPECT_EQ(other->cached_tokens, 0) << "other pixels behind the same placeholder ids share nothing";
  // A prefix that would end inside a block stops before it: a cache of [0, 8) only (same pixels,
  // a shorter prompt whose block [2, 10) ends past the last whole page).
  auto cut = image_seq(4, 9 + 1, {{2, 8}}, {7});
  h.run({cut.get()});
  EXPECT_EQ(cut->cached_tokens, 0) << "pages [0, 8) end inside the block [2, 10)";
}

TEST(Sequence, ImageBlocksBoundChunksAndKeyTheCache) {
  auto s = image_seq(1, 20, {{3, 5}, {10, 4}}, {1, 2});
  EXPECT_EQ(s->chunk_end(0, 6), 3);
  EXPECT_EQ(s->chunk_end(3, 6), 8);
  EXPECT_EQ(s->chunk_end(0, 8), 8);
  EXPECT_EQ(s->chunk_end(8, 12), 10);
  EXPECT_TRUE(s->inside_image(4));
  EXPECT_FALSE(s->inside_image(3));
  EXPECT_FALSE(s->inside_image(8));
  const auto keys = s->cache_keys();
  for (int64_t j = 0; j < 20; ++j) {
    const bool image = (j >= 3 && j < 8) || (j >= 10 && j < 14);
    EXPECT_EQ(keys[static_cast<size_t>(j)] < 0, image) << j;
    if (!image) {
      EXPECT_EQ(keys[static_cast<size_t>(j)], s->history()[static_cast<size_t>(j)]);
    }
  }
}

}  // namespace
}  // namespace dgemma
