// Pinned spans through the real engine on a fixture model (CPU), tested by rule (docs/MODEL.md §6.6):
// step 0 of a pinned request is the same forward as a request whose canvas_ids hold the pinned tokens;
// every step keeps the pins, accepts by the free-positions rule, renoises the rest with the counter RNG
// and stops by the free-positions rule; step 1's self-conditioning rows of pinned positions are one-hot
// (checked by recomputing the step by hand); runs are reproducible; pins do not leak across a batch.
// The reference's side of the same steps: test_pins_golden.cpp.
#include <algorithm>

#include "backend/decide_rules.h"
#include "engine/denoise_policy.h"
#include "engine/kv_pool.h"
#include "golden_util.h"
#include "support/forward.h"
#include "support/model_core.h"
#include "util/counter_rng.h"

namespace dgemma::golden {
namespace {

SequenceParams pinned_params(const Fixture& fx, std::vector<PinnedSpan> pins, int64_t max_tokens) {
  SequenceParams p;
  p.diffusion.max_denoising_steps = 8;
  p.diffusion.entropy_bound = 0.1;
  p.diffusion.confidence_threshold = 0.005;
  p.seed = 4242;
  p.max_tokens = max_tokens;
  p.eos_ids = fx.generation.eos_token_ids;
  p.pad_id = fx.generation.pad_token_id;
  p.trace = true;
  p.pins = std::move(pins);
  return p;
}

struct PinRun {
  std::vector<CanvasRecord> canvases;
  std::vector<int32_t> output;
  FinishReason reason = FinishReason::kNone;
};

PinRun run(const Fixture& fx, const SequenceParams& p, uint64_t id = 1) {
  ModelCore core(*fx.backend, *fx.model);
  std::unique_ptr<Sequence> s = core.make_sequence(id, fx.ids("prompt_ids"), p);
  core.run({s.get()}, 10000);
  return {core.traces().canvases(s->id()), s->output(), s->finish_reason()};
}

// tiny_a: C = 16. Spans at [4, 7) and [13, 18): the second crosses into canvas 1.
const std::vector<PinnedSpan> kPins = {{4, {11, 12, 13}}, {13, {21, 22, 23, 24, 25}}};

TEST(PinsEngine, FirstStepIsTheForwardOfTheCanvasHoldingThePins) {
  Fixture fx("tiny_a");
  const int C = fx.config.canvas_length;
  const SequenceParams pinned = pinned_params(fx, kPins, 24);
  const PinRun a = run(fx, pinned);
  ASSERT_FALSE(a.canvases.empty());
  const StepRecord& s0 = a.canvases[0].trace.at(0);
  const CanvasPins cp = canvas_pins(kPins, 0, C);

  // The initial canvas: the seed's random canvas with the pinned tokens written over it.
  std::vector<int32_t> want = random_canvas(pinned.seed, 0, 0, rng::kInitCanvas, C, static_cast<int>(fx.config.text.vocab_size));
  apply_pins(cp, want);
  EXPECT_EQ(s0.canvas_in, want);

  // The same canvas given as canvas_ids, no pins: the same forward, so the same entropies, argmax and
  // sample at every position, bit for bit; only the decision differs (pinned vs unpinned rule).
  SequenceParams plain = pinned;
  plain.pins.clear();
  plain.initial_canvas = want;
  const PinRun b = run(fx, plain);
  const StepRecord& t0 = b.canvases.at(0).trace.at(0);
  EXPECT_EQ(t0.canvas_in, s0.canvas_in);
  EXPECT_EQ(t0.entropy, s0.entropy);
  EXPECT_EQ(t0.argmax, s0.argmax);
  EXPECT_EQ(t0.sample, s0.sample);
  const float bound = static_cast<float>(pinned.diffusion.entropy_bound);
  EXPECT_EQ(t0.accept, entropy_bound_accept(t0.entropy, bound));
  EXPECT_EQ(s0.accept, entropy_bound_accept(s0.entropy, bound, cp.mask));
  EXPECT_NE(s0.accept, t0.accept) << "the fixture case must show the pinned rule differing from the unpinned one";
  for (int p = 0; p < C; ++p) {
    if (!cp.pinned(p) && s0.accept[p] == t0.accept[p]) {
      EXPECT_EQ(s0.canvas_out[p], t0.canvas_out[p]) << p;
    }
  }
}

TEST(PinsEngine, EveryStepKeepsThePinsAndFollowsTheFreePositionRule) {
  Fixture fx("tiny_a");
  const int C = fx.config.canvas_length;
  const uint32_t V = static_cast<uint32_t>(fx.config.text.vocab_size);
  const SequenceParams p = pinned_params(fx, kPins, 24);
  const PinRun a = run(fx, p);
  ASSERT_EQ(a.canvases.size(), 2u) << "max_tokens 24 spans two canvases";
  const float bound = static_cast<float>(p.diffusion.entropy_bound);
  int checked = 0;
  for (size_t k = 0; k < a.canvases.size(); ++k) {
    const CanvasPins cp = canvas_pins(kPins, static_cast<int64_t>(k), C);
    ASSERT_FALSE(cp.empty());
    const CanvasRecord& cr = a.canvases[k];
    StabilityRun stability(p.diffusion.stability_threshold);
    for (int s = 0; s < cr.steps; ++s) {
      SCOPED_TRACE("canvas " + std::to_string(k) + " step " + std::to_string(s));
      const StepRecord& r = cr.trace[s];
      EXPECT_EQ(r.accept, entropy_bound_accept(r.entropy, bound, cp.mask));
      const uint64_t key = rng::stream_key(p.seed, k, static_cast<uint64_t>(s), rng::kRenoise);
      bool same = s > 0;
      for (int q = 0; q < C; ++q) {
        if (cp.pinned(q)) {
          EXPECT_EQ(r.canvas_in[q], cp.tokens[q]);
          EXPECT_EQ(r.canvas_out[q], cp.tokens[q]);
          continue;
        }
        EXPECT_EQ(r.canvas_out[q], r.accept[q] ? r.sample[q] : static_cast<int32_t>(rng::uniform_token(key, q, V)));
        if (s > 0) same = same && r.argmax[q] == cr.trace[s - 1].argmax[q];
      }
      if (s > 0) {
        EXPECT_EQ(r.canvas_in, cr.trace[s - 1].canvas_out);
      }
      const bool stop = (stability.update(same) && is_confident(r.entropy, static_cast<float>(p.diffusion.confidence_threshold), cp.mask)) ||
                        s + 1 >= p.diffusion.max_denoising_steps;
      EXPECT_EQ(r.stop, stop);
      ++checked;
    }
    for (int q = 0; q < C; ++q) {
      if (cp.pinned(q)) {
        EXPECT_EQ(cr.committed[q], cp.tokens[q]) << "committed canvas " << k << " position " << q;
      }
    }
  }
  EXPECT_GT(checked, 2);
  // The answer holds every pinned token, in order (filler before the last pin dropped).
  std::vector<int32_t> pinned_seen;
  for (int32_t t : a.output)
    if (t >= 11 && t <= 25 && (t <= 13 || t >= 21)) pinned_seen.push_back(t);
  EXPECT_EQ(pinned_seen, (std::vector<int32_t>{11, 12, 13, 21, 22, 23, 24, 25}));
  EXPECT_LE(a.output.size(), 24u);

  const PinRun again = run(fx, p, 9);
  EXPECT_EQ(again.output, a.output) << "seeded runs are reproducible";
  ASSERT_EQ(again.canvases.size(), a.canvases.size());
  for (size_t k = 0; k < a.canvases.size(); ++k) EXPECT_EQ(again.canvases[k].committed, a.canvases[k].committed);
}

// Step 1 recomputed by hand from step 0's trace: prefill, the step-0 forward and sampler, the
// self-conditioning input with one-hot rows at the pinned positions, the step-1 forward and sampler.
// The engine's step-1 entropies must be these, bit for bit (same CPU ops in the same order).
TEST(PinsEngine, PinnedPositionsFeedOneHotSelfConditioning) {
  Fixture fx("tiny_a");
  Backend& be = *fx.backend;
  const int64_t C = fx.config.canvas_length, V = fx.config.text.vocab_size, H = fx.config.text.hidden_size;
  const SequenceParams p = pinned_params(fx, kPins, 24);
  const PinRun a = run(fx, p);
  ASSERT_GE(a.canvases.at(0).steps, 2);
  const StepRecord& s0 = a.canvases[0].trace[0];
  const StepRecord& s1 = a.canvases[0].trace[1];
  const CanvasPins cp = canvas_pins(kPins, 0, static_cast<int>(C));

  const auto prompt = fx.ids("prompt_ids");
  const int64_t npages = static_cast<int64_t>(prompt.size()) / C + 2;
  KvPoolPlan plan;
  plan.pages = {npages, npages};
  const KvStorage kv = allocate_kv_storage(fx.config, be, plan);
  std::vector<int32_t> table(static_cast<size_t>(npages));
  for (int64_t i = 0; i < npages; ++i) table[i] = static_cast<int32_t>(i);
  ItemKv item_kv;
  item_kv.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
  std::vector<ForwardItem> items(1);
  items[0].kind = ForwardItem::Kind::kEncode;
  items[0].tokens = prompt;
  items[0].kv = item_kv;
  forward_items(*fx.backend, *fx.model, items, kv);
  item_kv.cached = static_cast<int64_t>(prompt.size());

  Tensor logits = be.alloc(ScalarType::kBF16, {C, V});
  Tensor entropy = be.alloc(ScalarType::kF32, {C}), argmax = be.alloc(ScalarType::kI32, {C}),
         sample = be.alloc(ScalarType::kI32, {C}), logprob = be.alloc(ScalarType::kF32, {C});
  auto sampler = [&](int step) {
    SamplerArgs sa;
    sa.logits = logits;
    sa.softcap = static_cast<float>(fx.config.text.final_logit_softcapping);
    sa.temperature = temperature_at(p.diffusion, step);
    sa.sample_key = rng::stream_key(p.seed, 0, static_cast<uint64_t>(step), rng::kSample);
    sa.entropy = entropy;
    sa.argmax = argmax;
    sa.sample = sample;
    sa.argmax_logprob = logprob;
    be.sampler(sa);
    return tensor_to_floats(be, entropy);
  };
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, s0.canvas_in, item_kv, {}, logits, {}};
  forward_items(*fx.backend, *fx.model, items, kv);
  ASSERT_EQ(sampler(0), s0.entropy);

