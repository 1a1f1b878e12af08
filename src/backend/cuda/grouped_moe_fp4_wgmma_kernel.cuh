#pragma once
// The large-R W4A16 / W8A16 grouped (and dense) GEMM on Hopper warpgroup MMAs, included by
// grouped_moe_fp4_kernel.cuh (which provides Fp4Args, swz, kBK, kARowBytes, kSRowBytes, b_row_bytes,
// kFp4AccScale, kBf16x2Pow120) and compiled on the host by the emulated unit tests
// (tests/unit/backend/cuda_emulator.h emulates wgmma_m64n128k16 from the descriptors). Besides those
// of grouped_moe_fp4_kernel.cuh it needs sts_v2 / sts_v4 (quant_ptx.cuh), fence_proxy_async,
// wgmma_fence(_operand), wgmma_commit / wait and wgmma_m64n128k16 (wgmma_ptx.cuh) and sw128_desc
// (wgmma_desc.cuh).
//
// Why: at ~64+ rows per expert (batched denoising) the mma.sync kernel decodes every weight again per
// 16 MF-row M tile in each warp's registers and is compute-bound well below the tensor cores' wgmma
// rate. Here each weight is decoded once per 64 WG rows of its expert, into shared memory, and the
// tensor cores read it from there:
//   * grid, M tile loop and copies as grouped_fp4_kernel: grid (N tiles x m_split, E), each CTA
//     looping over every m_split-th M tile of 64 WG rows of its expert (its m_split CTAs adjacent in
//     blockIdx.x: they share the weight stream through L2), the (M tile, K tile) iterations
//     flattened; per iteration the CTA copies (cp.async, 16 bytes) the gathered A rows (bf16, 128-byte
//     swizzle: wgmma's K-major layout), and its BN weight rows' packed stage slices (and NVFP4 block
//     scale codes) into a packed stage ("P", chunk q of row r at q ^ ((r >> s) & (chunks - 1)): a
//     warp's 16-byte loads of consecutive rows hit distinct banks);
//   * each thread decodes one weight row (or half of one) of a P stage into a bf16 B stage ("D", rows of
//     128 bytes in the same 128-byte swizzle): per bf16x2 pair one rotate + mask and one exact bf16x2
//     multiply (quant_layout.h), written as whole 16-byte chunks (half rows: 8 bytes);
//   * warpgroup j multiplies tile rows 64 j .. 64 j + 63 by all BN columns: BN / 128 wgmma m64n128k16
//     per k16 step, A and D read through descriptors.
// Pipeline per iteration it (two barriers): cp.async wait (own copies of it + 1), async-proxy fence,
// barrier; wgmma of it (A stage it, D stage it), committed; wait for the wgmma of it - 1, barrier (a
// thread's wait covers only its own view of the wgmma: the barrier makes the wgmma of it - 1 done for
// every warp, so its A and D stages are free); the copies of the A rows of it + kAhead (into the A
// stage of it - 1) and of the weights of it + kPStages (into the P stage of it, decoded before the
// first barrier); the decode of it + 1 (its P stage landed before the first barrier) into the D stage
// of it - 1, then an async-proxy fence (the decode's generic-proxy stores become visible to the tensor
// cores' reads at the next first barrier). So the copies of stage it + 2 and later and the decode of
// stage it + 1 run against the wgmma of it, with two D stages; the weights, from HBM, are copied
// furthest ahead (kPStages iterations), the A rows (mostly L2 hits) S - 1.
// Epilogue per M tile (after the wgmma of its last K tile): grouped_fp4_kernel's (x 2^7 for NVFP4's
// scale code offset, x the row scale, then gelu.up or the routing weight with the same bf16 roundings).
// The weights are the same exact bf16 values as the mma.sync kernel's; the tensor cores sum in their own
// order, so the outputs agree with it to fp32 rounding of the sum, not bit for bit.
// Status: checked on the H200 against the CPU reference and bit for bit against the mma.sync kernel;
// no faster than it at our shapes (tuning.h set_quant_wgmma), so the automatic choice takes it only
// with set_quant_wgmma, off by default.
#include <cstdint>

