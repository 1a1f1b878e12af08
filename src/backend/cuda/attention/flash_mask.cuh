#pragma once
// Which keys a query row of the flash attention kernels sees (attention/flash_mma_kernel.cuh and
// attention/flash_wgmma_kernel.cuh), in one place. An item has n new tokens after L cached keys; its
// keys are [cached ; new] (key j >= L is new token j - L). Query token i sees key j iff
//   j < L + n, and, for a causal item, 0 <= i - (j - L) < window (window 0: no window).
// Plain C++ on the device's int maths: the emulated unit tests compile it on the host too (min / max
// come from the includer).

namespace dgemma::cuda::flash {

// One item's rule: L cached keys, keys below j_hi visible at most, causal, window (0: none).
struct KeyRule {
  int L, j_hi, causal, window;
};

// Whether query token i sees key j (j in [0, j_hi) of the item's keys).
__device__ __forceinline__ bool key_visible(const KeyRule& r, int i, int j) {
  const int dq = i - (j - r.L);
  return j < r.j_hi && (!r.causal || (dq >= 0 && (r.window <= 0 || dq < r.window)));
}

// Whether any key of the tile [jt, jt + bn) is hidden from some query token of [i_lo, i_hi]; false: the
// whole tile is visible to every row (the kernels then skip the per-element test).
__device__ __forceinline__ bool tile_has_hidden_keys(const KeyRule& r, int i_lo, int i_hi, int jt, int bn) {
  return jt + bn > r.j_hi ||
         (r.causal && (i_lo - (jt + bn - 1 - r.L) < 0 || (r.window > 0 && i_hi - (jt - r.L) >= r.window)));
}

// The keys any row of a row tile sees and the key tiles of its split. Rows [r0, r0 + k_rows) of an
// item of n tokens (rows n * groups, token-major) over L cached keys: [j_lo, j_hi) of [cached ; new],
// the tokens' visible keys by the rule above; the range in tiles of bn keys is cut into `splits` equal
// parts, this split's being tiles [kt0, kt1) (empty when kt0 >= kt1). i_lo / i_hi: the tile's first and
// last token.
struct TileKeys {
  int i_lo, i_hi, j_lo, j_hi, kt0, kt1;
};
__device__ __forceinline__ TileKeys tile_keys(int r0, int k_rows, int n, int groups, int L, int causal,
                                              int window, int bn, int splits, int split) {
  TileKeys k;
  k.i_lo = r0 / groups;
  k.i_hi = (min(r0 + k_rows, n * groups) - 1) / groups;
  k.j_lo = 0;
  k.j_hi = L + n;
  if (causal) {
    k.j_hi = min(k.j_hi, L + k.i_hi + 1);
    if (window > 0) k.j_lo = max(0, L + k.i_lo - window + 1);
  }
  const int key_tiles = (k.j_hi - k.j_lo + bn - 1) / bn;
  const int per_split = (key_tiles + splits - 1) / splits;
  k.kt0 = split * per_split;
  k.kt1 = min(key_tiles, k.kt0 + per_split);
  return k;
}

}  // namespace dgemma::cuda::flash
