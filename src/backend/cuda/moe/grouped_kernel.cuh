#pragma once
// The bf16 grouped expert GEMM kernels of moe/grouped.cu and their launch plan, in a header so that
// the unit tests compile them on the host against an emulation of the CUDA operations they use
// (tests/unit/backend/cuda_emulator.h): the includer provides them. On the device, moe/grouped.cu
// includes core/common.cuh and core/ptx.cuh first. What the kernels need: threadIdx / blockIdx,
// __syncthreads, __fmul_rn, min; smem_addr, cp_async16(_hint), evict_first_policy, cp_async_commit / wait,
// ldmatrix_x4, mma_bf16 (core/ptx.cuh); the wgmma wrappers (core/wgmma_ptx.cuh); TmaMap, the mbar_* barriers,
// cp_async_mbar_arrive_noinc and tma_load_2d (core/tma_ptx.cuh); f32_to_bf16, round_bf16, gelu_tanh
// (core/common.cuh); and DG_KERNEL_DYNAMIC_SMEM(name), the dynamic shared-memory buffer.
//
// Tensor cores via mma.sync m16n8k16 bf16 -> fp32, cp.async multi-stage pipelines, with the rounding
// points of the CPU reference (cpu/moe.cpp): every output element is one fp32 dot product rounded once
// to bf16; the gate_up epilogue applies the activation (bf16(bf16(gelu_tanh(g)) * u)), the down
// epilogue the routing weight (bf16(bf16(y) * w)). Both mma.sync kernels accumulate each output
// element over K in the same order (K tiles of 64, four k16 MMAs each), so they give the same bits.
//
// Common to both kernels: BK = 64, cp.async.cg 16-byte chunks into XOR-swizzled rows of 128 bytes
// (ldmatrix bank-conflict free). For gate_up a tile's weight rows are half gate rows (i0 ..) and half
// the matching up rows (I + i0 ..), laid out so that each thread holds gate and up of the same (row, i)
// and the activation is fused into the epilogue. The A rows are read by index (gate_up: expert_in rows
// pairs[r] / K, fusing the gather; down: act rows r). Missing rows / columns / K tails are zero-filled
// (cp.async src-size 0) and never stored. Weight copies carry an L2 evict-first policy (streamed once;
// the A rows are re-read per N tile).
//
// Small R (the average expert has few rows; T = 256 denoising, memory bound: ~16 rows per expert):
//   grouped_gemm_kernel<32>: tile 32 x 64 columns, 4 stages, 128 threads, grid (N tiles, E); each CTA
//   loops over its expert's M tiles with the (M tile, K tile) iterations flattened so the pipeline runs
//   on across M tiles. Warp w computes all 32 rows of the tile columns {8w .. 8w+7} and {32+8w .. 32+8w+7}.
// Large R (prefill chunks, batched denoising: ~64+ rows per expert):
//   grouped_tile_kernel<Cfg>: one tile of up to Cfg::kBM rows x Cfg::kBN columns per CTA from a tile
//   list written by the grouping (expert, first row, rows <= kBM), warps arranged kWarpsM x kWarpsN,
//   each computing kMF m16 x kNF n8 fragments. Why a tile list: an expert's weights are read from HBM
//   once per tile, and the tiles of an expert (and one N tile) sit next to each other in blockIdx.x
//   (the fastest grid index), so they run together and share the weight lines through L2. m16
//   fragments past the tile's rows are neither copied nor multiplied (per warp), so a 70-row tile costs
//   80 rows of MMAs. The hopper family's wgmma and TMA kernels (included below) read the same tile list.
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"
#include "backend/cuda/moe/expert_epilogue.cuh"
#include "backend/cuda_options.h"

