// Tensor parallelism on the CPU simulation (N threads, in-process collective): the sharded model equals
// the unsharded one bit for bit on the golden fixtures — the encoder's K/V of every rank's heads, the
// decoder logits (every rank's vocabulary columns), the sampler's outputs and probabilities, the
// self-conditioning embeddings, and whole seeded generate() trajectories with every step traced.
// (The unsharded model itself is checked against transformers by test_forward / test_generate.)
#include <cstring>

#include "engine/kv_pool.h"
#include "golden_util.h"
#include "model/tensor_parallel.h"
#include "support/forward.h"
#include "support/model_core.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma::golden {
namespace {

struct TpCase {
  std::string fixture;
  int size;
};
void PrintTo(const TpCase& c, std::ostream* os) { *os << c.fixture << " tp" << c.size; }

std::unique_ptr<TensorParallelModel> sharded(const Fixture& fx, int size) {
  auto loader = make_cpu_backend();
  return TensorParallelModel::cpu(fx.config, load_weights(fx.config, fixture_dir(fx.name) + "/model", *loader), size);
}

template <typename T>
std::vector<T> raw(const Tensor& t) {
  std::vector<T> v(t.nbytes() / sizeof(T));
  std::memcpy(v.data(), t.data, t.nbytes());
  return v;
}

// Columns [c0, c0 + n) of every row of a [rows, cols] tensor, as raw bf16 / f32 / i32 codes.
template <typename T>
std::vector<T> columns(const Tensor& t, int64_t c0, int64_t n) {
  const int64_t cols = t.dim(-1), rows = t.numel() / cols;
  std::vector<T> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = c0; c < c0 + n; ++c) out.push_back(t.ptr<T>()[r * cols + c]);
  return out;
}

// The pages of KV heads [h0, h0 + n) of a layer's pool [pages, Hkv, P, D].
std::vector<uint16_t> head_pages(const Tensor& pages, int64_t h0, int64_t n) {
  const int64_t np = pages.dim(0), hkv = pages.dim(1), row = pages.dim(2) * pages.dim(3);
  std::vector<uint16_t> out;
  for (int64_t p = 0; p < np; ++p)
    for (int64_t h = h0; h < h0 + n; ++h) {
      const uint16_t* src = pages.ptr<uint16_t>() + (p * hkv + h) * row;
      out.insert(out.end(), src, src + row);
    }
  return out;
}

class TensorParallelGolden : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelGolden, ForwardSamplerAndSelfConditioningAreBitIdentical) {
  const TpCase tc = GetParam();
  Fixture fx(tc.fixture);
  auto tp = sharded(fx, tc.size);
  const int N = tc.size;
  const auto prompt = fx.ids("prompt_ids");
  const auto canvas = fx.ids("canvas_ids");
  const int64_t C = fx.config.canvas_length, V = fx.config.text.vocab_size, H = fx.config.text.hidden_size, Vr = V / N;
  const int64_t P = C, npages = (static_cast<int64_t>(prompt.size()) + P - 1) / P + 1;
  KvPoolPlan plan;
  plan.pages = {npages, npages};
  std::vector<int32_t> table(static_cast<size_t>(npages));
  for (int64_t i = 0; i < npages; ++i) table[i] = static_cast<int32_t>(npages - 1 - i);

