// The fused projections (model/fused_weights.h): the fused weights hold exactly the checkpoint's rows
// in part order, concatenation is exact in every weight format and refuses parts that differ, and a
// model whose projections stay unfused computes bit for bit what the fused model computes (the CPU
// backend's GEMM is a fixed-order dot product per output element, whatever the weight's height).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/quant_reference.h"
#include "engine/kv_pool.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/fused_weights.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "support/forward.h"
#include "util/bf16.h"

namespace dgemma {
namespace {

const std::string kTiny = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";

// Rows [begin, end) of a bf16 host tensor equal the checkpoint tensor's bytes.
void expect_rows(const Tensor& fused, int64_t begin, const TensorInfo& part) {
  ASSERT_EQ(part.dtype, DType::kBF16) << part.name;
  const size_t row_bytes = static_cast<size_t>(fused.dim(1)) * 2;
  ASSERT_LE(static_cast<size_t>(begin) * row_bytes + part.nbytes, fused.nbytes()) << part.name;
  EXPECT_EQ(0, std::memcmp(fused.ptr<uint8_t>() + static_cast<size_t>(begin) * row_bytes, part.data, part.nbytes)) << part.name;
}

TEST(FusedWeights, FusedRowsAreTheCheckpointRowsInPartOrder) {
  const ModelConfig c = load_model_config(kTiny);
  auto be = make_cpu_backend();
  const ModelWeights w = load_weights(c, kTiny, *be);
  SafetensorsCheckpoint ck(kTiny);
  auto tensor = [&](const std::string& name) {
    const TensorInfo* t = ck.find("model.decoder." + name);
    EXPECT_NE(t, nullptr) << name;
    return t;
  };
  const int64_t S = c.text.self_conditioning_size, I = c.text.intermediate_size;
  ASSERT_EQ(w.sc_gate_up.dim(0), 2 * S);
  EXPECT_TRUE(w.sc_gate.empty() && w.sc_up.empty());
  expect_rows(w.sc_gate_up, 0, *tensor("self_conditioning.gate_proj.weight"));
  expect_rows(w.sc_gate_up, S, *tensor("self_conditioning.up_proj.weight"));
  int k_eq_v = 0;
  for (size_t li = 0; li < w.layers.size(); ++li) {
    SCOPED_TRACE("layer " + std::to_string(li));
    const LayerWeights& L = w.layers[li];
    const std::string p = "layers." + std::to_string(li) + ".";
    const int64_t nq = c.text.num_attention_heads * L.spec.head_dim, nk = L.spec.num_kv_heads * L.spec.head_dim;
    ASSERT_FALSE(L.qkv_proj.empty());
    ASSERT_EQ(L.qkv_proj.rows(), nq + (L.spec.k_eq_v ? 1 : 2) * nk);
    expect_rows(L.qkv_proj.data, 0, *tensor(p + "self_attn.q_proj.weight"));
    expect_rows(L.qkv_proj.data, nq, *tensor(p + "self_attn.k_proj.weight"));
    if (L.spec.k_eq_v) ++k_eq_v;
    else expect_rows(L.qkv_proj.data, nq + nk, *tensor(p + "self_attn.v_proj.weight"));
    ASSERT_EQ(L.mlp_gate_up.rows(), 2 * I);
    expect_rows(L.mlp_gate_up.data, 0, *tensor(p + "mlp.gate_proj.weight"));
    expect_rows(L.mlp_gate_up.data, I, *tensor(p + "mlp.up_proj.weight"));
  }
  EXPECT_GT(k_eq_v, 0) << "the fixture has K=V layers";
}

// A small host weight of `format` with distinct per-row scales (and NVFP4 block scales).
Weight small_weight(WeightFormat format, int64_t N, int64_t K, uint8_t salt) {
  Weight w;
  w.format = format;
  if (format == WeightFormat::kBF16) {
    w.data = host_tensor(ScalarType::kBF16, {N, K});
    for (int64_t i = 0; i < N * K; ++i) w.data.ptr<uint16_t>()[i] = f32_to_bf16(static_cast<float>((i * 7 + salt) % 23) - 11.0f);
    return w;
  }
  const bool fp4 = format == WeightFormat::kNvfp4;
  w.data = host_tensor(fp4 ? ScalarType::kU8 : ScalarType::kF8E4M3, {N, fp4 ? K / 2 : K});
  for (int64_t i = 0; i < w.data.numel(); ++i)
    w.data.ptr<uint8_t>()[i] = fp4 ? static_cast<uint8_t>(i * 37 + salt) : static_cast<uint8_t>(0x30 + (i * 5 + salt) % 24);
  w.row_scale = host_tensor(ScalarType::kF32, {N});
  for (int64_t n = 0; n < N; ++n) w.row_scale.ptr<float>()[n] = 0.25f * static_cast<float>(n + 1 + salt);
  if (fp4) {
    w.block = host_tensor(ScalarType::kF8E4M3, {N, K / kNvfp4Group});
    for (int64_t i = 0; i < w.block.numel(); ++i) w.block.ptr<uint8_t>()[i] = static_cast<uint8_t>(0x30 + (i + salt) % 8);
  }
  return w;
}

std::vector<float> dequantised(const Weight& w) {
  std::vector<float> v(static_cast<size_t>(w.rows() * w.cols()));
  quant_ref::dequantize(w, v.data());
  if (w.quantized())  // the row scale applies after the dot product; fold it in for the comparison
    for (int64_t n = 0; n < w.rows(); ++n)
      for (int64_t k = 0; k < w.cols(); ++k) v[static_cast<size_t>(n * w.cols() + k)] *= quant_ref::row_scales(w, 0)[n];
  return v;
}

TEST(FusedWeights, ConcatenationIsExactInEveryFormat) {
  const int64_t K = 32;
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Channel, WeightFormat::kNvfp4}) {
    SCOPED_TRACE(weight_format_name(f));
    const std::vector<Weight> parts = {small_weight(f, 8, K, 1), small_weight(f, 4, K, 2), small_weight(f, 4, K, 3)};
    const std::optional<Weight> fused = concat_rows(parts);
    ASSERT_TRUE(fused.has_value());
    EXPECT_EQ(fused->format, f);
    ASSERT_EQ(fused->rows(), 16);
    ASSERT_EQ(fused->cols(), K);
    int64_t first = 0;
    for (const Weight& p : parts) {
      EXPECT_EQ(dequantised(weight_rows(*fused, first, first + p.rows())), dequantised(p));
      first += p.rows();
    }
  }
  // Parts that differ are not fused.
  const Weight bf = small_weight(WeightFormat::kBF16, 4, K, 1), fp8 = small_weight(WeightFormat::kFp8Channel, 4, K, 1);
  EXPECT_FALSE(concat_rows(std::vector<Weight>{bf, fp8}).has_value()) << "formats differ";
  Weight fp8_dyn = fp8;
  fp8_dyn.act = ActQuant::kFp8Token;
  EXPECT_FALSE(concat_rows(std::vector<Weight>{fp8, fp8_dyn}).has_value()) << "activation handling differs";
  EXPECT_FALSE(concat_rows(std::vector<Weight>{bf, small_weight(WeightFormat::kBF16, 4, 2 * K, 1)}).has_value())
      << "input widths differ";
  EXPECT_FALSE(concat_rows(std::vector<Weight>{bf, Weight()}).has_value()) << "a part is empty";
}

