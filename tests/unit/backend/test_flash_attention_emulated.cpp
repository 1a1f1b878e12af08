// The flash attention kernels (src/backend/cuda/attention/flash_mma_kernel.cuh, and the wgmma kernel of
// attention/flash_wgmma_kernel.cuh) run on the host through cuda_emulator.h against the CPU backend's
// attention (the reference), on small random batches: several items in one launch (row tiles of
// several items, an item of more than one tile), head dims 64 to 512 (512: two output halves),
// bidirectional / causal / causal with a window, caches over several pages of a shuffled page table
// with cache_first > 0 (the table entries of pages before the cache are -1: the emulator aborts on any
// read outside the declared buffers), page sizes that are and are not powers of two, K = V (one pool
// and one new-key tensor for both), and forced key splits (the fp32 partials and their merge). The
// same kernel source the GPU runs; tests/gpu checks it there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/tensor.h"
#include "util/bf16.h"
#include "util/error.h"

#include "cuda_emulator.h"
#include "backend/cuda/attention/flash_mma_kernel.cuh"
#include "backend/cuda/attention/flash_wgmma_kernel.cuh"

namespace dgemma {
namespace {

struct ItemSpec {
  int n, L, first;
  bool causal;
  int window;
};

struct Case {
  std::string name;
  int Hq, Hkv, D, P;
  bool k_eq_v;
  std::vector<ItemSpec> items;
};

std::vector<uint16_t> random_bf16(std::mt19937& rng, size_t n, float std) {
  std::normal_distribution<float> nd(0.f, std);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = dgemma::f32_to_bf16(nd(rng));
  return v;
}

Tensor wrap(ScalarType t, std::initializer_list<int64_t> dims, void* data) {
  Tensor x = host_tensor(t, dims);
  std::memcpy(x.data, data, static_cast<size_t>(x.nbytes()));
  return x;
}

template <int D>
void launch_emulated(const cuda::flash::Params& p, int tiles) {
  using S = cuda::flash::ShapeOf<D>;
  using C = cuda::flash::Cfg<D>;
  emu::launch_3d([p] { cuda::flash::flash_attention_kernel<D, C::DV, C::BN, C::KG>(p); }, tiles, p.Hkv,
                 p.splits * S::kDChunks, S::kSmemBytes, S::kThreads);
  if (p.splits > 1) {
    const int64_t threads = int64_t{p.T} * p.Hq * (D / 4);
    emu::launch([p] { cuda::flash::flash_combine_kernel<D>(p); },
                static_cast<int>((threads + cuda::flash::kThreads - 1) / cuda::flash::kThreads), 1, 0);
  }
}

// The two kernels: mma.sync (attention/flash_mma_kernel.cuh) and the hopper family's wgmma one
// (attention/flash_wgmma_kernel.cuh) with the shapes attention/flash.cu launches: K and V tiles of 80
// keys (D 256) or 32 (D 512), two stages each.
enum class Kernel { kMmaSync, kWgmma };
// Warps fall asleep for runs of rounds (emu::g_jitter_seed): a consumer warp then reads a stage long
// after its warpgroup released it, and the consumers of head dim 512 drift apart between exchanges.
template <int D, int BN = D == 256 ? 80 : 32>
void launch_emulated_wgmma(const cuda::flash::Params& p, int tiles) {
  constexpr int kStages = 2;
  using S = cuda::flash::WgmmaShape<D, BN, kStages>;
  emu::g_jitter_seed = 0x5eed0000u + static_cast<uint64_t>(p.splits);
  emu::launch_3d([p] { cuda::flash::flash_wgmma_kernel<D, BN, kStages>(p); }, tiles, p.Hkv, p.splits, S::kSmemBytes,
                 S::kThreads);
  emu::g_jitter_seed = 0;
  if (p.splits > 1) {
    const int64_t threads = int64_t{p.T} * p.Hq * (D / 4);
    emu::launch([p] { cuda::flash::flash_combine_kernel<D>(p); },
                static_cast<int>((threads + cuda::flash::kThreads - 1) / cuda::flash::kThreads), 1, 0);
  }
}

// blocks[i]: item i's image blocks (items without an entry have none); windowed: they obey the window.
void run_case(const Case& c, int splits, Kernel kernel = Kernel::kMmaSync,
              const std::vector<std::vector<ImageBlock>>& blocks = {}, bool windowed = false) {
  const bool wgmma = kernel == Kernel::kWgmma;
  SCOPED_TRACE(c.name + " splits " + std::to_string(splits) + (wgmma ? " wgmma" : " mma.sync"));
  std::mt19937 rng(1234 + c.D + splits);
  const int groups = c.Hq / c.Hkv;
  int T = 0;
  for (const auto& it : c.items) T += it.n;
  // Pages: every item's positions [0, first + L) in its own pages of one shuffled pool; the table
  // entries of pages wholly before `first` are -1 (absent, never read).
  std::vector<int32_t> tables;
  std::vector<AttentionItem> items;
  std::vector<ImageBlock> all_blocks;
  int pages = 0;
  for (const auto& it : c.items) pages += (it.first + it.L + c.P - 1) / c.P;
  std::vector<int32_t> perm(std::max(pages, 1));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  int q0 = 0, next_page = 0;
  for (const auto& it : c.items) {
    AttentionItem a;
    a.q_first = q0;
    a.q_len = it.n;
    a.cache_first = it.first;
    a.cache_len = it.L;
    a.table_first = static_cast<int32_t>(tables.size());
    const int np = (it.first + it.L + c.P - 1) / c.P;
    a.table_len = np;
    for (int pg = 0; pg < np; ++pg) tables.push_back((pg + 1) * c.P <= it.first ? -1 : perm[next_page++]);
    a.causal = it.causal ? 1 : 0;
    a.window = it.window;
    if (items.size() < blocks.size() && !blocks[items.size()].empty()) {
      a.blocks_first = static_cast<int32_t>(all_blocks.size());
      a.blocks_len = static_cast<int32_t>(blocks[items.size()].size());
      a.blocks_windowed = windowed ? 1 : 0;
      all_blocks.insert(all_blocks.end(), blocks[items.size()].begin(), blocks[items.size()].end());
    }
    items.push_back(a);
    q0 += it.n;
  }
  if (tables.empty()) tables.push_back(-1);
  const size_t pool_elems = static_cast<size_t>(std::max(pages, 1)) * c.Hkv * c.P * c.D;
  // Score scale ~3 (peaked softmaxes, as in the model) with unit-variance q and k.
  const float scaling = 3.0f / std::sqrt(static_cast<float>(c.D));
  auto q = random_bf16(rng, size_t(T) * c.Hq * c.D, 1.f);
  auto kn = random_bf16(rng, size_t(T) * c.Hkv * c.D, 1.f);
  auto vn = c.k_eq_v ? kn : random_bf16(rng, size_t(T) * c.Hkv * c.D, 1.f);
  auto kp = random_bf16(rng, pool_elems, 1.f);
  auto vp = c.k_eq_v ? kp : random_bf16(rng, pool_elems, 1.f);

  // The reference: the CPU backend (its attention_batch is the default, one attention() per item).
  auto cpu = make_cpu_backend();
  AttentionBatchArgs a;
  a.q = wrap(ScalarType::kBF16, {T, c.Hq, c.D}, q.data());
  a.k_new = wrap(ScalarType::kBF16, {T, c.Hkv, c.D}, kn.data());
  a.v_new = wrap(ScalarType::kBF16, {T, c.Hkv, c.D}, vn.data());
  a.k_pages = wrap(ScalarType::kBF16, {std::max(pages, 1), c.Hkv, c.P, c.D}, kp.data());
  a.v_pages = wrap(ScalarType::kBF16, {std::max(pages, 1), c.Hkv, c.P, c.D}, vp.data());
  a.page_tables = wrap(ScalarType::kI32, {static_cast<int64_t>(tables.size())}, tables.data());
  a.items = wrap(ScalarType::kI32, {static_cast<int64_t>(items.size()), kAttentionItemFields}, items.data());
  a.host_items = items;
  a.host_blocks = all_blocks;
  a.scaling = scaling;
  a.out = host_tensor(ScalarType::kBF16, {T, c.Hq, c.D});
  cpu->attention_batch(a);
  const uint16_t* want = a.out.ptr<uint16_t>();
  // The same probabilities over |V|: A = sum_j P_j |v_j|, the scale of the probability roundings'
  // effect on each output element (the per-element bound below).
  std::vector<uint16_t> vn_abs(vn), vp_abs(vp);
  for (auto& x : vn_abs) x &= 0x7fff;
  for (auto& x : vp_abs) x &= 0x7fff;
  AttentionBatchArgs b = a;
  b.v_new = wrap(ScalarType::kBF16, {T, c.Hkv, c.D}, vn_abs.data());
  b.v_pages = wrap(ScalarType::kBF16, {std::max(pages, 1), c.Hkv, c.P, c.D}, vp_abs.data());
  b.out = host_tensor(ScalarType::kBF16, {T, c.Hq, c.D});
  cpu->attention_batch(b);
  const uint16_t* abs_ref = b.out.ptr<uint16_t>();

  // The kernel, emulated, on the same buffers (a poisoned output).
  std::vector<uint16_t> got(size_t(T) * c.Hq * c.D, 0x7fc1);
  const size_t rows = size_t(T) * c.Hq;
  std::vector<float> ws_o(splits > 1 ? splits * rows * c.D : 0), ws_ml(splits > 1 ? splits * rows * 2 : 0);
  cuda::flash::Params p{};
  p.q = q.data();
  p.k_new = kn.data();
  p.v_new = vn.data();
  p.k_pages = kp.data();
  p.v_pages = vp.data();
  p.tables = tables.data();
  p.items = reinterpret_cast<const int32_t*>(items.data());
  p.blocks = all_blocks.empty() ? nullptr : reinterpret_cast<const int32_t*>(all_blocks.data());
  p.out = got.data();
  p.ws_o = ws_o.data();
  p.ws_ml = ws_ml.data();
  p.num_items = static_cast<int>(items.size());
  p.T = T;
  p.Hq = c.Hq;
  p.Hkv = c.Hkv;
  p.groups = groups;
  p.page_size = c.P;
  p.splits = splits;
  p.scaling = scaling;
  int tiles = 0;
  const int cta_rows = c.D == 256 && wgmma ? 2 * cuda::flash::kBM : cuda::flash::kBM;  // D 512: 64
  for (const auto& it : items) tiles += (it.q_len * groups + cta_rows - 1) / cta_rows;
  tiles += 1;  // one CTA past the last tile: it must exit without writing
  auto bytes = [](const auto& v) { return v.size() * sizeof(v[0]); };
  emu::g_global = {{reinterpret_cast<const unsigned char*>(q.data()), bytes(q)},
                   {reinterpret_cast<const unsigned char*>(kn.data()), bytes(kn)},
                   {reinterpret_cast<const unsigned char*>(vn.data()), bytes(vn)},
                   {reinterpret_cast<const unsigned char*>(kp.data()), bytes(kp)},
                   {reinterpret_cast<const unsigned char*>(vp.data()), bytes(vp)}};
  switch (c.D) {
    case 64: launch_emulated<64>(p, tiles); break;
    case 128: launch_emulated<128>(p, tiles); break;
    case 256:
      if (wgmma) launch_emulated_wgmma<256>(p, tiles);
      else launch_emulated<256>(p, tiles);
      break;
    case 512:
      if (wgmma) launch_emulated_wgmma<512>(p, tiles);
      else launch_emulated<512>(p, tiles);
      break;
    default: FAIL() << "head dim";
  }
  emu::g_global.clear();

  // Differences from the reference: the fp32 dot products and P.V sums run in MMA order (a bf16 score
  // now and then rounds to its other neighbour: outliers, whole rows when the key dominates), and the
  // kernel rounds each probability relative to the running maximum before dividing by the sum, where
  // the reference rounds p / sum. Each side's rounding moves a probability by at most 2^-9 of itself,
  // so an output element moves by at most 2^-8 sum_j P_j |v_j| (= A), plus half a bf16 step of each
  // side's output rounding. An indexing, masking or layout error breaks this bound on most elements.
  size_t exact = 0, bad = 0;
  double err2 = 0, ref2 = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    ASSERT_FALSE(std::isnan(dgemma::bf16_to_f32(got[e]))) << "element " << e << " not written";
    const double g = dgemma::bf16_to_f32(got[e]), w = dgemma::bf16_to_f32(want[e]);
    const double A = dgemma::bf16_to_f32(abs_ref[e]);
    err2 += (g - w) * (g - w);
    ref2 += w * w;
    exact += got[e] == want[e];
    const double step = std::ldexp(1.0, std::ilogb(std::max(std::abs(w), 1e-30)) - 7);  // one bf16 step at w
    bad += std::abs(g - w) > 1.25 * std::ldexp(A, -8) + 1.5 * step;
  }
  const double n = static_cast<double>(got.size()), out_rows = static_cast<double>(T) * c.Hq;
  const double nmse = err2 / std::max(ref2, 1e-30);
  std::printf("  %s%s splits %d: nmse %.2e, exact %.3f, beyond the bound %.5f\n", c.name.c_str(),
              wgmma ? " (wgmma)" : "", splits, nmse, exact / n, bad / n);
  EXPECT_LT(nmse, 2e-5) << "relative mean-square error";
  EXPECT_LE(bad / n, std::max(1e-3, 1.0 / out_rows)) << "fraction of elements beyond the rounding bound";
  EXPECT_GT(exact / n, 0.5) << "bit-identical fraction";
}

TEST(FlashAttentionEmulated, HeadDim64) {
  const Case c{"d64 P16", 4, 2, 64, 16, false,
               {{20, 37, 5, false, 0}, {33, 0, 0, true, 0}, {17, 50, 40, true, 24}}};
  run_case(c, 1);
  run_case(c, 3);
}

TEST(FlashAttentionEmulated, HeadDim128Gqa8) {
  const Case c{"d128 P12 g8", 8, 1, 128, 12, false, {{9, 70, 0, false, 0}, {12, 19, 100, true, 0}}};
  run_case(c, 1);
  run_case(c, 2);
}

TEST(FlashAttentionEmulated, HeadDim256) {
  const Case c{"d256 P16", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}}};
  run_case(c, 1);
  run_case(c, 3);
  run_case({"d256 P16 long item", 4, 2, 256, 16, false, {{80, 20, 5, true, 30}, {3, 9, 0, false, 0}}}, 1);
}

