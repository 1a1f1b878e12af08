// Quantised checkpoints (tests/fixtures/quant, written by tools/quant/quantize.py from tiny_a): each
// format loads with the right per-slot formats, the quantised CPU path equals the bf16 path on the
// dequantised weights bit for bit (pow2-scale fixtures, where the dequantised weights are exactly
// bf16), FP8-dynamic's activation quantisation is applied, and broken files are refused clearly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "backend/quant_reference.h"
#include "engine/kv_pool.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/fused_weights.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "support/forward.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {
namespace {

namespace fs = std::filesystem;
const std::string kQuant = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/quant/";
const char* kFormats[] = {"tiny_a_nvfp4_modelopt", "tiny_a_nvfp4_ct", "tiny_a_fp8_dynamic"};

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("dgemma_quant_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static inline int counter = 0;
};

std::vector<Weight*> linears(ModelWeights& w) {
  std::vector<Weight*> out;
  for (auto& L : w.layers)
    for (Weight* p : {&L.qkv_proj, &L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.mlp_gate_up, &L.mlp_gate, &L.mlp_up,
                      &L.mlp_down, &L.experts_gate_up, &L.experts_down})
      if (!p->empty()) out.push_back(p);
  return out;
}

// A paged pool of `pages` canvas-sized pages, tables in order.
struct Pool {
  KvStorage kv;
  std::vector<int32_t> table;
  Pool(const ModelConfig& c, Backend& be, int64_t pages) {
    KvPoolPlan plan;
    plan.pages = {pages, pages};
    kv = allocate_kv_storage(c, be, plan);
    for (int64_t i = 0; i < pages; ++i) table.push_back(static_cast<int32_t>(i));
  }
  ItemKv item(int64_t cached) const {
    ItemKv k;
    k.cached = cached;
    k.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
    return k;
  }
};

// Prefill of a 20-token prompt, then one denoising pass over a canvas: the raw bf16 logits.
// fp8_row_fusion: DiffusionGemma::set_fp8_row_fusion.
std::vector<uint16_t> forward_logits(const std::string& dir, bool bf16_activations = false,
                                     bool fp8_row_fusion = true) {
  const ModelConfig c = load_model_config(dir);
  auto be = make_cpu_backend();
  ModelWeights w = load_weights(c, dir, *be);
  if (bf16_activations)
    for (Weight* p : linears(w)) p->act = ActQuant::kNone;
  DiffusionGemma m(c, std::move(w), *be);
  m.set_fp8_row_fusion(fp8_row_fusion);
  const int64_t V = c.text.vocab_size, C = c.canvas_length;
  const Pool pool(c, *be, (20 + C - 1) / C + 1);
  std::vector<int32_t> prompt, canvas;
  for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 5) % V));
  for (int64_t i = 0; i < C; ++i) canvas.push_back(static_cast<int32_t>((i * 7 + 3) % V));
  std::vector<ForwardItem> items(1);
  items[0].kind = ForwardItem::Kind::kEncode;
  items[0].tokens = prompt;
  items[0].kv = pool.item(0);
  forward_items(*be, m, items, pool.kv);
  Tensor logits = be->alloc(ScalarType::kBF16, {C, V});
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, pool.item(static_cast<int64_t>(prompt.size())), {}, logits, {}};
  forward_items(*be, m, items, pool.kv);
  std::vector<uint16_t> out(static_cast<size_t>(C * V));
  be->to_host(logits, out.data());
  return out;
}

