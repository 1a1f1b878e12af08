#pragma once
// The flash attention kernels of attention/flash.cu, in a header so that the unit tests compile them on
// the host against the CUDA emulation of tests/unit/backend/cuda_emulator.h (which provides the device
// operations; nvcc takes them from core/common.cuh and core/ptx.cuh). What the kernels need: threadIdx /
// blockIdx, __syncthreads, __shfl_xor_sync, exp2f, fmaxf; smem_addr, cp_async16, cp_async_commit / wait,
// ldmatrix_x4(_trans), mma_bf16 (core/ptx.cuh); f32_to_bf16, round_bf16 (core/common.cuh);
// DG_KERNEL_DYNAMIC_SMEM(name), the dynamic shared-memory buffer.
//
// One launch computes one layer's attention for every item (sequence) of a forward pass
// (AttentionBatchArgs, backend.h), FlashAttention-2 style on bf16 mma.sync m16n8k16:
//   * a group of 4 warps (16 query rows each) owns 64 query rows of one KV head: the rows are the
//     pairs (token, query head of the KV head's group), token-major, so one K/V tile serves the whole
//     GQA group; the CTA walks its visible key range in tiles of BN keys, double-buffered by cp.async
//     straight from the paged pool (through the item's page table) and, for the new keys, from
//     k_new / v_new;
//   * scores keep the reference's rounding points, s = bf16(bf16(q . k) * scaling) (cheap: two
//     roundings per score), then an online fp32 softmax in base 2 (log2(e) folded into the score),
//     the probabilities rounded to bf16 once as the P.V operand and the fp32 output divided by the
//     fp32 row sum at the end. The only rounding point that moves: the reference rounds p / sum, this
//     kernel p (relative to the running max) — one bf16 rounding of each probability either way;
//   * head dim 512: the fp32 output of 16 rows x 512 columns (256 registers a thread) does not fit a
//     warp, so two warp groups of a CTA (8 warps) split the head dim: each sums the scores over its
//     256 dims, the partial scores meet in shared memory (added in group order: both groups hold the
//     same scores and softmax state) and each produces 256 output columns. No MMA work is repeated;
//     the cost is one shared-memory exchange of the 16 x BN partial scores per key tile;
//   * split-K: when the grid is small (few queries over long caches) the key range of every row
//     tile is cut into `splits` parts, each writing an fp32 partial (output, max, sum) that
//     flash_combine_kernel merges in split order (deterministic).
// Item metadata is read from device memory (AttentionItem rows); the grid only needs an upper bound
// of the row tiles (extra CTAs exit).
#include <cstdint>

#include "backend/cuda/attention/flash_mask.cuh"
#include "backend/cuda/core/kernel_macros.cuh"
#ifdef __CUDACC__
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/ptx.cuh"
#endif