namespace dgemma::cuda {
namespace {

constexpr int kBK = 64;  // K per stage: a smem row is 128 bytes = 8 chunks of 16 bytes
constexpr int kRowBytes = kBK * 2;

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile (rows of 128 bytes).
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// The copy plan of the tile-list kernels (grouped_tile_kernel, grouped_wgmma_kernel, grouped_w8a8_kernel):
// a thread's copy j covers tile row trow + step j.
// Weight rows of a tile of bn: down, tile row s is weight row n0 + s; gate_up, s < bn / 2 the gate row
// i = n0 + s, else the up row N + i of i = n0 + s - bn / 2 (gate and up of one i in one tile). src[j] is
// the row's start in the expert's weights w_e, or `none` (a valid address, copied as zeros) past N.
template <bool kGateUp, int kCopies, typename T>
__device__ __forceinline__ void tile_weight_rows(const T* w_e, const T* none, int trow, int step, int bn, int n0,
                                                 int N, int Kd, const T* (&src)[kCopies], bool (&ok)[kCopies]) {
DG_UNROLL
  for (int j = 0; j < kCopies; ++j) {
    const int s = trow + step * j;
    int n;
    if (kGateUp) {
      const int i = n0 + (s < bn / 2 ? s : s - bn / 2);
      ok[j] = i < N;
      n = s < bn / 2 ? i : N + i;
    } else {
      n = n0 + s;
      ok[j] = n < N;
    }
    src[j] = ok[j] ? w_e + static_cast<int64_t>(n) * Kd : none;
  }
}
// Activation rows of tile row m = trow + step j: gate_up, the token of sorted pair row0 + m (the gather);
// down, the sorted row itself; -1 (zero-filled) for m in [rows, limit), -2 (not copied) from limit on.
template <bool kGateUp, int kCopies>
__device__ __forceinline__ void tile_activation_rows(const int32_t* pairs, int top_k, int row0, int rows, int limit,
                                                     int trow, int step, int (&row)[kCopies]) {
DG_UNROLL
  for (int j = 0; j < kCopies; ++j) {
    const int m = trow + step * j;
    row[j] = m < limit ? -1 : -2;
    if (m < rows) row[j] = kGateUp ? pairs[row0 + m] / top_k : row0 + m;
  }
}

// The copies of one K tile, element k onwards of every row, into the stage buffers sa (activations)
// and sb (weights) in 128-byte swizzled rows: this thread's 16-byte chunk `chunk` of the activation
// rows a_row[j] (tile_activation_rows: -2 not copied, -1 zero-filled) and of the weight rows b_src[j]
// (tile_weight_rows), at tile rows trow + step j. A chunk lies wholly inside or outside Kd (Kd is a
// multiple of a chunk's elements). T: bf16 (8 elements a chunk) or E4M3 (16).
// The activation half: also the whole copy of the TMA kernel's producers (moe/grouped_tma_kernel.cuh).
template <int kACopies, typename T>
__device__ __forceinline__ void tile_copy_activations(uint32_t sa, const T* a, int Kd, int k, int trow, int step,
                                                      int chunk, const int (&a_row)[kACopies]) {
  const bool k_ok = k < Kd;
DG_UNROLL
  for (int j = 0; j < kACopies; ++j) {
    if (a_row[j] == -2) continue;  // never read
    const bool ok = a_row[j] >= 0 && k_ok;
    cp_async16(sa + swz(trow + step * j, chunk), ok ? a + static_cast<int64_t>(a_row[j]) * Kd + k : a, ok);
  }
}
template <int kACopies, int kBCopies, typename T>
__device__ __forceinline__ void tile_copy_stage(uint32_t sa, uint32_t sb, const T* a, const T* w, int Kd, int k,
                                                int trow, int step, int chunk, const int (&a_row)[kACopies],
                                                const T* (&b_src)[kBCopies], const bool (&b_ok)[kBCopies],
                                                uint64_t w_policy) {
  tile_copy_activations(sa, a, Kd, k, trow, step, chunk, a_row);
  const bool k_ok = k < Kd;
DG_UNROLL
  for (int j = 0; j < kBCopies; ++j) {
    const bool ok = b_ok[j] && k_ok;
    cp_async16_hint(sb + swz(trow + step * j, chunk), ok ? b_src[j] + k : w, ok, w_policy);
  }
}

struct GroupedArgs {
  const uint16_t* a;        // gate_up: x [T, Kd]; down: act [R, Kd]
  const uint16_t* w;        // [E, Nw, Kd]
  const int32_t* offsets;   // [E + 1]
  const int32_t* pairs;     // [R]
  const float* top_w;       // [R] by pair id (down)
  uint16_t* out;            // gate_up: act [R, N]; down: y [R, N] by pair id
  int Kd;                   // reduction length (H for gate_up, I for down)
  int N;                    // output columns (I for gate_up, H for down)
  int top_k;                // K (gate_up: token of a pair)
};

// ---- small R: grouped_gemm_kernel<32> -----------------------------------------------------------

constexpr int kSmallThreads = 128;  // 4 warps
constexpr int kSmallBN = 64;        // output columns per CTA (gate_up: 32 gate + 32 up)
constexpr int kSmallStages = 4;
template <int BM>
constexpr int small_smem_bytes() { return kSmallStages * (BM + kSmallBN) * kRowBytes; }

template <int BM, bool kGateUp>
__global__ void __launch_bounds__(kSmallThreads, BM == 32 ? 4 : 3) grouped_gemm_kernel(GroupedArgs g) {
  constexpr int kThreads = kSmallThreads, kBN = kSmallBN, kStages = kSmallStages;
  constexpr int MF = BM / 16;              // m16 fragments per warp
  constexpr int kAChunks = BM * 8 / kThreads;  // 16-byte chunks per thread per A stage
  constexpr int kBChunks = kBN * 8 / kThreads;
  constexpr int kAStage = BM * kRowBytes, kBStage = kBN * kRowBytes;
  static_assert(BM % 16 == 0 && kAChunks >= 1 && kBChunks == 4, "tile shape");
  DG_KERNEL_DYNAMIC_SMEM(smem);

  const int e = blockIdx.y;
  const int row0 = g.offsets[e];
  const int rows = g.offsets[e + 1] - row0;
  if (rows <= 0) return;  // uniform over the CTA, before any barrier
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int Kd = g.Kd, N = g.N;
  const int KT = (Kd + kBK - 1) / kBK;
  const int MT = (rows + BM - 1) / BM;
  const int total = MT * KT;
  const uint32_t s_base = smem_addr(smem);
  const uint32_t s_b = s_base + kStages * kAStage;
  const int chunk = tid & 7;  // the 16-byte chunk (K offset chunk * 8) this thread copies

  // Weight rows this thread copies (fixed for the CTA): tile row s = tid / 8 + 16 j.
  const uint16_t* w_e = g.w + static_cast<int64_t>(e) * (kGateUp ? 2 * N : N) * Kd;
  const uint16_t* b_src[kBChunks];
  bool b_ok[kBChunks];
DG_UNROLL
  for (int j = 0; j < kBChunks; ++j) {
    const int s = (tid >> 3) + 16 * j;
    int n;  // weight row
    if (kGateUp) {
      const int i = blockIdx.x * (kBN / 2) + (s & (kBN / 2 - 1));
      b_ok[j] = i < N;
      n = s < kBN / 2 ? i : N + i;
    } else {
      n = blockIdx.x * kBN + s;
      b_ok[j] = n < N;
    }
    b_src[j] = b_ok[j] ? w_e + static_cast<int64_t>(n) * Kd : g.w;
  }
  // A rows this thread copies for the M tile being loaded: tile row tid / 8 + 16 j.
  const uint16_t* a_src[kAChunks];
  bool a_ok[kAChunks];
  auto set_a_rows = [&](int mt) {
DG_UNROLL
    for (int j = 0; j < kAChunks; ++j) {
      const int m = mt * BM + (tid >> 3) + 16 * j;
      a_ok[j] = m < rows;
      int64_t src_row = 0;
      if (a_ok[j]) src_row = kGateUp ? g.pairs[row0 + m] / g.top_k : row0 + m;
      a_src[j] = a_ok[j] ? g.a + src_row * Kd : g.a;
    }
  };

  const uint64_t w_policy = evict_first_policy();
  int load_mt = 0, load_kt = 0;  // the next (M tile, K tile) to copy
  auto load_next = [&](int stage) {
    if (load_kt == 0) set_a_rows(load_mt);
    const int k = load_kt * kBK + chunk * 8;
    const bool k_ok = k < Kd;  // Kd % 8 == 0: a chunk is entirely inside or outside
    const uint32_t sa = s_base + stage * kAStage, sb = s_b + stage * kBStage;
DG_UNROLL
    for (int j = 0; j < kAChunks; ++j) {
      const int r = (tid >> 3) + 16 * j;
      const bool ok = a_ok[j] && k_ok;
      cp_async16(sa + swz(r, chunk), ok ? a_src[j] + k : g.a, ok);
    }
DG_UNROLL
    for (int j = 0; j < kBChunks; ++j) {
      const int r = (tid >> 3) + 16 * j;
      const bool ok = b_ok[j] && k_ok;
      cp_async16_hint(sb + swz(r, chunk), ok ? b_src[j] + k : g.w, ok, w_policy);
    }
    if (++load_kt == KT) {
      load_kt = 0;
      ++load_mt;
    }
  };

  float acc[MF][2][4];
  zero_acc(acc);

  // Prologue: stages 0 .. kStages - 2 (a group is committed even when empty, so the wait counts hold).
DG_UNROLL
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < total) load_next(s);
    cp_async_commit();
  }

