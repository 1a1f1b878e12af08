#pragma once
// The W4A16 / W8A16 grouped (and dense) GEMM kernel of grouped_moe_fp4.cu, in a header so that the
// unit tests compile it on the host against an emulation of the few CUDA operations it uses
// (tests/unit/backend/cuda_emulator.h): the includer provides them. On the device, grouped_moe_fp4.cu
// includes common.cuh, ptx.cuh and quant_ptx.cuh first. What the kernel needs: threadIdx / blockIdx,
// __syncthreads, __byte_perm, __fmul_rn, min; smem_addr, cp_async16(_hint), evict_first_policy,
// cp_async_commit / wait, ldmatrix_x4, mma_bf16 (ptx.cuh); lds_u32 / v2 / v4, bf16x2_mul
// (quant_ptx.cuh); f32_to_bf16, round_bf16, gelu_tanh (common.cuh); and DG_KERNEL_DYNAMIC_SMEM(name),
// the dynamic shared-memory buffer.
//
// W4A16 grouped expert GEMMs for NVFP4 weights (grouped_moe_fp4.cuh). The structure is the small-R
// bf16 kernel of grouped_moe.cu (tile 32 rows x 64 columns, BK = 64, 4 cp.async stages, 128 threads,
// each CTA looping over its expert's M tiles with the (M tile, K tile) iterations flattened), with the
// weight operand changed:
//   * per stage a CTA copies 64 weight rows x 32 packed bytes (64 K values) and their 64 x 4 E4M3 block
//     scales — a quarter of the bf16 kernel's weight bytes — with an L2 evict-first policy, all by
//     16-byte cp.async (the device layout of quant_layout.h: scales stage major);
//   * each thread builds its mma.sync B fragments in registers from one 8-byte (FP8: 16-byte) and one
//     4-byte shared-memory load per weight row and stage (its bytes for all four k16 steps are adjacent
//     in the device layout): the packed bytes become bf16 values e2m1 * block (exact; bit placement and
//     bf16x2 multiplies, quant_layout.h), so no bf16 weight tile exists;
//   * the epilogue multiplies the fp32 accumulators by the rows' global scale, then applies the
//     activation / routing weight with the bf16 kernels' roundings.
// Why not wgmma: at ~16 rows per expert a step is bound by the weight stream; this
// kernel cuts the bytes 3.6x against bf16 with the existing, checked mma.sync pipeline. The large-R
// (prefill) case runs this kernel too, looping over M tiles (more A re-reads, same weight bytes).
#include <cstdint>

#include "backend/cuda/quant_layout.h"

#ifdef __CUDACC__
#define DG_UNROLL _Pragma("unroll")
#else
#define DG_UNROLL  // the host compiler of the emulated tests
#endif
#ifndef DG_KERNEL_DYNAMIC_SMEM
#define DG_KERNEL_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kBM = 32;       // rows per M tile: the MoE (~16 rows an expert) and small dense inputs
constexpr int kBMDense = 128;  // dense inputs of >= 128 rows: each weight tile is decoded once per 128 rows
constexpr int kBN = 64;
constexpr int kBK = 64;
constexpr int kStages = 4;
constexpr int kARowBytes = kBK * 2;   // bf16 A row of a stage
constexpr int kSRowBytes = kBK / 16;  // NVFP4 block scales of a weight row in a stage
constexpr int kSStage = kBN * kSRowBytes;
// Weight bytes of a row in a stage: packed FP4 32, FP8 64.
template <bool kFp8>
__host__ __device__ constexpr int b_row_bytes() { return kFp8 ? kBK : kBK / 2; }
template <int BM, bool kFp8>
constexpr int smem_bytes() { return kStages * (BM * kARowBytes + kBN * b_row_bytes<kFp8>() + (kFp8 ? 0 : kSStage)); }

__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kARowBytes + ((chunk ^ (row & 7)) << 4));
}

// Two E4M3 codes in bits 0-7 and 16-23 -> bf16x2 of their values (exact: E4M3 values are bf16 values;
// quant_layout.h). The NaN codes, which no quantiser writes, become 480.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t x) { return bf16x2_mul(e4m3x2_bits(x), kBf16x2Pow120); }

// One packed byte (element 2j low nibble) times the bf16x2 block scale -> bf16x2, lower k in the low
// half. e2m1 * block has at most 6 significant bits, so both multiplies are exact.
__device__ __forceinline__ uint32_t e2m1x2_scaled(uint32_t byte, uint32_t scale2) {
  return bf16x2_mul(bf16x2_mul(e2m1x2_bits(byte), kBf16x2Pow126), scale2);
}