namespace dgemma::cuda {
namespace flash {

constexpr int kThreads = 128;
constexpr int kBM = 64;  // query rows (token x group head) per CTA
constexpr float kLog2e = 1.4426950408889634f;

struct Params {
  const uint16_t* q;        // [T, Hq, D]
  const uint16_t* k_new;    // [T, Hkv, D]
  const uint16_t* v_new;
  const uint16_t* k_pages;  // [pages, Hkv, P, D] (null when no item has a cache)
  const uint16_t* v_pages;
  const int32_t* tables;    // all items' page tables
  const int32_t* items;     // [num_items, kFields]: AttentionItem rows
  const int32_t* blocks;    // the items' image blocks (pairs; null when no item has any)
  uint16_t* out;            // [T, Hq, D]
  float* ws_o;              // splits > 1: [splits, T * Hq, D] fp32 partial outputs (unnormalised)
  float* ws_ml;             // splits > 1: [splits, T * Hq, 2] running max (log2 units) and sum
  int num_items, T, Hq, Hkv, groups, page_size, splits;
  float scaling;
};

// KG warp groups of 4 warps split the head dim: group g sums the scores over its DQK / KG dims
// (the partial scores meet in shared memory, added in group order so every group holds the same
// scores) and produces output columns [g DV, (g + 1) DV) of the CTA's DV * KG columns.
template <int DQK, int DV, int BN, int KG>
struct Shape {
  static constexpr int kThreads = 128 * KG;
  static constexpr int kRows = kBM;               // query rows of a CTA
  static constexpr int kVCols = DV * KG;          // output columns of a CTA
  static constexpr int kDChunks = DQK / kVCols;   // CTAs per row tile along the output columns
  static constexpr int kQBytes = kRows * DQK * 2;
  static constexpr int kKBytes = BN * DQK * 2;  // one buffer
  static constexpr int kVBytes = BN * kVCols * 2;
  static constexpr int kKOff = kQBytes;
  static constexpr int kVOff = kKOff + 2 * kKBytes;
  static constexpr int kOffsOff = kVOff + 2 * kVBytes;
  static constexpr int kXOff = kOffsOff + 2 * BN * 8;              // partial scores (KG > 1)
  static constexpr int kXBytes = KG > 1 ? kThreads * (BN / 2) * 4 : 0;
  static constexpr int kSmemBytes = kXOff + kXBytes;
  static_assert(DQK % kVCols == 0 && DV % 16 == 0 && BN % 16 == 0 && DQK >= 64 && DV >= 64);
  static_assert(KG == 1 || KG == 2);
  static_assert((DQK / KG) % 16 == 0);
};

// The tile shapes by head dim (attention/flash.cu):
//   D 64 / 128: BN 64 keys, the whole head dim in one CTA of 4 warps;
//   D 256:      BN 32, 4 warps (two CTAs an SM);
//   D 512:      BN 32, 8 warps, two groups splitting the head dim (256 output columns each).
template <int D>
struct Cfg;
template <>
struct Cfg<64> { static constexpr int DV = 64, BN = 64, KG = 1; };
template <>
struct Cfg<128> { static constexpr int DV = 128, BN = 64, KG = 1; };
template <>
struct Cfg<256> { static constexpr int DV = 256, BN = 32, KG = 1; };
template <>
struct Cfg<512> { static constexpr int DV = 256, BN = 32, KG = 2; };
template <int D>
using ShapeOf = Shape<D, Cfg<D>::DV, Cfg<D>::BN, Cfg<D>::KG>;

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of `cols` bf16: chunks are
// XOR-swizzled by the row's low 3 bits so that the 8 row addresses of an ldmatrix hit distinct banks.
template <int cols>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * cols * 2 + ((chunk ^ (row & 7)) << 4));
}

// Round-to-nearest-even to bf16 of finite values (scores and probabilities are never NaN): one cvt
// instruction on the device, core/common.cuh's rounding (the same for finite values) in the emulation.
#ifdef __CUDACC__
__device__ __forceinline__ float round_score(float x) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#else
inline float round_score(float x) { return round_bf16(x); }
inline uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(f32_to_bf16(lo)) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16);
}
#endif

// The item of row tile `tile` (counting every item's tiles of one KV head in item order) and the
// tile's index within it; -1 past the last tile.
template <int kRows>
__device__ __forceinline__ int find_item(const Params& p, int tile, int& local) {
  for (int i = 0; i < p.num_items; ++i) {
    const int tiles = (p.items[i * kFields + kQLen] * p.groups + kRows - 1) / kRows;
    if (tile < tiles) {
      local = tile;
      return i;
    }
    tile -= tiles;
  }
  return -1;
}