  // One step's work, the same calls on the unsharded model and on every rank.
  struct Out {
    KvStorage kv;
    Tensor logits, logits_sc, probs, soft;
    Tensor entropy, argmax, sample, logprob, argmax_gap, sample_gap;
  };
  auto step = [&](Backend& be, DiffusionGemma& m, int tp_size) {
    Out o;
    o.kv = allocate_kv_storage(fx.config, be, plan, tp_size);
    ItemKv ikv;
    ikv.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
    std::vector<ForwardItem> items(1);
    items[0].kind = ForwardItem::Kind::kEncode;
    items[0].tokens = prompt;
    items[0].kv = ikv;
    forward_items(be, m, items, o.kv);
    ikv.cached = static_cast<int64_t>(prompt.size());
    o.logits = be.alloc(ScalarType::kBF16, {C, m.logits_columns()});
    items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, ikv, {}, o.logits, {}};
    forward_items(be, m, items, o.kv);
    // The sampler writes the probabilities over a copy of the logits.
    o.probs = be.alloc(ScalarType::kBF16, {C, m.logits_columns()});
    be.copy(o.probs, o.logits);
    SamplerArgs sa;
    sa.logits = o.probs;
    sa.temperature = 0.8f;
    sa.sample_key = rng::stream_key(7, 0, 0, rng::kSample);
    for (Tensor* t : {&o.entropy, &o.logprob, &o.argmax_gap, &o.sample_gap})
      *t = be.alloc(ScalarType::kF32, {C});
    o.argmax = be.alloc(ScalarType::kI32, {C});
    o.sample = be.alloc(ScalarType::kI32, {C});
    sa.entropy = o.entropy, sa.argmax = o.argmax, sa.sample = o.sample, sa.argmax_logprob = o.logprob;
    sa.argmax_gap = o.argmax_gap, sa.sample_gap = o.sample_gap;
    m.sampler_batch_encoded(std::span<SamplerArgs>(&sa, 1), Tensor{});  // the CPU encodes nothing
    o.soft = be.alloc(ScalarType::kBF16, {C, H});
    m.soft_embeddings(o.probs, o.soft);
    o.logits_sc = be.alloc(ScalarType::kBF16, {C, m.logits_columns()});
    items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, ikv, o.soft, o.logits_sc, {}};
    forward_items(be, m, items, o.kv);
    return o;
  };
  const Out want = step(*fx.backend, *fx.model, 1);
  std::vector<Out> got(static_cast<size_t>(N));
  tp->run([&](int r) { got[static_cast<size_t>(r)] = step(tp->backend(r), tp->rank(r), N); });

  for (int r = 0; r < N; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Out& g = got[static_cast<size_t>(r)];
    const ShardPlan plan_r{r, N};
    for (size_t li = 0; li < want.kv.layers.size(); ++li) {
      const IndexRange h = plan_r.kv_heads(fx.config.text.layers[li].num_kv_heads);
      EXPECT_EQ(raw<uint16_t>(g.kv.layers[li].k), head_pages(want.kv.layers[li].k, h.begin, h.size())) << "K of layer " << li;
      EXPECT_EQ(raw<uint16_t>(g.kv.layers[li].v), head_pages(want.kv.layers[li].v, h.begin, h.size())) << "V of layer " << li;
    }
    EXPECT_EQ(raw<uint16_t>(g.logits), columns<uint16_t>(want.logits, r * Vr, Vr)) << "logits without self-conditioning";
    EXPECT_EQ(raw<uint16_t>(g.probs), columns<uint16_t>(want.probs, r * Vr, Vr)) << "self-conditioning probabilities";
    EXPECT_EQ(raw<float>(g.entropy), raw<float>(want.entropy)) << "entropy";
    EXPECT_EQ(raw<int32_t>(g.argmax), raw<int32_t>(want.argmax)) << "argmax";
    EXPECT_EQ(raw<int32_t>(g.sample), raw<int32_t>(want.sample)) << "Gumbel-max sample";
    EXPECT_EQ(raw<float>(g.logprob), raw<float>(want.logprob)) << "argmax log-probability";
    EXPECT_EQ(raw<float>(g.argmax_gap), raw<float>(want.argmax_gap)) << "argmax margin";
    EXPECT_EQ(raw<float>(g.sample_gap), raw<float>(want.sample_gap)) << "sample margin";
    EXPECT_EQ(raw<uint16_t>(g.soft), raw<uint16_t>(want.soft)) << "self-conditioning embeddings";
    EXPECT_EQ(raw<uint16_t>(g.logits_sc), columns<uint16_t>(want.logits_sc, r * Vr, Vr)) << "logits with self-conditioning";
  }
}