TEST(QuantWeights, EachFormatLoadsWithItsPerSlotFormats) {
  struct Want {
    const char* fixture;
    WeightFormat experts, attention, mlp;
    ActQuant act;
  };
  const Want wants[] = {
      {"tiny_a_nvfp4_modelopt", WeightFormat::kNvfp4, WeightFormat::kBF16, WeightFormat::kBF16, ActQuant::kNone},
      {"tiny_a_nvfp4_ct", WeightFormat::kNvfp4, WeightFormat::kBF16, WeightFormat::kNvfp4, ActQuant::kNone},
      {"tiny_a_fp8_dynamic", WeightFormat::kFp8Channel, WeightFormat::kFp8Channel, WeightFormat::kFp8Channel,
       ActQuant::kFp8Token},
  };
  for (const Want& want : wants) {
    SCOPED_TRACE(want.fixture);
    const std::string dir = kQuant + want.fixture + "/model";
    const ModelConfig c = load_model_config(dir);
    ASSERT_TRUE(c.quant.quantized());
    auto be = make_cpu_backend();
    const ModelWeights w = load_weights(c, dir, *be);
    for (const auto& L : w.layers) {
      EXPECT_EQ(L.experts_gate_up.format, want.experts);
      EXPECT_EQ(L.experts_down.format, want.experts);
      EXPECT_EQ(L.experts_gate_up.experts(), c.text.num_experts);
      EXPECT_EQ(L.experts_gate_up.rows(), 2 * c.text.moe_intermediate_size);
      EXPECT_EQ(L.experts_gate_up.cols(), c.text.hidden_size);
      EXPECT_EQ(L.experts_down.cols(), c.text.moe_intermediate_size);
      EXPECT_EQ(L.qkv_proj.format, want.attention);  // fused q | k | v (one format per group here)
      EXPECT_EQ(L.mlp_gate_up.format, want.mlp);
      EXPECT_EQ(L.o_proj.format, want.attention);
      EXPECT_EQ(L.mlp_down.format, want.mlp);
      EXPECT_EQ(L.experts_down.act, want.act);
    }
  }
}

// The dequantisation is exact: on the pow2-scale fixtures the CPU reference's fp32 dequantised
// weights are bf16 values and equal, bit for bit, the numpy quantiser's own dequantisation.
TEST(QuantWeights, DequantisationEqualsTheQuantisersBitForBit) {
  for (const char* f : kFormats) {
    SCOPED_TRACE(f);
    const std::string base = kQuant + std::string(f) + "_pow2/";
    const ModelConfig c = load_model_config(base + "model");
    auto be = make_cpu_backend();
    ModelWeights w = load_weights(c, base + "model", *be);
    SafetensorsCheckpoint deq(base + "dequant");
    int compared = 0;
    for (size_t li = 0; li < w.layers.size(); ++li) {
      const std::string p = "model.decoder.layers." + std::to_string(li) + ".";
      // The fused projections' parts are their row ranges (model/fused_weights.h).
      const LayerWeights& L = w.layers[li];
      const int64_t nq = c.text.num_attention_heads * L.spec.head_dim, nk = L.spec.num_kv_heads * L.spec.head_dim;
      const int64_t I = c.text.intermediate_size;
      const Weight q = weight_rows(L.qkv_proj, 0, nq), k = weight_rows(L.qkv_proj, nq, nq + nk);
      const Weight gate = weight_rows(L.mlp_gate_up, 0, I), upw = weight_rows(L.mlp_gate_up, I, 2 * I);
      const std::pair<const Weight*, std::string> slots[] = {
          {&L.experts_gate_up, "experts.gate_up_proj"}, {&L.experts_down, "experts.down_proj"},
          {&q, "self_attn.q_proj.weight"},              {&k, "self_attn.k_proj.weight"},
          {&gate, "mlp.gate_proj.weight"},              {&upw, "mlp.up_proj.weight"},
          {&L.mlp_down, "mlp.down_proj.weight"}};
      for (const auto& [wt, name] : slots) {
        if (!wt->quantized()) continue;
        const TensorInfo* ref = deq.find(p + name);
        ASSERT_NE(ref, nullptr) << name;
        std::vector<float> got(static_cast<size_t>(wt->experts() * wt->rows() * wt->cols()));
        ASSERT_EQ(got.size() * 2, ref->nbytes);
        quant_ref::dequantize(*wt, got.data());
        for (size_t i = 0; i < got.size(); ++i) {
          uint16_t b;
          std::memcpy(&b, ref->data + 2 * i, 2);
          ASSERT_EQ(round_bf16(got[i]), got[i]) << name << " element " << i << " is not a bf16 value";
          ASSERT_EQ(f32_to_bf16(got[i]), b) << name << " element " << i;
        }
        ++compared;
      }
    }
    EXPECT_GE(compared, 12);
  }
}