// The scores of key tile [jt, jt + BN) for a thread's mma accumulator fragment (C layout: element e of
// n-block nb is the row whose token sees keys_a (e < 2) or keys_b, key jt + nb * 8 + 2 t4 + (e & 1)), in
// place: the reference's roundings s = bf16(bf16(q . k) * scaling), in base 2, -inf where the key is
// hidden (tested only when the tile has hidden keys: kMasked); mx[h] takes the maximum of row h's scores.
// score(nb, e) names the element.
template <int BN, bool kMasked, class Score>
__device__ __forceinline__ void scale_mask_tile(Score&& score, int jt, const KeyRange& keys_a,
                                                const KeyRange& keys_b, int t4, float scaling,
                                                float (&mx)[2]) {
  DG_UNROLL
  for (int nb = 0; nb < BN / 8; ++nb)
    DG_UNROLL
    for (int e = 0; e < 4; ++e) {
      const bool vis = !kMasked || key_visible(e < 2 ? keys_a : keys_b, jt + nb * 8 + 2 * t4 + (e & 1));
      float& acc = score(nb, e);
      const float s = vis ? round_score(round_score(acc) * scaling) * kLog2e : -INFINITY;
      acc = s;
      mx[e >> 1] = fmaxf(mx[e >> 1], s);
    }
}

// scale_mask_tile with the key test only in the tiles that have hidden keys (`masked`, uniform over the
// CTA): two copies of the loop, so that the common whole-visible tile runs no per-element test.
template <int BN, class Score>
__device__ __forceinline__ void scale_mask_scores(Score&& score, bool masked, int jt, const KeyRange& keys_a,
                                                  const KeyRange& keys_b, int t4, float scaling,
                                                  float (&mx)[2]) {
  if (masked)
    scale_mask_tile<BN, true>(score, jt, keys_a, keys_b, t4, scaling, mx);
  else
    scale_mask_tile<BN, false>(score, jt, keys_a, keys_b, t4, scaling, mx);
}