// Image blocks in causal prefill items: a block seen whole by its tokens (later keys of the block
// included), unclamped by the window and clamped to it, blocks crossing row tiles and key tiles.
TEST(FlashAttentionEmulated, ImageBlocks) {
  const Case c{"d64 P16 images",
               4,
               2,
               64,
               16,
               false,
               {{70, 0, 0, true, 16}, {40, 23, 0, true, 0}, {9, 30, 0, false, 0}}};
  const std::vector<std::vector<ImageBlock>> blocks = {{{3, 30}, {31, 60}}, {{0, 12}, {20, 39}}};
  run_case(c, 1, Kernel::kMmaSync, blocks);
  run_case(c, 3, Kernel::kMmaSync, blocks);
  run_case(c, 1, Kernel::kMmaSync, blocks, /*windowed=*/true);
  run_case({"d256 P16 images", 4, 2, 256, 16, false, {{50, 10, 0, true, 12}}}, 2, Kernel::kWgmma,
           {{{5, 45}}});
}

// The wgmma kernel: 128-row tiles over two consumer warpgroups, K / V tiles of 80 keys (m64n80k16
// scores, five k16 steps of P.V) in a ring of two stages (several laps of it), items of one tile, of
// several, and of rows in one warpgroup only, bidirectional and causal with windows, several splits
// (empty ones too).
TEST(FlashAttentionEmulated, HeadDim256Wgmma) {
  const Case c{"d256 P16", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}}};
  constexpr Kernel kWg = Kernel::kWgmma;
  run_case(c, 1, kWg);
  run_case(c, 2, kWg);
  run_case(c, 3, kWg);
  // More key tiles than stages (the ring's phases), an item of two 128-row tiles, a canvas over a
  // long cache with a page table that starts mid-page.
  run_case({"d256 P16 long item", 4, 2, 256, 16, false, {{80, 20, 5, true, 30}, {3, 9, 0, false, 0}}}, 1, kWg);
  run_case({"d256 P24 canvas over 300 cached", 4, 2, 256, 24, false,
            {{40, 300, 17, false, 0}, {70, 100, 0, true, 50}, {9, 0, 0, false, 0}}},
           1, kWg);
  run_case({"d256 P16 K=V prefill", 8, 1, 256, 16, true, {{33, 60, 4, true, 0}, {20, 70, 0, false, 0}}}, 2, kWg);
  run_case({"d256 P16 splits past the tiles", 4, 2, 256, 16, false, {{12, 90, 3, false, 0}}}, 5, kWg);
}

