// A step's input block (model/forward_inputs.h): the forward's layout depends only on the
// items' kinds and lengths and on the tables' reserved room (what lets a recorded step replay with
// another step's block), the attention launch plans see plan_cached, device canvases and soft
// embeddings named by address give what host tokens and tensors give, a step appends the canvases'
// soft-output addresses and the sampler's and decide's arguments after the forward's words, and the
// block-copy ops of the CPU backend gather and scatter what they name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/kv_pool.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/weights.h"
#include "support/forward.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {
namespace {

const std::string kTiny = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";

struct Tiny {
  ModelConfig c = load_model_config(kTiny);
  std::unique_ptr<Backend> be = make_cpu_backend();
  DiffusionGemma model{c, load_weights(c, kTiny, *be), *be};
};

ForwardItem denoise_item(const Tiny& t, std::span<const int32_t> table, int64_t cached, const Tensor& logits) {
  ForwardItem it;
  it.kind = ForwardItem::Kind::kDenoise;
  it.kv.cached = cached;
  it.kv.tables = {table, table};
  it.logits = logits;
  (void)t;
  return it;
}

TEST(ForwardInputs, LayoutDependsOnlyOnKindsLengthsAndTableRoom) {
  Tiny t;
  const int64_t C = t.c.canvas_length, V = t.c.text.vocab_size;
  Tensor logits = t.be->alloc(ScalarType::kBF16, {2 * C, V});
  const std::vector<int32_t> short_table = {0, 1}, long_table = {4, 5, 6, 7, 8};
  std::vector<int32_t> canvas(static_cast<size_t>(C), 3);
  std::vector<ForwardItem> a = {denoise_item(t, short_table, C, logits.rows(0, C)),
                                denoise_item(t, short_table, C, logits.rows(C, 2 * C))};
  std::vector<ForwardItem> b = {denoise_item(t, long_table, 4 * C + 7, logits.rows(0, C)),
                                denoise_item(t, short_table, 0, logits.rows(C, 2 * C))};
  for (auto* items : {&a, &b})
    for (ForwardItem& it : *items) it.tokens = canvas;
  b[1].kv.tables = {};
  const int64_t room = 32;
  const ForwardInputs ia = encode_forward_inputs(t.model.forward_shape(), a, room),
                      ib = encode_forward_inputs(t.model.forward_shape(), b, room);
  EXPECT_EQ(ia.words.size(), ib.words.size());
  EXPECT_EQ(ia.positions_at, ib.positions_at);
  EXPECT_EQ(ia.tables_at, ib.tables_at);
  EXPECT_EQ(ia.items_at, ib.items_at);
  EXPECT_EQ(ia.canvas_table_at, ib.canvas_table_at);
  EXPECT_EQ(ia.soft_table_at, ib.soft_table_at);
  EXPECT_NE(ia.words, ib.words) << "the contents differ";
  // Positions start at each item's cache length.
  EXPECT_EQ(ib.words[static_cast<size_t>(ib.positions_at)], 4 * C + 7);
  EXPECT_EQ(ib.words[static_cast<size_t>(ib.positions_at + C)], 0);
  // Without room given, exactly the tables' entries; too little room is refused.
  EXPECT_EQ(encode_forward_inputs(t.model.forward_shape(), b).table_words,
            static_cast<int64_t>(2 * long_table.size()));
  EXPECT_THROW(encode_forward_inputs(t.model.forward_shape(), b, 3), Error);
}

TEST(ForwardInputs, LaunchPlansSeePlanCachedTheDeviceTheRealCache) {
  Tiny t;
  const int64_t C = t.c.canvas_length, V = t.c.text.vocab_size;
  Tensor logits = t.be->alloc(ScalarType::kBF16, {C, V});
  const std::vector<int32_t> table = {0, 1, 2};
  std::vector<int32_t> canvas(static_cast<size_t>(C), 3);
  std::vector<ForwardItem> items = {denoise_item(t, table, 2 * C, logits)};
  items[0].tokens = canvas;
  items[0].plan_cached = 100 * C;
  const ForwardInputs in = encode_forward_inputs(t.model.forward_shape(), items);
  const int full = static_cast<int>(KvGroup::kFull), sliding = static_cast<int>(KvGroup::kSliding);
  // The block's item rows (AttentionItem's field order: cache_len is the fourth word).
  const int32_t dev_full_cache = in.words[static_cast<size_t>(in.items_at[full] + 3)];
  const int32_t dev_sliding_cache = in.words[static_cast<size_t>(in.items_at[sliding] + 3)];
  EXPECT_EQ(dev_full_cache, 2 * C) << "the kernels read the real cache";
  EXPECT_EQ(in.plan_items[full][0].cache_len, 100 * C) << "the launch plan assumes the longest";
  EXPECT_EQ(dev_sliding_cache, std::min<int64_t>(2 * C, sliding_keep(t.c)));
  EXPECT_EQ(in.plan_items[sliding][0].cache_len, sliding_keep(t.c)) << "a sliding layer sees window-1 at most";
  EXPECT_EQ(in.plan_items[full][0].q_len, C);
}

TEST(ForwardInputs, EncodeItemsComeFirst) {
  Tiny t;
  const int64_t C = t.c.canvas_length, V = t.c.text.vocab_size;
  Tensor logits = t.be->alloc(ScalarType::kBF16, {C, V});
  std::vector<int32_t> canvas(static_cast<size_t>(C), 3), prompt = {5, 6, 7};
  const std::vector<int32_t> table = {0, 1};
  std::vector<ForwardItem> items = {denoise_item(t, table, C, logits), ForwardItem{}};
  items[0].tokens = canvas;
  items[1].tokens = prompt;
  items[1].kv.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
  EXPECT_THROW(encode_forward_inputs(t.model.forward_shape(), items), Error);
}

// The same denoising pass with the canvas and the soft embeddings on the host (tokens, a tensor read
// directly before) and named by address (token_ids): the same logits bit for bit.
TEST(ForwardInputs, DeviceCanvasesAndSoftEmbeddingsAreGathered) {
  Tiny t;
  const int64_t C = t.c.canvas_length, V = t.c.text.vocab_size, H = t.c.text.hidden_size;
  KvPoolPlan plan;
  plan.pages = {4, 4};
  const KvStorage kv = allocate_kv_storage(t.c, *t.be, plan);
  const std::vector<int32_t> table = {0, 1, 2, 3};
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 5) % V));
  std::vector<ForwardItem> enc(1);
  enc[0].tokens = prompt;
  enc[0].kv.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
  forward_items(*t.be, t.model, enc, kv);
  std::vector<int32_t> canvas;
  for (int64_t i = 0; i < C; ++i) canvas.push_back(static_cast<int32_t>((i * 7 + 3) % V));
  Tensor soft = t.be->alloc(ScalarType::kBF16, {C, H});
  for (int64_t i = 0; i < C * H; ++i) soft.ptr<uint16_t>()[i] = f32_to_bf16(std::sin(0.37f * static_cast<float>(i)));
  Tensor ids = t.be->alloc(ScalarType::kI32, {C});
  std::memcpy(ids.data, canvas.data(), static_cast<size_t>(C) * 4);
  Tensor l1 = t.be->alloc(ScalarType::kBF16, {C, V}), l2 = t.be->alloc(ScalarType::kBF16, {C, V});
  for (int with_soft = 0; with_soft < 2; ++with_soft) {
    std::vector<ForwardItem> a = {denoise_item(t, table, 20, l1)}, b = {denoise_item(t, table, 20, l2)};
    a[0].tokens = canvas;
    b[0].token_ids = ids;
    if (with_soft) a[0].soft_embeds = b[0].soft_embeds = soft;
    forward_items(*t.be, t.model, a, kv);
    forward_items(*t.be, t.model, b, kv);
    EXPECT_EQ(0, std::memcmp(l1.data, l2.data, l1.nbytes())) << (with_soft ? "with" : "without") << " soft embeddings";
  }
}