namespace dgemma::cuda {
namespace {

// WG warpgroups (BM = 64 WG rows), BN weight rows, S A stages, P stages SP4 (NVFP4) / SP8 (FP8).
template <int WG, int BN, int S, int SP4, int SP8, int MinBlocks>
struct QuantWgCfg {
  static constexpr int kWarpGroups = WG, kBN = BN, kStages = S, kMinBlocks = MinBlocks;
  static constexpr int kThreads = 128 * WG, kBM = 64 * WG;
  static constexpr int kDStages = 2;
  static constexpr int kAhead = S - 1;  // iterations whose A rows are copied ahead
  static constexpr int kAStage = kBM * kARowBytes;         // bf16 A rows of a stage
  static constexpr int kDStage = kBN * kARowBytes;         // decoded bf16 weight rows of a stage
  template <bool kFp8>
  static constexpr int p_stages() { return kFp8 ? SP8 : SP4; }  // = the iterations copied ahead
  template <bool kFp8>
  static constexpr int p_stage() { return kBN * b_row_bytes<kFp8>() + (kFp8 ? 0 : kBN * kSRowBytes); }
  template <bool kFp8>  // + the 1024-byte alignment of the base (wgmma's swizzle atoms)
  static constexpr int smem() {
    return S * kAStage + p_stages<kFp8>() * p_stage<kFp8>() + kDStages * kDStage + 1024;
  }
  static_assert(BN % 128 == 0 && (BN % (128 * WG) == 0 || 128 * WG == 2 * BN), "decode: one row or half a row a thread");
  static_assert(kAhead >= 2, "the copies of it + 1 land a whole iteration before its decode");
  static_assert(SP4 >= kAhead && SP8 >= kAhead, "a copy group's weights no later than its A rows");
  // 227 KB a block (sm_90), and MinBlocks CTAs with their 1 KB reserve within the SM's 228 KB
  template <bool kFp8>
  static constexpr bool fits() { return smem<kFp8>() <= 232448 && MinBlocks * (smem<kFp8>() + 1024) <= 233472; }
  static_assert(fits<false>() && fits<true>(), "shared memory budget");
  // the accumulators (64 BN / 128 floats a thread) and ~60 more within the launch bounds' registers
  static_assert(64 * (BN / 128) + 60 <= 65536 / (kThreads * MinBlocks) && 64 * (BN / 128) + 60 <= 255,
                "register budget");
};

template <class C, bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) grouped_fp4_wgmma_kernel(Fp4Args g) {
  constexpr int kThreads = C::kThreads, kStages = C::kStages, kBM = C::kBM, kBN = C::kBN;
  constexpr int kAStage = C::kAStage, kDStage = C::kDStage, kDStages = C::kDStages, kAhead = C::kAhead;
  constexpr int kBRowBytes = b_row_bytes<kFp8>();
  constexpr int kPStage = C::template p_stage<kFp8>();
  constexpr int kPStages = C::template p_stages<kFp8>();  // also the iterations whose weights are copied ahead
  constexpr int kWStage = kBN * kBRowBytes;      // the packed weights of a P stage; the scale codes follow
  constexpr int kRowChunks = kBRowBytes / 16;    // 16-byte chunks of a packed row slice: NVFP4 2, FP8 4
  constexpr int kPShift = kFp8 ? 1 : 2;          // P swizzle: 8 consecutive rows' chunk q on distinct banks
  constexpr int kACopies = kBM * 8 / kThreads;   // 4
  constexpr int kBCopies = kBN * kRowChunks / kThreads;
  constexpr int kSChunks = kBN * kSRowBytes / 16;  // scale codes of 4 rows a chunk
  constexpr int NF = kBN / 8, NH = kBN / 128;
  // Decode: thread tid takes tile rows tid % kBN + kThreads j (j < kDRows) and quads kQuads (tid / kBN) ..
  constexpr int kDRows = kBN >= kThreads ? kBN / kThreads : 1;
  constexpr int kQuads = kBN >= kThreads ? 4 : 2;
  constexpr int kLoadChunks = kQuads * (kFp8 ? 16 : 8) / 16;  // P chunks a decoded row part reads
  static_assert(kACopies * kThreads == kBM * 8 && kBCopies * kThreads == kBN * kRowChunks, "whole chunks per thread");
  static_assert(kSChunks <= kThreads, "one scale chunk per thread at most");
  DG_KERNEL_DYNAMIC_SMEM(smem);

  const int e = blockIdx.y;
  const bool dense = g.dense_rows > 0;
  const int row0 = dense ? e * kBM : g.offsets[e];
  const int rows = dense ? min(kBM, g.dense_rows - row0) : g.offsets[e + 1] - row0;
  const int64_t we = dense ? 0 : e;  // the weight's expert
  // CTA x: N tile x / m_split, M tiles m_first, m_first + m_split, ... of the expert (the CTAs of an
  // expert's N tile are adjacent, so they run together and read its weights from HBM once).
  const int ms = g.m_split, n_tile = blockIdx.x / ms, m_first = blockIdx.x % ms;
  const int MT = rows > 0 ? (rows + kBM - 1) / kBM : 0;
  const int my_mt = MT > m_first ? (MT - m_first + ms - 1) / ms : 0;
  if (my_mt <= 0) return;  // uniform over the CTA, before any barrier
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const int Kd = g.Kd, N = g.N;
  const int Nw = kGateUp ? 2 * N : N;
  const int KT = Kd / kBK;  // Kd % 64 == 0 (grouped_fp4_supported)
  const int total = my_mt * KT;
  const uint32_t s_a = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t s_d = s_a + kStages * kAStage;  // 1024-byte aligned: kAStage and kDStage are multiples
  const uint32_t s_p = s_d + kDStages * kDStage;
  const int chunk = tid & 7;

  // Weight tile row s -> weight row n (gate_up: s < BN / 2 gate row i, else up row N + i).
  auto weight_row = [&](int s, bool& ok) {
    if (kGateUp) {
      const int i = n_tile * (kBN / 2) + (s & (kBN / 2 - 1));
      ok = i < N;
      return s < kBN / 2 ? i : N + i;
    }
    const int n = n_tile * kBN + s;
    ok = n < N;
    return n;
  };
  auto p_chunk = [](int row, int q) { return row * kBRowBytes + 16 * (q ^ ((row >> kPShift) & (kRowChunks - 1))); };
  const int64_t w_row_bytes = kFp8 ? Kd : Kd / 2;
  bool p_ok[kBCopies];
  const uint8_t* p_src[kBCopies];
  uint32_t p_dst[kBCopies];
DG_UNROLL
  for (int j = 0; j < kBCopies; ++j) {
    const int c = tid + kThreads * j;
    const int s = c / kRowChunks, q = c % kRowChunks;
    const int n = weight_row(s, p_ok[j]);
    p_src[j] = p_ok[j] ? g.w + (we * Nw + n) * w_row_bytes + 16 * q : g.w;
    p_dst[j] = static_cast<uint32_t>(p_chunk(s, q));
  }
  // Scale copy (threads 0 .. BN / 4 - 1, NVFP4): tile rows 4 tid .. 4 tid + 3, consecutive weight rows
  // (a 4-row group never straddles the gate / up halves or N, a multiple of 4), 16 bytes a stage.
  bool s_ok = false;
  const uint8_t* s_src = g.s;
  if (!kFp8 && tid < kSChunks) {
    const int n = weight_row(4 * tid, s_ok);
    if (s_ok) s_src = g.s + (we * KT * Nw + n) * 4;
  }
  // A rows of the M tile being copied; rows past the expert's are zero-filled (no global read).
  const uint16_t* a_src[kACopies];
  bool a_ok[kACopies];
  auto set_a_rows = [&](int mt) {
DG_UNROLL
    for (int j = 0; j < kACopies; ++j) {
      const int m = mt * kBM + (tid >> 3) + (kThreads / 8) * j;
      a_ok[j] = m < rows;
      const int r = row0 + (a_ok[j] ? m : 0);
      const int64_t src_row = kGateUp ? g.pairs[r] / g.top_k : r;
      a_src[j] = g.a + (a_ok[j] ? src_row * Kd : 0);
    }
  };

  // No L2 eviction hint on the weight copies (unlike grouped_fp4_kernel): with the hinted cp.async here,
  // ptxas (CUDA 13.0, sm_90a) emitted an LDGSTS whose cache-policy descriptor sat in uniform registers it
  // never wrote, and the H200 raised an illegal instruction (compute-sanitizer: that LDGSTS of load_p).
  // The A rows of the next iteration not yet copied (the expert's M tile load_mt, K tile load_kt).
  int load_mt = m_first, load_kt = 0;
  auto load_a = [&](int stage) {
    if (load_kt == 0) set_a_rows(load_mt);
    const int k = load_kt * kBK + chunk * 8;
    const uint32_t sa = s_a + stage * kAStage;
DG_UNROLL
    for (int j = 0; j < kACopies; ++j) {
      const int r = (tid >> 3) + (kThreads / 8) * j;
      cp_async16(sa + swz(r, chunk), a_ok[j] ? a_src[j] + k : g.a, a_ok[j]);
    }
    if (++load_kt == KT) {
      load_kt = 0;
      load_mt += ms;
    }
  };
  // The weights (and scale codes) of iteration i: K tile i % KT (the same for every M tile), P stage
  // i % kPStages. p_next: the next iteration whose weights are not yet copied.
  int p_next = 0;
  auto load_p = [&] {
    const int kt = p_next % KT;
    const uint32_t sp = s_p + (p_next % kPStages) * kPStage;
DG_UNROLL
    for (int j = 0; j < kBCopies; ++j) {
      const uint8_t* src = p_ok[j] ? p_src[j] + kt * kBRowBytes : g.w;
      cp_async16(sp + p_dst[j], src, p_ok[j]);
    }
    if (!kFp8 && tid < kSChunks)
      cp_async16(sp + kWStage + tid * 16, s_ok ? s_src + static_cast<int64_t>(kt) * Nw * 4 : g.s, s_ok);
    ++p_next;
  };

  // Decodes P stage `ps` into D stage `ds`. Row part: quads b0 .. b0 + kQuads - 1 (quad b: bytes 8 b ..
  // (FP8 16 b ..) of the slice, the k pairs 16 kk + 8 h + 2 b); decoded chunk (kk, h) of a row holds the
  // pairs of quads 0 .. 3 as words 0 .. 3.
  const int d_row0 = tid % (kBN < kThreads ? kBN : kThreads);
  const int b0 = kQuads == 4 ? 0 : 2 * (tid / kBN);
  auto decode = [&](int ps, int ds) {
    const uint32_t sp = s_p + ps * kPStage, sd = s_d + ds * kDStage;
DG_UNROLL
    for (int j = 0; j < kDRows; ++j) {
      const int row = d_row0 + kThreads * j;
      uint32_t w[4 * kLoadChunks];  // word t of local quad bl: w[2 bl + t] (NVFP4), w[4 bl + t] (FP8)
      const int q0 = b0 * (kFp8 ? 16 : 8) / 16;
DG_UNROLL
      for (int q = 0; q < kLoadChunks; ++q) {
        uint32_t v[4];
        lds_v4(sp + p_chunk(row, q0 + q), v);
DG_UNROLL
        for (int i = 0; i < 4; ++i) w[4 * q + i] = v[i];
      }
      const uint32_t sc = kFp8 ? 0u : lds_u32(sp + kWStage + row * kSRowBytes);  // codes kk = 0 .. 3
DG_UNROLL
      for (int kk = 0; kk < kBK / 16; ++kk) {
        const uint32_t scale2 = kFp8 ? kBf16x2Pow120 : scale_code_bits(__byte_perm(sc, 0, 0x4040u | (kk << 8) | kk));
DG_UNROLL
        for (int h = 0; h < 2; ++h) {
          uint32_t out[kQuads];
DG_UNROLL
          for (int bl = 0; bl < kQuads; ++bl) {
            const uint32_t bits = kFp8 ? fp8_pair_bits(w[4 * bl + kk], h) : fp4_pair_bits(w[2 * bl + (kk >> 1)], 2 * (kk & 1) + h);
            out[bl] = bf16x2_mul(bits, scale2);
          }
          const uint32_t dst = sd + swz(row, 2 * kk + h) + 4 * b0;
          if constexpr (kQuads == 4) {
            sts_v4(dst, out);
          } else {
            sts_v2(dst, out);
          }
        }
      }
    }
  };

  float acc[NH][64];  // n8 fragment nf, element q: acc[nf / 16][4 (nf % 16) + q]
  auto zero_acc = [&] {
DG_UNROLL
    for (int h = 0; h < NH; ++h)
DG_UNROLL
      for (int q = 0; q < 64; ++q) acc[h][q] = 0.f;
  };
  zero_acc();
  auto frag = [&](int nf, int q) -> float& { return acc[nf >> 4][4 * (nf & 15) + q]; };
  auto fence_acc = [&] {
DG_UNROLL
    for (int h = 0; h < NH; ++h)
DG_UNROLL
      for (int q = 0; q < 64; ++q) wgmma_fence_operand(acc[h][q]);
  };

  // Prologue: the copies of iterations 0 .. kAhead - 1 (a group is committed even when empty, so the
  // wait counts hold: before iteration it, kAhead + it groups are committed; group i holds iteration
  // i's A rows and the weights of iteration i + kPStages - kAhead, group 0 also those of the ones
  // before), and the decode of iteration 0.
DG_UNROLL
  for (int s = 0; s < kAhead; ++s) {
    if (s < total) load_a(s);
    for (int i = s == 0 ? 0 : s + kPStages - kAhead; i <= s + kPStages - kAhead; ++i)
      if (i < total) load_p();
    cp_async_commit();
  }
  cp_async_wait<kAhead - 1>();
  __syncthreads();
  decode(0, 0);
  fence_proxy_async();

  // Accumulator fragments: frag(nf, q) is tile row 64 wg + 16 (warp % 4) + lane / 4 + 8 (q / 2), column
  // 8 nf + 2 (lane % 4) + q % 2.
  const int g_row = lane >> 2, g_col = 2 * (lane & 3);
  const int m_lane = 64 * wg + 16 * (warp & 3) + g_row;
  const float* rs_e = g.rs + we * Nw;
  // NVFP4: acc * 2^7 is exact, so this is bf16(acc_true * rs) as with unscaled weights.
  auto scaled = [&](float v, float rs) { return __fmul_rn(kFp8 ? v : __fmul_rn(v, kFp4AccScale), rs); };
  auto epilogue = [&](int mt) {
DG_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int m = mt * kBM + m_lane + 8 * h;
      if (m >= rows) continue;
      const int64_t r = row0 + m;
      if (kGateUp) {
DG_UNROLL
        for (int nf = 0; nf < NF / 2; ++nf) {
          const int i = n_tile * (kBN / 2) + 8 * nf + g_col;
          if (i >= N) continue;  // N % 4 == 0: i + 1 < N as well
          uint32_t packed = 0;
DG_UNROLL
          for (int c = 0; c < 2; ++c) {
            const float gv = scaled(frag(nf, 2 * h + c), rs_e[i + c]);
            const float uv = scaled(frag(nf + NF / 2, 2 * h + c), rs_e[N + i + c]);
            const float gate = round_bf16(gelu_tanh(round_bf16(gv)));
            const uint16_t v = f32_to_bf16(__fmul_rn(gate, round_bf16(uv)));
            packed |= static_cast<uint32_t>(v) << (16 * c);
          }
          *reinterpret_cast<uint32_t*>(g.out + r * N + i) = packed;
        }
      } else {
        const int p = dense ? static_cast<int>(r) : g.pairs[r];
        const float wt = dense ? 1.0f : g.top_w[p];  // dense: bf16(bf16(y) * 1) = bf16(y)
DG_UNROLL
        for (int nf = 0; nf < NF; ++nf) {
          const int n = n_tile * kBN + 8 * nf + g_col;
          if (n >= N) continue;
          uint32_t packed = 0;
DG_UNROLL
          for (int c = 0; c < 2; ++c) {
            const float yv = scaled(frag(nf, 2 * h + c), rs_e[n + c]);
            const uint16_t v = f32_to_bf16(__fmul_rn(round_bf16(yv), wt));
            packed |= static_cast<uint32_t>(v) << (16 * c);
          }
          *reinterpret_cast<uint32_t*>(g.out + static_cast<int64_t>(p) * N + n) = packed;
        }
      }
    }
  };