TEST(FlashAttentionEmulated, HeadDim512KEqV) {
  const Case c{"d512 P8 K=V", 4, 1, 512, 8, true, {{6, 45, 3, false, 0}, {10, 0, 0, true, 0}}};
  run_case(c, 1);
  run_case(c, 2);
}

// The wgmma kernel at head dim 512: 64-row tiles, the two consumers splitting the head dim and
// exchanging partial scores, K / V tiles of 32 keys in rings of two stages (several laps), causal
// prefill items with a window and without, a canvas over a cache, K = V and not, splits (empty ones
// too).
TEST(FlashAttentionEmulated, HeadDim512Wgmma) {
  const Case c{"d512 P8 K=V", 4, 1, 512, 8, true, {{6, 45, 3, false, 0}, {10, 0, 0, true, 0}}};
  constexpr Kernel kWg = Kernel::kWgmma;
  run_case(c, 1, kWg);
  run_case(c, 2, kWg);
  run_case({"d512 P16 g8 long", 8, 1, 512, 16, false, {{20, 150, 9, false, 0}, {12, 40, 0, true, 0}}}, 1, kWg);
  run_case({"d512 P24 w30 two heads", 4, 2, 512, 24, false, {{40, 70, 5, true, 30}, {3, 9, 0, false, 0}}}, 3, kWg);
  run_case({"d512 P8 K=V splits past the tiles", 4, 1, 512, 8, true, {{5, 30, 0, false, 0}}}, 6, kWg);
}

