// Pinned spans against the reference (tools/golden/make_pin_goldens.py -> tests/fixtures/*/golden_pins):
//   A. the decoder forward of a canvas holding the pinned tokens, and of a later step whose pinned
//      positions' self-conditioning rows are one-hot (the reference given one-hot logits rows);
//   B. step 0 of a pinned request through the engine against step 0 of the reference's generate()
//      from that canvas (decoder_input_ids), with the same counter-based noise: entropies, argmax and
//      sample at every position, and the acceptance under the pinned rule (computed by the generator
//      with an independent implementation on the reference's entropies).
// Instantiated for each fixture that has golden_pins/ (made on the GPU machine).
#include <filesystem>

#include "backend/decide_rules.h"
#include "engine/denoise_policy.h"
#include "engine/kv_pool.h"
#include "golden_util.h"
#include "routing_ties.h"
#include "support/forward.h"
#include "support/model_core.h"

namespace dgemma::golden {
namespace {

constexpr double kMaxNmse = 2.5e-4;  // as test_forward.cpp: a few compounded bf16 roundings
constexpr double kMaxNormAbs = 0.08;
constexpr double kTieZ = 0.25, kTieH = 0.1;  // as test_generate.cpp

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size()) << "a golden array of an unexpected shape";
  if (got.size() != want.size()) return INFINITY;
  double ss_w = 0, ss_d = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    ss_w += static_cast<double>(want[i]) * want[i];
    ss_d += d * d;
  }
  return ss_w > 0 ? ss_d / ss_w : ss_d;
}

struct PinGolden {
  Fixture fx;
  Json m;
  std::vector<PinnedSpan> pins;
  explicit PinGolden(const std::string& name) : fx(name) {
    m = parse_json(read_text_file(fixture_dir(name) + "/golden_pins/manifest.json"), "manifest", true);
    for (const auto& s : m["pins"]) pins.push_back({s["offset"].get<int64_t>(), s["tokens"].get<std::vector<int32_t>>()});
  }
  NpyArray array(const std::string& key) const { return read_npy(fixture_dir(fx.name) + "/golden_pins/" + key + ".npy"); }
  std::vector<int32_t> ids(const std::string& key) const {
    std::vector<int32_t> out;
    for (int64_t v : array(key).as_int()) out.push_back(static_cast<int32_t>(v));
    return out;
  }
};

class PinsGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(PinsGolden, ForwardsOfAPinnedCanvasAndOneHotSelfConditioning) {
  PinGolden g(GetParam());
  Fixture& fx = g.fx;
  Backend& be = *fx.backend;
  const int64_t C = fx.config.canvas_length, V = fx.config.text.vocab_size, H = fx.config.text.hidden_size;
  const int64_t rows = g.m["logits_rows_kept"].get<int64_t>();
  const CanvasPins cp = canvas_pins(g.pins, 0, static_cast<int>(C));
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
  Tensor capped = be.alloc(ScalarType::kF32, {C, V});
  auto capped_rows = [&] {
    be.softcap_logits(logits, static_cast<float>(fx.config.text.final_logit_softcapping), capped);
    std::vector<float> v = tensor_to_floats(be, capped);
    v.resize(static_cast<size_t>(rows * V));
    return v;
  };
  const std::vector<int32_t> canvas0 = g.ids("canvas0"), canvas1 = g.ids("canvas1");
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas0, item_kv, {}, logits, {}};
  forward_items(*fx.backend, *fx.model, items, kv);
  const double e0 = nmse(capped_rows(), g.array("logits0").as_float());
  std::printf("  %s logits0 nmse=%.2e\n", fx.name.c_str(), e0);
  EXPECT_LE(e0, kMaxNmse);

  // Self-conditioning: the reference's bf16 signal for the free rows, one-hot rows at pinned positions
  // through dgemma's own path (one_hot_soft_embeddings). Only full canvases are kept for this.
  if (rows != C) return;
  const auto sc = g.array("sc_input").as_float();
  ASSERT_EQ(sc.size(), static_cast<size_t>(C * V)) << "sc_input is not [C, V]";
  Tensor probs = bf16_softmax_rows(sc, C, V);
  Tensor soft = be.alloc(ScalarType::kBF16, {C, H});
  fx.model->soft_embeddings(be.upload(probs), soft);
  Tensor pin_ids = be.alloc(ScalarType::kI32, {C});
  be.from_host(pin_ids, cp.tokens.data());
  for (const auto& [b, e] : cp.runs) fx.model->one_hot_soft_embeddings(pin_ids.rows(b, e), soft.rows(b, e));
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas1, item_kv, soft, logits, {}};
  // Self-conditioned: rows near a routing tie are checked loosely (routing_ties.h).
  const std::vector<float> margin = routing_margins(
      fx, C, [&](const DumpHook& hook) { forward_items(*fx.backend, *fx.model, items, kv, hook); });
  const std::vector<float> got1 = capped_rows();
  const double e1 = check_logits_with_routing_ties(fx.name + " logits1 (one-hot SC)", got1, g.array("logits1").as_float(),
                                                   V, margin, kMaxNmse, kMaxNormAbs);
  std::vector<uint8_t> strict(static_cast<size_t>(C));
  for (int64_t p = 0; p < C; ++p) strict[static_cast<size_t>(p)] = margin[static_cast<size_t>(p)] >= kRouterTie;
  const auto plain = g.array("logits1_softmax_sc").as_float();
  ASSERT_EQ(plain.size(), got1.size()) << "logits1_softmax_sc";
  const double e_plain = rows_diff(got1, plain, V, strict).nmse;
  std::printf("  %s the same rows against the softmax-SC reference: nmse=%.2e\n", fx.name.c_str(), e_plain);
  EXPECT_GT(e_plain, 10 * e1) << "the one-hot rows must make a measurable difference (the generator must give the "
                                 "pinned rows a self-conditioning signal that is not already one-hot)";
}

