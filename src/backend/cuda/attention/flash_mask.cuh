#pragma once
// Which keys a query row of the flash attention kernels sees (attention/flash_mma_kernel.cuh and
// attention/flash_wgmma_kernel.cuh): the rule of backend/attention_keys.h (causal within the window, or
// bidirectional, widened over an item's image blocks), read from an item's row of the launch's items and
// its blocks. Plain C++ on the device's int maths: the emulated unit tests compile it on the host too
// (min / max come from the includer).
#include "backend/attention_keys.h"

namespace dgemma::cuda::flash {

// Item fields (AttentionItem, backend.h).
enum : int {
  kQFirst = 0,
  kQLen,
  kCacheFirst,
  kCacheLen,
  kTableFirst,
  kTableLen,
  kCausal,
  kWindow,
  kBlocksFirst,
  kBlocksLen,
  kBlocksWindowed,
  kFields
};

// The rule of an item's row `meta` (kFields words); `blocks`: the launch's image blocks (pairs).
__device__ __forceinline__ ItemKeys item_keys(const int* meta, const int* blocks) {
  return ItemKeys{meta[kCacheLen],
                  meta[kQLen],
                  meta[kCausal],
                  meta[kWindow],
                  meta[kBlocksLen] > 0 ? blocks + 2 * meta[kBlocksFirst] : nullptr,
                  meta[kBlocksLen],
                  meta[kBlocksWindowed]};
}

// Whether key j is visible to a query token that sees `r`.
__device__ __forceinline__ bool key_visible(const KeyRange& r, int j) {
  return j >= r.lo && j < r.hi;
}

// The keys any row of a row tile sees and the key tiles of its split. Rows [r0, r0 + k_rows) of an
// item (rows n * groups, token-major): i_lo / i_hi its first and last token, `first` / `last` their key
// ranges; [j_lo, j_hi) the keys any of its tokens sees (the ranges' ends rise with the token); the range
// in tiles of bn keys is cut into `splits` equal parts, this split's being tiles [kt0, kt1) (empty when
// kt0 >= kt1).
struct TileKeys {
  int i_lo, i_hi, j_lo, j_hi, kt0, kt1;
  KeyRange first, last;
};
__device__ __forceinline__ TileKeys tile_keys(const ItemKeys& rule, int r0, int k_rows, int groups, int bn,
                                              int splits, int split) {
  TileKeys k;
  k.i_lo = r0 / groups;
  k.i_hi = (min(r0 + k_rows, rule.n * groups) - 1) / groups;
  k.first = query_keys(rule, k.i_lo);
  k.last = query_keys(rule, k.i_hi);
  k.j_lo = k.first.lo;
  k.j_hi = k.last.hi;
  const int key_tiles = (k.j_hi - k.j_lo + bn - 1) / bn;
  const int per_split = (key_tiles + splits - 1) / splits;
  k.kt0 = split * per_split;
  k.kt1 = min(key_tiles, k.kt0 + per_split);
  return k;
}

// Whether any key of the tile [jt, jt + bn) is hidden from some query token of the row tile; false: the
// whole tile is visible to every row (the kernels then skip the per-element test). Keys past j_hi (a
// partial last tile) are hidden.
__device__ __forceinline__ bool tile_has_hidden_keys(const TileKeys& k, int jt, int bn) {
  return jt < k.last.lo || jt + bn > k.first.hi;
}

}  // namespace dgemma::cuda::flash