  // ldmatrix lane addressing. A: lane -> tile row (lane & 15), chunk + (lane >> 4) (the four 8x8
  // matrices are a0..a3 of the m16n8k16 A fragment). B: matrix q = lane >> 3 -> n fragment q >> 1
  // (tile rows 32 (q >> 1) + 8 warp + (lane & 7)), chunk + (q & 1) (b0, b1 of each fragment).
  const int a_row = lane & 15, a_chunk = lane >> 4;
  const int b_row = ((lane >> 4) << 5) + 8 * warp + (lane & 7), b_chunk = (lane >> 3) & 1;

  int mt = 0, kt = 0;
  for (int it = 0; it < total; ++it) {
    cp_async_wait<kStages - 2>();  // this thread's copies of iteration `it` have landed ...
    __syncthreads();               // ... everyone's; and everyone is done with the stage refilled below
    if (it + kStages - 1 < total) load_next((it + kStages - 1) % kStages);
    cp_async_commit();

    const int stage = it % kStages;
    const uint32_t sa = s_base + stage * kAStage, sb = s_b + stage * kBStage;
DG_UNROLL
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(sb + swz(b_row, 2 * kk + b_chunk), b[0], b[1], b[2], b[3]);
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf) {
        uint32_t a[4];
        ldmatrix_x4(sa + swz(mf * 16 + a_row, 2 * kk + a_chunk), a[0], a[1], a[2], a[3]);
        mma_bf16(acc[mf][0], a, b[0], b[1]);
        mma_bf16(acc[mf][1], a, b[2], b[3]);
      }
    }

    if (++kt == KT) {  // epilogue of M tile mt: registers -> global (no shared memory involved)
      const int g_row = lane >> 2, g_col = 2 * (lane & 3);
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int m = mt * BM + mf * 16 + g_row + 8 * h;
          if (m >= rows) continue;
          const int64_t r = row0 + m;
          if (kGateUp) {
            const int i = blockIdx.x * (kBN / 2) + 8 * warp + g_col;
            if (i >= N) continue;  // N % 8 == 0, so i + 1 < N as well
            store_act_pair(g.out + r * N + i, [&](int c) { return acc[mf][0][2 * h + c]; },
                           [&](int c) { return acc[mf][1][2 * h + c]; });
          } else {
            const int p = g.pairs[r];
            const float wt = g.top_w[p];
DG_UNROLL
            for (int nf = 0; nf < 2; ++nf) {
              const int n = blockIdx.x * kBN + 32 * nf + 8 * warp + g_col;
              if (n >= N) continue;
              store_weighted_pair(g.out + static_cast<int64_t>(p) * N + n,
                                  [&](int c) { return acc[mf][nf][2 * h + c]; }, wt);
            }
          }
        }
      zero_acc(acc);
      kt = 0;
      ++mt;
    }
  }
  cp_async_wait<0>();  // nothing is outstanding (the last groups are empty), but leave no copy behind
}