// The rule of the reference: the quantised checkpoint through the quantised path equals its
// dequantised weights through the bf16 path. Exact here: with power-of-two row scales the per-row
// scale multiply after the fp32 dot product is exact, and value * block is exact in fp32.
TEST(QuantWeights, QuantisedPathEqualsTheDequantisedModelExactly) {
  for (const char* f : kFormats) {
    SCOPED_TRACE(f);
    const std::string base = kQuant + std::string(f) + "_pow2/";
    // FP8-dynamic: with bf16 activations (the weights alone); its activation quantisation next.
    const std::vector<uint16_t> q = forward_logits(base + "model", /*bf16_activations=*/true);
    const std::vector<uint16_t> d = forward_logits(base + "dequant");
    ASSERT_EQ(q.size(), d.size());
    size_t differ = 0;
    for (size_t i = 0; i < q.size(); ++i) differ += q[i] != d[i];
    EXPECT_EQ(differ, 0u) << "logits differ from the dequantised model's";
  }
}

// FP8-dynamic quantises every matmul input per token. Its effect is real (the logits change) and
// bounded: an E4M3 rounding is at most 2^-4 relative per element, random in sign, so over a
// K-term dot product the relative error of a projection is about 2^-4/sqrt(3) / sqrt(K/2)-ish
// noise: a few percent of the logits' rms after 6 layers, far below a structural error (~100%).
TEST(QuantWeights, Fp8DynamicActivationQuantisationIsAppliedAndBounded) {
  const std::string base = kQuant + "tiny_a_fp8_dynamic_pow2/";
  const std::vector<uint16_t> q = forward_logits(base + "model");
  const std::vector<uint16_t> d = forward_logits(base + "dequant");
  double ss_d = 0, ss_w = 0;
  size_t differ = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const double a = bf16_to_f32(q[i]), b = bf16_to_f32(d[i]);
    ASSERT_TRUE(std::isfinite(a));
    differ += q[i] != d[i];
    ss_d += (a - b) * (a - b);
    ss_w += b * b;
  }
  const double nmse = ss_d / ss_w;
  std::printf("  fp8 per-token activations vs bf16: %zu / %zu logits differ, nmse %.3g\n", differ, q.size(), nmse);
  EXPECT_GT(differ, q.size() / 2) << "activation quantisation not applied";
  EXPECT_LT(nmse, 1e-2);
}

// The FP8 rows that the residual junctions and the dense MLP's activation write for the W8A8 linears
// (backend.h Fp8Rows, DiffusionGemma::set_fp8_row_fusion) change no bit: the logits equal those of every
// linear quantising its own input. On these fixtures every consumer of those rows runs W8A8 (the
// fused q|k|v, the dense gate|up and down, the experts' gate_up), so every fused output is taken.
TEST(QuantWeights, Fp8RowFusionGivesTheSameLogits) {
  for (const char* f : {"tiny_a_fp8_dynamic", "tiny_a_fp8_dynamic_pow2"}) {
    SCOPED_TRACE(f);
    const std::string dir = kQuant + std::string(f) + "/model";
    {
      const ModelConfig c = load_model_config(dir);
      auto be = make_cpu_backend();
      const ModelWeights w = load_weights(c, dir, *be);
      for (const LayerWeights& l : w.layers) {
        EXPECT_TRUE(takes_fp8_rows(l.qkv_proj));
        EXPECT_TRUE(takes_fp8_rows(l.mlp_gate_up));
        EXPECT_TRUE(takes_fp8_rows(l.mlp_down));
        EXPECT_TRUE(takes_fp8_rows(l.experts_gate_up));
      }
    }
    const std::vector<uint16_t> fused = forward_logits(dir);
    const std::vector<uint16_t> plain =
        forward_logits(dir, /*bf16_activations=*/false, /*fp8_row_fusion=*/false);
    ASSERT_EQ(fused.size(), plain.size());
    size_t differ = 0;
    for (size_t i = 0; i < fused.size(); ++i) differ += fused[i] != plain[i];
    EXPECT_EQ(differ, 0u) << "the fused FP8 rows change the logits";
  }
}

