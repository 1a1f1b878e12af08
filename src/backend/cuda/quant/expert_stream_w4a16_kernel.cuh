#pragma once
// The W4A16 (NVFP4) and W8A16 (FP8, bf16 activations) weight-streaming expert GEMM: the design of
// quant/expert_stream_plan.cuh on bf16 warpgroup MMAs with A from registers. TMA streams the packed weight
// tiles in their device layout (quant/layout.h; 64 rows of 128 bytes a tile: 256 K values of NVFP4,
// 128 of FP8) and, for NVFP4, their block scale codes (device layout [E, Kd / 64, Nw, 4]: a stage's
// 4 x 64 rows x 4 codes of a tile by one 2-D box); the consumer warpgroup decodes them in registers
// straight into the wgmma A fragment and issues wgmma m64nNk16 bf16 with B the expert's bf16 rows
// resident in shared memory (copied once per CTA and row chunk by cp.async, 128-byte swizzled K-major),
// N = 16 / 32 / 48 / 64 by the chunk's rows. Two consumer warpgroups, one a tile, so that one decodes
// while the other's MMAs run. So the decode is off the load path: a stage is handed back as soon as its
// words are in registers.
//
// The A fragment of rows g, g + 8 (g = lane / 4) of warp w's 16 and k pairs 2 t, 2 t + 8 (t = lane % 4)
// of a k16 step is exactly what the device layout gives lane quad t of a row (it was made for the
// mma.sync B fragment, whose k pattern is the same): NVFP4 the 8 bytes 8 t .. of the row's 32-byte
// slice of each 64 K (two words: steps 2 u, 2 u + 1 in word u) and its 4 scale codes; FP8 the 16 bytes
// 16 t .. of the 64-byte slice (word u: step u). Per bf16x2 pair one rotate + mask and one exact bf16x2
// multiply by the block scale code (NVFP4; the value e2m1 * scale * 2^-7) or by 2^120 (FP8).
// The maths are quant/weight_only_kernel.cuh's: exact bf16 weights, fp32 sums over all K in the
// accumulators, then (NVFP4) * 2^7, * row_scale, and the same gelu(gate) * up / routing-weight
// roundings. The tensor cores sum in their own order, so the result equals the mma.sync kernel's up
// to fp32 rounding of the sums (in the emulator, which sums k in order, bit for bit the reference).
//
// The includer provides what expert_stream_w8a8_kernel.cuh lists (less the FP8 quantisation's) and
// cp_async16 / cp_async_commit / cp_async_wait, lds_u32 / lds_v2 / lds_v4, bf16x2_mul, __byte_perm,
// wgmma_m64nk16_rs and wgmma_fence_operand(uint32_t&).
#include <cstdint>
#include <type_traits>

#include "backend/cuda/quant/expert_stream_plan.cuh"
#include "backend/cuda/quant/layout.h"
#include "backend/cuda/core/wgmma_desc.cuh"