struct Fp4Args {
  const uint16_t* a;         // gate_up: x [T, Kd]; down: act [R, Kd]
  const uint8_t* w;          // packed [E, Nw, Kd / 2]
  const uint8_t* s;          // block scales, device layout [E, Kd / 64, Nw, 4] (quant_layout.h)
  const float* rs;           // row scales [E, Nw]
  const int32_t* offsets;    // [E + 1]
  const int32_t* pairs;      // [R]
  const float* top_w;        // [R] by pair id (down)
  uint16_t* out;
  int Kd, N, top_k;
  int dense_rows = 0;        // > 0: a dense matmul of that many rows (no offsets / pairs / top_w, one weight):
                             // CTA row blockIdx.y takes rows 32 y .. (the "experts" all share weight 0)
};

template <int BM, bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(kThreads, BM == kBM ? 4 : 2) grouped_fp4_kernel(Fp4Args g) {
  constexpr int MF = BM / 16;
  constexpr int kAChunks = BM * 8 / kThreads;  // 2 (BM 32), 8 (BM 128)
  constexpr int kAStage = BM * kARowBytes;
  constexpr int kBRowBytes = b_row_bytes<kFp8>();
  constexpr int kBStage = kBN * kBRowBytes;
  constexpr int kBChunks = kBStage / 16 / kThreads;  // FP4 1, FP8 2 weight chunks per thread a stage
  static_assert(kBChunks * 16 * kThreads == kBStage && kBN <= kThreads, "whole weight chunks per thread");
  DG_KERNEL_DYNAMIC_SMEM(smem);

  const int e = blockIdx.y;
  const bool dense = g.dense_rows > 0;
  const int row0 = dense ? e * BM : g.offsets[e];
  const int rows = dense ? min(BM, g.dense_rows - row0) : g.offsets[e + 1] - row0;
  const int64_t we = dense ? 0 : e;  // the weight's expert
  if (rows <= 0) return;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int Kd = g.Kd, N = g.N;
  const int Nw = kGateUp ? 2 * N : N;
  const int KT = Kd / kBK;  // Kd % 64 == 0 (grouped_fp4_supported)
  const int MT = (rows + BM - 1) / BM;
  const int total = MT * KT;
  const uint32_t s_a = smem_addr(smem);
  const uint32_t s_b = s_a + kStages * kAStage;
  const uint32_t s_s = s_b + kStages * kBStage;
  const int chunk = tid & 7;

  // Weight tile row s -> weight row n (gate_up: s < 32 gate row i, else up row N + i).
  auto weight_row = [&](int s, bool& ok) {
    if (kGateUp) {
      const int i = blockIdx.x * (kBN / 2) + (s & (kBN / 2 - 1));
      ok = i < N;
      return s < kBN / 2 ? i : N + i;
    }
    const int n = blockIdx.x * kBN + s;
    ok = n < N;
    return n;
  };
  // Weight copies of this thread: chunk c = tid + kThreads j of the stage is tile row c / (row bytes / 16),
  // bytes 16 * (c % (row bytes / 16)) of the row's stage slice.
  constexpr int kRowChunks = kBRowBytes / 16;
  const int64_t w_row_bytes = kFp8 ? Kd : Kd / 2;
  bool p_ok[kBChunks];
  const uint8_t* p_src[kBChunks];
DG_UNROLL
  for (int j = 0; j < kBChunks; ++j) {
    const int c = tid + kThreads * j;
    const int row = weight_row(c / kRowChunks, p_ok[j]);
    p_src[j] = p_ok[j] ? g.w + (we * Nw + row) * w_row_bytes + 16 * (c % kRowChunks) : g.w;
  }
  // Scale copy (threads 0..15, NVFP4): tile rows 4 tid .. 4 tid + 3, consecutive weight rows (the
  // 4-row groups never straddle the gate / up halves or N, a multiple of 8), 16 bytes a stage.
  constexpr int kSChunks = kSStage / 16;
  bool s_ok = false;
  const uint8_t* s_src = g.s;
  if (!kFp8 && tid < kSChunks) {
    const int n = weight_row(4 * tid, s_ok);
    if (s_ok) s_src = g.s + (we * KT * Nw + n) * 4;
  }
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
  int load_mt = 0, load_kt = 0;
  auto load_next = [&](int stage) {
    if (load_kt == 0) set_a_rows(load_mt);
    const int k = load_kt * kBK + chunk * 8;
    const uint32_t sa = s_a + stage * kAStage;
DG_UNROLL
    for (int j = 0; j < kAChunks; ++j) {
      const int r = (tid >> 3) + 16 * j;
      cp_async16(sa + swz(r, chunk), a_ok[j] ? a_src[j] + k : g.a, a_ok[j]);
    }
DG_UNROLL
    for (int j = 0; j < kBChunks; ++j)
      cp_async16_hint(s_b + stage * kBStage + (tid + kThreads * j) * 16, p_ok[j] ? p_src[j] + load_kt * kBRowBytes : g.w,
                      p_ok[j], w_policy);
    if (!kFp8 && tid < kSChunks)
      cp_async16(s_s + stage * kSStage + tid * 16, s_ok ? s_src + static_cast<int64_t>(load_kt) * Nw * 4 : g.s, s_ok);
    if (++load_kt == KT) {
      load_kt = 0;
      ++load_mt;
    }
  };

  float acc[MF][2][4];
DG_UNROLL
  for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
    for (int nf = 0; nf < 2; ++nf)
DG_UNROLL
      for (int q = 0; q < 4; ++q) acc[mf][nf][q] = 0.f;

DG_UNROLL
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < total) load_next(s);
    cp_async_commit();
  }

  // A fragments by ldmatrix as in grouped_moe.cu. B fragment nf of warp w: tile row 32 nf + 8 w + lane / 4,
  // k = 16 kk + 2 (lane % 4) + {0, 1} (b0) and + 8 (b1); the device layout (quant_layout.h) puts the
  // bytes of quad lane % 4 for the four kk of a stage at 8 (lane % 4) (FP4) / 16 (lane % 4) (FP8).
  const int a_row = lane & 15, a_chunk = lane >> 4;
  const int b_row0 = 8 * warp + (lane >> 2), b_byte = lane & 3;

  int mt = 0, kt = 0;
  for (int it = 0; it < total; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (it + kStages - 1 < total) load_next((it + kStages - 1) % kStages);
    cp_async_commit();

    const int stage = it % kStages;
    const uint32_t sa = s_a + stage * kAStage, sb = s_b + stage * kBStage, ss = s_s + stage * kSStage;
    // This thread's weight bytes of the stage (both n fragments, all four k16 steps) and block scales.
    uint32_t wb[2][4], sc2[2][2];
DG_UNROLL
    for (int nf = 0; nf < 2; ++nf) {
      const int row = 32 * nf + b_row0;
      if (kFp8) {
        lds_v4(sb + row * kBRowBytes + fp8_slice_pos(b_byte, 0, 0), wb[nf]);
      } else {
        uint32_t two[2];
        lds_v2(sb + row * kBRowBytes + fp4_slice_pos(b_byte, 0, 0), two);
        wb[nf][0] = two[0];
        wb[nf][1] = two[1];
        const uint32_t sc = lds_u32(ss + row * kSRowBytes);  // the 4 scale codes, kk = 0 .. 3
        sc2[nf][0] = e4m3x2_to_bf16x2(spread_lo(sc));          // bf16x2 (scale 0, scale 1)
        sc2[nf][1] = e4m3x2_to_bf16x2(spread_hi(sc));          // (scale 2, scale 3)
      }
    }
DG_UNROLL
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t b[2][2];
DG_UNROLL
      for (int nf = 0; nf < 2; ++nf) {
        if (kFp8) {  // word kk: b0's byte pair, then b1's
          b[nf][0] = e4m3x2_to_bf16x2(spread_lo(wb[nf][kk]));
          b[nf][1] = e4m3x2_to_bf16x2(spread_hi(wb[nf][kk]));
        } else {     // bytes 2 kk (b0) and 2 kk + 1 (b1) of the 8; scale kk in both halves
          const uint32_t scale2 = __byte_perm(sc2[nf][kk >> 1], 0, (kk & 1) ? 0x3232 : 0x1010);
          const uint32_t two = wb[nf][kk >> 1] >> (16 * (kk & 1));
          b[nf][0] = e2m1x2_scaled(two & 0xffu, scale2);
          b[nf][1] = e2m1x2_scaled((two >> 8) & 0xffu, scale2);
        }
      }
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf) {
        uint32_t a[4];
        ldmatrix_x4(sa + swz(mf * 16 + a_row, 2 * kk + a_chunk), a[0], a[1], a[2], a[3]);
        mma_bf16(acc[mf][0], a, b[0][0], b[0][1]);
        mma_bf16(acc[mf][1], a, b[1][0], b[1][1]);
      }
    }

    if (++kt == KT) {
      const int g_row = lane >> 2, g_col = 2 * (lane & 3);
      const float* rs_e = g.rs + we * Nw;
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int m = mt * BM + mf * 16 + g_row + 8 * h;
          if (m >= rows) continue;
          const int64_t r = row0 + m;
          if (kGateUp) {
            const int i = blockIdx.x * (kBN / 2) + 8 * warp + g_col;
            if (i >= N) continue;
            uint32_t packed = 0;
DG_UNROLL
            for (int c = 0; c < 2; ++c) {
              const float gv = __fmul_rn(acc[mf][0][2 * h + c], rs_e[i + c]);
              const float uv = __fmul_rn(acc[mf][1][2 * h + c], rs_e[N + i + c]);
              const float gate = round_bf16(gelu_tanh(round_bf16(gv)));
              const uint16_t v = f32_to_bf16(__fmul_rn(gate, round_bf16(uv)));
              packed |= static_cast<uint32_t>(v) << (16 * c);
            }
            *reinterpret_cast<uint32_t*>(g.out + r * N + i) = packed;
          } else {
            const int p = dense ? static_cast<int>(r) : g.pairs[r];
            const float wt = dense ? 1.0f : g.top_w[p];  // dense: bf16(bf16(y) * 1) = bf16(y)
DG_UNROLL
            for (int nf = 0; nf < 2; ++nf) {
              const int n = blockIdx.x * kBN + 32 * nf + 8 * warp + g_col;
              if (n >= N) continue;
              uint32_t packed = 0;
DG_UNROLL
              for (int c = 0; c < 2; ++c) {
                const float yv = __fmul_rn(acc[mf][nf][2 * h + c], rs_e[n + c]);
                const uint16_t v = f32_to_bf16(__fmul_rn(round_bf16(yv), wt));
                packed |= static_cast<uint32_t>(v) << (16 * c);
              }
              *reinterpret_cast<uint32_t*>(g.out + static_cast<int64_t>(p) * N + n) = packed;
            }
          }
        }
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
        for (int nf = 0; nf < 2; ++nf)