// ---- large R: one tile per CTA from the tile list -------------------------------------------------

// Warps kWarpsM x kWarpsN (warp w: wm = w / kWarpsN, wn = w % kWarpsN), each kMF m16 x kNF n8 fragments:
// tile kBM = 16 kMF kWarpsM rows x kBN = 8 kNF kWarpsN columns, kStages cp.async stages.
template <int WM, int WN, int MF, int NF, int S, int MinBlocks>
struct TileCfg {
  static constexpr int kWarpsM = WM, kWarpsN = WN, kMF = MF, kNF = NF, kStages = S, kMinBlocks = MinBlocks;
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kBM = 16 * MF * WM;
  static constexpr int kBN = 8 * NF * WN;
  static constexpr int kAStage = kBM * kRowBytes, kBStage = kBN * kRowBytes;
  static constexpr int kSmem = S * (kAStage + kBStage);
  static_assert(NF % 2 == 0, "B fragments come in ldmatrix.x4 pairs; gate_up needs gate and up halves");
  static_assert((kBN * 8) % kThreads == 0, "whole weight chunks per thread");
  static_assert(kThreads % 8 == 0 && S >= 2, "copy layout, pipeline");
};

// The large-R shape of the portable family (MoeKernel::kMmaSync128x128): 128 x 128, 4 warps 1 x 4 (warp:
// all rows x 32 columns), 3 stages, 96 KB, 2 CTAs per SM: 8 warps per SM, each B fragment feeds up to
// 8 MMAs.
using TileMma128x128 = TileCfg<1, 4, 8, 4, 3, 2>;

