// Host side of the flash attention kernels (flash_attention_kernel.cuh): the per-head-dim tile shapes,
// the launch plan (row tiles of all items, key splits when the grid would leave SMs idle) and the
// launches. Tile shapes (BM = 64 query rows, 4 warps):
//   D 64 / 128: BN 64 keys, the whole head dim in one CTA (41 / 81 KB of shared memory);
//   D 256:      BN 32, 97 KB (two CTAs an SM; 128 fp32 output registers a thread);
//   D 512:      BN 32, 8 warps: two groups of 4 split the head dim (partial scores added through
//               shared memory; each group 256 output columns), 209 KB; or (variant 1) 4 warps with
//               the two 256-column output halves in CTAs of their own, each recomputing the scores,
//               161 KB.
//   D 256 variant 1: 8 warps splitting the head dim (128 output columns a group), 113 KB, two CTAs
//               an SM (128 registers a thread); variant 2: 8 warps over 128 query rows, 129 KB.
//   Variant 3 (sm_90, flash_attention_wgmma_kernel.cuh): warpgroup MMAs, a producer warpgroup and two
//               consumers, K and V double-buffered; D 256 128 query rows, BN 64, 193 KB; D 512 64
//               query rows, the consumers splitting the head dim, BN 32, 225 KB; one CTA an SM. On
//               other GPUs variant 3 plans variant 0. Variant 4: D 256 with BN 80 (225 KB; the scores
//               read 115 bytes of shared memory a cycle instead of 128; D 512 as 3).
#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/device_info.cuh"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/wgmma_ptx.cuh"
#include "backend/cuda/tma_ptx.cuh"
#include "backend/cuda/flash_attention.cuh"
#include "backend/cuda/flash_attention_kernel.cuh"
#include "backend/cuda/flash_attention_wgmma_kernel.cuh"
#include "backend/cuda/tuning.h"
#include "backend/workspace_bounds.h"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

using flash::kThreads;
using flash::Params;

constexpr int kMaxSplits = 32;
constexpr int kCachedDevices = 16;
std::atomic<int> g_forced_splits{0};

using flash::Cfg;
using flash::ShapeOf;

constexpr int kWgmmaVariant = 3, kWgmma80Variant = 4;
std::atomic<int> g_variant{kWgmma80Variant};  // off sm_90 plans fall back to 0

// The kernel of head dim D and variant V: its shape (rows a CTA, keys a tile, CTAs along the output
// columns, threads, shared memory) and launch. Variants 0 .. 2: the mma.sync kernel with Cfg<D, V>;
// variants 3 and 4: the wgmma kernel (WgmmaKernel).
template <int D, int V>
struct Kernel {
  using S = ShapeOf<D, V>;
  using C = Cfg<D, V>;
  static constexpr int kRows = S::kRows, kBN = C::BN, kDChunks = S::kDChunks, kThreads = S::kThreads;
  static constexpr int kSmemBytes = S::kSmemBytes;
  static void* ptr() { return reinterpret_cast<void*>(flash::flash_attention_kernel<D, C::DV, C::BN, C::KG, C::RG>); }
  static void launch(dim3 grid, const Params& p, cudaStream_t stream) {
    flash::flash_attention_kernel<D, C::DV, C::BN, C::KG, C::RG><<<grid, kThreads, kSmemBytes, stream>>>(p);
  }
};
// The wgmma kernel: K and V tiles of 64 keys (D 256) or 32 (D 512), two stages each; variant 4 (D 256)
// tiles of 80 keys.
template <int D, int BN>
struct WgmmaKernel {
  static constexpr int kBN = BN, kStages = 2;
  using S = flash::WgmmaShape<D, kBN, kStages>;
  static constexpr int kRows = S::kRows, kDChunks = S::kDChunks, kThreads = S::kThreads;
  static constexpr int kSmemBytes = S::kSmemBytes;
  static void* ptr() { return reinterpret_cast<void*>(flash::flash_wgmma_kernel<D, kBN, kStages>); }
  static void launch(dim3 grid, const Params& p, cudaStream_t stream) {
    flash::flash_wgmma_kernel<D, kBN, kStages><<<grid, kThreads, kSmemBytes, stream>>>(p);
  }
};
template <int D>
struct Kernel<D, kWgmmaVariant> : WgmmaKernel<D, D == 256 ? 64 : 32> {};
template <>
struct Kernel<256, kWgmma80Variant> : WgmmaKernel<256, 80> {};

template <int D, int V>
void* kernel_ptr() {
  return Kernel<D, V>::ptr();
}