TEST(FusedWeights, MixedFormatPartsStaySeparate) {
  auto be = make_cpu_backend();
  LayerWeights L;
  L.q_proj = small_weight(WeightFormat::kFp8Channel, 8, 32, 1);
  L.k_proj = small_weight(WeightFormat::kBF16, 4, 32, 2);
  L.v_proj = small_weight(WeightFormat::kFp8Channel, 4, 32, 3);
  L.mlp_gate = small_weight(WeightFormat::kNvfp4, 8, 32, 4);
  L.mlp_up = small_weight(WeightFormat::kNvfp4, 8, 32, 5);
  finish_layer_fusion(*be, L);
  EXPECT_TRUE(L.qkv_proj.empty());
  EXPECT_EQ(L.q_proj.format, WeightFormat::kFp8Channel);
  EXPECT_EQ(L.k_proj.format, WeightFormat::kBF16);
  EXPECT_EQ(L.v_proj.rows(), 4);
  ASSERT_FALSE(L.mlp_gate_up.empty()) << "gate and up share NVFP4";
  EXPECT_TRUE(L.mlp_gate.empty() && L.mlp_up.empty());
  EXPECT_EQ(L.mlp_gate_up.rows(), 16);
}

// Prefill of a prompt, then one denoising pass (self-conditioned: the SC MLP runs) over a canvas.
struct ForwardRun {
  std::vector<uint16_t> logits;
  std::map<std::string, std::vector<uint16_t>> dumps;
};
ForwardRun forward(const ModelConfig& c, ModelWeights w, bool dump) {
  auto be = make_cpu_backend();
  DiffusionGemma m(c, std::move(w), *be);
  ForwardRun run;
  DumpHook hook;
  if (dump)
    hook = [&](const std::string& name, const Tensor& t) {
      if (t.type != ScalarType::kBF16) return;
      std::vector<uint16_t> v(static_cast<size_t>(t.numel()));
      std::memcpy(v.data(), t.data, t.nbytes());
      run.dumps[name] = std::move(v);
    };
  const int64_t V = c.text.vocab_size, C = c.canvas_length, H = c.text.hidden_size;
  const int64_t prompt_len = 20, pages = (prompt_len + C - 1) / C + 1;
  KvPoolPlan plan;
  plan.pages = {pages, pages};
  const KvStorage kv = allocate_kv_storage(c, *be, plan);
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int64_t i = 0; i < pages; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  ItemKv item;
  item.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
  std::vector<int32_t> prompt, canvas;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 5) % V));
  for (int64_t i = 0; i < C; ++i) canvas.push_back(static_cast<int32_t>((i * 7 + 3) % V));
  std::vector<ForwardItem> items(1);
  items[0].kind = ForwardItem::Kind::kEncode;
  items[0].tokens = prompt;
  items[0].kv = item;
  forward_items(*be, m, items, kv, hook);
  Tensor logits = be->alloc(ScalarType::kBF16, {C, V});
  Tensor soft = be->alloc(ScalarType::kBF16, {C, H});
  for (int64_t i = 0; i < C * H; ++i) soft.ptr<uint16_t>()[i] = f32_to_bf16(std::sin(0.37f * static_cast<float>(i)));
  item.cached = prompt_len;
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, item, soft, logits, {}};
  forward_items(*be, m, items, kv, hook);
  run.logits.assign(logits.ptr<uint16_t>(), logits.ptr<uint16_t>() + C * V);
  return run;
}

