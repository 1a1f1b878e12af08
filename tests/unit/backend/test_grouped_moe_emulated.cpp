// The bf16 grouped expert GEMM kernels (src/backend/cuda/moe/grouped_kernel.cuh) run on the host
// through cuda_emulator.h: every kernel (the small-rows one, the mma.sync tile-list one, and the hopper
// family's wgmma and warp-specialised TMA ones, whose emulation sums k in order like the mma's) on
// routings of 0, 1 .. 290 rows per expert, with N and K tails, against the MoE maths of cpu/moe.cpp computed here
// (each element one fp32 dot product in k order, as the emulated mma sums, rounded at the CPU's
// points): a tiling, indexing or epilogue error moves elements, a summation-order difference none.
// The same kernel source the GPU runs; tests/gpu checks it there against the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulator.h"
#include "moe_test_routing.h"
#include "backend/cuda/moe/grouped_kernel.cuh"

namespace dgemma::cuda {
namespace {

struct EmuLauncher {
  template <int BM, bool kGateUp>
  void small(const GroupedArgs& g, int64_t grid_x, int64_t grid_y) {
    emu::launch([g] { grouped_gemm_kernel<BM, kGateUp>(g); }, static_cast<int>(grid_x), static_cast<int>(grid_y),
                small_smem_bytes<BM>(), kSmallThreads);
  }
  template <class C, bool kGateUp>
  void tile(const GroupedArgs& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y) {
    emu::launch([g, tiles] { grouped_tile_kernel<C, kGateUp>(g, tiles); }, static_cast<int>(grid_x),
                static_cast<int>(grid_y), C::kSmem, C::kThreads);
  }
  template <class C, bool kGateUp>
  void wg(const GroupedArgs& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y) {
    emu::launch([g, tiles] { grouped_wgmma_kernel<C, kGateUp>(g, tiles); }, static_cast<int>(grid_x),
                static_cast<int>(grid_y), C::kSmem, C::kThreads);
  }
  template <class C, bool kGateUp>
  void tma(const GroupedArgs& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y, int64_t E) {
    const TmaMap map{g.w, E * (kGateUp ? 2 : 1) * g.N, g.Kd, C::kBN / 2};
    emu::launch([map, g, tiles] { grouped_tma_kernel<C, kGateUp>(map, g, tiles); }, static_cast<int>(grid_x),
                static_cast<int>(grid_y), C::kSmem, C::kThreads);
  }
};

std::vector<uint16_t> randn(size_t n, float std, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, std);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(nd(rng));
  return v;
}

using test::tile_list;

size_t count_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// Routing `counts` rows per expert (pair ids a random permutation, token = pair / K), hidden H,
// intermediate I; every kernel's gate_up and down against the reference.
void check(int H, int I, int K, const std::vector<int>& counts, uint32_t seed) {
  std::mt19937 rng(seed);
  const test::Routing route = test::random_routing(counts, K, rng);
  const int E = route.E, R = route.R, T = route.T;
  const std::vector<int32_t>& offsets = route.offsets;
  const std::vector<int32_t>& pairs = route.pairs;
  const std::vector<float>& top_w = route.top_w;
  const auto x = randn(static_cast<size_t>(T) * H, 1.0f, rng);
  const auto gate_up = randn(static_cast<size_t>(E) * 2 * I * H, 0.2f, rng);
  const auto down = randn(static_cast<size_t>(E) * H * I, 0.2f, rng);

  // Reference (cpu/moe.cpp's rounding points).
  std::vector<uint16_t> act_ref(static_cast<size_t>(R) * I), y_ref(static_cast<size_t>(R) * H);
  for (int e = 0; e < E; ++e)
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int t = pairs[r] / K;
      for (int i = 0; i < I; ++i) {
        float sg = 0, su = 0;
        const uint16_t* wg = gate_up.data() + (static_cast<size_t>(e) * 2 * I + i) * H;
        const uint16_t* wu = wg + static_cast<size_t>(I) * H;
        for (int k = 0; k < H; ++k) {
          const float xv = bf16_to_f32(x[static_cast<size_t>(t) * H + k]);
          sg += xv * bf16_to_f32(wg[k]);
          su += xv * bf16_to_f32(wu[k]);
        }
        const float g = round_bf16(gelu_tanh(round_bf16(sg)));
        act_ref[static_cast<size_t>(r) * I + i] = f32_to_bf16(g * round_bf16(su));
      }
      const int p = pairs[r];
      for (int n = 0; n < H; ++n) {
        float s = 0;
        const uint16_t* wd = down.data() + (static_cast<size_t>(e) * H + n) * I;
        for (int k = 0; k < I; ++k) s += bf16_to_f32(act_ref[static_cast<size_t>(r) * I + k]) * bf16_to_f32(wd[k]);
        y_ref[static_cast<size_t>(p) * H + n] = f32_to_bf16(round_bf16(s) * top_w[p]);
      }
    }