  Tensor soft = be.alloc(ScalarType::kBF16, {C, H});
  fx.model->soft_embeddings(logits, soft);
  Tensor soft_plain = be.alloc(ScalarType::kBF16, {C, H});
  be.copy(soft_plain, soft);
  std::vector<int32_t> ids(cp.tokens.begin(), cp.tokens.end());
  Tensor pin_ids = be.alloc(ScalarType::kI32, {C});
  be.from_host(pin_ids, ids.data());
  for (const auto& [b, e] : cp.runs) fx.model->one_hot_soft_embeddings(pin_ids.rows(b, e), soft.rows(b, e));

  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, s1.canvas_in, item_kv, soft, logits, {}};
  forward_items(*fx.backend, *fx.model, items, kv);
  EXPECT_EQ(sampler(1), s1.entropy) << "step 1 is the forward with one-hot self-conditioning rows";
  // And the softmax rows would have given something else (the check has teeth).
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, s1.canvas_in, item_kv, soft_plain, logits, {}};
  forward_items(*fx.backend, *fx.model, items, kv);
  EXPECT_NE(sampler(1), s1.entropy);
}

TEST(PinsEngine, OneHotSoftEmbeddingsAreTheGemmOfOneHotProbabilities) {
  Fixture fx("tiny_a");
  Backend& be = *fx.backend;
  const int64_t V = fx.config.text.vocab_size, H = fx.config.text.hidden_size;
  const std::vector<int32_t> ids = {0, 3, 511, 77};
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor probs = host_tensor(ScalarType::kBF16, {n, V});
  std::fill(probs.ptr<uint16_t>(), probs.ptr<uint16_t>() + n * V, uint16_t{0});
  for (int64_t i = 0; i < n; ++i) probs.ptr<uint16_t>()[i * V + ids[i]] = f32_to_bf16(1.0f);
  Tensor a = be.alloc(ScalarType::kBF16, {n, H}), b = be.alloc(ScalarType::kBF16, {n, H});
  fx.model->soft_embeddings(be.upload(probs), a);
  Tensor t = be.alloc(ScalarType::kI32, {n});
  be.from_host(t, ids.data());
  fx.model->one_hot_soft_embeddings(t, b);
  EXPECT_EQ(tensor_to_floats(be, a), tensor_to_floats(be, b));
}

TEST(PinsEngine, PinsStayWithTheirSequenceInABatch) {
  Fixture fx("tiny_a");
  SequenceParams unpinned = pinned_params(fx, {}, 20);
  unpinned.seed = 99;
  const PinRun solo = run(fx, unpinned, 2);
  ModelCore core(*fx.backend, *fx.model);
  auto s1 = core.make_sequence(1, fx.ids("prompt_ids"), pinned_params(fx, kPins, 24));
  auto s2 = core.make_sequence(2, fx.ids("prompt_ids"), unpinned);
  core.run({s1.get(), s2.get()}, 10000);
  EXPECT_EQ(s2->output(), solo.output);
  const PinRun pinned_solo = run(fx, pinned_params(fx, kPins, 24));
  EXPECT_EQ(s1->output(), pinned_solo.output);
}

}  // namespace
}  // namespace dgemma::golden