// Grid (tile list entries, N tiles). Tile rows s of B: down: weight row n0 + s; gate_up: s < kBN / 2
// gate row i = n0 + s, else the up row N + i of i = n0 + s - kBN / 2. Warp (wm, wn): m16 fragments
// wm kMF + mf (tile rows 16 (wm kMF + mf) ..) and n8 fragments nf: down tile columns wn kNF 8 + 8 nf;
// gate_up nf < kNF / 2 the gate rows wn (kNF / 2) 8 + 8 nf and nf >= kNF / 2 the matching up rows
// (tile rows kBN / 2 + ..), so acc[mf][nf] and acc[mf][nf + kNF / 2] are gate and up of one (row, i).
template <class C, bool kGateUp>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) grouped_tile_kernel(GroupedArgs g, const int32_t* __restrict__ tiles) {
  constexpr int kThreads = C::kThreads, MF = C::kMF, NF = C::kNF, kStages = C::kStages;
  constexpr int kBM = C::kBM, kBN = C::kBN, kAStage = C::kAStage, kBStage = C::kBStage;
  constexpr int kRowsPerPass = kThreads / 8;                       // rows one copy pass covers
  constexpr int kACopies = (kBM + kRowsPerPass - 1) / kRowsPerPass;  // A chunks per thread (the last partial)
  constexpr int kBCopies = kBN / kRowsPerPass;
  constexpr int kHalf = NF / 2;
  DG_KERNEL_DYNAMIC_SMEM(smem);

  const int e = tiles[4 * blockIdx.x];
  if (e < 0) return;  // past the list's used entries; uniform over the CTA, before any barrier
  const int row0 = tiles[4 * blockIdx.x + 1], rows = tiles[4 * blockIdx.x + 2];  // 1 <= rows <= kBM
  const int used = (rows + 15) & ~15;  // tile rows that are copied (fragments in use), zero-filled past rows
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp / C::kWarpsN, wn = warp % C::kWarpsN;
  const int mfs = min(MF, max(0, (used >> 4) - wm * MF));  // this warp's fragments in use (warp-uniform)
  const int Kd = g.Kd, N = g.N;
  const int KT = (Kd + kBK - 1) / kBK;
  const int n0 = blockIdx.y * (kGateUp ? kBN / 2 : kBN);  // first output column (gate_up: i)
  const uint32_t s_a = smem_addr(smem), s_b = s_a + kStages * kAStage;
  const int trow = tid >> 3, chunk = tid & 7;  // copies: tile rows trow + kRowsPerPass j, K offset chunk * 8

  const uint16_t* w_e = g.w + static_cast<int64_t>(e) * (kGateUp ? 2 * N : N) * Kd;
  const uint16_t* b_src[kBCopies];
  bool b_ok[kBCopies];
  tile_weight_rows<kGateUp>(w_e, g.w, trow, kRowsPerPass, kBN, n0, N, Kd, b_src, b_ok);
  // A rows: -2 not copied (past the used fragments or the tile), -1 zero-filled, else the source row.
  int a_row[kACopies];
  tile_activation_rows<kGateUp>(g.pairs, g.top_k, row0, rows, min(used, kBM), trow, kRowsPerPass, a_row);

  const uint64_t w_policy = evict_first_policy();
  auto load_stage = [&](int stage, int kt) {
    tile_copy_stage(s_a + stage * kAStage, s_b + stage * kBStage, g.a, g.w, Kd, kt * kBK + chunk * 8, trow, kRowsPerPass,
                    chunk, a_row, b_src, b_ok, w_policy);
  };

  float acc[MF][NF][4];
  zero_acc(acc);

  // Prologue: K tiles 0 .. kStages - 2 (a group is committed even when empty, so the wait counts
  // hold: before iteration kt, kStages - 1 + kt groups are committed and group kt is K tile kt).
DG_UNROLL
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }

  // ldmatrix lane addressing. A: lane -> tile row 16 (wm MF + mf) + (lane & 15), chunk 2 kk + (lane >> 4)
  // (the four 8x8 matrices are a0..a3). B, x4 number p covers n fragments 2p, 2p + 1: matrix q = lane >> 3
  // -> fragment 2p + (q >> 1), chunk 2 kk + (q & 1) (b0, b1); its rows from lanes 8q .. 8q + 7.
  const int a_row0 = 16 * wm * MF + (lane & 15), a_chunk = lane >> 4, b_chunk = (lane >> 3) & 1;
  int b_row[kHalf];