namespace dgemma::cuda {
namespace {

constexpr float kW4a16AccScale = 128.0f;        // 2^7: NVFP4's scale code offset (quant/layout.h)
constexpr uint32_t kW4a16Pow120 = 0x7B807B80u;  // bf16x2 2^120: the FP8 decode's factor
constexpr int kW4a16ScaleTileBytes = 4 * kStreamTileRows * 4;  // 4 x 64 rows x 4 codes

// Per format: K values a stage (one 128-byte row of packed weights per weight row), 64-K sub-stages
// in it, weight bytes a stage (two tiles, NVFP4 also their scale codes).
template <bool kFp8>
struct W4a16Stage {
  static constexpr int kK = kFp8 ? 128 : 256;
  static constexpr int kSubs = kK / 64;
  static constexpr int kBytes = 2 * kStreamTileBytes + (kFp8 ? 0 : 2 * kW4a16ScaleTileBytes);
};

constexpr int kW4a16Threads = 384;  // warpgroup 0 produces, warpgroups 1 and 2 consume tiles 0 and 1
// The instances with a register cap for two CTAs an SM (85 a thread): up to 32 rows a chunk.
constexpr int kW4a16StreamTwoCtaRows = 32;

// Shared memory of expert_stream_w4a16_kernel<kGateUp, kFp8, max_rows> at this Kd (a multiple of 64):
// the ring, the rows (bf16, K-major in 64-K column blocks of max_rows 128-byte rows), and for gate_up
// the up values handed to the gate's warpgroup (bf16, max_rows / 2 a thread of 128).
template <bool kFp8>
StreamSmem w4a16_stream_smem(bool gate_up, int Kd, int max_rows) {
  return StreamSmem{W4a16Stage<kFp8>::kBytes, (Kd / 64) * max_rows * 128, gate_up ? 128 * max_rows : 0};
}

template <bool kGateUp, bool kFp8, int kMaxRows>
__global__ void __launch_bounds__(kW4a16Threads, kMaxRows <= kW4a16StreamTwoCtaRows ? 2 : 1)
    expert_stream_w4a16_kernel(const __grid_constant__ TmaMap wmap, const __grid_constant__ TmaMap smap,
                               ExpertStreamArgs g) {
  static_assert(kMaxRows % 16 == 0 && kMaxRows >= 16 && kMaxRows <= 64, "rows a chunk");
  using Stage = W4a16Stage<kFp8>;
  constexpr int kRowsBytes = kMaxRows * 128;  // one 64-K column block of the chunk's bf16 rows
  DG_KERNEL_DYNAMIC_SMEM(smem);
  const int e = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int Kd = g.Kd, N = g.N, S = g.stages;
  const int KT = (Kd + Stage::kK - 1) / Stage::kK, KB = Kd / 64;
  const int b0 = blockIdx.x * g.blocks_per_cta, nb = min(g.blocks_per_cta, g.blocks - b0);
  const int Nw = kGateUp ? 2 * N : N;
  const uint32_t s_ring = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t s_rows = s_ring + S * Stage::kBytes, s_xchg = s_rows + KB * kRowsBytes;
  StreamRing ring;
  ring.ring = s_ring;
  ring.full = s_xchg + (kGateUp ? 128 * kMaxRows : 0);
  ring.empty = ring.full + 8 * S;
  ring.stage_bytes = Stage::kBytes;
  ring.stages = S;
  ring.KT = KT;
  ring.nb = nb;
  ring.b0 = b0;
  ring.consumer_warps = 8;
  if (tid == 0) ring.init_barriers();
  __syncthreads();

  // ---- the producer's stream (thread 0): per stage the two tiles of (block j, K tile kt) and, NVFP4,
  // their scale codes (rows y = e KB + 4 kt .. + 3 of the [E KB, Nw 4] code matrix, bytes 4 n ..)
  const uint64_t policy = tid == 0 ? evict_first_policy() : 0;
  auto load = [&](uint32_t dst, uint32_t bar, int j, int kt) {
    for (int t = 0; t < 2; ++t) {
      const int row = expert_stream_tile_row(kGateUp, e, N, j, t);
      tma_load_2d_hint(dst + t * kStreamTileBytes, &wmap, kt * 128, row, bar, policy);
      if (!kFp8)
        tma_load_2d_hint(dst + 2 * kStreamTileBytes + t * kW4a16ScaleTileBytes, &smap, 4 * (row - e * Nw),
                         e * KB + 4 * kt, bar, policy);
    }
  };
  const int per_chunk = nb * KT;
  // With the early prefetch, chunk 0's first stages now: they depend on nothing upstream.
  if (g.early_prefetch != 0 && tid == 0)
    while (ring.issued < min(S, per_chunk)) ring.issue(load);

  DG_GRIDDEP_WAIT();
  const int row0 = g.offsets[e], rows = g.offsets[e + 1] - row0;
  if (rows <= 0) {  // no rows: no weights (the early stages, if any, land before the block leaves)
    if (tid == 0) ring.drain();
    return;
  }
  const int chunks = (rows + kMaxRows - 1) / kMaxRows, total = chunks * per_chunk;
  if (tid == 0)
    while (ring.issued < min(S, total)) ring.issue(load);

  // Copies the rows of chunk c (threads first .. first + count - 1, 16-byte pieces in turn): piece q
  // of row r (bf16 values 8 q ..) into column block q / 8, chunk q % 8 of the row's 128 bytes,
  // swizzled; rows past the chunk's up to a multiple of 16 zero-filled.
  auto copy_rows = [&](int c, int first_thread, int count) {
    const int first = c * kMaxRows, n = min(kMaxRows, rows - first), n16 = (n + 15) & ~15;
    const int pieces = Kd / 8;
    for (int idx = tid - first_thread; idx < n16 * pieces; idx += count) {
      const int r = idx / pieces, q = idx - r * pieces;
      const bool valid = r < n;
      const int64_t src_row = !valid ? 0 : kGateUp ? g.pairs[row0 + first + r] / g.top_k : row0 + first + r;
      cp_async16(s_rows + (q >> 3) * kRowsBytes + r * 128 + (((q & 7) ^ (r & 7)) << 4),
                 g.x + src_row * Kd + 8 * q, valid);
    }
    cp_async_commit();
    cp_async_wait<0>();
  };
  copy_rows(0, 0, kW4a16Threads);
  fence_proxy_async();  // the rows (cp.async: generic-proxy writes) visible to the tensor cores
  __syncthreads();
  DG_GRIDDEP_LAUNCH_DEPENDENTS();

  if (warp < 4) {  // ---- producer warpgroup: thread 0 streams the rest
    if (tid != 0) return;
    while (ring.issued < total) ring.issue(load);
    return;
  }

  // ---- consumer warpgroup ct (1 + ct): tile ct of every stage (gate_up: the gate rows, then the up
  // rows; down: the block's first 64 rows, then the next 64); its warp cw computes the tile's rows
  // 16 cw .. 16 cw + 15. While one warpgroup's MMAs run, the other decodes: each waits for its own
  // MMAs before it writes the next A fragments (an A register written while a wgmma that reads
  // registers is in flight serialises the wgmma), so the overlap is across the two warpgroups.
  const int ct = (warp >> 2) - 1, cw = warp & 3, ctid = tid & 127;
  const int g_row = lane >> 2, quad = lane & 3, g_col = 2 * quad;
  const float* rs_e = g.row_scale + static_cast<int64_t>(e) * Nw;
  uint16_t* const xchg = reinterpret_cast<uint16_t*>(smem + (s_xchg - smem_addr(smem)));
  RingPos read;
  // Decodes sub-stage `sub` (K 64 sub ..) of tile ct of the stage at sp into the A fragments a[kk].
  auto decode = [&](uint32_t sp, int sub, uint32_t(&a)[4][4]) {
    uint32_t w[2][4], sc[2] = {0, 0};
    DG_UNROLL
    for (int h2 = 0; h2 < 2; ++h2) {
      const int row = 16 * cw + g_row + 8 * h2;
      const uint32_t tile = sp + ct * kStreamTileBytes + row * 128;
      if (kFp8) {
        lds_v4(tile + (((4 * sub + quad) ^ (row & 7)) << 4), w[h2]);
      } else {
        uint32_t two[2];
        lds_v2(tile + (((2 * sub + (quad >> 1)) ^ (row & 7)) << 4) + 8 * (quad & 1), two);
        w[h2][0] = two[0];
        w[h2][1] = two[1];
        sc[h2] = lds_u32(sp + 2 * kStreamTileBytes + ct * kW4a16ScaleTileBytes + sub * 256 + row * 4);
      }
    }
    DG_UNROLL
    for (int kk = 0; kk < 4; ++kk) {
      DG_UNROLL
      for (int h2 = 0; h2 < 2; ++h2) {
        const uint32_t scale2 =
            kFp8 ? kW4a16Pow120 : scale_code_bits(__byte_perm(sc[h2], 0, 0x4040u | (kk << 8) | kk));
        DG_UNROLL
        for (int h = 0; h < 2; ++h) {
          const uint32_t bits =
              kFp8 ? fp8_pair_bits(w[h2][kk], h) : fp4_pair_bits(w[h2][kk >> 1], 2 * (kk & 1) + h);
          a[kk][h2 + 2 * h] = bf16x2_mul(bits, scale2);
        }
      }
    }
  };
  // NVFP4: acc * 2^7 is exact, so this is bf16(acc_true * rs) as with unscaled weights.
  auto scaled = [](float v, float rs) { return __fmul_rn(kFp8 ? v : __fmul_rn(v, kW4a16AccScale), rs); };
  // The chunk's blocks with N = 16 / 32 / 48 / 64 (NT) token columns.
  auto run_chunk = [&](auto nt, int first, int n) {
    constexpr int NT = decltype(nt)::value, NF = NT / 2;
    float acc[NF];
    uint32_t a[4][4];  // the A fragments of the 4 k16 steps of 64 K
    auto fence_acc = [&] {
      DG_UNROLL
      for (int q = 0; q < NF; ++q) wgmma_fence_operand(acc[q]);
    };
    for (int j = b0; j < b0 + nb; ++j) {
      DG_UNROLL
      for (int q = 0; q < NF; ++q) acc[q] = 0.f;
      for (int kt = 0; kt < KT; ++kt) {
        mbar_wait(ring.full + 8 * read.slot, read.phase);
        const uint32_t sp = s_ring + read.slot * Stage::kBytes;
        DG_UNROLL
        for (int sub = 0; sub < Stage::kSubs; ++sub) {
          const int kb = kt * Stage::kSubs + sub;  // the 64-K column block
          if (kb >= KB) break;                     // past Kd (warpgroup-uniform)
          decode(sp, sub, a);
          // The stage's last words are in registers: it goes back to the producer.
          if (sub == Stage::kSubs - 1 || kb == KB - 1)
            if (lane == 0) mbar_arrive(ring.empty + 8 * read.slot);
          DG_UNROLL
          for (int kk = 0; kk < 4; ++kk) {
            DG_UNROLL
            for (int i = 0; i < 4; ++i) wgmma_fence_operand(a[kk][i]);
          }
          fence_acc();
          wgmma_fence();
          DG_UNROLL
          for (int kk = 0; kk < 4; ++kk)
            wgmma_m64nk16_rs<NT>(acc, a[kk], sw128_desc(s_rows + kb * kRowsBytes + 32 * kk), true);
          wgmma_commit();
          fence_acc();
          wgmma_wait<0>();  // before the next decode writes the A registers
          fence_acc();
        }
        read.next(S);
      }
      // acc[4 f + q]: tile ct's row 16 cw + g_row + 8 (q / 2), token column 8 f + g_col + q % 2. gate_up:
      // the up warpgroup hands bf16(up) to the gate one through shared memory (element q of thread
      // ctid at q * 128 + ctid), which pairs it with its own gate element of the same thread.
      if (kGateUp) {
        if (ct == 1) {
          DG_UNROLL
          for (int h = 0; h < 2; ++h) {
            const int i = 64 * j + 16 * cw + g_row + 8 * h;
            const float rs_u = i < N ? rs_e[N + i] : 0.0f;
            DG_UNROLL
            for (int q = 0; q < 4 * (NT / 8); q += 4) {
              DG_UNROLL
              for (int c = 0; c < 2; ++c)
                xchg[(q + 2 * h + c) * 128 + ctid] = f32_to_bf16(scaled(acc[q + 2 * h + c], rs_u));
            }
          }
        }
        named_barrier_sync(2, 256);  // the up values in place
        if (ct == 0) {
          DG_UNROLL
          for (int h = 0; h < 2; ++h) {
            const int i = 64 * j + 16 * cw + g_row + 8 * h;
            if (i >= N) continue;
            const float rs_g = rs_e[i];
            DG_UNROLL
            for (int f = 0; f < NT / 8; ++f) {
              DG_UNROLL
              for (int c = 0; c < 2; ++c) {
                const int col = 8 * f + g_col + c;
                if (col >= n) continue;
                const float gate = round_bf16(gelu_tanh(round_bf16(scaled(acc[4 * f + 2 * h + c], rs_g))));
                const float up = bf16_to_f32(xchg[(4 * f + 2 * h + c) * 128 + ctid]);
                g.out[static_cast<int64_t>(row0 + first + col) * N + i] = f32_to_bf16(__fmul_rn(gate, up));
              }
            }
          }
        }
        named_barrier_sync(2, 256);  // read: the buffer is free for the next block
      } else {
        DG_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int o = 128 * j + 64 * ct + 16 * cw + g_row + 8 * h;
          if (o >= N) continue;
          const float rs = rs_e[o];
          DG_UNROLL
          for (int f = 0; f < NT / 8; ++f) {
            DG_UNROLL
            for (int c = 0; c < 2; ++c) {
              const int col = 8 * f + g_col + c;
              if (col >= n) continue;
              const int p = g.pairs[row0 + first + col];
              const float v = scaled(acc[4 * f + 2 * h + c], rs);
              g.out[static_cast<int64_t>(p) * N + o] = f32_to_bf16(__fmul_rn(round_bf16(v), g.top_w[p]));
            }
          }
        }
      }
    }
  };
  for (int c = 0; c < chunks; ++c) {
    const int first = c * kMaxRows, n = min(kMaxRows, rows - first);
    if (c > 0) {  // every consumer thread's MMAs on the previous rows have completed (each waited)
      named_barrier_sync(1, 256);
      copy_rows(c, 128, 256);
      fence_proxy_async();
      named_barrier_sync(1, 256);
    }
    const int n16 = (n + 15) >> 4;  // uniform over the consumers
    if (n16 == 1) run_chunk(std::integral_constant<int, 16>{}, first, n);
    if constexpr (kMaxRows >= 32)
      if (n16 == 2) run_chunk(std::integral_constant<int, 32>{}, first, n);
    if constexpr (kMaxRows >= 48)
      if (n16 == 3) run_chunk(std::integral_constant<int, 48>{}, first, n);
    if constexpr (kMaxRows >= 64)
      if (n16 == 4) run_chunk(std::integral_constant<int, 64>{}, first, n);
  }
}

// The launch of one projection for any launcher L (as run_expert_stream_w8a8):
// `l.template w4a16<kGateUp, kFp8, kMaxRows>(wmap, smap, args, grid_x, grid_y, smem)` runs the kernel.
// w: the packed weights [E, Nw, Kd / 2] (NVFP4) or E4M3 [E, Nw, Kd] (FP8) in the device layout; block:
// NVFP4's scale codes [E, Kd / 64, Nw, 4] (unused for FP8).
template <bool kGateUp, bool kFp8, class L>
void run_expert_stream_w4a16(L& l, const ExpertStreamPlan& plan, ExpertStreamArgs g, const uint8_t* w,
                             const uint8_t* block, int64_t E, bool early_prefetch) {
  if (plan.max_rows == 0 || E <= 0 || g.N <= 0) return;
  g.blocks = plan.blocks;
  g.blocks_per_cta = plan.blocks_per_cta;
  g.stages = plan.stages;
  g.early_prefetch = early_prefetch ? 1 : 0;
  const int64_t Nw = kGateUp ? 2 * int64_t{g.N} : g.N;
  const auto wmap = l.map(w, E * Nw, kFp8 ? g.Kd : g.Kd / 2, 128, kStreamTileRows, true);
  const auto smap = kFp8 ? wmap : l.map(block, E * (g.Kd / 64), Nw * 4, 256, 4, false);  // (FP8: unused)
  const int grid_x = (plan.blocks + plan.blocks_per_cta - 1) / plan.blocks_per_cta;
  switch (plan.max_rows) {
    case 16:
      l.template w4a16<kGateUp, kFp8, 16>(wmap, smap, g, grid_x, E, plan.smem);
      break;
    case 32:
      l.template w4a16<kGateUp, kFp8, 32>(wmap, smap, g, grid_x, E, plan.smem);
      break;
    default:
      l.template w4a16<kGateUp, kFp8, 64>(wmap, smap, g, grid_x, E, plan.smem);
      break;
  }
}

}  // namespace
}  // namespace dgemma::cuda