// The realistic-scale fixtures (the exporters' scale rules) serve too; their logits are finite.
TEST(QuantWeights, RealisticScaleFixturesRunOnTheCpu) {
  for (const char* f : kFormats) {
    SCOPED_TRACE(f);
    const std::vector<uint16_t> q = forward_logits(kQuant + std::string(f) + "/model");
    for (uint16_t b : q) ASSERT_TRUE(std::isfinite(bf16_to_f32(b)));
  }
}

// ------------------------------------------------------------------------------------------------
// Broken quantised files
// ------------------------------------------------------------------------------------------------

// A copy of a quantised fixture with its tensors edited (edit returns false to drop one).
struct BrokenCopy {
  TempDir dir;
  BrokenCopy(const std::string& fixture, const std::function<bool(TensorToWrite&)>& edit,
             const std::function<void(std::string&)>& edit_config = nullptr) {
    const std::string src = kQuant + fixture + "/model";
    for (const char* f : {"config.json", "hf_quant_config.json", "generation_config.json"})
      if (fs::exists(src + "/" + f)) fs::copy_file(src + "/" + f, dir.path / f);
    if (edit_config) {
      std::ifstream in(dir.path / "config.json");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      edit_config(text);
      std::ofstream(dir.path / "config.json") << text;
    }
    SafetensorsCheckpoint ck(src);
    std::vector<TensorToWrite> out;
    for (const TensorInfo* t : ck.tensors()) {
      TensorToWrite w{t->name, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes)};
      if (edit(w)) out.push_back(std::move(w));
    }
    write_safetensors((dir.path / "model.safetensors").string(), out);
  }
  std::string path() const { return dir.path.string(); }
};

// Loads and returns the error message (empty when it loaded).
std::string load_error(const std::string& dir, ErrorKind want = ErrorKind::kInvalidFile) {
  try {
    const ModelConfig c = load_model_config(dir);
    auto be = make_cpu_backend();
    load_weights(c, dir, *be);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), want) << e.what();
    return e.what();
  }
  return "";
}

const std::string kExpert = "model.decoder.layers.1.experts.2.";

