// Checks of the memory plan's assumptions on the device: the allocator's ceiling holds on the real
// allocator (reserved bytes never above it, the oldest cached blocks given back, a clear error past
// it), its 2 MiB blocks are what the driver takes (cudaMemGetInfo moves by the reserved bytes), and
// the flash attention plans of the 26B-A4B shapes stay within workspace_bounds.h's key-split bound at
// every step size up to 4,096 tokens (the largest real workspace is printed).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/attention/flash.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/workspace_bounds.h"
#include "gpu_check_util.h"
#include "util/error.h"

namespace dgemma::gpu_test {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The shared backend's ceiling is lifted again however the check ends.
struct CeilingGuard {
  Backend& be;
  ~CeilingGuard() { be.set_allocator_ceiling(0); }
};

uint64_t device_used(Backend& be) {
  const MemoryInfo m = be.memory_info();
  return m.total - m.free;
}

void check_allocator_ceiling(Reporter& r) {
  Backend& be = cuda();
  be.synchronize();
  be.release_cached_memory();
  CeilingGuard guard{be};
  const AllocatorStats s0 = be.allocator_stats();
  const uint64_t ceiling = s0.reserved + 64 * kMiB;
  be.set_allocator_ceiling(ceiling);
  // 40 requests of 1..40 MiB + 1 byte, each released at once: 21 block sizes of 2..42 MiB, ~460 MiB that
  // a cache without a ceiling would keep.
  uint64_t max_reserved = 0;
  for (int i = 1; i <= 40; ++i) {
    Tensor t = be.alloc(ScalarType::kU8, {static_cast<int64_t>(i) * static_cast<int64_t>(kMiB) + 1});
    max_reserved = std::max(max_reserved, be.allocator_stats().reserved);
  }
  const AllocatorStats s1 = be.allocator_stats();
  r.note(fmt::format("40 requests under a ceiling of +64 MiB: reserved at most +{} MiB, {} cached blocks given back",
                     (max_reserved - s0.reserved) / kMiB, s1.evictions - s0.evictions));
  if (max_reserved > ceiling) r.fail(fmt::format("reserved {} over the ceiling {}", max_reserved, ceiling));
  if (s1.evictions == s0.evictions) r.fail("no cached block was given back under the ceiling");
  // A live block and one more that cannot fit: a resource-exhausted error with the numbers.
  {
    Tensor live = be.alloc(ScalarType::kU8, {static_cast<int64_t>(40 * kMiB)});
    bool thrown = false;
    try {
      Tensor more = be.alloc(ScalarType::kU8, {static_cast<int64_t>(40 * kMiB)});
    } catch (const Error& e) {
      thrown = e.kind() == ErrorKind::kResourceExhausted && std::string(e.what()).find("ceiling") != std::string::npos;
      r.note(std::string("over the ceiling: ") + e.what());
    }
    if (!thrown) r.fail("a block over the ceiling did not fail with a resource-exhausted error naming the ceiling");
  }
  if (be.allocator_stats().in_use != s0.in_use) r.fail("blocks of the check are still in use");
}

void check_allocator_counts_device_memory(Reporter& r) {
  Backend& be = cuda();
  be.synchronize();
  be.release_cached_memory();
  const uint64_t used0 = device_used(be), res0 = be.allocator_stats().reserved;
  std::vector<Tensor> live;
  for (int i = 0; i < 32; ++i) live.push_back(be.alloc(ScalarType::kU8, {static_cast<int64_t>((i % 7 + 1) * 3 * kMiB + 12345)}));
  const uint64_t used1 = device_used(be), res1 = be.allocator_stats().reserved;
  const int64_t du = static_cast<int64_t>(used1) - static_cast<int64_t>(used0);
  const int64_t dr = static_cast<int64_t>(res1) - static_cast<int64_t>(res0);
  r.note(fmt::format("32 large blocks: the device's used memory grew by {:.1f} MiB, the allocator's reserved by {:.1f} MiB",
                     du / double(kMiB), dr / double(kMiB)));
  // The plan counts reserved bytes; the device must not take more than a granule a block beyond them.
  if (du > dr + static_cast<int64_t>(32 * 2 * kMiB))
    r.fail(fmt::format("the device took {} bytes for {} reserved: more than a 2 MiB granule a block over", du, dr));
  live.clear();
  be.synchronize();
  be.release_cached_memory();
  // Small blocks, for the record: the driver packs them; the plan's reserve covers them.
  const uint64_t used2 = device_used(be), res2 = be.allocator_stats().reserved;
  for (int i = 0; i < 2000; ++i) live.push_back(be.alloc(ScalarType::kU8, {static_cast<int64_t>(4096 + (i % 5) * 512)}));
  const int64_t su = static_cast<int64_t>(device_used(be)) - static_cast<int64_t>(used2);
  const int64_t sr = static_cast<int64_t>(be.allocator_stats().reserved) - static_cast<int64_t>(res2);
  r.note(fmt::format("2000 small blocks: the device grew by {:.1f} MiB, the allocator's reserved by {:.1f} MiB",
                     su / double(kMiB), sr / double(kMiB)));
  live.clear();
  be.synchronize();
  be.release_cached_memory();
}

// Every step size 1..4096 of the 26B-A4B attention shapes, as the scheduler composes them: a prefill
// chunk over a long cache alone, or 1-4 denoising canvases (over long caches) + the rest as a chunk.
void check_flash_workspace_bound(Reporter& r) {
  struct Layer {
    const char* name;
    int64_t Hq, Hkv, D, window;
  };
  const Layer layers[] = {{"full D=512", 16, 2, 512, 0}, {"sliding D=256", 16, 8, 256, 1024}};
  const int64_t C = 256, L = 30000;
  const cuda::Stream stream = cuda::context_of(cuda()).stream;
  // Both kernels' plans where the GPU runs both (the hopper family's wgmma kernel on sm_90).
  for (const bool wgmma : {false, true}) {
    if (wgmma && !sm90_gpu()) continue;
    const char* kernel = wgmma ? "wgmma" : "mma.sync";
    for (const Layer& l : layers) {
      uint64_t worst = 0;
      int64_t worst_t = 0;
      int worst_splits = 0;
      for (int canvases = 0; canvases <= 4; ++canvases)
        for (int64_t T = std::max<int64_t>(1, canvases * C); T <= 4096; ++T) {
          std::vector<AttentionItem> items;
          int32_t at = 0;
          const int32_t cached = static_cast<int32_t>(l.window > 0 ? l.window - 1 : L);
          for (int c = 0; c < canvases; ++c) {
            items.push_back({at, static_cast<int32_t>(C), 0, cached, 0, 1, 0, 0});
            at += static_cast<int32_t>(C);
          }
          if (T > at)
            items.push_back({at, static_cast<int32_t>(T - at), 0, cached, 0, 1, 1, static_cast<int32_t>(l.window)});
          const auto plan =
              cuda::plan_flash_attention(T, l.Hq, l.Hkv, l.D, reinterpret_cast<const int32_t*>(items.data()),
                                         static_cast<int>(items.size()), wgmma, 0, stream);
          const uint64_t bound =
              workspace_bounds::flash_split_bytes(T, l.Hq, l.D, workspace_bounds::kFlashMaxAutoSplits);
          if (plan.splits > workspace_bounds::kFlashMaxAutoSplits ||
              static_cast<uint64_t>(plan.workspace_bytes) > bound) {
            r.fail(fmt::format("{} {} T={} ({} canvases): {} splits, {} workspace bytes over the bound {}", kernel,
                               l.name, T, canvases, plan.splits, plan.workspace_bytes, bound));
            return;
          }
          if (static_cast<uint64_t>(plan.workspace_bytes) > worst) {
            worst = static_cast<uint64_t>(plan.workspace_bytes);
            worst_t = T;
            worst_splits = plan.splits;
          }
        }
      r.note(fmt::format("{} {}: the largest key-split workspace up to 4096 tokens is {:.1f} MiB ({} splits at "
                         "T={}); the plan's bound at 4096 tokens: {:.1f} MiB",
                         kernel, l.name, worst / double(kMiB), worst_splits, worst_t,
                         workspace_bounds::flash_split_bytes(4096, l.Hq, l.D, workspace_bounds::kFlashMaxAutoSplits) /
                             double(kMiB)));
    }
  }
}

}  // namespace

std::vector<Case> memory_cases() {
  return {
      {"memory_allocator_ceiling", check_allocator_ceiling},
      {"memory_allocator_counts_device_memory", check_allocator_counts_device_memory},
      {"memory_flash_workspace_bound", check_flash_workspace_bound},
  };
}

}  // namespace dgemma::gpu_test
