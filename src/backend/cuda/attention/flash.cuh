#pragma once
// The one-launch-per-layer flash attention of AttentionBatchArgs (kernels: attention/flash_mma_kernel.cuh,
// attention/flash_wgmma_kernel.cuh; host side: attention/flash.cu). Host side only: plan a launch (the
// kernel, row tiles, key splits, workspace), then launch it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// The two kernels: mma.sync (sm_80; every head dim) and, in the hopper family, the warpgroup-MMA one
// (sm_90a; head dims 256 and 512).
enum class FlashKernel { kMmaSync, kWgmma };

struct FlashAttentionPlan {
  int tiles = 0;      // row tiles of one KV head over all items (the grid's x)
  int splits = 0;     // key splits per row tile; 0: not supported (take another path)
  int64_t workspace_bytes = 0;  // device workspace of the split partials (0 with one split)
  FlashKernel kernel = FlashKernel::kMmaSync;
};

// Supported: D in {64, 128, 256, 512}, Hq a multiple of Hkv, a device with enough shared memory
// (sm_80+), at most 65535 KV heads, item rows within int32. Deterministic for a given shape, items,
// kernel and device (the split count depends on the SM count). `wgmma`: the hopper family's kernel for
// head dims 256 / 512; forced_splits: 0 planned, else the key splits of every launch (clamped to
// [1, 32]). host_items: the num_items AttentionItem rows (backend.h) as flash::kFields int32 each (this
// header is compiled by nvcc in C++17 and does not include backend.h).
FlashAttentionPlan plan_flash_attention(int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const int32_t* host_items,
                                        int num_items, bool wgmma, int forced_splits, Stream stream);

// Launches the kernel (and the split merge) on `stream`; `workspace` holds plan.workspace_bytes
// (16-byte aligned; may be null when that is 0). Pointers as in AttentionBatchArgs; k_pages / v_pages /
// tables may be null when no item has a cache, blocks when no item has image blocks; page_size is the
// pool's P (any positive value).
void launch_flash_attention(const FlashAttentionPlan& plan, void* workspace, const uint16_t* q,
                            const uint16_t* k_new, const uint16_t* v_new, const uint16_t* k_pages,
                            const uint16_t* v_pages, int64_t page_size, const int32_t* tables,
                            const int32_t* items, const int32_t* blocks, int num_items, uint16_t* out,
                            int64_t T, int64_t Hq, int64_t Hkv, int64_t D, float scaling, Stream stream);

}  // namespace dgemma::cuda
