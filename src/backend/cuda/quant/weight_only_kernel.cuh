#pragma once
// The W4A16 / W8A16 grouped (and dense) GEMM kernel of quant/weight_only.cu, in a header so that the
// unit tests compile it on the host against an emulation of the few CUDA operations it uses
// (tests/unit/backend/cuda_emulator.h): the includer provides them. On the device, quant/weight_only.cu
// includes core/common.cuh, core/ptx.cuh and quant/ptx.cuh first. What the kernel needs: threadIdx /
// blockIdx, __syncthreads, __syncwarp, __byte_perm, __fmul_rn, min; smem_addr, cp_async16(_hint),
// evict_first_policy, cp_async_commit / wait, ldmatrix_x4, mma_bf16 (core/ptx.cuh); lds_u32 / v2 / v4,
// bf16x2_mul (quant/ptx.cuh); f32_to_bf16, round_bf16, gelu_tanh (core/common.cuh); and
// DG_KERNEL_DYNAMIC_SMEM(name), the dynamic shared-memory buffer.
//
// W4A16 grouped expert GEMMs for NVFP4 weights (quant/weight_only.cuh). The structure is the small-R
// bf16 kernel of moe/grouped.cu (K steps of 64, cp.async stages, each CTA looping over its expert's M
// tiles with the (M tile, stage) iterations flattened), with the weight operand changed:
//   * per K step a CTA copies BN weight rows x 32 packed bytes (64 K values) and their BN x 4 block
//     scale codes with an L2 evict-first policy, all by 16-byte cp.async (quant/layout.h); a stage holds
//     U K steps, copied together and run by an unrolled loop with fixed shared-memory offsets, so
//     that the copies' addressing, the wait, the barrier and the loop are paid once a stage rather than
//     once a K step;
//   * each warp owns 16 weight rows (two n fragments) for all rows of the M tile, so every weight is
//     decoded once per CTA and M tile; each thread builds its mma.sync B fragments from one 8-byte
//     (FP8: 16-byte) and one 4-byte shared-memory load per row and K step: per bf16x2 fragment register
//     one rotate + mask (quant/layout.h) and one exact bf16x2 multiply by the block scale (FP8: 2^120);
//   * M tiles of BM = 16 MF rows skip the m fragments without rows (an expert with 16 rows runs one;
//     MF = 2 has a copy of the stage's code for one fragment, so no branch runs per fragment);
//   * the epilogue multiplies the fp32 accumulators by 2^7 (NVFP4, undoing the scale code's offset:
//     exact) and the rows' global scale, then applies the activation / routing weight with the bf16
//     kernels' roundings.
// The tile (QuantTile: MF m fragments, W warps = BN / 16 weight rows, S stages of U K steps) is chosen
// per launch by the rows (below), or forced (CudaOptions). Why mma.sync: a step is bound by the weight
// stream and its decode; mma.sync with register-built B fragments keeps the weights packed.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/core/kernel_macros.cuh"
#include "backend/cuda/moe/expert_epilogue.cuh"
#include "backend/cuda/quant/layout.h"
#include "backend/cuda_options.h"

namespace dgemma::cuda {
namespace {

constexpr int kBK = 64;
constexpr int kARowBytes = kBK * 2;   // bf16 A row of a K step
constexpr int kSRowBytes = kBK / 16;  // NVFP4 block scale codes of a weight row in a K step
// Weight bytes of a row in a K step: packed FP4 32, FP8 64.
template <bool kFp8>
__host__ __device__ constexpr int b_row_bytes() { return kFp8 ? kBK : kBK / 2; }
template <int MF, int W, int S, int U, bool kFp8>
constexpr int smem_bytes() {
  return S * U * (16 * MF * kARowBytes + 16 * W * b_row_bytes<kFp8>() + (kFp8 ? 0 : 16 * W * kSRowBytes));
}
constexpr float kFp4AccScale = 128.0f;  // 2^7: the scale codes' offset (quant/layout.h)

__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kARowBytes + ((chunk ^ (row & 7)) << 4));
}

constexpr uint32_t kBf16x2Pow120 = 0x7B807B80u;  // bf16 2^120 (exponent field 247) in both halves