// The weights with every fused projection split back into its parts (views of the fused rows).
ModelWeights unfused(const ModelConfig& c, ModelWeights w) {
  const int64_t S = c.text.self_conditioning_size, I = c.text.intermediate_size;
  w.sc_gate = w.sc_gate_up.rows(0, S);
  w.sc_up = w.sc_gate_up.rows(S, 2 * S);
  w.sc_gate_up = Tensor();
  for (LayerWeights& L : w.layers) {
    const int64_t nq = c.text.num_attention_heads * L.spec.head_dim, nk = L.spec.num_kv_heads * L.spec.head_dim;
    L.q_proj = weight_rows(L.qkv_proj, 0, nq);
    L.k_proj = weight_rows(L.qkv_proj, nq, nq + nk);
    if (!L.spec.k_eq_v) L.v_proj = weight_rows(L.qkv_proj, nq + nk, nq + 2 * nk);
    L.mlp_gate = weight_rows(L.mlp_gate_up, 0, I);
    L.mlp_up = weight_rows(L.mlp_gate_up, I, 2 * I);
    L.qkv_proj = L.mlp_gate_up = Weight();
  }
  return w;
}

TEST(FusedWeights, UnfusedProjectionsGiveTheSameBits) {
  const ModelConfig c = load_model_config(kTiny);
  auto be = make_cpu_backend();
  const ModelWeights w = load_weights(c, kTiny, *be);
  const ForwardRun fused = forward(c, w, false), parts = forward(c, unfused(c, w), false);
  ASSERT_EQ(fused.logits.size(), parts.logits.size());
  EXPECT_TRUE(fused.logits == parts.logits) << "fused vs unfused projections";
  // With a dump hook too (the projections copied out of the fused output), and its intermediates
  // (q_proj, k_proj, v_proj, ...) are the unfused model's.
  const ForwardRun fused_dump = forward(c, w, true), parts_dump = forward(c, unfused(c, w), true);
  EXPECT_TRUE(fused_dump.logits == fused.logits) << "the dump path";
  EXPECT_TRUE(parts_dump.logits == fused.logits);
  ASSERT_TRUE(fused_dump.dumps.count("layer0.q_proj") && fused_dump.dumps.count("layer0.v_proj"));
  ASSERT_EQ(fused_dump.dumps.size(), parts_dump.dumps.size());
  for (const auto& [name, v] : fused_dump.dumps) EXPECT_TRUE(v == parts_dump.dumps.at(name)) << name;
}