DG_UNROLL
          for (int q = 0; q < 4; ++q) acc[mf][nf][q] = 0.f;
      kt = 0;
      ++mt;
    }
  }
  cp_async_wait<0>();
}

// The launches of the public entry points (grouped_moe_fp4.cuh), for any launcher: `l.template
// go<BM, kGateUp, kFp8>(args, grid_x, grid_y)` runs the kernel over that grid (the device: a CUDA
// launch; the unit tests: the emulator).
template <typename L>
void run_gate_up(L& l, bool fp8, const uint16_t* x, const uint8_t* w, const uint8_t* block, const float* row_scale,
                 const int32_t* offsets, const int32_t* pairs, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                 uint16_t* act) {
  if (R <= 0 || E <= 0 || I <= 0) return;
  const Fp4Args g{x, w, block, row_scale, offsets, pairs, nullptr, act, static_cast<int>(H), static_cast<int>(I),
                  static_cast<int>(K)};
  const int64_t n_tiles = (I + kBN / 2 - 1) / (kBN / 2);
  if (fp8) l.template go<kBM, true, true>(g, n_tiles, E);
  else l.template go<kBM, true, false>(g, n_tiles, E);
}

template <typename L>
void run_down(L& l, bool fp8, const uint16_t* act, const uint8_t* w, const uint8_t* block, const float* row_scale,
              const int32_t* offsets, const int32_t* pairs, const float* top_w, int64_t R, int64_t E, int64_t H,
              int64_t I, uint16_t* y) {
  if (R <= 0 || E <= 0 || H <= 0) return;
  const Fp4Args g{act, w, block, row_scale, offsets, pairs, top_w, y, static_cast<int>(I), static_cast<int>(H), 1};
  const int64_t n_tiles = (H + kBN - 1) / kBN;
  if (fp8) l.template go<kBM, false, true>(g, n_tiles, E);
  else l.template go<kBM, false, false>(g, n_tiles, E);
}