DG_UNROLL
  for (int p = 0; p < kHalf; ++p) {
    const int nf = 2 * p + (lane >> 4);
    const int base = kGateUp ? (nf < kHalf ? wn * kHalf * 8 + 8 * nf : kBN / 2 + wn * kHalf * 8 + 8 * (nf - kHalf))
                             : wn * NF * 8 + 8 * nf;
    b_row[p] = base + (lane & 7);
  }

  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();  // this thread's copies of K tile kt have landed ...
    __syncthreads();               // ... everyone's; and everyone is done with the stage refilled below
    if (kt + kStages - 1 < KT) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();
    if (mfs == 0) continue;  // a warp without rows (warp-uniform: its ldmatrix / mma are skipped whole)

    const int stage = kt % kStages;
    const uint32_t sa = s_a + stage * kAStage, sb = s_b + stage * kBStage;
DG_UNROLL
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t b[NF][2];
DG_UNROLL
      for (int p = 0; p < kHalf; ++p)
        ldmatrix_x4(sb + swz(b_row[p], 2 * kk + b_chunk), b[2 * p][0], b[2 * p][1], b[2 * p + 1][0], b[2 * p + 1][1]);
      // A fragments double-buffered: fragment mf + 1 is loaded before the MMAs of fragment mf.
      uint32_t a[2][4];
      ldmatrix_x4(sa + swz(a_row0, 2 * kk + a_chunk), a[0][0], a[0][1], a[0][2], a[0][3]);
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf) {
        if (mf >= mfs) break;  // warp-uniform
        if (mf + 1 < mfs) {
          uint32_t(&nx)[4] = a[(mf + 1) & 1];
          ldmatrix_x4(sa + swz(a_row0 + 16 * (mf + 1), 2 * kk + a_chunk), nx[0], nx[1], nx[2], nx[3]);
        }
DG_UNROLL
        for (int nf = 0; nf < NF; ++nf) mma_bf16(acc[mf][nf], a[mf & 1], b[nf][0], b[nf][1]);
      }
    }
  }
  cp_async_wait<0>();  // nothing is outstanding (the last groups are empty), but leave no copy behind

  // Epilogue: registers -> global (no shared memory involved). Thread: rows 16 (wm MF + mf) + g_row + 8 h,
  // column pairs g_col, g_col + 1 of each n fragment.
  const int g_row = lane >> 2, g_col = 2 * (lane & 3);
  const int m_base = 16 * wm * MF + g_row;
  if (kGateUp) {
DG_UNROLL
    for (int mf = 0; mf < MF; ++mf) {
      if (mf >= mfs) break;
DG_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int m = m_base + 16 * mf + 8 * h;
        if (m >= rows) continue;
        const int64_t r = row0 + m;
DG_UNROLL
        for (int nf = 0; nf < kHalf; ++nf) {
          const int i = n0 + wn * kHalf * 8 + 8 * nf + g_col;
          if (i >= N) continue;  // N % 8 == 0, so i + 1 < N as well
          store_act_pair(g.out + r * N + i, [&](int c) { return acc[mf][nf][2 * h + c]; },
                         [&](int c) { return acc[mf][nf + kHalf][2 * h + c]; });
        }
      }
    }
  } else {
    // The pair ids and routing weights of the thread's rows first (two dependent loads in all, not two
    // per row: the stores below may alias them as far as the compiler knows).
    int pid[MF][2];
    float wt[MF][2];
DG_UNROLL
    for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int m = m_base + 16 * mf + 8 * h;
        pid[mf][h] = mf < mfs && m < rows ? g.pairs[row0 + m] : -1;
      }