// CTAs of the kernel one SM holds (0: too little shared memory), after allowing the kernel its
// dynamic shared memory on `device`; remembered per device.
template <int D, int V>
int resident_ctas(int device) {
  static std::atomic<int> cache[kCachedDevices] = {};  // value + 1; 0: not known yet
  if (device >= 0 && device < kCachedDevices) {
    const int v = cache[device].load();
    if (v > 0) return v - 1;
  }
  constexpr int bytes = Kernel<D, V>::kSmemBytes;
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  int result = 0;
  if (optin >= bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel_ptr<D, V>(), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&result, kernel_ptr<D, V>(), Kernel<D, V>::kThreads,
                                                             bytes));
    result = std::max(result, 0);
  }
  if (device >= 0 && device < kCachedDevices) cache[device].store(result + 1);
  return result;
}

int sm_count(int device) {
  static std::atomic<int> cache[kCachedDevices] = {};
  if (device >= 0 && device < kCachedDevices && cache[device].load() > 0) return cache[device].load();
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  sms = std::max(sms, 1);
  if (device >= 0 && device < kCachedDevices) cache[device].store(sms);
  return sms;
}

int64_t ml_bytes(int64_t splits, int64_t rows) { return (splits * rows * 2 * 4 + 15) / 16 * 16; }

