// Host side of the flash attention kernels: the per-head-dim tile shapes, the launch plan (row tiles
// of all items, key splits when the grid would leave SMs idle) and the launches. Tile shapes:
//   mma.sync (attention/flash_mma_kernel.cuh; BM = 64 query rows, 4 warps):
//     D 64 / 128: BN 64 keys, the whole head dim in one CTA (41 / 81 KB of shared memory);
//     D 256:      BN 32, 97 KB (two CTAs an SM; 128 fp32 output registers a thread);
//     D 512:      BN 32, 8 warps: two groups of 4 split the head dim (partial scores added through
//                 shared memory; each group 256 output columns), 209 KB.
//   wgmma (attention/flash_wgmma_kernel.cuh, the hopper family, D 256 / 512): a producer warpgroup and
//     two consumers, K and V double-buffered, one CTA an SM; D 256 128 query rows, BN 80, 225 KB; D 512
//     64 query rows, the consumers splitting the head dim, BN 32, 225 KB.
#include <algorithm>

#include "backend/cuda/attention/flash.cuh"
#include "backend/cuda/attention/flash_mma_kernel.cuh"
#include "backend/cuda/attention/flash_wgmma_kernel.cuh"
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/ptx.cuh"
#include "backend/cuda/core/tma_ptx.cuh"
#include "backend/cuda/core/wgmma_ptx.cuh"
#include "backend/workspace_bounds.h"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

using flash::kThreads;
using flash::Params;

constexpr int kMaxSplits = 32;

// The kernel of head dim D: its shape (rows a CTA, keys a tile, CTAs along the output columns,
// threads, shared memory) and launch.
template <int D, FlashKernel K>
struct Kernel;
template <int D>
struct Kernel<D, FlashKernel::kMmaSync> {
  using S = flash::ShapeOf<D>;
  using C = flash::Cfg<D>;
  static constexpr int kRows = S::kRows, kBN = C::BN, kDChunks = S::kDChunks, kThreads = S::kThreads;
  static constexpr int kSmemBytes = S::kSmemBytes;
  static const void* ptr() { return reinterpret_cast<const void*>(flash::flash_attention_kernel<D, C::DV, C::BN, C::KG>); }
  static void launch(dim3 grid, const Params& p, Stream stream) {
    flash::flash_attention_kernel<D, C::DV, C::BN, C::KG><<<grid, kThreads, kSmemBytes, stream>>>(p);
  }
};
// The wgmma kernel: K and V tiles of 80 keys (D 256) or 32 (D 512), two stages each.
template <int D>
struct Kernel<D, FlashKernel::kWgmma> {
  static constexpr int kBN = D == 256 ? 80 : 32, kStages = 2;
  using S = flash::WgmmaShape<D, kBN, kStages>;
  static constexpr int kRows = S::kRows, kDChunks = S::kDChunks, kThreads = S::kThreads;
  static constexpr int kSmemBytes = S::kSmemBytes;
  static const void* ptr() { return reinterpret_cast<const void*>(flash::flash_wgmma_kernel<D, kBN, kStages>); }
  static void launch(dim3 grid, const Params& p, Stream stream) {
    flash::flash_wgmma_kernel<D, kBN, kStages><<<grid, kThreads, kSmemBytes, stream>>>(p);
  }
};

// CTAs of the kernel one SM holds (0: too little shared memory), after allowing the kernel its
// dynamic shared memory on the stream's device.
template <int D, FlashKernel K>
int resident_ctas(Stream stream) {
  return stream.occupancy->resident_blocks(Kernel<D, K>::ptr(), Kernel<D, K>::kThreads, Kernel<D, K>::kSmemBytes);
}

int64_t ml_bytes(int64_t splits, int64_t rows) { return (splits * rows * 2 * 4 + 15) / 16 * 16; }

template <int D, FlashKernel K>
FlashAttentionPlan plan_for(int64_t T, int64_t Hq, int64_t Hkv, const int32_t* items, int num_items,
                            int forced_splits, Stream stream) {
  constexpr int BN = Kernel<D, K>::kBN, kDChunks = Kernel<D, K>::kDChunks, kRows = Kernel<D, K>::kRows;
  const int64_t groups = Hq / Hkv;
  int64_t tiles = 0, max_key_tiles = 0;
  for (int i = 0; i < num_items; ++i) {
    const int32_t* it = items + i * flash::kFields;
    const int64_t n = it[flash::kQLen], L = it[flash::kCacheLen], window = it[flash::kWindow];
    if (n <= 0) continue;
    tiles += ceil_div(n * groups, kRows);
    int64_t span = L + n;
    // A windowed tile spans its window and its rows, unless an image block widens it past the window.
    const bool wide_blocks = it[flash::kBlocksLen] > 0 && !it[flash::kBlocksWindowed];
    if (it[flash::kCausal] && window > 0 && !wide_blocks)
      span = std::min<int64_t>(span, window + kRows / groups + 1);
    max_key_tiles = std::max(max_key_tiles, ceil_div(span, BN));
  }
  if (tiles == 0 || tiles > 0x7fffffff) return {};
  const int resident = resident_ctas<D, K>(stream);
  if (resident <= 0) return {};
  int64_t splits = forced_splits;
  if (splits <= 0) {
    // The split count with the least time in waves of CTAs (waves(s) / s: each CTA's work shrinks
    // with s), ties to fewer splits; at most 8 splits (the partials are fp32 rows of the whole head
    // dim) and at least 4 key tiles a split. Then the fewest splits with the same tiles per split.
    const int64_t ctas = tiles * Hkv * kDChunks, slots = int64_t{stream.occupancy->sm_count()} * resident;
    const int64_t max_splits = std::clamp<int64_t>(max_key_tiles / 4, 1, workspace_bounds::kFlashMaxAutoSplits);
    splits = 1;
    double best = static_cast<double>(ceil_div(ctas, slots));
    for (int64_t s = 2; s <= max_splits; ++s) {
      const double t = static_cast<double>(ceil_div(ctas * s, slots)) / static_cast<double>(s);
      if (t < 0.9 * best) {
        best = t;
        splits = s;
      }
    }
    const int64_t per = ceil_div(max_key_tiles, splits);
    splits = std::max<int64_t>(1, ceil_div(max_key_tiles, per));
  }
  splits = std::clamp<int64_t>(splits, 1, kMaxSplits);
  FlashAttentionPlan plan;
  plan.tiles = static_cast<int>(tiles);
  plan.splits = static_cast<int>(splits);
  plan.kernel = K;
  const int64_t rows = T * Hq;
  plan.workspace_bytes = splits > 1 ? ml_bytes(splits, rows) + splits * rows * D * 4 : 0;
  return plan;
}