TEST(ForwardInputs, AStepAppendsItsPartsAfterTheForwards) {
  Tiny t;
  const int64_t C = t.c.canvas_length, V = t.c.text.vocab_size, H = t.c.text.hidden_size;
  Tensor logits = t.be->alloc(ScalarType::kBF16, {2 * C, V});
  Tensor soft = t.be->alloc(ScalarType::kBF16, {C, H});
  const std::vector<int32_t> table = {0, 1};
  std::vector<int32_t> canvas(static_cast<size_t>(C), 3);
  std::vector<ForwardItem> items = {denoise_item(t, table, C, logits.rows(0, C)),
                                    denoise_item(t, table, C, logits.rows(C, 2 * C))};
  for (ForwardItem& it : items) it.tokens = canvas;
  const std::vector<Tensor> soft_out = {soft, Tensor{}};  // the second canvas is idle: not scattered
  const std::vector<SamplerArgs> sampling(2);
  const std::vector<DecideArgs> deciding(2);
  const StepInputs s = encode_step_inputs(t.model.forward_shape(), *t.be, items, 0, soft_out, sampling, deciding);
  const ForwardInputs alone = encode_forward_inputs(t.model.forward_shape(), items);
  EXPECT_GE(s.soft_out_at, static_cast<int64_t>(alone.words.size())) << "after the forward's words";
  EXPECT_EQ(s.soft_out_at % 16, 0) << "64-byte aligned";
  EXPECT_TRUE(std::equal(alone.words.begin(), alone.words.end(), s.forward.words.begin()));
  EXPECT_EQ(static_cast<int64_t>(s.forward.words.size()), s.words);
  uint64_t first = 0, second = 0;
  std::memcpy(&first, &s.forward.words[static_cast<size_t>(s.soft_out_at)], 8);
  std::memcpy(&second, &s.forward.words[static_cast<size_t>(s.soft_out_at + 2)], 8);
  EXPECT_EQ(first, reinterpret_cast<uintptr_t>(soft.data));
  EXPECT_EQ(second, 0u);
  EXPECT_LE(s.soft_out_at + 4, s.sampler_at);
  EXPECT_LE(s.sampler_at, s.decide_at);
  EXPECT_LE(s.decide_at, s.words);
}