DG_UNROLL
    for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
      for (int h = 0; h < 2; ++h) wt[mf][h] = pid[mf][h] >= 0 ? g.top_w[pid[mf][h]] : 0.f;
DG_UNROLL
    for (int mf = 0; mf < MF; ++mf) {
      if (mf >= mfs) break;
DG_UNROLL
      for (int h = 0; h < 2; ++h) {
        if (pid[mf][h] < 0) continue;
        const int64_t p = pid[mf][h];
DG_UNROLL
        for (int nf = 0; nf < NF; ++nf) {
          const int n = n0 + wn * NF * 8 + 8 * nf + g_col;
          if (n >= N) continue;
          store_weighted_pair(g.out + p * N + n, [&](int c) { return acc[mf][nf][2 * h + c]; }, wt[mf][h]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace dgemma::cuda

// The sm_90a wgmma kernels, on the definitions above.
#include "backend/cuda/moe/grouped_wgmma_kernel.cuh"
// The TMA kernel, on the wgmma kernels' definitions.
#include "backend/cuda/moe/grouped_tma_kernel.cuh"

namespace dgemma::cuda {
namespace {

// The hopper family's shapes: the wgmma 64 x 128 tiles, one warpgroup, 4 stages, 97 KB, 2 CTAs per SM
// (moe/grouped_wgmma_kernel.cuh), and the warp-specialised TMA 128 x 256 tiles, a producer warpgroup
// and two consumers, 4 stages, 193 KB (moe/grouped_tma_kernel.cuh).
using Wgmma64x128 = WgCfg<1, 128, 4, 2>;
using Tma128x256 = TmaCfg<2, 256, 4>;

// ---- launch plans ---------------------------------------------------------------------------------

// Which kernel a grouped MoE call runs and the tile list it needs (the grouping writes the list).
struct GroupedPlanImpl {
  MoeKernel kernel = MoeKernel::kSmallRows;
  int tile_rows = 0;      // the tile list's tile height (0: no list, the small-rows kernel)
  int64_t max_tiles = 0;  // entries of the tile list
};

inline int tile_rows_of(MoeKernel k) {
  switch (k) {
    case MoeKernel::kMmaSync128x128: return TileMma128x128::kBM;
    case MoeKernel::kWgmma64x128: return Wgmma64x128::kBM;
    case MoeKernel::kTma128x256: return Tma128x256::kBM;
    default: return 0;
  }
}

inline bool hopper_moe_kernel(MoeKernel k) { return k == MoeKernel::kWgmma64x128 || k == MoeKernel::kTma128x256; }

// The automatic choice by the mean rows per expert R / E: the first step whose bound it does not
// exceed. Up to ~24 rows per expert the small-rows kernel streams the weights at their floor; the
// hopper family then takes the wgmma 64 x 128 tiles up to ~96 rows and the TMA 128 x 256 tiles past
// them, the portable family the mma.sync 128 x 128 tiles (docs/BENCHMARKS.md "Kernel choices").
struct AutoStep {
  int64_t max_mean_rows;
  MoeKernel hopper, portable;
};
constexpr AutoStep kAutoSteps[] = {{24, MoeKernel::kSmallRows, MoeKernel::kSmallRows},
                                   {96, MoeKernel::kWgmma64x128, MoeKernel::kMmaSync128x128},
                                   {int64_t{1} << 40, MoeKernel::kTma128x256, MoeKernel::kMmaSync128x128}};

// `kernel`: kAuto (kAutoSteps) or that kernel whenever R > 0; a hopper-family kernel without `hopper`
// runs as kMmaSync128x128.
inline GroupedPlanImpl grouped_plan(MoeKernel kernel, int64_t R, int64_t E, bool hopper) {
  GroupedPlanImpl p;
  if (R <= 0 || E <= 0) return p;
  if (kernel == MoeKernel::kAuto)
    for (const AutoStep& a : kAutoSteps)
      if (R <= a.max_mean_rows * E) {
        kernel = hopper ? a.hopper : a.portable;
        break;
      }
  if (!hopper && hopper_moe_kernel(kernel)) kernel = MoeKernel::kMmaSync128x128;
  p.kernel = kernel;
  p.tile_rows = tile_rows_of(kernel);
  if (p.tile_rows > 0) p.max_tiles = R / p.tile_rows + E;  // sum over experts of ceil(rows / tile_rows)
  return p;
}

// The launches of the public entry points (moe/grouped.cuh), for any launcher L with
//   l.template small<BM, kGateUp>(args, grid_x, grid_y), l.template tile<Cfg, kGateUp>(args, tiles, grid_x,
//   grid_y), l.template wg<Cfg, kGateUp>(...) likewise and l.template tma<Cfg, kGateUp>(..., E) (the
// device: CUDA launches; the unit tests: the emulator).
template <bool kGateUp, class L>
void run_grouped(L& l, const GroupedPlanImpl& plan, const GroupedArgs& g, const int32_t* tiles, int64_t E) {
  auto n_tiles = [&](int bn) { return (g.N + (kGateUp ? bn / 2 : bn) - 1) / (kGateUp ? bn / 2 : bn); };
  switch (plan.kernel) {
    case MoeKernel::kMmaSync128x128:
      return l.template tile<TileMma128x128, kGateUp>(g, tiles, plan.max_tiles, n_tiles(TileMma128x128::kBN));
    case MoeKernel::kWgmma64x128:
      return l.template wg<Wgmma64x128, kGateUp>(g, tiles, plan.max_tiles, n_tiles(Wgmma64x128::kBN));
    case MoeKernel::kTma128x256:  // the weight map covers E experts' rows
      return l.template tma<Tma128x256, kGateUp>(g, tiles, plan.max_tiles, n_tiles(Tma128x256::kBN), E);
    default: return l.template small<32, kGateUp>(g, n_tiles(kSmallBN), E);
  }
}

template <class L>
void run_grouped_gate_up(L& l, const GroupedPlanImpl& plan, const uint16_t* x, const uint16_t* gate_up,
                         const int32_t* offsets, const int32_t* pairs, const int32_t* tiles, int64_t R, int64_t E,
                         int64_t K, int64_t H, int64_t I, uint16_t* act) {
  if (R <= 0 || E <= 0 || I <= 0) return;
  const GroupedArgs g{x, gate_up, offsets, pairs, nullptr, act, static_cast<int>(H), static_cast<int>(I),
                      static_cast<int>(K)};
  run_grouped<true>(l, plan, g, tiles, E);
}

template <class L>
void run_grouped_down(L& l, const GroupedPlanImpl& plan, const uint16_t* act, const uint16_t* down,
                      const int32_t* offsets, const int32_t* pairs, const int32_t* tiles, const float* top_w, int64_t R,
                      int64_t E, int64_t H, int64_t I, uint16_t* y) {
  if (R <= 0 || E <= 0 || H <= 0) return;
  const GroupedArgs g{act, down, offsets, pairs, top_w, y, static_cast<int>(I), static_cast<int>(H), 1};
  run_grouped<false>(l, plan, g, tiles, E);
}

}  // namespace
}  // namespace dgemma::cuda