// One CTA row per BM rows of x; every CTA decodes its weight tiles again (from L2), so inputs of 128
// rows or more take 128-row tiles (a quarter of the decoding per row; two CTAs per SM).
template <typename L>
void run_dense(L& l, bool fp8, const uint16_t* x, const uint8_t* w, const uint8_t* block, const float* row_scale,
               int64_t T, int64_t N, int64_t K, uint16_t* out) {
  if (T <= 0 || N <= 0) return;
  const Fp4Args g{x, w, block, row_scale, nullptr, nullptr, nullptr, out, static_cast<int>(K), static_cast<int>(N), 1,
                  static_cast<int>(T)};
  const int64_t n_tiles = (N + kBN - 1) / kBN;
  if (T >= kBMDense) {
    const int64_t m_tiles = (T + kBMDense - 1) / kBMDense;
    if (fp8) l.template go<kBMDense, false, true>(g, n_tiles, m_tiles);
    else l.template go<kBMDense, false, false>(g, n_tiles, m_tiles);
    return;
  }
  const int64_t m_tiles = (T + kBM - 1) / kBM;
  if (fp8) l.template go<kBM, false, true>(g, n_tiles, m_tiles);
  else l.template go<kBM, false, false>(g, n_tiles, m_tiles);
}

}  // namespace
}  // namespace dgemma::cuda