template <int D, FlashKernel K>
void launch_for(const FlashAttentionPlan& plan, Params p, void* ws, Stream stream) {
  constexpr int kDChunks = Kernel<D, K>::kDChunks;
  DG_CHECK((plan.kernel == K && resident_ctas<D, K>(stream) > 0));  // also allows the shared memory
  p.splits = plan.splits;
  const int64_t rows = int64_t{p.T} * p.Hq;
  if (plan.splits > 1) {
    DG_CHECK(ws != nullptr && plan.workspace_bytes >= ml_bytes(plan.splits, rows) + plan.splits * rows * D * 4);
    p.ws_ml = static_cast<float*>(ws);
    p.ws_o = reinterpret_cast<float*>(static_cast<char*>(ws) + ml_bytes(plan.splits, rows));
  }
  const dim3 grid(static_cast<unsigned>(plan.tiles), static_cast<unsigned>(p.Hkv),
                  static_cast<unsigned>(plan.splits * kDChunks));
  Kernel<D, K>::launch(grid, p, stream);
  CUDA_CHECK_LAUNCH(stream);
  if (plan.splits > 1) {
    const int64_t threads = rows * (D / 4);
    flash::flash_combine_kernel<D><<<static_cast<unsigned>(ceil_div(threads, kThreads)), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH(stream);
  }
}

}  // namespace

FlashAttentionPlan plan_flash_attention(int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const int32_t* host_items,
                                        int num_items, bool wgmma, int forced_splits, Stream stream) {
  if (Hkv <= 0 || Hkv > 65535 || Hq % Hkv != 0 || T <= 0 || T * Hq > 0x7fffffff) return {};
  constexpr FlashKernel kMma = FlashKernel::kMmaSync, kWg = FlashKernel::kWgmma;
  const int splits = forced_splits <= 0 ? 0 : std::min(forced_splits, kMaxSplits);
  switch (D) {
    case 64: return plan_for<64, kMma>(T, Hq, Hkv, host_items, num_items, splits, stream);
    case 128: return plan_for<128, kMma>(T, Hq, Hkv, host_items, num_items, splits, stream);
    case 256:
      return wgmma ? plan_for<256, kWg>(T, Hq, Hkv, host_items, num_items, splits, stream)
                   : plan_for<256, kMma>(T, Hq, Hkv, host_items, num_items, splits, stream);
    case 512:
      return wgmma ? plan_for<512, kWg>(T, Hq, Hkv, host_items, num_items, splits, stream)
                   : plan_for<512, kMma>(T, Hq, Hkv, host_items, num_items, splits, stream);
    default: return {};
  }
}

void launch_flash_attention(const FlashAttentionPlan& plan, void* workspace, const uint16_t* q,
                            const uint16_t* k_new, const uint16_t* v_new, const uint16_t* k_pages,
                            const uint16_t* v_pages, int64_t page_size, const int32_t* tables,
                            const int32_t* items, const int32_t* blocks, int num_items, uint16_t* out,
                            int64_t T, int64_t Hq, int64_t Hkv, int64_t D, float scaling, Stream stream) {
  DG_CHECK(plan.splits > 0 && plan.tiles > 0 && page_size > 0 && page_size <= 0x7fffffff);
  Params p{};
  p.q = q;
  p.k_new = k_new;
  p.v_new = v_new;
  p.k_pages = k_pages;
  p.v_pages = v_pages;
  p.tables = tables;
  p.items = items;
  p.blocks = blocks;
  p.out = out;
  p.num_items = num_items;
  p.T = static_cast<int>(T);
  p.Hq = static_cast<int>(Hq);
  p.Hkv = static_cast<int>(Hkv);
  p.groups = static_cast<int>(Hq / Hkv);
  p.page_size = static_cast<int>(page_size);
  p.scaling = scaling;
  constexpr FlashKernel kMma = FlashKernel::kMmaSync, kWg = FlashKernel::kWgmma;
  const bool wg = plan.kernel == kWg;
  switch (D) {
    case 64: return launch_for<64, kMma>(plan, p, workspace, stream);
    case 128: return launch_for<128, kMma>(plan, p, workspace, stream);
    case 256: return wg ? launch_for<256, kWg>(plan, p, workspace, stream) : launch_for<256, kMma>(plan, p, workspace, stream);
    case 512: return wg ? launch_for<512, kWg>(plan, p, workspace, stream) : launch_for<512, kMma>(plan, p, workspace, stream);
    default: DG_CHECK(false);
  }
}

}  // namespace dgemma::cuda