struct Fp4Args {
  const uint16_t* a;         // gate_up: x [T, Kd]; down: act [R, Kd]
  const uint8_t* w;          // packed [E, Nw, Kd / 2]
  const uint8_t* s;          // block scale codes, device layout [E, Kd / 64, Nw, 4] (quant/layout.h)
  const float* rs;           // row scales [E, Nw]
  const int32_t* offsets;    // [E + 1]
  const int32_t* pairs;      // [R]
  const float* top_w;        // [R] by pair id (down)
  uint16_t* out;
  int Kd, N, top_k;
  int dense_rows = 0;        // > 0: a dense matmul of that many rows (no offsets / pairs / top_w, one weight):
                             // CTA row blockIdx.y takes rows BM y .. (the "experts" all share weight 0)
};

// Blocks an SM the registers must allow: 3 for 32 x 128 (80 registers), 4 (128) for 32 x 64, 2 for 128 x 64.
template <int MF, int W>
constexpr int min_blocks() { return MF >= 8 ? (W >= 8 ? 1 : 2) : (W >= 8 ? 3 : 4); }

template <int MF, int W, int S, int U, bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(32 * W, min_blocks<MF, W>()) grouped_fp4_kernel(Fp4Args g) {
  constexpr int kThreads = 32 * W;
  constexpr int BM = 16 * MF;
  constexpr int BN = 16 * W;
  constexpr int kAChunks = BM * 8 / kThreads;
  static_assert(kAChunks * kThreads == BM * 8, "whole A chunks per thread");
  // A stage holds U K steps of 64 values, each step's tiles laid out as a one-step stage would be.
  constexpr int kBRowBytes = b_row_bytes<kFp8>();
  constexpr int kAStep = BM * kARowBytes, kBStep = BN * kBRowBytes, kSStep = BN * kSRowBytes;
  constexpr int kAStage = U * kAStep, kBStage = U * kBStep, kSStage = U * kSStep;
  constexpr int kBChunks = kBStep / 16 / kThreads;  // FP4 1, FP8 2 weight chunks per thread a K step
  static_assert(kBChunks * 16 * kThreads == kBStep, "whole weight chunks per thread");
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
  const int KT = Kd / kBK;             // K steps (Kd % 64 == 0: grouped_fp4_supported)
  const int KS = (KT + U - 1) / U;     // stages an M tile; the last may hold fewer than U steps
  const int MT = (rows + BM - 1) / BM;
  const int total = MT * KS;
  const uint32_t s_a = smem_addr(smem);
  const uint32_t s_b = s_a + S * kAStage;
  const uint32_t s_s = s_b + S * kBStage;
  const int chunk = tid & 7;

  // Weight tile row s -> weight row n (gate_up: s < BN / 2 gate row i, else up row N + i).
  auto weight_row = [&](int s, bool& ok) {
    if (kGateUp) {
      const int i = blockIdx.x * (BN / 2) + (s & (BN / 2 - 1));
      ok = i < N;
      return s < BN / 2 ? i : N + i;
    }
    const int n = blockIdx.x * BN + s;
    ok = n < N;
    return n;
  };
  // Copy sources hold in-bounds addresses even for the copies that read nothing (zero source bytes:
  // rows past N or past the expert's), so that a K offset is a plain add.
  // Weight copies of this thread: chunk c = tid + kThreads j of a K step is tile row c / (row bytes / 16),
  // bytes 16 * (c % (row bytes / 16)) of the row's step slice.
  constexpr int kRowChunks = kBRowBytes / 16;
  const int64_t w_row_bytes = kFp8 ? Kd : Kd / 2;
  bool p_ok[kBChunks];
  const uint8_t* p_src[kBChunks];
DG_UNROLL
  for (int j = 0; j < kBChunks; ++j) {
    const int c = tid + kThreads * j;
    const int row = weight_row(c / kRowChunks, p_ok[j]);
    p_src[j] = g.w + (we * Nw + (p_ok[j] ? row : 0)) * w_row_bytes + 16 * (c % kRowChunks);
  }
  // Scale copy (threads 0 .. BN / 4 - 1, NVFP4): tile rows 4 tid .. 4 tid + 3, consecutive weight rows
  // (the 4-row groups never straddle the gate / up halves or N, a multiple of 8), 16 bytes a K step.
  constexpr int kSChunks = kSStep / 16;
  bool s_ok = false;
  const uint8_t* s_src = g.s;
  if (!kFp8 && tid < kSChunks) {
    const int n = weight_row(4 * tid, s_ok);
    s_src = g.s + (we * KT * Nw + (s_ok ? n : 0)) * 4;
  }
  const int64_t s_step = static_cast<int64_t>(Nw) * 4;  // scale bytes of one K step
  const uint16_t* a_src[kAChunks];
  bool a_ok[kAChunks];
  // Branch-free (selects, and copies of zero bytes for rows past the expert's): no divergence inside
  // the main loop, whose ldmatrix / mma.sync need converged warps.
  auto set_a_rows = [&](int mt) {
DG_UNROLL
    for (int j = 0; j < kAChunks; ++j) {
      const int m = mt * BM + (tid >> 3) + (kThreads / 8) * j;
      a_ok[j] = m < rows;
      const int r = row0 + (a_ok[j] ? m : 0);  // row0 itself is a row of the expert
      const int64_t src_row = kGateUp ? g.pairs[r] / g.top_k : r;
      a_src[j] = g.a + src_row * Kd + chunk * 8;
    }
  };

  const uint64_t w_policy = kFp8 ? 0 : evict_first_policy();  // (FP8 copies take no hint: see load_next)
  // The next stage's copies into `stage`: its A rows (kCopyA), its weights and scales (kCopyWeights) or
  // both; then the next stage is the one after.
  enum : int { kCopyA = 1, kCopyWeights = 2, kCopyAll = 3 };
  int load_mt = 0, load_ks = 0;
  auto load_next = [&](int stage, int parts) {
    if ((parts & kCopyA) && load_ks == 0) set_a_rows(load_mt);
    const int step0 = load_ks * U;
    const uint32_t sa = s_a + stage * kAStage, sb = s_b + stage * kBStage, ss = s_s + stage * kSStage;
DG_UNROLL
    for (int u = 0; u < U; ++u) {
      if (U > 1 && step0 + u >= KT) break;  // uniform: the M tile's last stage
      const int k = (step0 + u) * kBK;
      // A rows past the expert's are zero-filled (no global read).
      if (parts & kCopyA) {
DG_UNROLL
        for (int j = 0; j < kAChunks; ++j) {
          const int r = (tid >> 3) + (kThreads / 8) * j;
          cp_async16(sa + u * kAStep + swz(r, chunk), a_src[j] + k, a_ok[j]);
        }
      }
      if (!(parts & kCopyWeights)) continue;
DG_UNROLL
      for (int j = 0; j < kBChunks; ++j) {
        const uint32_t dst = sb + u * kBStep + (tid + kThreads * j) * 16;
        const uint8_t* src = p_src[j] + (step0 + u) * kBRowBytes;
        // FP8: no L2 hint. With it, CUDA 13.0's ptxas gives the 8-warp FP8 tiles two weight copies whose
        // memory descriptor register is never written (LDGSTS ... desc[UR1]): an illegal instruction.
        if (kFp8) cp_async16(dst, src, p_ok[j]);
        else cp_async16_hint(dst, src, p_ok[j], w_policy);
      }
      if (!kFp8 && tid < kSChunks)
        cp_async16(ss + u * kSStep + tid * 16, s_src + (step0 + u) * s_step, s_ok);
    }
    if (++load_ks == KS) {
      load_ks = 0;
      ++load_mt;
    }
  };

  float acc[MF][2][4];
  zero_acc(acc);

  // gate_up lets down (launched programmatically: weight_only.cu) start once all its blocks have begun;
  // down copies the weights of its first stages, which no kernel writes, before waiting for gate_up to
  // finish, then its A rows (gate_up's output). The first commit group holds them all.
  if (kGateUp) DG_LAUNCH_DEPENDENTS();
  if (!kGateUp) {
DG_UNROLL
    for (int s = 0; s < S - 1; ++s)
      if (s < total) load_next(s, kCopyWeights);
    load_mt = load_ks = 0;  // the A rows' copies below start at the first stage again
    DG_GRID_DEPENDENCY_WAIT();
  }
DG_UNROLL
  for (int s = 0; s < S - 1; ++s) {
    if (s < total) load_next(s, kGateUp ? kCopyAll : kCopyA);
    cp_async_commit();
  }

  // A fragments by ldmatrix as in moe/grouped.cu. B fragment nf of warp w: tile row 8 (W nf + w) + lane / 4
  // (gate_up: nf 0 gate, nf 1 the matching up row), k = 16 kk + 2 (lane % 4) + {0, 1} (b0) and + 8 (b1);
  // quad lane % 4's words are bytes 8 (lane % 4) (FP4) / 16 (lane % 4) (FP8) of the row's slice.
  // This lane's ldmatrix offsets in an A step for m fragment 0 and each k16 step (fragment mf adds
  // 16 mf rows, which keeps the swizzle: 16 mf % 8 == 0).
  uint32_t a_off[kBK / 16];
DG_UNROLL
  for (int kk = 0; kk < kBK / 16; ++kk) a_off[kk] = swz(lane & 15, 2 * kk + (lane >> 4));
  const int b_row0 = 8 * warp + (lane >> 2), b_quad = lane & 3;

  // One K step (64 values) of the stage's tiles at sa / sb / ss on the first NMF m fragments; kCheck: stop
  // at the M tile's m fragments with rows (m_frags, uniform over the CTA).
  int m_frags = min(MF, (rows + 15) / 16);  // m fragments with rows in this M tile
  auto k_step = [&](auto nmf, auto check, uint32_t sa, uint32_t sb, uint32_t ss) {
    constexpr int NMF = decltype(nmf)::value;
    constexpr bool kCheck = decltype(check)::value;
    // This thread's weight words of the step (both n fragments, all four k16 steps) and scale codes.
    uint32_t wb[2][4], sc[2];
DG_UNROLL
    for (int nf = 0; nf < 2; ++nf) {
      const int row = 8 * W * nf + b_row0;
      if (kFp8) {
        lds_v4(sb + row * kBRowBytes + 16 * b_quad, wb[nf]);
      } else {
        uint32_t two[2];
        lds_v2(sb + row * kBRowBytes + 8 * b_quad, two);
        wb[nf][0] = two[0];
        wb[nf][1] = two[1];
        sc[nf] = lds_u32(ss + row * kSRowBytes);  // the 4 scale codes, kk = 0 .. 3
      }
    }
DG_UNROLL
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t b[2][2];
DG_UNROLL
      for (int nf = 0; nf < 2; ++nf) {
        if (kFp8) {  // word kk: pair 0 b0, pair 1 b1
          b[nf][0] = bf16x2_mul(fp8_pair_bits(wb[nf][kk], 0), kBf16x2Pow120);
          b[nf][1] = bf16x2_mul(fp8_pair_bits(wb[nf][kk], 1), kBf16x2Pow120);
        } else {     // word kk / 2, pairs 2 (kk & 1) + h; scale code kk in both halves
          const uint32_t scale2 = scale_code_bits(__byte_perm(sc[nf], 0, 0x4040u | (kk << 8) | kk));
          b[nf][0] = bf16x2_mul(fp4_pair_bits(wb[nf][kk >> 1], 2 * (kk & 1)), scale2);
          b[nf][1] = bf16x2_mul(fp4_pair_bits(wb[nf][kk >> 1], 2 * (kk & 1) + 1), scale2);
        }
      }
DG_UNROLL
      for (int mf = 0; mf < NMF; ++mf) {
        if (kCheck && mf >= m_frags) break;
        uint32_t a[4];
        ldmatrix_x4(sa + a_off[kk] + mf * 16 * kARowBytes, a[0], a[1], a[2], a[3]);
        mma_bf16(acc[mf][0], a, b[0][0], b[0][1]);
        mma_bf16(acc[mf][1], a, b[1][0], b[1][1]);
      }
    }
  };
  // The stage's K steps with NMF / kCheck as k_step.
  auto stage_steps = [&](auto nmf, auto check, int steps, uint32_t sa, uint32_t sb, uint32_t ss) {
DG_UNROLL
    for (int u = 0; u < U; ++u) {
      if (u >= steps) break;  // uniform: the M tile's last stage
      k_step(nmf, check, sa + u * kAStep, sb + u * kBStep, ss + u * kSStep);
    }
  };

  int mt = 0, ks = 0;
  int stage = 0, load_stage = S - 1;
  for (int it = 0; it < total; ++it) {
    cp_async_wait<S - 2>();
    __syncthreads();
    if (it + S - 1 < total) load_next(load_stage, kCopyAll);
    cp_async_commit();
    load_stage = load_stage + 1 == S ? 0 : load_stage + 1;
    __syncwarp();  // converged warps for ldmatrix / mma.sync (the scale copies above are per thread)
    const uint32_t sa = s_a + stage * kAStage, sb = s_b + stage * kBStage, ss = s_s + stage * kSStage;
    const int steps = U == 1 ? 1 : min(U, KT - ks * U);  // the K steps the loader copied
    // Every m fragment, or (an M tile with fewer rows) those with rows: MF 2 has one then.
    using Full = std::integral_constant<int, MF>;
    if (MF != 2) stage_steps(Full{}, std::true_type{}, steps, sa, sb, ss);
    else if (m_frags == MF) stage_steps(Full{}, std::false_type{}, steps, sa, sb, ss);
    else stage_steps(std::integral_constant<int, 1>{}, std::false_type{}, steps, sa, sb, ss);

    if (++ks == KS) {
      const int g_row = lane >> 2, g_col = 2 * (lane & 3);
      const float* rs_e = g.rs + we * Nw;
      // NVFP4: acc * 2^7 is exact, so this is bf16(acc_true * rs) as with unscaled weights.
      auto scaled = [&](float v, float rs) { return __fmul_rn(kFp8 ? v : __fmul_rn(v, kFp4AccScale), rs); };
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int m = mt * BM + mf * 16 + g_row + 8 * h;
          if (m >= rows) continue;
          const int64_t r = row0 + m;
          if (kGateUp) {
            const int i = blockIdx.x * (BN / 2) + 8 * warp + g_col;
            if (i >= N) continue;
            auto gate = [&](int c) { return scaled(acc[mf][0][2 * h + c], rs_e[i + c]); };
            auto up = [&](int c) { return scaled(acc[mf][1][2 * h + c], rs_e[N + i + c]); };
            store_act_pair(g.out + r * N + i, gate, up);
          } else {
            const int p = dense ? static_cast<int>(r) : g.pairs[r];
            const float wt = dense ? 1.0f : g.top_w[p];  // dense: bf16(bf16(y) * 1) = bf16(y)
DG_UNROLL
            for (int nf = 0; nf < 2; ++nf) {
              const int n = blockIdx.x * BN + 8 * W * nf + 8 * warp + g_col;
              if (n >= N) continue;
              store_weighted_pair(g.out + static_cast<int64_t>(p) * N + n,
                                  [&](int c) { return scaled(acc[mf][nf][2 * h + c], rs_e[n + c]); }, wt);
            }
          }
        }
      zero_acc(acc);
      ks = 0;
      ++mt;
      m_frags = min(MF, (rows - mt * BM + 15) / 16);
      __syncwarp();  // after the epilogue's per-lane branches
    }
    stage = stage + 1 == S ? 0 : stage + 1;
  }
  cp_async_wait<0>();
}

}  // namespace
}  // namespace dgemma::cuda

