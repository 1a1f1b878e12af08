#pragma once
// Which keys a query token of an attention item sees: the one rule of the CPU reference
// (cpu/attention.cpp), the flash kernels (cuda/attention/flash_mask.cuh) and the per-item path's softmax
// (cuda/attention/per_item.cu). Plain C++ (C++17: nvcc compiles it for the device too).
//
// An item has n new tokens after L visible cached keys; its keys are [cached ; new], key j >= L being
// new token j - L. Query token i (0 <= i < n) sees the contiguous key range [lo, hi):
//   bidirectional item: [0, L + n);
//   causal item:        [max(0, L + i - window + 1), L + i + 1)   (window 0: lo = 0);
//   causal item, i inside image block [first, end) of the item's new tokens: hi = L + end (the whole block
//     is visible, later tokens of it included), and unless the item's blocks are `windowed`, lo is lowered
//     to L + first when the window would hide the block's start.
// So a layer's mask is "causal (within the window) OR same image block", the block part AND-ed with the
// window only when windowed (docs/IMAGES.md "The attention mask"). Blocks are ascending and disjoint; an
// item's blocks are never split between items (the scheduler never cuts an image block). Both ends of the
// range are non-decreasing in i, so a tile of consecutive query tokens sees [lo(first), hi(last)) at most
// and every key of [lo(last), hi(first)) for sure.
#include <cstdint>

#if defined(__CUDACC__)
#define DG_KEYS_FN __host__ __device__ __forceinline__
#else
#define DG_KEYS_FN inline
#endif

namespace dgemma {

// An image block of an item: new tokens [first, end).
struct ImageBlock {
  int32_t first = 0, end = 0;
};
static_assert(sizeof(ImageBlock) == 2 * sizeof(int32_t));

// The keys a query sees: [lo, hi) of the item's keys.
struct KeyRange {
  int lo, hi;
};

// One item's rule. blocks: nblocks (first, end) pairs (ImageBlock), in memory the caller's code can read
// (host or device).
struct ItemKeys {
  int L, n, causal, window;
  const int32_t* blocks;
  int nblocks;
  int windowed;
};

DG_KEYS_FN KeyRange query_keys(const ItemKeys& k, int i) {
  if (!k.causal) return KeyRange{0, k.L + k.n};
  int lo = 0;
  if (k.window > 0) {
    lo = k.L + i - k.window + 1;
    if (lo < 0) lo = 0;
  }
  int hi = k.L + i + 1;
  for (int b = 0; b < k.nblocks; ++b) {
    const int first = k.blocks[2 * b], end = k.blocks[2 * b + 1];
    if (i < first) break;
    if (i < end) {
      hi = k.L + end;
      if (!k.windowed && k.L + first < lo) lo = k.L + first;
      break;
    }
  }
  return KeyRange{lo, hi};
}

}  // namespace dgemma