void expect_names(const std::string& msg, const std::string& tensor) {
  EXPECT_NE(msg.find(tensor), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << "the file is named: " << msg;
}

TEST(QuantWeights, MissingOrMisshapedScalesAreRefused) {
  {
    BrokenCopy b("tiny_a_nvfp4_modelopt", [](TensorToWrite& t) { return t.name != kExpert + "up_proj.weight_scale"; });
    const std::string m = load_error(b.path());
    EXPECT_NE(m.find("missing tensor " + kExpert + "up_proj.weight_scale"), std::string::npos) << m;
  }
  {
    BrokenCopy b("tiny_a_nvfp4_modelopt", [](TensorToWrite& t) { return t.name != kExpert + "down_proj.weight_scale_2"; });
    EXPECT_NE(load_error(b.path()).find(kExpert + "down_proj.weight_scale_2"), std::string::npos);
  }
  {
    BrokenCopy b("tiny_a_nvfp4_modelopt", [](TensorToWrite& t) {
      if (t.name == kExpert + "gate_proj.weight_scale") t.shape = {t.shape[1], t.shape[0]};  // [32, 4] -> [4, 32]
      return true;
    });
    expect_names(load_error(b.path()), kExpert + "gate_proj.weight_scale");
  }
  {
    BrokenCopy b("tiny_a_fp8_dynamic", [](TensorToWrite& t) {
      if (t.name == "model.decoder.layers.0.self_attn.q_proj.weight_scale") {
        t.shape = {t.shape[0] / 2, 2};
      }
      return true;
    });
    expect_names(load_error(b.path()), "model.decoder.layers.0.self_attn.q_proj.weight_scale");
  }
  {  // a block-scale dtype that is not E4M3
    BrokenCopy b("tiny_a_nvfp4_ct", [](TensorToWrite& t) {
      if (t.name == kExpert + "up_proj.weight_scale") t.dtype = DType::kU8;
      return true;
    });
    expect_names(load_error(b.path()), kExpert + "up_proj.weight_scale");
  }
}

TEST(QuantWeights, NanOrNegativeBlockScalesAndBadGlobalsAreRefused) {
  for (uint8_t bad : {uint8_t{0x7f}, uint8_t{0xff}, uint8_t{0xb8} /* -1.0 */}) {
    BrokenCopy b("tiny_a_nvfp4_modelopt", [&](TensorToWrite& t) {
      if (t.name == kExpert + "gate_proj.weight_scale") t.bytes[5] = bad;
      return true;
    });
    const std::string m = load_error(b.path());
    expect_names(m, kExpert + "gate_proj.weight_scale");
    EXPECT_NE(m.find("finite and non-negative"), std::string::npos) << m;
  }
  for (float g : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    BrokenCopy b("tiny_a_nvfp4_ct", [&](TensorToWrite& t) {
      if (t.name == kExpert + "down_proj.weight_global_scale") std::memcpy(t.bytes.data(), &g, 4);
      return true;
    });
    expect_names(load_error(b.path()), kExpert + "down_proj.weight_global_scale");
  }
  {
    const uint16_t neg = f32_to_bf16(-0.01f);
    BrokenCopy b("tiny_a_fp8_dynamic", [&](TensorToWrite& t) {
      if (t.name == "model.decoder.layers.3.mlp.up_proj.weight_scale") std::memcpy(t.bytes.data() + 6, &neg, 2);
      return true;
    });
    expect_names(load_error(b.path()), "model.decoder.layers.3.mlp.up_proj.weight_scale");
  }
}

TEST(QuantWeights, WrongPackedWidthIsRefused) {
  BrokenCopy b("tiny_a_nvfp4_modelopt", [](TensorToWrite& t) {
    if (t.name == kExpert + "down_proj.weight") {  // U8 [64, 16] -> [64, 32]: as if unpacked
      std::vector<uint8_t> wide(t.bytes.size() * 2);
      for (size_t i = 0; i < t.bytes.size(); ++i) wide[2 * i] = wide[2 * i + 1] = t.bytes[i];
      t.bytes = wide;
      t.shape = {t.shape[0], t.shape[1] * 2};
    }
    return true;
  });
  const std::string m = load_error(b.path());
  expect_names(m, kExpert + "down_proj.weight");
  EXPECT_NE(m.find("two E2M1 values per byte"), std::string::npos) << m;
}

// Gate and up keep their own global scales in the stacked weight (never the gate's for both).
TEST(QuantWeights, GateAndUpGlobalScalesStaySeparate) {
  const std::string fixture = "tiny_a_nvfp4_modelopt";
  float gate_s2 = 0, up_s2 = 0;
  BrokenCopy b(fixture, [&](TensorToWrite& t) {
    if (t.name == kExpert + "up_proj.weight_scale_2") {
      std::memcpy(&up_s2, t.bytes.data(), 4);
      up_s2 *= 2.0f;  // the up projection now dequantises to exactly twice its values
      std::memcpy(t.bytes.data(), &up_s2, 4);
    }
    if (t.name == kExpert + "gate_proj.weight_scale_2") std::memcpy(&gate_s2, t.bytes.data(), 4);
    return true;
  });
  auto be = make_cpu_backend();
  const std::string orig_dir = kQuant + fixture + "/model";
  const ModelConfig c = load_model_config(orig_dir);
  const ModelWeights a = load_weights(c, orig_dir, *be);
  const ModelWeights m = load_weights(load_model_config(b.path()), b.path(), *be);
  const Weight& wa = a.layers[1].experts_gate_up;
  const Weight& wm = m.layers[1].experts_gate_up;
  const int64_t I = c.text.moe_intermediate_size, H = c.text.hidden_size, N = 2 * I;
  const float* rs = quant_ref::row_scales(wm, 2);
  for (int64_t r = 0; r < I; ++r) EXPECT_EQ(rs[r], gate_s2) << "gate row " << r;
  for (int64_t r = I; r < N; ++r) EXPECT_EQ(rs[r], up_s2) << "up row " << r;
  ASSERT_NE(gate_s2, up_s2);
  std::vector<float> da(static_cast<size_t>(8 * N * H)), dm(da.size());
  quant_ref::dequantize(wa, da.data());
  quant_ref::dequantize(wm, dm.data());
  for (int64_t e = 0; e < 8; ++e)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t k = 0; k < H; ++k) {
        const size_t i = static_cast<size_t>((e * N + r) * H + k);
        ASSERT_EQ(dm[i], (e == 2 && r >= I) ? 2.0f * da[i] : da[i]) << e << " " << r << " " << k;
      }
}