TEST_P(PinsGolden, StepZeroOfAPinnedRequestIsTheReferenceStepFromThatCanvas) {
  PinGolden g(GetParam());
  Fixture& fx = g.fx;
  const int C = fx.config.canvas_length;
  SequenceParams p;
  p.diffusion.max_denoising_steps = g.m["max_denoising_steps"].get<int>();
  p.diffusion.entropy_bound = g.m["entropy_bound"].get<double>();
  p.diffusion.t_min = g.m["t_min"].get<double>();
  p.diffusion.t_max = g.m["t_max"].get<double>();
  p.diffusion.stability_threshold = g.m["stability_threshold"].get<int>();
  p.diffusion.confidence_threshold = g.m["confidence_threshold"].get<double>();
  p.seed = g.m["seed"].get<uint64_t>();
  p.max_tokens = g.m["max_tokens"].get<int64_t>();
  p.eos_ids = g.m["eos_token_ids"].get<std::vector<int32_t>>();
  p.trace = true;
  p.pins = g.pins;
  ModelCore core(*fx.backend, *fx.model);
  auto seq = core.make_sequence(1, fx.ids("prompt_ids"), p);
  core.run({seq.get()}, 100000);
  // A copy: canvases() returns the records by value (a reference into it would dangle).
  const std::vector<CanvasRecord> canvases = core.traces().canvases(seq->id());
  ASSERT_FALSE(canvases.empty()) << "no canvas traced";
  ASSERT_FALSE(canvases[0].trace.empty()) << "no step of canvas 0 traced";
  const StepRecord r = canvases[0].trace[0];
  const auto we = g.array("step0.entropy").as_float();
  const auto wa = g.ids("step0.argmax"), ws = g.ids("step0.sample");
  const auto wacc = g.array("step0.accept_pinned_rule").as_int();
  const auto wt = g.array("step0.temperature").as_float();
  const size_t n = static_cast<size_t>(C);
  for (const size_t got : {r.canvas_in.size(), r.entropy.size(), r.argmax.size(), r.sample.size(), r.accept.size(),
                           r.argmax_gap.size(), r.sample_gap.size()})
    ASSERT_EQ(got, n) << "a step-0 trace field is not one value per canvas position";
  for (const size_t want : {we.size(), wa.size(), ws.size(), wacc.size()})
    ASSERT_EQ(want, n) << "a step-0 golden array is not one value per canvas position";
  ASSERT_EQ(wt.size(), 1u) << "step0.temperature holds one value";
  EXPECT_EQ(r.canvas_in, g.ids("canvas0")) << "the initial canvas (seed's random tokens + pins), as the generator built it";
  EXPECT_EQ(r.temperature, wt[0]);
  const CanvasPins cp = canvas_pins(g.pins, 0, C);
  // Margins of the pinned rule on our entropies (the near-tie allowance of an accept decision).
  const std::vector<float> margin = entropy_bound_margins(r.entropy, static_cast<float>(p.diffusion.entropy_bound), cp.mask);
  int ties = 0;
  for (int q = 0; q < C; ++q) {
    EXPECT_LE(std::fabs(static_cast<double>(r.entropy[q]) - we[q]), 0.1 + 0.05 * std::fabs(we[q])) << "entropy at " << q;
    if (r.argmax[q] != wa[q]) {
      EXPECT_LT(r.argmax_gap[q], kTieZ) << "argmax differs at " << q << " without a near-tie";
      ++ties;
    }
    if (r.sample[q] != ws[q]) {
      EXPECT_LT(r.sample_gap[q], kTieZ) << "sample differs at " << q << " without a near-tie";
      ++ties;
    }
    if (r.accept[q] != wacc[q]) {
      EXPECT_LT(margin[q], kTieH) << "accept differs at " << q << " without a near-tie";
      ++ties;
    }
  }
  std::printf("  %s step 0: %d near-tie differences over %d positions\n", fx.name.c_str(), ties, C);
}

std::vector<std::string> fixtures_with_pin_goldens() {
  std::vector<std::string> out;
  for (const char* f : {"tiny_a", "tiny_b"})
    if (std::filesystem::exists(fixture_dir(f) + "/golden_pins/manifest.json")) out.push_back(f);
  return out;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PinsGolden);
INSTANTIATE_TEST_SUITE_P(Fixtures, PinsGolden, ::testing::ValuesIn(fixtures_with_pin_goldens()));

}  // namespace
}  // namespace dgemma::golden