// The default attention_batch (one attention() per item) refuses items outside the batch's rows or
// page tables instead of reading past them.
TEST(AttentionBatchDefault, RejectsItemsOutsideTheBatch) {
  auto cpu = make_cpu_backend();
  std::vector<uint16_t> x(size_t(4) * 2 * 64, 0);
  std::vector<int32_t> table = {0};
  std::vector<uint16_t> pool(size_t(1) * 1 * 16 * 64, 0);
  auto args = [&](std::vector<AttentionItem>& items) {
    AttentionBatchArgs a;
    a.q = wrap(ScalarType::kBF16, {4, 2, 64}, x.data());
    a.k_new = wrap(ScalarType::kBF16, {4, 1, 64}, x.data());
    a.v_new = a.k_new;
    a.k_pages = wrap(ScalarType::kBF16, {1, 1, 16, 64}, pool.data());
    a.v_pages = a.k_pages;
    a.page_tables = wrap(ScalarType::kI32, {1}, table.data());
    a.items = wrap(ScalarType::kI32, {static_cast<int64_t>(items.size()), kAttentionItemFields}, items.data());
    a.host_items = items;
    a.out = host_tensor(ScalarType::kBF16, {4, 2, 64});
    return a;
  };
  std::vector<AttentionItem> ok = {{0, 4, 0, 16, 0, 1, 0, 0}};
  EXPECT_NO_THROW(cpu->attention_batch(args(ok)));
  std::vector<AttentionItem> rows = {{1, 4, 0, 0, 0, 0, 0, 0}};
  EXPECT_THROW(cpu->attention_batch(args(rows)), Error);
  std::vector<AttentionItem> tables = {{0, 4, 0, 4, 0, 2, 0, 0}};
  EXPECT_THROW(cpu->attention_batch(args(tables)), Error);
  std::vector<AttentionItem> cache = {{0, 4, 10, 7, 0, 1, 0, 0}};  // positions 10..16 need two pages
  EXPECT_THROW(cpu->attention_batch(args(cache)), Error);
}

}  // namespace
}  // namespace dgemma