  EmuLauncher l;
  for (const MoeKernel v : {MoeKernel::kSmallRows, MoeKernel::kMmaSync128x128, MoeKernel::kWgmma64x128,
                            MoeKernel::kTma128x256}) {
    const GroupedPlanImpl plan = grouped_plan(v, R, E, true);
    ASSERT_EQ(plan.kernel, v);
    const std::vector<int32_t> tiles = plan.max_tiles > 0 ? tile_list(offsets, plan.tile_rows, plan.max_tiles)
                                                          : std::vector<int32_t>{};
    const int32_t* tp = tiles.empty() ? nullptr : tiles.data();
    std::vector<uint16_t> act(static_cast<size_t>(R) * I, 0xFFFF), y(static_cast<size_t>(R) * H, 0xFFFF);
    run_grouped_gate_up(l, plan, x.data(), gate_up.data(), offsets.data(), pairs.data(), tp, R, E, K, H, I, act.data());
    EXPECT_EQ(count_diff(act, act_ref), 0u) << moe_kernel_word(v) << " gate_up H" << H << " I" << I;
    run_grouped_down(l, plan, act_ref.data(), down.data(), offsets.data(), pairs.data(), tp, top_w.data(), R, E, H, I,
                     y.data());
    EXPECT_EQ(count_diff(y, y_ref), 0u) << moe_kernel_word(v) << " down H" << H << " I" << I;
  }
}

// One K tile + 8 (gate_up K = 72), one partial K tile (down K = 40); gate_up 40 and down 72 columns:
// partial N tiles everywhere. Rows: empty experts, 1 row, 200 rows (several tiles of every height,
// the last partial), counts just past the tile heights 64 and 128, and 290 rows.
TEST(GroupedMoeEmulated, EveryKernelOnRaggedRouting) {
  check(72, 40, 2, {0, 1, 200, 17, 0, 65, 81, 3, 0, 129, 290}, 11);
}

// Several N tiles of every shape (gate_up 136 columns, down 264) and several K tiles with tails
// (K = 264 and 136), with two row tiles of the 64-row shape.
TEST(GroupedMoeEmulated, EveryKernelOnSeveralNAndKTiles) { check(264, 136, 4, {0, 3, 70}, 12); }

// The automatic choice: the small-rows kernel up to 24 rows per expert on average, a tile list beyond:
// in the hopper family the wgmma 64 x 128 tiles up to 96 rows an expert, then the TMA 128 x 256 ones;
// in the portable family the mma.sync 128 x 128 tiles.
TEST(GroupedMoeEmulated, AutomaticPlan) {
  for (const bool hopper : {true, false}) {
    EXPECT_EQ(grouped_plan(MoeKernel::kAuto, 0, 128, hopper).max_tiles, 0);
    EXPECT_EQ(grouped_plan(MoeKernel::kAuto, 256 * 8, 128, hopper).kernel, MoeKernel::kSmallRows);
    EXPECT_EQ(grouped_plan(MoeKernel::kAuto, 256 * 8, 128, hopper).max_tiles, 0);
    for (const int64_t T : {1024, 2048, 4096, 32768}) {
      const GroupedPlanImpl big = grouped_plan(MoeKernel::kAuto, T * 8, 128, hopper);
      const MoeKernel want = !hopper ? MoeKernel::kMmaSync128x128
                             : T <= 1536 ? MoeKernel::kWgmma64x128
                                         : MoeKernel::kTma128x256;
      EXPECT_EQ(big.kernel, want) << T << (hopper ? " hopper" : " portable");
      EXPECT_EQ(big.tile_rows, tile_rows_of(want));
      EXPECT_EQ(big.max_tiles, T * 8 / big.tile_rows + 128);
    }
  }
  // A named kernel is taken as it is, even where the automatic choice would differ; the portable
  // family runs a hopper kernel's request on the mma.sync tiles.
  EXPECT_EQ(grouped_plan(MoeKernel::kMmaSync128x128, 256 * 8, 128, true).kernel, MoeKernel::kMmaSync128x128);
  EXPECT_EQ(grouped_plan(MoeKernel::kSmallRows, 4096 * 8, 128, true).max_tiles, 0);
  EXPECT_EQ(grouped_plan(MoeKernel::kTma128x256, 4096 * 8, 128, false).kernel, MoeKernel::kMmaSync128x128);
}

// The emulator reports a barrier that some thread never reaches instead of hanging: thread 0 waits at
// its warp's collective while the others wait at __syncthreads.
TEST(GroupedMoeEmulated, EmulatorReportsADeadlockedBarrier) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(emu::launch(
                   [] {
                     if (threadIdx.x == 0) emu::g_warp_bar[0]->arrive_and_wait();
                     __syncthreads();
                   },
                   1, 1, 0),
               "deadlocked at a barrier");
}

}  // namespace
}  // namespace dgemma::cuda