// grid: (row tiles of all items, Hkv, splits * kDChunks); block: Shape::kThreads.
template <int DQK, int DV, int BN, int KG>
__global__ void __launch_bounds__(128 * KG, 1) flash_attention_kernel(const Params p) {
  using S = Shape<DQK, DV, BN, KG>;
  constexpr int kThreadsCta = S::kThreads, kVCols = S::kVCols, kDK = DQK / KG, kRows = S::kRows;
  DG_KERNEL_DYNAMIC_SMEM(smem);
  // wgrp: the warp group (a compile-time 0 with one group, so that the loops over it unroll).
  // warp: the warp's 16-row slice of the CTA's rows.
  const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, wgrp = KG > 1 ? tid >> 7 : 0;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z / S::kDChunks, dc = blockIdx.z % S::kDChunks;
  int tile = 0;
  const int item = find_item<kRows>(p, blockIdx.x, tile);
  if (item < 0) return;  // the whole CTA leaves together
  const int* meta = p.items + item * kFields;
  const int q_first = meta[kQFirst], n = meta[kQLen], cache_first = meta[kCacheFirst], L = meta[kCacheLen];
  const int table_first = meta[kTableFirst];
  const int groups = p.groups, rows = n * groups, r0 = tile * kRows;

  const ItemKeys rule = item_keys(meta, p.blocks);
  const TileKeys keys = tile_keys(rule, r0, kRows, groups, BN, p.splits, split);
  const int j_lo = keys.j_lo, j_hi = keys.j_hi, kt0 = keys.kt0, kt1 = keys.kt1;

  const uint32_t q_s = smem_addr(smem);
  const uint32_t k_s = q_s + S::kKOff, v_s = q_s + S::kVOff;
  int64_t* offs = reinterpret_cast<int64_t*>(smem + S::kOffsOff);  // [2][BN]

  // Row offsets of key tile kt (threads < BN): >= 0 a pool row ((page * Hkv + kvh) * P + pos % P),
  // -2 - r new-key row r of k_new / v_new, -1 no key (zero-filled, masked).
  auto key_offsets = [&](int kt, int64_t* o) {
    const int j = j_lo + kt * BN + tid;
    int64_t v = -1;
    if (j < j_hi) {
      if (j < L) {
        const int pos = cache_first + j;
        const int page = p.tables[table_first + pos / p.page_size];
        v = (static_cast<int64_t>(page) * p.Hkv + kvh) * p.page_size + pos % p.page_size;
      } else {
        v = -2 - (static_cast<int64_t>(q_first + j - L) * p.Hkv + kvh);
      }
    }
    o[tid] = v;
  };
  auto load_kv = [&](int buf, const int64_t* o) {
    constexpr int kc = DQK / 8, vc = kVCols / 8;
    for (int c = tid; c < BN * kc; c += kThreadsCta) {
      const int row = c / kc, ch = c % kc;
      const int64_t v = o[row];
      const uint16_t* src = v >= 0 ? p.k_pages + v * DQK : p.k_new + (v == -1 ? 0 : (-2 - v) * DQK);
      cp_async16(k_s + buf * S::kKBytes + swz<DQK>(row, ch), src + (v == -1 ? 0 : ch * 8), v != -1);
    }
    for (int c = tid; c < BN * vc; c += kThreadsCta) {
      const int row = c / vc, ch = c % vc;
      const int64_t v = o[row];
      const uint16_t* src = v >= 0 ? p.v_pages + v * DQK : p.v_new + (v == -1 ? 0 : (-2 - v) * DQK);
      cp_async16(v_s + buf * S::kVBytes + swz<kVCols>(row, ch), src + (v == -1 ? 0 : dc * kVCols + ch * 8),
                 v != -1);
    }
  };

  // Prologue: the query tile (zeros past the item's rows) and the first key tile, one group.
  if (kt0 < kt1 && tid < BN) key_offsets(kt0, offs);
  {
    constexpr int qc = DQK / 8;
    for (int c = tid; c < kRows * qc; c += kThreadsCta) {
      const int row = c / qc, ch = c % qc, rr = r0 + row;
      const bool valid = rr < rows;
      const int tok = valid ? rr / groups : 0, head = kvh * groups + (valid ? rr % groups : 0);
      const uint16_t* src = p.q + (static_cast<int64_t>(q_first + tok) * p.Hq + head) * DQK + ch * 8;
      cp_async16(q_s + swz<DQK>(row, ch), src, valid);
    }
  }
  __syncthreads();
  if (kt0 < kt1) load_kv(0, offs);
  cp_async_commit();

  // This thread's two rows of the warp's 16: g and g + 8 (C fragment layout), and their tokens.
  const int g = lane >> 2, t4 = lane & 3;
  const int ra = warp * 16 + g;
  const int tok_a = (r0 + ra) / groups, tok_b = (r0 + ra + 8) / groups;
  const KeyRange keys_a = query_keys(rule, tok_a), keys_b = query_keys(rule, tok_b);
  float o_acc[DV / 8][4];
  DG_UNROLL
  for (int nb = 0; nb < DV / 8; ++nb) o_acc[nb][0] = o_acc[nb][1] = o_acc[nb][2] = o_acc[nb][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  for (int kt = kt0; kt < kt1; ++kt) {
    const int buf = (kt - kt0) & 1;
    const bool more = kt + 1 < kt1;
    if (more && tid < BN) key_offsets(kt + 1, offs + (buf ^ 1) * BN);
    __syncthreads();  // offsets visible; every warp is done with buffer buf ^ 1
    if (more) load_kv(buf ^ 1, offs + (buf ^ 1) * BN);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // tile kt (and the query tile) landed for every thread

    // S = Q . K^T for the warp's 16 rows x BN keys, fp32 (this group's dims [wgrp kDK, + kDK)).
    float s_acc[BN / 8][4];
    DG_UNROLL
    for (int nb = 0; nb < BN / 8; ++nb) s_acc[nb][0] = s_acc[nb][1] = s_acc[nb][2] = s_acc[nb][3] = 0.f;
    const uint32_t kb = k_s + buf * S::kKBytes;
    DG_UNROLL
    for (int k16 = 0; k16 < kDK / 16; ++k16) {
      const int kk = wgrp * (kDK / 16) + k16;
      uint32_t a[4];
      ldmatrix_x4(q_s + swz<DQK>(warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * kk + (lane >> 4)), a[0], a[1],
                  a[2], a[3]);
      DG_UNROLL
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(kb + swz<DQK>(16 * np + (lane & 7) + 8 * (lane >> 4), 2 * kk + ((lane >> 3) & 1)), b[0], b[1],
                    b[2], b[3]);
        mma_bf16(s_acc[2 * np], a, b[0], b[1]);
        mma_bf16(s_acc[2 * np + 1], a, b[2], b[3]);
      }
    }

    if constexpr (KG > 1) {
      // The other group's partial scores (same rows): both groups add group 0's part first.
      float* x = reinterpret_cast<float*>(smem + S::kXOff);
      DG_UNROLL
      for (int nb = 0; nb < BN / 8; ++nb)
        DG_UNROLL
        for (int e = 0; e < 4; ++e) x[(nb * 4 + e) * kThreadsCta + tid] = s_acc[nb][e];
      __syncthreads();
      const int other = tid ^ 128;
      DG_UNROLL
      for (int nb = 0; nb < BN / 8; ++nb)
        DG_UNROLL
        for (int e = 0; e < 4; ++e) {
          const float o = x[(nb * 4 + e) * kThreadsCta + other];
          s_acc[nb][e] = wgrp == 0 ? s_acc[nb][e] + o : o + s_acc[nb][e];
        }
    }
    // The reference's score roundings, the masks, base-2 scores; row maxima over the quad. Whether any
    // (row, key) of the tile is masked is uniform over the CTA (its token range).
    const int jt = j_lo + kt * BN;
    const bool masked = tile_has_hidden_keys(keys, jt, BN);
    float mx[2] = {-INFINITY, -INFINITY};
    auto score = [&](int nb, int e) -> float& { return s_acc[nb][e]; };
    scale_mask_scores<BN>(score, masked, jt, keys_a, keys_b, t4, p.scaling, mx);
    float alpha[2], base[2];
    DG_UNROLL
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      base[h] = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: everything is exp2(-inf) = 0
      alpha[h] = exp2f(m_run[h] - base[h]);
      m_run[h] = m_new;
      l_run[h] *= alpha[h];
    }
    DG_UNROLL
    for (int nb = 0; nb < DV / 8; ++nb) {
      o_acc[nb][0] *= alpha[0];
      o_acc[nb][1] *= alpha[0];
      o_acc[nb][2] *= alpha[1];
      o_acc[nb][3] *= alpha[1];
    }
    // P (bf16 A fragments of the P.V product; the fp32 values go into the row sums).
    uint32_t pa[BN / 16][4];
    DG_UNROLL
    for (int nb = 0; nb < BN / 8; ++nb) {
      float pv[4];
      DG_UNROLL
      for (int e = 0; e < 4; ++e) {
        pv[e] = exp2f(s_acc[nb][e] - base[e >> 1]);
        l_run[e >> 1] += pv[e];
      }
      pa[nb >> 1][(nb & 1) * 2] = pack_bf16x2(pv[0], pv[1]);
      pa[nb >> 1][(nb & 1) * 2 + 1] = pack_bf16x2(pv[2], pv[3]);
    }
    // O += P . V: V rows are keys (k), columns the output dims (n): transposed ldmatrix.
    const uint32_t vb = v_s + buf * S::kVBytes;
    DG_UNROLL
    for (int kk = 0; kk < BN / 16; ++kk)
      DG_UNROLL
      for (int np = 0; np < DV / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(vb + swz<kVCols>(16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1),
                                           wgrp * (DV / 8) + 2 * np + (lane >> 4)),
                          b[0], b[1], b[2], b[3]);
        mma_bf16(o_acc[2 * np], pa[kk], b[0], b[1]);
        mma_bf16(o_acc[2 * np + 1], pa[kk], b[2], b[3]);
      }
  }
  cp_async_wait<0>();

  // Row sums over the quad; then the bf16 output (one split) or the fp32 partials.
  DG_UNROLL
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  DG_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int rr = r0 + ra + 8 * h;
    if (rr >= rows) continue;
    const int tok = rr / groups, head = kvh * groups + rr % groups;
    const int64_t orow = static_cast<int64_t>(q_first + tok) * p.Hq + head;
    if (p.splits == 1) {
      const float inv = l_run[h] > 0.f ? 1.f / l_run[h] : 0.f;
      uint16_t* dst = p.out + orow * DQK + dc * kVCols + wgrp * DV + 2 * t4;
      DG_UNROLL
      for (int nb = 0; nb < DV / 8; ++nb)
        *reinterpret_cast<uint32_t*>(dst + nb * 8) = pack_bf16x2(o_acc[nb][2 * h] * inv, o_acc[nb][2 * h + 1] * inv);
    } else {
      const int64_t wrow = static_cast<int64_t>(split) * p.T * p.Hq + orow;
      float* dst = p.ws_o + wrow * DQK + dc * kVCols + wgrp * DV + 2 * t4;
      DG_UNROLL
      for (int nb = 0; nb < DV / 8; ++nb) {
        dst[nb * 8] = o_acc[nb][2 * h];
        dst[nb * 8 + 1] = o_acc[nb][2 * h + 1];
      }
      if (dc == 0 && wgrp == 0 && t4 == 0) {
        p.ws_ml[wrow * 2] = m_run[h];
        p.ws_ml[wrow * 2 + 1] = l_run[h];
      }
    }
  }
}

