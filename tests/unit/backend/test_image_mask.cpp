// The image-block attention rule (backend/attention_keys.h) against its definition written out per
// (query, key) pair, and the CPU attention op under it: a causal item whose one image block covers every
// new token is exactly the bidirectional item; tokens outside the blocks attend as plain causal ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/attention_keys.h"
#include "backend/backend.h"
#include "util/bf16.h"

namespace dgemma {
namespace {

// The definition: query i sees key j (an index into [L cached ; n new]) iff j < L + n and, for a causal
// item, the key is causal within the window, or both are new tokens of one block (and, when windowed,
// the key is within the window too).
bool visible(int L, int n, int window, const std::vector<ImageBlock>& blocks, bool windowed, int i, int j) {
  if (j >= L + n) return false;
  const int dq = i - (j - L);
  const bool in_window = window <= 0 || dq < window;
  const bool causal = dq >= 0 && in_window;
  bool same_block = false;
  for (const ImageBlock& b : blocks)
    if (i >= b.first && i < b.end && j - L >= b.first && j - L < b.end) same_block = true;
  return causal || (same_block && (!windowed || in_window));
}

TEST(ImageMask, KeyRangesEqualTheDefinitionPairByPair) {
  uint32_t s = 7;
  auto rnd = [&](int m) {
    s = s * 1664525u + 1013904223u;
    return static_cast<int>((s >> 8) % static_cast<uint32_t>(m));
  };
  for (int trial = 0; trial < 400; ++trial) {
    const int L = rnd(3) == 0 ? 0 : rnd(20), n = 1 + rnd(40), window = rnd(2) ? 0 : 1 + rnd(12);
    const bool windowed = rnd(2) == 1;
    std::vector<ImageBlock> blocks;
    for (int at = rnd(4); at < n; at += 1 + rnd(6)) {
      const int end = std::min(n, at + 1 + rnd(15));
      blocks.push_back({at, end});
      at = end;
    }
    const ItemKeys rule{L,
                        n,
                        1,
                        window,
                        reinterpret_cast<const int32_t*>(blocks.data()),
                        static_cast<int>(blocks.size()),
                        windowed ? 1 : 0};
    KeyRange prev{0, 0};
    for (int i = 0; i < n; ++i) {
      const KeyRange r = query_keys(rule, i);
      for (int j = 0; j < L + n + 2; ++j)
        ASSERT_EQ(j >= r.lo && j < r.hi, visible(L, n, window, blocks, windowed, i, j))
            << "trial " << trial << " L " << L << " n " << n << " window " << window << " i " << i << " j "
            << j;
      // The flash kernels bound a tile's keys by its first and last rows: both ends never decrease.
      EXPECT_GE(r.lo, prev.lo);
      EXPECT_GE(r.hi, prev.hi);
      prev = r;
    }
  }
}

TEST(ImageMask, BidirectionalItemsIgnoreBlocks) {
  const ImageBlock b{1, 3};
  const ItemKeys rule{4, 6, 0, 0, reinterpret_cast<const int32_t*>(&b), 1, 0};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(query_keys(rule, i).lo, 0);
    EXPECT_EQ(query_keys(rule, i).hi, 10);
  }
}

Tensor random_bf16(std::initializer_list<int64_t> dims, uint32_t seed) {
  Tensor t = host_tensor(ScalarType::kBF16, dims);
  uint32_t s = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.ptr<uint16_t>()[i] = f32_to_bf16(2.0f * (static_cast<float>(s >> 8) / 16777216.0f - 0.5f));
  }
  return t;
}

std::vector<uint16_t> words(const Tensor& t) {
  return std::vector<uint16_t>(t.ptr<uint16_t>(), t.ptr<uint16_t>() + t.numel());
}

TEST(ImageMask, CpuAttentionWithOneWholeBlockIsBidirectionalOutsideItIsCausal) {
  auto be = make_cpu_backend();
  const int64_t n = 9, Hq = 4, Hkv = 2, D = 16;
  const Tensor q = random_bf16({n, Hq, D}, 1), k = random_bf16({n, Hkv, D}, 2),
               v = random_bf16({n, Hkv, D}, 3);
  auto run = [&](bool causal, int64_t window, std::vector<ImageBlock> blocks, bool windowed) {
    AttentionArgs a;
    a.q = q;
    a.k_new = k;
    a.v_new = v;
    a.causal = causal;
    a.window = window;
    a.blocks = blocks;
    a.blocks_windowed = windowed;
    a.out = host_tensor(ScalarType::kBF16, {n, Hq, D});
    be->attention(a);
    return words(a.out);
  };
  const auto bidirectional = run(false, 0, {}, false);
  EXPECT_EQ(run(true, 0, {{0, static_cast<int32_t>(n)}}, false), bidirectional);
  // Unclamped: a block longer than the window is still seen whole; clamped, it is not.
  EXPECT_EQ(run(true, 3, {{0, static_cast<int32_t>(n)}}, false), bidirectional);
  EXPECT_NE(run(true, 3, {{0, static_cast<int32_t>(n)}}, true), bidirectional);
  // Rows before and after a block are causal rows; rows of the block (but its last) see later keys.
  const auto causal = run(true, 0, {}, false), with_block = run(true, 0, {{4, 7}}, false);
  const size_t row = static_cast<size_t>(Hq * D);
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    const bool same =
        std::equal(causal.begin() + i * row, causal.begin() + (i + 1) * row, with_block.begin() + i * row);
    EXPECT_EQ(same, i < 4 || i >= 6) << "row " << i;  // the block's last row sees what causal sees
  }
}

TEST(ImageMask, AttentionBatchPassesEachItemItsBlocks) {
  auto be = make_cpu_backend();
  const int64_t T = 10, Hq = 2, Hkv = 1, D = 8;
  const Tensor q = random_bf16({T, Hq, D}, 4), k = random_bf16({T, Hkv, D}, 5),
               v = random_bf16({T, Hkv, D}, 6);
  std::vector<AttentionItem> items(2);
  items[0] = {0, 4, 0, 0, 0, 0, 1, 0, 0, 1, 0};
  items[1] = {4, 6, 0, 0, 0, 0, 1, 0, 1, 1, 0};
  const std::vector<ImageBlock> blocks = {{1, 3}, {0, 6}};
  AttentionBatchArgs a;
  a.q = q;
  a.k_new = k;
  a.v_new = v;
  a.host_items = items;
  a.host_blocks = blocks;
  a.out = host_tensor(ScalarType::kBF16, {T, Hq, D});
  be->attention_batch(a);
  for (int m = 0; m < 2; ++m) {
    const AttentionItem& it = items[static_cast<size_t>(m)];
    AttentionArgs one;
    one.q = q.rows(it.q_first, it.q_first + it.q_len);
    one.k_new = k.rows(it.q_first, it.q_first + it.q_len);
    one.v_new = v.rows(it.q_first, it.q_first + it.q_len);
    one.causal = true;
    one.blocks = std::span<const ImageBlock>(blocks).subspan(static_cast<size_t>(m), 1);
    one.out = host_tensor(ScalarType::kBF16, {it.q_len, Hq, D});
    be->attention(one);
    EXPECT_EQ(words(one.out), words(a.out.rows(it.q_first, it.q_first + it.q_len))) << "item " << m;
  }
  // Blocks out of their item's range are refused.
  std::vector<ImageBlock> bad = {{1, 3}, {0, 7}};
  a.host_blocks = bad;
  EXPECT_THROW(be->attention_batch(a), std::exception);
}

}  // namespace
}  // namespace dgemma