template <int D, int V>
FlashAttentionPlan plan_for(int64_t T, int64_t Hq, int64_t Hkv, const int32_t* items, int num_items, int device) {
  constexpr int BN = Kernel<D, V>::kBN, kDChunks = Kernel<D, V>::kDChunks, kRows = Kernel<D, V>::kRows;
  const int64_t groups = Hq / Hkv;
  int64_t tiles = 0, max_key_tiles = 0;
  for (int i = 0; i < num_items; ++i) {
    const int32_t* it = items + i * flash::kFields;
    const int64_t n = it[flash::kQLen], L = it[flash::kCacheLen], window = it[flash::kWindow];
    if (n <= 0) continue;
    tiles += ceil_div(n * groups, kRows);
    int64_t span = L + n;
    if (it[flash::kCausal] && window > 0) span = std::min<int64_t>(span, window + kRows / groups + 1);
    max_key_tiles = std::max(max_key_tiles, ceil_div(span, BN));
  }
  if (tiles == 0 || tiles > 0x7fffffff) return {};
  const int resident = resident_ctas<D, V>(device);
  if (resident <= 0) return {};
  int64_t splits = g_forced_splits.load();
  if (splits <= 0) {
    // The split count with the least time in waves of CTAs (waves(s) / s: each CTA's work shrinks
    // with s), ties to fewer splits; at most 8 splits (the partials are fp32 rows of the whole head
    // dim) and at least 4 key tiles a split. Then the fewest splits with the same tiles per split.
    const int64_t ctas = tiles * Hkv * kDChunks, slots = int64_t{sm_count(device)} * resident;
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
  const int64_t rows = T * Hq;
  plan.workspace_bytes = splits > 1 ? ml_bytes(splits, rows) + splits * rows * D * 4 : 0;
  return plan;
}

template <int D, int V>
void launch_for(const FlashAttentionPlan& plan, Params p, void* ws, int device, cudaStream_t stream) {
  constexpr int kDChunks = Kernel<D, V>::kDChunks;
  const bool ready = plan.variant == V && resident_ctas<D, V>(device) > 0;  // also sets the smem limit
  DG_CHECK(ready);
  p.splits = plan.splits;
  const int64_t rows = int64_t{p.T} * p.Hq;
  if (plan.splits > 1) {
    DG_CHECK(ws != nullptr && plan.workspace_bytes >= ml_bytes(plan.splits, rows) + plan.splits * rows * D * 4);
    p.ws_ml = static_cast<float*>(ws);
    p.ws_o = reinterpret_cast<float*>(static_cast<char*>(ws) + ml_bytes(plan.splits, rows));
  }
  const dim3 grid(static_cast<unsigned>(plan.tiles), static_cast<unsigned>(p.Hkv),
                  static_cast<unsigned>(plan.splits * kDChunks));
  Kernel<D, V>::launch(grid, p, stream);
  CUDA_CHECK_LAUNCH();
  if (plan.splits > 1) {
    const int64_t threads = rows * (D / 4);
    flash::flash_combine_kernel<D><<<static_cast<unsigned>(ceil_div(threads, kThreads)), kThreads, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

int set_flash_attention_variant(int v) { return g_variant.exchange(v >= 0 && v <= kWgmma80Variant ? v : 0); }

int set_flash_attention_splits(int splits) {
  return g_forced_splits.exchange(splits <= 0 ? 0 : std::min(splits, kMaxSplits));
}

FlashAttentionPlan plan_flash_attention(int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const int32_t* host_items,
                                        int num_items, int device) {
  if (Hkv <= 0 || Hkv > 65535 || Hq % Hkv != 0 || T <= 0 || T * Hq > 0x7fffffff) return {};
  switch (D) {
    case 64: return plan_for<64, 0>(T, Hq, Hkv, host_items, num_items, device);
    case 128: return plan_for<128, 0>(T, Hq, Hkv, host_items, num_items, device);
    case 256:
    case 512: {
      int v = g_variant.load();
      if (D == 512 && v == 2) v = 0;                                    // D 512 has variants 0, 1 and 3
      if (D == 512 && v == kWgmma80Variant) v = kWgmmaVariant;
      if (v >= kWgmmaVariant && !current_device_has_wgmma()) v = 0;     // the wgmma kernels: sm_90 only
      FlashAttentionPlan plan;
      if (D == 256) {
        switch (v) {
          case 1: plan = plan_for<256, 1>(T, Hq, Hkv, host_items, num_items, device); break;
          case 2: plan = plan_for<256, 2>(T, Hq, Hkv, host_items, num_items, device); break;
          case kWgmmaVariant: plan = plan_for<256, kWgmmaVariant>(T, Hq, Hkv, host_items, num_items, device); break;
          case kWgmma80Variant: plan = plan_for<256, kWgmma80Variant>(T, Hq, Hkv, host_items, num_items, device); break;
          default: plan = plan_for<256, 0>(T, Hq, Hkv, host_items, num_items, device);
        }
      } else {
        switch (v) {
          case 1: plan = plan_for<512, 1>(T, Hq, Hkv, host_items, num_items, device); break;
          case kWgmmaVariant: plan = plan_for<512, kWgmmaVariant>(T, Hq, Hkv, host_items, num_items, device); break;
          default: plan = plan_for<512, 0>(T, Hq, Hkv, host_items, num_items, device);
        }
      }
      plan.variant = v;
      return plan;
    }
    default: return {};
  }
}

void launch_flash_attention(const FlashAttentionPlan& plan, void* workspace, const uint16_t* q,
                            const uint16_t* k_new, const uint16_t* v_new, const uint16_t* k_pages,
                            const uint16_t* v_pages, int64_t page_size, const int32_t* tables,
                            const int32_t* items, int num_items, uint16_t* out, int64_t T, int64_t Hq,
                            int64_t Hkv, int64_t D, float scaling, int device, cudaStream_t stream) {
  DG_CHECK(plan.splits > 0 && plan.tiles > 0 && page_size > 0 && page_size <= 0x7fffffff);
  Params p{};
  p.q = q;
  p.k_new = k_new;
  p.v_new = v_new;
  p.k_pages = k_pages;
  p.v_pages = v_pages;
  p.tables = tables;
  p.items = items;
  p.out = out;
  p.num_items = num_items;
  p.T = static_cast<int>(T);
  p.Hq = static_cast<int>(Hq);
  p.Hkv = static_cast<int>(Hkv);
  p.groups = static_cast<int>(Hq / Hkv);
  p.page_size = static_cast<int>(page_size);
  p.scaling = scaling;
  switch (D) {
    case 64: return launch_for<64, 0>(plan, p, workspace, device, stream);
    case 128: return launch_for<128, 0>(plan, p, workspace, device, stream);
    case 256:
      if (plan.variant == kWgmma80Variant) return launch_for<256, kWgmma80Variant>(plan, p, workspace, device, stream);
      if (plan.variant == kWgmmaVariant) return launch_for<256, kWgmmaVariant>(plan, p, workspace, device, stream);
      if (plan.variant == 2) return launch_for<256, 2>(plan, p, workspace, device, stream);
      if (plan.variant == 1) return launch_for<256, 1>(plan, p, workspace, device, stream);
      return launch_for<256, 0>(plan, p, workspace, device, stream);
    case 512:
      if (plan.variant == kWgmmaVariant) return launch_for<512, kWgmmaVariant>(plan, p, workspace, device, stream);
      if (plan.variant) return launch_for<512, 1>(plan, p, workspace, device, stream);
      return launch_for<512, 0>(plan, p, workspace, device, stream);
    default: DG_CHECK(false);
  }
}

}  // namespace dgemma::cuda