namespace dgemma::cuda {
namespace {

// The tiles (MF m fragments = BM / 16 rows, W warps = BN / 16 weight rows, S cp.async stages of U K
// steps of 64 values) of the QuantTile choices.
struct TileShape {
  int mf, w, stages, steps;
};
constexpr TileShape tile_shape(QuantTile t) {
  switch (t) {
    case QuantTile::kRows32Cols64: return {2, 4, 4, 1};
    case QuantTile::kRows32Cols128K256: return {2, 8, 2, 4};
    case QuantTile::kRows128Cols64: return {8, 4, 4, 1};
    default: return {0, 0, 0, 0};  // kAuto: resolved before
  }
}

// The automatic choice from the mean rows per expert (the routing is on the device): 8 warps (half the
// A re-reads), 32-row M tiles and 256 K values a stage up to ~96 rows an expert; 128-row ones for
// prefill-sized groups (each further M tile re-reads the weights, and a popular expert's M tiles run one
// after another in its CTAs).
inline QuantTile auto_expert_tile(int64_t R, int64_t E) {
  const int64_t mean = R / (E > 0 ? E : 1);
  return mean <= 96 ? QuantTile::kRows32Cols128K256 : QuantTile::kRows128Cols64;
}
// The dense matmul's: 32-row tiles, or 128-row tiles (a quarter of the decoding) from 128 rows on.
inline QuantTile auto_dense_tile(int64_t T) { return T >= 128 ? QuantTile::kRows128Cols64 : QuantTile::kRows32Cols64; }

template <QuantTile kTile, bool kGateUp, bool kFp8, typename L>
void go_tile(L& l, const Fp4Args& g, int64_t n_out, int64_t grid_y) {
  constexpr TileShape t = tile_shape(kTile);
  const int64_t cols = kGateUp ? 8 * t.w : 16 * t.w;  // output columns of a CTA
  l.template go<t.mf, t.w, t.stages, t.steps, kGateUp, kFp8>(g, (n_out + cols - 1) / cols, grid_y);
}
template <bool kGateUp, bool kFp8, typename L>
void go_tile(L& l, QuantTile tile, const Fp4Args& g, int64_t n_out, int64_t grid_y) {
  switch (tile) {
    case QuantTile::kRows32Cols64:
      return go_tile<QuantTile::kRows32Cols64, kGateUp, kFp8>(l, g, n_out, grid_y);
    case QuantTile::kRows32Cols128K256:
      return go_tile<QuantTile::kRows32Cols128K256, kGateUp, kFp8>(l, g, n_out, grid_y);
    default: return go_tile<QuantTile::kRows128Cols64, kGateUp, kFp8>(l, g, n_out, grid_y);
  }
}

// The launches of the public entry points (quant/weight_only.cuh), for any launcher: `l.template
// go<MF, W, S, kGateUp, kFp8>(args, grid_x, grid_y)` runs the kernel over that grid (the device: a CUDA
// launch; the unit tests: the emulator). `tile`: kAuto, or the tile of every launch.
template <typename L>
void run_gate_up(L& l, bool fp8, const uint16_t* x, const uint8_t* w, const uint8_t* block, const float* row_scale,
                 const int32_t* offsets, const int32_t* pairs, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                 uint16_t* act, QuantTile tile = QuantTile::kAuto) {
  if (R <= 0 || E <= 0 || I <= 0) return;
  const Fp4Args g{x, w, block, row_scale, offsets, pairs, nullptr, act, static_cast<int>(H), static_cast<int>(I),
                  static_cast<int>(K), 0};
  if (tile == QuantTile::kAuto) tile = auto_expert_tile(R, E);
  if (fp8) go_tile<true, true>(l, tile, g, I, E);
  else go_tile<true, false>(l, tile, g, I, E);
}

template <typename L>
void run_down(L& l, bool fp8, const uint16_t* act, const uint8_t* w, const uint8_t* block, const float* row_scale,
              const int32_t* offsets, const int32_t* pairs, const float* top_w, int64_t R, int64_t E, int64_t H,
              int64_t I, uint16_t* y, QuantTile tile = QuantTile::kAuto) {
  if (R <= 0 || E <= 0 || H <= 0) return;
  const Fp4Args g{act, w, block, row_scale, offsets, pairs, top_w, y, static_cast<int>(I), static_cast<int>(H), 1, 0};
  if (tile == QuantTile::kAuto) tile = auto_expert_tile(R, E);
  if (fp8) go_tile<false, true>(l, tile, g, H, E);
  else go_tile<false, false>(l, tile, g, H, E);
}

// Dense: one CTA row per BM rows of x; every CTA row decodes the weight tiles again (from L2).
template <typename L>
void run_dense(L& l, bool fp8, const uint16_t* x, const uint8_t* w, const uint8_t* block, const float* row_scale,
               int64_t T, int64_t N, int64_t K, uint16_t* out, QuantTile tile = QuantTile::kAuto) {
  if (T <= 0 || N <= 0) return;
  const Fp4Args g{x, w, block, row_scale, nullptr, nullptr, nullptr, out, static_cast<int>(K), static_cast<int>(N), 1,
                  static_cast<int>(T)};
  if (tile == QuantTile::kAuto) tile = auto_dense_tile(T);
  const int64_t bm = 16 * tile_shape(tile).mf, m_tiles = (T + bm - 1) / bm;
  if (fp8) go_tile<false, true>(l, tile, g, N, m_tiles);
  else go_tile<false, false>(l, tile, g, N, m_tiles);
}

}  // namespace
}  // namespace dgemma::cuda
