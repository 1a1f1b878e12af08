// A batch of different sequences gives bitwise the same results as each sequence run alone
// (issue "CPU reference engine", item 5): the CPU backend's maths never depends on the batch.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/weights.h"
#include "support/model_core.h"

namespace dgemma {
namespace {

struct Spec {
  std::vector<int32_t> prompt;
  uint64_t seed;
  int64_t max_tokens;
  std::vector<int32_t> initial;
};

class BatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";
    config_ = load_model_config(dir);
    backend_ = make_cpu_backend();
    model_ = std::make_unique<DiffusionGemma>(config_, load_weights(config_, dir, *backend_), *backend_);
  }

  static SequenceParams params(const Spec& s) {
    SequenceParams p;
    p.diffusion.max_denoising_steps = 10;
    p.diffusion.entropy_bound = 0.3;
    p.seed = s.seed;
    p.max_tokens = s.max_tokens;
    p.eos_ids = {1, 106, 50};
    p.trace = true;
    p.initial_canvas = s.initial;
    return p;
  }

  struct Run {
    std::vector<int32_t> output;
    FinishReason finish;
    int64_t steps;
    std::vector<CanvasRecord> canvases;
  };

  // Runs the sequences together (prefill chunks of 7 tokens so prefills, commits and denoising steps
  // of different sequences mix within one forward) until all finish; `pages` bounds the KV pool.
  std::vector<Run> run(const std::vector<Spec>& specs, ModelCoreOptions o = {}) {
    o.prefill_chunk = 7;
    ModelCore mc(*backend_, *model_, o);
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::vector<Sequence*> ptrs;
    for (size_t i = 0; i < specs.size(); ++i) {
      seqs.push_back(mc.make_sequence(i + 1, specs[i].prompt, params(specs[i])));
      ptrs.push_back(seqs.back().get());
    }
    mc.run(ptrs, 2000);
    preemptions_ = mc.core().scheduler().stats().preemptions;
    std::vector<Run> out;
    for (auto& s : seqs)
      out.push_back({s->output(), s->finish_reason(), s->denoise_steps_total(), mc.traces().canvases(s->id())});
    return out;
  }

  int64_t preemptions_ = 0;
  ModelConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DiffusionGemma> model_;
};

template <typename R>
void expect_same(const R& a, const R& b) {
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(a.finish, b.finish);
  ASSERT_EQ(a.canvases.size(), b.canvases.size());
  for (size_t k = 0; k < a.canvases.size(); ++k) {
    const auto& ca = a.canvases[k];
    const auto& cb = b.canvases[k];
    ASSERT_EQ(ca.trace.size(), cb.trace.size()) << "canvas " << k;
    EXPECT_EQ(ca.committed, cb.committed);
    for (size_t s = 0; s < ca.trace.size(); ++s) {
      EXPECT_EQ(ca.trace[s].canvas_in, cb.trace[s].canvas_in);
      EXPECT_EQ(ca.trace[s].argmax, cb.trace[s].argmax);
      EXPECT_EQ(ca.trace[s].sample, cb.trace[s].sample);
      EXPECT_EQ(ca.trace[s].accept, cb.trace[s].accept);
      EXPECT_EQ(ca.trace[s].entropy, cb.trace[s].entropy) << "entropies must be bitwise equal";
    }
  }
}

TEST_F(BatchingTest, ThreeSequencesBatchedEqualEachAlone) {
  std::vector<int32_t> initial(config_.canvas_length);
  for (int i = 0; i < config_.canvas_length; ++i) initial[i] = (i * 31 + 7) % 512;
  const std::vector<Spec> specs = {
      {{2, 105, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29}, 11, 40, {}},
      {{2, 40, 41, 42}, 22, 20, initial},
      {{2, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313}, 33, 48, {}},
  };
  std::vector<Run> alone;
  for (const auto& s : specs) alone.push_back(run({s}).front());
  const std::vector<Run> batched = run(specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    EXPECT_GE(alone[i].steps, 2) << "a real trajectory";
    expect_same(alone[i], batched[i]);
  }
}