// Projections of one group stored in different formats are not fused (model/fused_weights.h): layer
// 0's k_proj rewritten as bf16 in the FP8 checkpoint leaves its q / k / v separate, the other groups
// fused, and the model runs on them.
TEST(QuantWeights, MixedFormatProjectionsStaySeparate) {
  const std::string k = "model.decoder.layers.0.self_attn.k_proj.weight";
  std::vector<uint16_t> k_bf16;
  BrokenCopy b("tiny_a_fp8_dynamic", [&](TensorToWrite& t) {
    if (t.name == k + "_scale") return false;
    if (t.name != k) return true;
    t.dtype = DType::kBF16;
    for (uint8_t code : t.bytes) k_bf16.push_back(f32_to_bf16(f8e4m3_to_f32(code)));
    t.bytes.resize(k_bf16.size() * 2);
    std::memcpy(t.bytes.data(), k_bf16.data(), t.bytes.size());
    return true;
  });
  const ModelConfig c = load_model_config(b.path());
  auto be = make_cpu_backend();
  ModelWeights w = load_weights(c, b.path(), *be);
  const LayerWeights& L0 = w.layers[0];
  EXPECT_TRUE(L0.qkv_proj.empty());
  EXPECT_EQ(L0.q_proj.format, WeightFormat::kFp8Channel);
  EXPECT_EQ(L0.v_proj.format, WeightFormat::kFp8Channel);
  ASSERT_EQ(L0.k_proj.format, WeightFormat::kBF16);
  ASSERT_EQ(L0.k_proj.data.numel(), static_cast<int64_t>(k_bf16.size()));
  EXPECT_EQ(0, std::memcmp(L0.k_proj.data.data, k_bf16.data(), k_bf16.size() * 2));
  EXPECT_EQ(L0.mlp_gate_up.format, WeightFormat::kFp8Channel) << "the MLP pair still fuses";
  for (size_t li = 1; li < w.layers.size(); ++li) EXPECT_FALSE(w.layers[li].qkv_proj.empty()) << li;
  const std::vector<uint16_t> logits = forward_logits(b.path());
  int finite = 0;
  for (uint16_t v : logits) finite += std::isfinite(bf16_to_f32(v));
  EXPECT_EQ(finite, static_cast<int>(logits.size()));
}

