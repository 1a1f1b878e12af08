#pragma once
// The two warp-wide steps of grouping MoE pairs by expert, which the routing kernel fuses with the
// top-k (moe/route_kernel.cuh).
// Device code only; called by one whole warp (lane = threadIdx.x % 32).
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

namespace dgemma::cuda {

// base[e] (e < E) holds expert e's pair count on entry and its first row on return (an exclusive scan
// in expert order); offsets[0..E] receives the same, with offsets[E] the total.
__device__ __forceinline__ void expert_offsets_warp(int* base, int E, int32_t* offsets, int lane) {
  int carry = 0;
  for (int e0 = 0; e0 < E; e0 += 32) {
    const int e = e0 + lane;
    const int v = e < E ? base[e] : 0;
    int incl = v;
DG_UNROLL
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += n;
    }
    if (e < E) {
      base[e] = carry + incl - v;
      offsets[e] = carry + incl - v;
    }
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) offsets[E] = carry;
}

// The tile list of the grouped GEMMs from the experts' first rows base[] (R rows in all): every
// expert's rows cut into tiles of tile_rows rows, entries {expert, first row, rows, 0}, then -1 entries
// up to max_tiles.
__device__ __forceinline__ void expert_tiles_warp(const int* base, int E, int R, int tile_rows, int4* tiles,
                                                  int max_tiles, int lane) {
  int carry = 0;  // tiles of the experts before this chunk
  for (int e0 = 0; e0 < E; e0 += 32) {
    const int e = e0 + lane;
    const int first_row = e < E ? base[e] : 0;
    const int n_rows = e < E ? (e + 1 < E ? base[e + 1] : R) - first_row : 0;
    const int n_tiles = (n_rows + tile_rows - 1) / tile_rows;
    int incl = n_tiles;
DG_UNROLL
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += n;
    }
    const int first_tile = carry + incl - n_tiles;
    for (int j = 0; j < n_tiles; ++j)  // usually 1 or 2; an expert with every token: T / tile_rows
      tiles[first_tile + j] = make_int4(e, first_row + j * tile_rows, min(tile_rows, n_rows - j * tile_rows), 0);
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  for (int j = carry + lane; j < max_tiles; j += 32) tiles[j] = make_int4(-1, 0, 0, 0);
}

}  // namespace dgemma::cuda