// A pool too small for all three at once: the scheduler preempts and later recomputes from the
// history; the counter-based RNG makes every restarted canvas identical, so results equal the
// unconstrained run bit for bit.
TEST_F(BatchingTest, PreemptionUnderAFullPoolChangesNothing) {
  std::vector<Spec> specs;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt{2, 105};
    for (int j = 0; j < 30 + 9 * i; ++j) prompt.push_back(200 + 13 * i + j);
    specs.push_back({prompt, static_cast<uint64_t>(40 + i), 64, {}});
  }
  const std::vector<Run> roomy = run(specs);
  ASSERT_EQ(preemptions_, 0);
  ModelCoreOptions tight;
  tight.kv_tokens = 9 * config_.canvas_length;  // 9 pages: one sequence's whole answer fits, three do not
  tight.prefix_caching = false;
  const std::vector<Run> squeezed = run(specs, tight);
  EXPECT_GT(preemptions_, 0) << "the pool was meant to run out";
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    EXPECT_EQ(roomy[i].output, squeezed[i].output);
    EXPECT_EQ(roomy[i].finish, squeezed[i].finish);
    ASSERT_EQ(roomy[i].canvases.size(), squeezed[i].canvases.size());
    for (size_t k = 0; k < roomy[i].canvases.size(); ++k) EXPECT_EQ(roomy[i].canvases[k].committed, squeezed[i].canvases[k].committed);
  }
}

// Prefix caching: a request whose prompt (or prompt + committed canvases) starts with pages that an
// earlier request encoded reuses them, and its results are bit-identical to a run without the cache.
TEST_F(BatchingTest, PrefixCacheHitsAreBitIdenticalToAFreshRun) {
  const int C = config_.canvas_length;
  std::vector<int32_t> prompt{2, 105};
  for (int j = 0; j < 68; ++j) prompt.push_back(150 + (j * 37) % 300);
  const Spec spec{prompt, 5, 40, {}};
  ModelCoreOptions no_cache;
  no_cache.prefix_caching = false;
  const Run fresh = run({spec}, no_cache).front();

  ModelCoreOptions o;
  o.prefill_chunk = 7;
  ModelCore core(*backend_, *model_, o);
  auto first = core.make_sequence(1, prompt, params(spec));
  core.run({first.get()}, 2000);
  EXPECT_EQ(first->cached_tokens, 0);
  auto second = core.make_sequence(2, prompt, params(spec));
  core.run({second.get()}, 2000);
  EXPECT_EQ(second->cached_tokens, (static_cast<int64_t>(prompt.size()) - 1) / C * C) << "all whole pages but the last token's";
  const Run hit{second->output(), second->finish_reason(), second->denoise_steps_total(), core.traces().canvases(2)};
  expect_same(fresh, hit);

  // The committed canvases are pages of the history too: a follow-up whose prompt is the first
  // request's history (prompt + committed canvases) plus a few tokens reuses them.
  ASSERT_GT(first->history().size(), prompt.size());
  std::vector<int32_t> follow = first->history();
  follow.insert(follow.end(), {7, 8, 9});
  const Spec follow_spec{follow, 9, 24, {}};
  auto third = core.make_sequence(3, follow, params(follow_spec));
  core.run({third.get()}, 2000);
  EXPECT_GT(third->cached_tokens, static_cast<int64_t>(prompt.size())) << "pages of committed canvases were reused";
  const Run follow_fresh = run({follow_spec}, no_cache).front();
  expect_same(follow_fresh, Run{third->output(), third->finish_reason(), third->denoise_steps_total(), core.traces().canvases(3)});
  const SchedulerStats& st = core.core().scheduler().stats();
  EXPECT_EQ(st.prefix_hits, second->cached_tokens + third->cached_tokens);
  EXPECT_EQ(st.prefix_queries, static_cast<int64_t>(2 * prompt.size() + follow.size()));
}

TEST_F(BatchingTest, SeedDeterminesTheTrajectory) {
  const Spec s{{2, 105, 50, 51, 52, 53}, 7, 32, {}};
  Spec other = s;
  other.seed = 8;
  const Run a = run({s}).front(), b = run({s}).front(), c = run({other}).front();
  expect_same(a, b);
  EXPECT_NE(a.canvases[0].trace[0].canvas_in, c.canvases[0].trace[0].canvas_in) << "another seed, another initial canvas";
}

}  // namespace
}  // namespace dgemma
