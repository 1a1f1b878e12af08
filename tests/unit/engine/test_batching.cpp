// A batch of different sequences gives bitwise the same results as each sequence run alone
// (issue "CPU reference engine", item 5): the CPU backend's maths never depends on the batch.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "engine/batch_runner.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/kv_cache.h"
#include "model/weights.h"

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

  std::unique_ptr<Sequence> make(const Spec& s, SequenceKv& kv) {
    SequenceParams p;
    p.diffusion.max_denoising_steps = 10;
    p.diffusion.entropy_bound = 0.3;
    p.seed = s.seed;
    p.max_tokens = s.max_tokens;
    p.eos_ids = {1, 106, 50};
    p.trace = true;
    p.initial_canvas = s.initial;
    auto seq = std::make_unique<Sequence>(s.seed, s.prompt, p);
    seq->kv = &kv;
    seq->logits = backend_->alloc(ScalarType::kBF16, {config_.canvas_length, config_.text.vocab_size});
    seq->soft_embeds = backend_->alloc(ScalarType::kBF16, {config_.canvas_length, config_.text.hidden_size});
    return seq;
  }

  // Runs the sequences together (prefill chunks of 7 tokens so prefills, commits and denoising steps
  // of different sequences mix within one forward) until all finish.
  void run(std::vector<Sequence*> seqs) {
    BatchRunner runner(*model_, 4096, 7);
    for (auto* s : seqs) runner.start(*s);
    std::vector<SequenceEvent> events;
    for (int guard = 0; guard < 2000; ++guard) {
      std::vector<Sequence*> live;
      for (auto* s : seqs)
        if (s->state != Sequence::State::kFinished) live.push_back(s);
      if (live.empty()) return;
      runner.step(live, events);
    }
    FAIL() << "sequences did not finish";
  }

  ModelConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DiffusionGemma> model_;
};

void expect_same(const Sequence& a, const Sequence& b) {
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
  std::vector<SequenceKv> alone_kv, batch_kv;
  for (size_t i = 0; i < specs.size(); ++i) {
    alone_kv.push_back(allocate_kv(config_, *backend_, 1024, 64));
    batch_kv.push_back(allocate_kv(config_, *backend_, 1024, 64));
  }
  std::vector<std::unique_ptr<Sequence>> alone, batched;
  for (size_t i = 0; i < specs.size(); ++i) {
    alone.push_back(make(specs[i], alone_kv[i]));
    run({alone.back().get()});
    batched.push_back(make(specs[i], batch_kv[i]));
  }
  run({batched[0].get(), batched[1].get(), batched[2].get()});
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    EXPECT_GE(alone[i]->denoise_steps_total, 2) << "a real trajectory";
    expect_same(*alone[i], *batched[i]);
  }
}

TEST_F(BatchingTest, SeedDeterminesTheTrajectory) {
  SequenceKv kv1 = allocate_kv(config_, *backend_, 1024, 64), kv2 = allocate_kv(config_, *backend_, 1024, 64);
  SequenceKv kv3 = allocate_kv(config_, *backend_, 1024, 64);
  const Spec s{{2, 105, 50, 51, 52, 53}, 7, 32, {}};
  auto a = make(s, kv1), b = make(s, kv2);
  Spec other = s;
  other.seed = 8;
  auto c = make(other, kv3);
  run({a.get()});
  run({b.get()});
  run({c.get()});
  expect_same(*a, *b);
  EXPECT_NE(a->canvases[0].trace[0].canvas_in, c->canvases[0].trace[0].canvas_in) << "another seed, another initial canvas";
}

}  // namespace
}  // namespace dgemma