  int mt = m_first, kt = 0;
  for (int it = 0; it < total; ++it) {
    cp_async_wait<kAhead - 2>();  // this thread's copies of iteration it + 1 have landed ...
    fence_proxy_async();          // ... its A rows visible to the tensor cores' reads ...
    __syncthreads();              // ... everyone's; D stage it decoded (and fenced) by everyone
    // Every warpgroup multiplies, also one past the M tile's rows (zero rows, never stored): a branch
    // around the wgmma makes ptxas serialise them (C7520).
    const uint32_t sa = s_a + (it % kStages) * kAStage + wg * 64 * kARowBytes, sd = s_d + (it % kDStages) * kDStage;
    fence_acc();
    wgmma_fence();
DG_UNROLL
    for (int kk = 0; kk < kBK / 16; ++kk)
DG_UNROLL
      for (int h = 0; h < NH; ++h)
        wgmma_m64n128k16(acc[h], sw128_desc(sa + 32 * kk), sw128_desc(sd + h * 128 * kARowBytes + 32 * kk));
    wgmma_commit();
    fence_acc();
    wgmma_wait<1>();  // this thread's view of the wgmma of it - 1 is done ...
    fence_acc();
    __syncthreads();  // ... everyone's: its A and D stages may be refilled
    // A rows of it + kAhead into the stage of it - 1; the weights of it + kPStages into the P stage of
    // it, decoded before the first barrier.
    if (it + kAhead < total) load_a((it + kAhead) % kStages);
    if (p_next < total) load_p();
    cp_async_commit();
    if (it + 1 < total) {
      decode((it + 1) % kPStages, (it + 1) % kDStages);
      fence_proxy_async();  // the decode's stores, visible to the wgmma of it + 1 after the next barrier
    }
    if (++kt == KT) {
      wgmma_wait<0>();
      fence_acc();
      epilogue(mt);
      zero_acc();
      fence_acc();
      kt = 0;
      mt += ms;
    }
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
}

// The wgmma tile variants (kQuantTiles ids 10 ..; sm_90 only, grouped_moe_fp4.cu falls back to the
// mma.sync kernel elsewhere), A stages / P stages (NVFP4, FP8):
//  10:  64 x 128, one warpgroup, 4 / 8, 6, 2 CTAs per SM (NVFP4 101 KB, FP8 113 KB);
//  11: 128 x 128, two warpgroups, 6 / 8, 8 (NVFP4 165 KB, FP8 193 KB): each weight decoded once per 128 rows;
//  12: 128 x 256, two warpgroups, 5 / 8, 5 (NVFP4 217 KB, FP8 225 KB): half the A re-reads of 11.
using QWg10 = QuantWgCfg<1, 128, 4, 8, 6, 2>;
using QWg11 = QuantWgCfg<2, 128, 6, 8, 8, 1>;
using QWg12 = QuantWgCfg<2, 256, 5, 8, 5, 1>;
constexpr int kFirstQuantWgmmaTile = 10;

}  // namespace
}  // namespace dgemma::cuda