// The split partials of every item row merged in split order: out = bf16(sum_s O_s 2^(m_s - M) /
// sum_s l_s 2^(m_s - M)), M the largest m_s. One thread per 4 output columns of a row; rows of no item
// are left alone. grid: ceil(T * Hq * D / 4 / kThreads).
template <int D>
__global__ void __launch_bounds__(kThreads) flash_combine_kernel(const Params p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t row = idx / (D / 4);
  if (row >= static_cast<int64_t>(p.T) * p.Hq) return;
  const int tok = static_cast<int>(row / p.Hq), c = static_cast<int>(idx % (D / 4)) * 4;
  bool mine = false;
  for (int i = 0; i < p.num_items; ++i) {
    const int b = p.items[i * kFields + kQFirst];
    if (tok >= b && tok < b + p.items[i * kFields + kQLen]) mine = true;
  }
  if (!mine) return;
  const int64_t stride = static_cast<int64_t>(p.T) * p.Hq;
  float M = -INFINITY;
  for (int s = 0; s < p.splits; ++s) M = fmaxf(M, p.ws_ml[(s * stride + row) * 2]);
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, l = 0.f;
  if (M != -INFINITY) {
    for (int s = 0; s < p.splits; ++s) {
      const int64_t w = s * stride + row;
      const float f = exp2f(p.ws_ml[w * 2] - M);
      l += p.ws_ml[w * 2 + 1] * f;
      const float* o = p.ws_o + w * D + c;
      DG_UNROLL
      for (int k = 0; k < 4; ++k) acc[k] += o[k] * f;
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  uint16_t* dst = p.out + row * D + c;
  *reinterpret_cast<uint32_t*>(dst) = pack_bf16x2(acc[0] * inv, acc[1] * inv);
  *reinterpret_cast<uint32_t*>(dst + 2) = pack_bf16x2(acc[2] * inv, acc[3] * inv);
}

}  // namespace flash
}  // namespace dgemma::cuda