// The load-time option (dgemma_bench --fused-projections off): the parts stay separate, the model
// computes the same bits, and dummy weights hold the same values either way.
TEST(FusedWeights, FusionSwitchedOffKeepsThePartsAndTheBits) {
  const ModelConfig c = load_model_config(kTiny);
  auto be = make_cpu_backend();
  const ModelWeights parts = load_weights(c, kTiny, *be, {}, WeightLoadOptions{.fuse_projections = false});
  const ModelWeights dummy_parts = dummy_weights(c, *be, 5, WeightLoadOptions{.fuse_projections = false});
  const ModelWeights fused = load_weights(c, kTiny, *be);
  const ModelWeights dummy_fused = dummy_weights(c, *be, 5);
  EXPECT_TRUE(parts.sc_gate_up.empty() && !parts.sc_gate.empty() && !parts.sc_up.empty());
  for (const LayerWeights& L : parts.layers) {
    EXPECT_TRUE(L.qkv_proj.empty() && L.mlp_gate_up.empty());
    EXPECT_FALSE(L.q_proj.empty() || L.k_proj.empty() || L.mlp_gate.empty() || L.mlp_up.empty());
    EXPECT_EQ(L.v_proj.empty(), L.spec.k_eq_v);
  }
  EXPECT_TRUE(forward(c, parts, false).logits == forward(c, fused, false).logits);
  // Dummy parts: the fused tensor's rows.
  const int64_t I = c.text.intermediate_size, S = c.text.self_conditioning_size;
  for (size_t li = 0; li < dummy_parts.layers.size(); ++li) {
    const LayerWeights& p = dummy_parts.layers[li];
    const LayerWeights& f = dummy_fused.layers[li];
    const int64_t nq = p.q_proj.rows(), nk = p.k_proj.rows();
    auto same = [](const Weight& a, const Weight& b) {
      return a.data.nbytes() == b.data.nbytes() && std::memcmp(a.data.data, b.data.data, a.data.nbytes()) == 0;
    };
    EXPECT_TRUE(same(p.q_proj, weight_rows(f.qkv_proj, 0, nq))) << li;
    EXPECT_TRUE(same(p.k_proj, weight_rows(f.qkv_proj, nq, nq + nk))) << li;
    if (!p.spec.k_eq_v) {
      EXPECT_TRUE(same(p.v_proj, weight_rows(f.qkv_proj, nq + nk, nq + 2 * nk))) << li;
    }
    EXPECT_TRUE(same(p.mlp_up, weight_rows(f.mlp_gate_up, I, 2 * I))) << li;
  }
  EXPECT_EQ(0, std::memcmp(dummy_parts.sc_up.data, dummy_fused.sc_gate_up.rows(S, 2 * S).data, dummy_parts.sc_up.nbytes()));
}

}  // namespace
}  // namespace dgemma