// Seeded generate() of two batched sequences (the manifest's runs' settings, sampled and traced; the
// second with a pinned span): every
// step's record and the outputs equal the unsharded engine's.
TEST_P(TensorParallelGolden, SeededTrajectoriesAreBitIdentical) {
  const TpCase tc = GetParam();
  Fixture fx(tc.fixture);
  auto tp = sharded(fx, tc.size);
  // The manifest's first run's settings where it has runs, else the checkpoint's generation config.
  const GenerationConfig& gc = fx.generation;
  const Json meta = fx.manifest.contains("runs") ? fx.manifest["runs"][0] : Json::object();
  auto num = [&](const char* key, double fallback) { return meta.contains(key) ? meta[key].get<double>() : fallback; };
  SequenceParams p;
  p.diffusion.max_denoising_steps = static_cast<int>(num("max_denoising_steps", gc.max_denoising_steps));
  p.diffusion.entropy_bound = num("entropy_bound", gc.entropy_bound);
  p.diffusion.t_min = num("t_min", gc.t_min);
  p.diffusion.t_max = num("t_max", gc.t_max);
  p.diffusion.stability_threshold = static_cast<int>(num("stability_threshold", gc.stability_threshold));
  p.diffusion.confidence_threshold = num("confidence_threshold", gc.confidence_threshold);
  p.max_tokens = 2 * fx.config.canvas_length;
  p.eos_ids = {1, 106, 50};
  p.trace = true;
  const std::vector<int32_t> prompt = fx.ids("prompt_ids");
  const std::vector<int32_t> shorter(prompt.begin(), prompt.begin() + static_cast<long>(prompt.size() / 2 + 1));

  auto generate = [&](ModelCore& core) {
    std::vector<std::unique_ptr<Sequence>> seqs;
    SequenceParams a = p, b = p;
    a.seed = static_cast<uint64_t>(num("seed", 1234));
    b.seed = a.seed + 101;
    b.pins = {PinnedSpan{3, {5, 6, 7}}};  // pinned positions: one-hot self-conditioning rows on the sharded path
    seqs.push_back(core.make_sequence(1, prompt, a));
    seqs.push_back(core.make_sequence(2, shorter, b));
    core.run({seqs[0].get(), seqs[1].get()}, 10000);
    return seqs;
  };
  ModelCore ref_core(*fx.backend, *fx.model);
  ModelCore tp_core(*tp);
  const auto want = generate(ref_core);
  const auto got = generate(tp_core);
  int steps = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i + 1));
    EXPECT_EQ(got[i]->output(), want[i]->output());
    EXPECT_EQ(got[i]->finish_reason(), want[i]->finish_reason());
    const auto wc = ref_core.traces().canvases(want[i]->id()), gc = tp_core.traces().canvases(got[i]->id());
    ASSERT_EQ(gc.size(), wc.size());
    for (size_t k = 0; k < wc.size(); ++k) {
      EXPECT_EQ(gc[k].committed, wc[k].committed) << "canvas " << k;
      ASSERT_EQ(gc[k].trace.size(), wc[k].trace.size()) << "canvas " << k;
      for (size_t s = 0; s < wc[k].trace.size(); ++s, ++steps) {
        const StepRecord &g = gc[k].trace[s], &w = wc[k].trace[s];
        SCOPED_TRACE("canvas " + std::to_string(k) + " step " + std::to_string(s));
        EXPECT_EQ(g.canvas_in, w.canvas_in);
        EXPECT_EQ(g.argmax, w.argmax);
        EXPECT_EQ(g.sample, w.sample);
        EXPECT_EQ(g.canvas_out, w.canvas_out);
        EXPECT_EQ(g.accept, w.accept);
        EXPECT_EQ(g.stop, w.stop);
        EXPECT_EQ(0, std::memcmp(g.entropy.data(), w.entropy.data(), w.entropy.size() * sizeof(float))) << "entropy bits";
        EXPECT_EQ(0, std::memcmp(g.sample_gap.data(), w.sample_gap.data(), w.sample_gap.size() * sizeof(float)));
      }
    }
  }
  std::printf("%s tp%d: %d traced steps identical to the unsharded engine\n", tc.fixture.c_str(), tc.size, steps);
  EXPECT_GT(steps, 2);
}

INSTANTIATE_TEST_SUITE_P(Cpu, TensorParallelGolden,
                         ::testing::Values(TpCase{"tiny_a", 2}, TpCase{"tiny_a", 4}, TpCase{"tiny_b", 2},
                                           TpCase{"quant/tiny_a_nvfp4_ct", 2}),
                         [](const ::testing::TestParamInfo<TpCase>& i) {
                           std::string n = i.param.fixture + "_tp" + std::to_string(i.param.size);
                           for (char& c : n)
                             if (c == '/') c = '_';
                           return n;
                         });

// `dgemma generate --tensor-parallel-size N` (the engine factory's assembly, one thread per rank) prints
// what the unsharded engine prints, token for token.
TEST(TensorParallel, GenerateCommandMatchesOneRank) {
  Fixture fx("tiny_a");
  std::string ids;
  for (int32_t t : fx.ids("prompt_ids")) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  auto run = [&](int tp) {
    const std::string cmd = std::string(DGEMMA_BINARY_DIR) + "/dgemma generate " + fixture_dir("tiny_a") +
                            "/model --device cpu --seed 11 --max-tokens 40 --prompt-ids " + ids +
                            " --tensor-parallel-size " + std::to_string(tp) + " 2>/dev/null";
    FILE* pipe = popen(cmd.c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    std::string out;
    char buf[4096];
    while (pipe && fgets(buf, sizeof(buf), pipe)) out += buf;
    EXPECT_EQ(pipe ? pclose(pipe) : -1, 0) << cmd;
    return out;
  };
  const std::string one = run(1);
  EXPECT_FALSE(one.empty());
  EXPECT_EQ(run(2), one);
  EXPECT_EQ(run(4), one);
}

// A size the model's shapes do not divide is refused with the dimension named (tiny_b has 2 heads).
TEST(TensorParallel, RefusesSizesTheShapesDoNotDivide) {
  const ModelConfig c = load_model_config(fixture_dir("tiny_b") + "/model");
  try {
    validate_tensor_parallel(c, 4);
    FAIL() << "tp 4 over 2 heads accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("num_attention_heads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate_tensor_parallel(c, 3), Error);
  EXPECT_THROW(validate_tensor_parallel(c, 16), Error);
  EXPECT_NO_THROW(validate_tensor_parallel(c, 2));
}

}  // namespace
}  // namespace dgemma::golden