TEST(BlockCopies, GatherAndScatterWhatTheTableNames) {
  auto be = make_cpu_backend();
  std::vector<int32_t> x = {1, 2, 3, 4}, y = {5, 6, 7, 8};
  Tensor table = be->alloc(ScalarType::kI32, {6});  // three u64 addresses
  const uint64_t at[3] = {reinterpret_cast<uintptr_t>(y.data()), 0, reinterpret_cast<uintptr_t>(x.data())};
  std::memcpy(table.data, at, sizeof(at));
  std::vector<int32_t> dst(12, -1);
  Tensor d = borrow_tensor(dst.data(), ScalarType::kI32, {12});
  be->gather_blocks(table, 3, 16, d, /*zero_missing=*/false);
  EXPECT_EQ(dst, (std::vector<int32_t>{5, 6, 7, 8, -1, -1, -1, -1, 1, 2, 3, 4})) << "a missing block is left alone";
  be->gather_blocks(table, 3, 16, d, /*zero_missing=*/true);
  EXPECT_EQ(dst, (std::vector<int32_t>{5, 6, 7, 8, 0, 0, 0, 0, 1, 2, 3, 4})) << "or zeroed";
  std::vector<int32_t> src = {10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32, 33};
  be->scatter_blocks(borrow_tensor(src.data(), ScalarType::kI32, {12}), table, 3, 16);
  EXPECT_EQ(y, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(x, (std::vector<int32_t>{30, 31, 32, 33}));
}

}  // namespace
}  // namespace dgemma