TEST(QuantWeights, QuantisedWhereTheConfigForbidsIsRefused) {
  {  // an ignored module holding quantised tensors
    BrokenCopy b("tiny_a_fp8_dynamic", [](TensorToWrite&) { return true; }, [](std::string& cfg) {
      const std::string key = "\"ignore\": [";
      cfg.insert(cfg.find(key) + key.size(), "\"re:.*layers\\\\.4\\\\.mlp.*\", ");
    });
    const std::string m = load_error(b.path());
    EXPECT_NE(m.find("model.decoder.layers.4.mlp.gate_proj"), std::string::npos) << m;
    EXPECT_NE(m.find("ignore list"), std::string::npos) << m;
  }
  {  // quantised tensors without any quantization_config
    BrokenCopy b("tiny_a_nvfp4_ct", [](TensorToWrite&) { return true; }, [](std::string& cfg) {
      cfg.replace(cfg.find("\"quantization_config\""), std::string("\"quantization_config\"").size(), "\"unused_config\"");
    });
    const std::string m = load_error(b.path());
    EXPECT_NE(m.find("declares no quantization_config"), std::string::npos) << m;
  }
  {  // integer (AWQ-style) tensors
    BrokenCopy b("tiny_a_nvfp4_modelopt", [](TensorToWrite& t) {
      if (t.name == kExpert + "up_proj.weight") t.name = kExpert + "up_proj.qweight";
      return true;
    });
    const std::string m = load_error(b.path());
    expect_names(m, kExpert + "up_proj.qweight");
  }
  {  // the config's method says AWQ: refused before any tensor is read, naming the file
    BrokenCopy b("tiny_a_nvfp4_ct", [](TensorToWrite&) { return true; }, [](std::string& cfg) {
      cfg.replace(cfg.find("\"compressed-tensors\""), std::string("\"compressed-tensors\"").size(), "\"awq\"");
    });
    try {
      load_model_config(b.path());
      ADD_FAILURE() << "awq accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  }
}

TEST(QuantWeights, GgufIsRefused) {
  TempDir d;
  fs::copy_file(kQuant + "tiny_a_fp8_dynamic/model/config.json", d.path / "config.json");
  std::ofstream(d.path / "model-Q4_K_M.gguf") << "GGUF";
  const std::string m = load_error(d.path.string(), ErrorKind::kUnsupported);
  EXPECT_NE(m.find("model-Q4_K_M.gguf"), std::string::npos) << m;
  EXPECT_NE(m.find("GGUF"), std::string::npos) << m;
}

}  // namespace
}  // namespace dgemma

namespace dgemma {
namespace {

// Dummy weights in each format (the benchmarks' 26B runs use these at full size): the right slots are
// quantised, and a forward pass on the CPU gives finite logits of a sane scale.
TEST(QuantWeights, DummyWeightsInEachFormat) {
  const std::string dir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";
  for (const char* f : {"nvfp4-modelopt", "nvfp4-ct", "fp8-dynamic"}) {
    SCOPED_TRACE(f);
    ModelConfig c = load_model_config(dir);
    c.quant = quant_preset(f);
    auto be = make_cpu_backend();
    ModelWeights w = dummy_weights(c, *be, 3);
    const bool fp8 = std::string(f) == "fp8-dynamic";
    const WeightFormat q = fp8 ? WeightFormat::kFp8Channel : WeightFormat::kNvfp4;
    EXPECT_EQ(w.layers[1].experts_gate_up.format, q);
    EXPECT_EQ(w.layers[1].mlp_gate_up.format, std::string(f) == "nvfp4-modelopt" ? WeightFormat::kBF16 : q);
    EXPECT_EQ(w.layers[1].qkv_proj.format, fp8 ? q : WeightFormat::kBF16);
    EXPECT_TRUE(w.layers[1].mlp_up.empty() && w.layers[1].q_proj.empty()) << "fused";
    EXPECT_EQ(w.layers[1].experts_down.act, fp8 ? ActQuant::kFp8Token : ActQuant::kNone);
    std::vector<float> deq(static_cast<size_t>(w.layers[1].experts_down.experts() * w.layers[1].experts_down.rows() *
                                               w.layers[1].experts_down.cols()));
    quant_ref::dequantize(w.layers[1].experts_down, deq.data());
    double ss = 0;
    for (float v : deq) ss += static_cast<double>(v) * v;
    const double rms = std::sqrt(ss / static_cast<double>(deq.size()));
    const double want = 1.0 / std::sqrt(static_cast<double>(c.text.moe_intermediate_size));
    EXPECT_GT(rms, 0.5 * want);
    EXPECT_LT(rms, 2.0 * want);
    DiffusionGemma m(c, std::move(w), *be);
    const Pool pool(c, *be, 2);
    std::vector<int32_t> prompt{5, 6, 7, 8};
    std::vector<ForwardItem> items{{ForwardItem::Kind::kEncode, prompt, pool.item(0), {}, {}, {}}};
    forward_items(*be, m, items, pool.kv);
  }
  EXPECT_THROW(quant_preset("awq"), Error);
}

}  // namespace
}  // namespace dgemma
