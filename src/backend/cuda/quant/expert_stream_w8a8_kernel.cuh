#pragma once
// The W8A8 weight-streaming expert GEMM (FP8-dynamic experts, few rows per expert): the design of
// quant/expert_stream_plan.cuh on Hopper's FP8 warpgroup MMA, wgmma m64nNk32 .e4m3.e4m3 with the weights
// as A (64 rows a tile, K-major [Nw, Kd] as the checkpoint stores them, by TMA into 128-byte swizzled
// stages) and the expert's rows as B (N = 16 / 32 / 48 / 64 by the rows of the chunk).
//
// The activation quantisation is fused into the prologue: the CTA reads its rows' bf16 activations
// (gate_up: each routed row's token row of x; down: the routed rows of act) and quantises each row as
// quant/fp8_quant_kernel.cuh does, bit for bit (the same e4m3_code, amax, IEEE division and floor scale):
//   s = max(amax / 448, 1 / (448 * 512)),  q[k] = e4m3(x[k] / s)
// into the B operand's 128-byte swizzled K-major layout in shared memory (K tiles of 128 codes; codes
// past Kd and rows past the chunk's zero), one warp a row; the scales stay in shared memory for the
// epilogue. The maths are quant/w8a8_experts_kernel.cuh's: per K tile of 128 the four k32 MMAs start
// from zero and the tile's sum is added to fp32 registers (promotion every 128 K), then
//   v = (sum * s_row) * row_scale[n]
// and gate_up act = bf16(bf16(gelu_tanh(bf16(v_gate))) * bf16(v_up)), down y[p] = bf16(bf16(v) * top_w[p]).
//
// The includer provides (device: core/common.cuh, core/ptx.cuh, quant/ptx.cuh, core/wgmma_ptx.cuh,
// core/tma_ptx.cuh, quant/expert_stream_ptx.cuh; the emulated unit tests:
// tests/unit/backend/cuda_emulator.h): threadIdx /
// blockIdx, __syncthreads, __shfl_xor_sync, __ldg, __fdiv_rn, __fmul_rn, fmaxf, fabsf, smem_addr,
// sts_b64, evict_first_policy, the mbar_* barriers, tma_load_2d_hint, fence_proxy_async,
// named_barrier_sync, wgmma_fence(_operand) / commit / wait, wgmma_m64nk32_e4m3, f32_to_bf16,
// round_bf16, gelu_tanh and DG_KERNEL_DYNAMIC_SMEM.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/core/bf16_words.cuh"
#include "backend/cuda/quant/expert_stream_plan.cuh"
#include "backend/cuda/quant/fp8_quant_kernel.cuh"
#include "backend/cuda/core/wgmma_desc.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kW8a8StreamK = 128;  // K values (bytes) of a stage: one 128-byte row per weight row
constexpr int kW8a8StreamStageBytes = 2 * kStreamTileBytes;
constexpr int kW8a8QuantWordsPerLane = 11;  // a row's 16-byte words a lane keeps in registers (Kd <= 2816)

// The instances with a 128-register cap (two CTAs an SM): 16 rows a chunk (32 would spill).
constexpr int kW8a8StreamTwoCtaRows = 16;

// Shared memory of expert_stream_w8a8_kernel<., max_rows> at this Kd.
inline StreamSmem w8a8_stream_smem(int Kd, int max_rows) {
  const int kt = (Kd + kW8a8StreamK - 1) / kW8a8StreamK;
  return StreamSmem{kW8a8StreamStageBytes, kt * max_rows * 128, max_rows * 4};
}

template <bool kGateUp, int kMaxRows>
__global__ void __launch_bounds__(kStreamThreads, kMaxRows <= kW8a8StreamTwoCtaRows ? 2 : 1)
    expert_stream_w8a8_kernel(const __grid_constant__ TmaMap wmap, ExpertStreamArgs g) {
  static_assert(kMaxRows % 16 == 0 && kMaxRows >= 16 && kMaxRows <= 64, "rows a chunk");
  constexpr int kRowsBytes = kMaxRows * 128;  // one K tile of the chunk's codes
  DG_KERNEL_DYNAMIC_SMEM(smem);
  const int e = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int Kd = g.Kd, N = g.N, S = g.stages;
  const int KT = (Kd + kW8a8StreamK - 1) / kW8a8StreamK;
  const int b0 = blockIdx.x * g.blocks_per_cta, nb = min(g.blocks_per_cta, g.blocks - b0);
  const uint32_t base = smem_addr(smem), s_ring = (base + 1023u) & ~1023u;
  const uint32_t s_codes = s_ring + S * kW8a8StreamStageBytes, s_scales = s_codes + KT * kRowsBytes;
  float* const scales = reinterpret_cast<float*>(smem + (s_scales - base));
  StreamRing ring;
  ring.ring = s_ring;
  ring.full = s_scales + kMaxRows * 4;
  ring.empty = ring.full + 8 * S;
  ring.stage_bytes = kW8a8StreamStageBytes;
  ring.stages = S;
  ring.KT = KT;
  ring.nb = nb;
  ring.b0 = b0;
  if (tid == 0) ring.init_barriers();
  __syncthreads();

  // ---- the producer's stream (thread 0): per stage the two weight tiles of (block j, K tile kt)
  const uint64_t policy = tid == 0 ? evict_first_policy() : 0;
  auto load = [&](uint32_t dst, uint32_t bar, int j, int kt) {
    for (int t = 0; t < 2; ++t)
      tma_load_2d_hint(dst + t * kStreamTileBytes, &wmap, kt * kW8a8StreamK,
                       expert_stream_tile_row(kGateUp, e, N, j, t), bar, policy);
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

  // Quantises the rows of chunk c into the codes (warps w0 .. w0 + nw - 1, a row each in turn).
  // Word i of a row (bf16 values 8 i .. 8 i + 7) becomes 8 codes: K tile i / 16, 16-byte chunk
  // (i % 16) / 2 of the row's 128 bytes (swizzled with the row's 8-row phase), half i % 2.
  auto quantize = [&](int c, int w0, int nw) {
    const int first = c * kMaxRows, n = min(kMaxRows, rows - first), n16 = (n + 15) & ~15;
    const int words = Kd / 8, padded = KT * (kW8a8StreamK / 8);
    for (int r = warp - w0; r < n16; r += nw) {  // warp-uniform
      const bool valid = r < n;
      const int64_t src_row = !valid ? 0 : kGateUp ? g.pairs[row0 + first + r] / g.top_k : row0 + first + r;
      const uint4* src = reinterpret_cast<const uint4*>(g.x) + src_row * words;
      auto load_word = [&](int i) { return valid && i < words ? __ldg(src + i) : make_uint4(0, 0, 0, 0); };
      uint4 v[kW8a8QuantWordsPerLane];
      float amax = 0.0f;
      auto add_amax = [&](const uint4& w) {
        float f[8];
        unpack_bf16x8(w, f);
        DG_UNROLL
        for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(f[k]));
      };
      DG_UNROLL
      for (int j = 0; j < kW8a8QuantWordsPerLane; ++j) v[j] = load_word(lane + 32 * j);
      DG_UNROLL
      for (int j = 0; j < kW8a8QuantWordsPerLane; ++j) add_amax(v[j]);
      for (int i0 = 32 * kW8a8QuantWordsPerLane; i0 < words; i0 += 32)
        add_amax(load_word(i0 + lane));  // Kd > 2816
      DG_UNROLL
      for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      const float s = fmaxf(__fdiv_rn(amax, kFp8QuantMax), kFp8QuantMinScale);
      if (lane == 0) scales[r] = s;
      auto store_codes = [&](int i, const uint4& w) {
        float f[8];
        unpack_bf16x8(w, f);
        uint32_t q[2] = {0, 0};
        DG_UNROLL
        for (int k = 0; k < 8; ++k) q[k / 4] |= e4m3_code(__fdiv_rn(f[k], s)) << (8 * (k % 4));
        const int ch = (i & 15) >> 1;
        sts_b64(s_codes + (i >> 4) * kRowsBytes + r * 128 + ((ch ^ (r & 7)) << 4) + 8 * (i & 1), q[0], q[1]);
      };
      DG_UNROLL
      for (int j = 0; j < kW8a8QuantWordsPerLane; ++j)
        if (lane + 32 * j < padded) store_codes(lane + 32 * j, v[j]);
      for (int i0 = 32 * kW8a8QuantWordsPerLane; i0 < padded; i0 += 32)
        if (i0 + lane < padded) store_codes(i0 + lane, load_word(i0 + lane));
    }
  };
  quantize(0, 0, kStreamThreads / 32);  // every warp: the producer's loads are in flight meanwhile
  fence_proxy_async();                  // the codes (generic-proxy stores) visible to the tensor cores
  __syncthreads();
  DG_GRIDDEP_LAUNCH_DEPENDENTS();

  if (warp < 4) {  // ---- producer warpgroup: thread 0 streams the rest
    if (tid != 0) return;
    while (ring.issued < total) ring.issue(load);
    return;
  }

  // ---- consumer warpgroup: warp cw computes tile rows 16 cw .. 16 cw + 15 of both tiles
  const int cw = warp - 4, g_row = lane >> 2, g_col = 2 * (lane & 3);
  const float* rs_e = g.row_scale + static_cast<int64_t>(e) * (kGateUp ? 2 * N : N);
  RingPos read;
  // The chunk's blocks with N = 16 / 32 / 48 / 64 (NT) token columns.
  auto run_chunk = [&](auto nt, int first, int n) {
    constexpr int NT = decltype(nt)::value, NF = NT / 2;
    float acc[2][NF], sum[2][NF];
    DG_UNROLL
    for (int t = 0; t < 2; ++t) {
      DG_UNROLL
      for (int q = 0; q < NF; ++q) acc[t][q] = 0.f;
    }
    auto fence_acc = [&] {
      DG_UNROLL
      for (int t = 0; t < 2; ++t) {
        DG_UNROLL
        for (int q = 0; q < NF; ++q) wgmma_fence_operand(acc[t][q]);
      }
    };
    for (int j = b0; j < b0 + nb; ++j) {
      DG_UNROLL
      for (int t = 0; t < 2; ++t) {
        DG_UNROLL
        for (int q = 0; q < NF; ++q) sum[t][q] = 0.f;
      }
      for (int kt = 0; kt < KT; ++kt) {
        mbar_wait(ring.full + 8 * read.slot, read.phase);
        const uint32_t sa = s_ring + read.slot * kW8a8StreamStageBytes, sb = s_codes + kt * kRowsBytes;
        fence_acc();
        wgmma_fence();
        DG_UNROLL
        for (int kk = 0; kk < kW8a8StreamK / 32; ++kk) {
          DG_UNROLL
          for (int t = 0; t < 2; ++t)
            wgmma_m64nk32_e4m3<NT>(acc[t], sw128_desc(sa + t * kStreamTileBytes + 32 * kk),
                                   sw128_desc(sb + 32 * kk), kk > 0);
        }
        wgmma_commit();
        fence_acc();
        wgmma_wait<0>();  // this K tile's sums (promoted below); its stage goes back to the producer
        fence_acc();
        if (lane == 0) mbar_arrive(ring.empty + 8 * read.slot);
        read.next(S);
        DG_UNROLL
        for (int t = 0; t < 2; ++t) {
          DG_UNROLL
          for (int q = 0; q < NF; ++q) sum[t][q] += acc[t][q];
        }
      }
      // sum[t][4 f + q]: tile t's row 16 cw + g_row + 8 (q / 2), token column 8 f + g_col + q % 2.
      DG_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int m = 16 * cw + g_row + 8 * h;
        if (kGateUp) {
          const int i = 64 * j + m;
          if (i >= N) continue;
          const float rs_g = rs_e[i], rs_u = rs_e[N + i];
          DG_UNROLL
          for (int f = 0; f < NT / 8; ++f) {
            DG_UNROLL
            for (int c = 0; c < 2; ++c) {
              const int col = 8 * f + g_col + c;
              if (col >= n) continue;
              const float s_row = scales[col];
              const float vg = __fmul_rn(__fmul_rn(sum[0][4 * f + 2 * h + c], s_row), rs_g);
              const float vu = __fmul_rn(__fmul_rn(sum[1][4 * f + 2 * h + c], s_row), rs_u);
              const float gate = round_bf16(gelu_tanh(round_bf16(vg)));
              g.out[static_cast<int64_t>(row0 + first + col) * N + i] =
                  f32_to_bf16(__fmul_rn(gate, round_bf16(vu)));
            }
          }
        } else {
          DG_UNROLL
          for (int t = 0; t < 2; ++t) {
            const int o = 128 * j + 64 * t + m;
            if (o >= N) continue;
            const float rs = rs_e[o];
            DG_UNROLL
            for (int f = 0; f < NT / 8; ++f) {
              DG_UNROLL
              for (int c = 0; c < 2; ++c) {
                const int col = 8 * f + g_col + c;
                if (col >= n) continue;
                const int p = g.pairs[row0 + first + col];
                const float v = __fmul_rn(__fmul_rn(sum[t][4 * f + 2 * h + c], scales[col]), rs);
                g.out[static_cast<int64_t>(p) * N + o] = f32_to_bf16(__fmul_rn(round_bf16(v), g.top_w[p]));
              }
            }
          }
        }
      }
    }
  };
  for (int c = 0; c < chunks; ++c) {
    const int first = c * kMaxRows, n = min(kMaxRows, rows - first);
    if (c > 0) {  // every consumer thread's MMAs on the previous codes have completed (each waited)
      named_barrier_sync(1, 128);
      quantize(c, 4, 4);
      fence_proxy_async();
      named_barrier_sync(1, 128);
    }
    const int n16 = (n + 15) >> 4;  // warpgroup-uniform
    if (n16 == 1) run_chunk(std::integral_constant<int, 16>{}, first, n);
    if constexpr (kMaxRows >= 32)
      if (n16 == 2) run_chunk(std::integral_constant<int, 32>{}, first, n);
    if constexpr (kMaxRows >= 48)
      if (n16 == 3) run_chunk(std::integral_constant<int, 48>{}, first, n);
    if constexpr (kMaxRows >= 64)
      if (n16 == 4) run_chunk(std::integral_constant<int, 64>{}, first, n);
  }
}

// The launch of one projection for any launcher L (the device: a CUDA launch; the unit tests: the
// emulator): `l.map(base, rows, cols, box_cols, box_rows, swizzle)` makes the TMA map of a byte matrix,
// `l.template w8a8<kGateUp, kMaxRows>(map, args, grid_x, grid_y, smem)` runs the kernel. g: the
// activations, routing and output (its plan fields are set here); w: the E4M3 weights [E, Nw, Kd].
template <bool kGateUp, class L>
void run_expert_stream_w8a8(L& l, const ExpertStreamPlan& plan, ExpertStreamArgs g, const uint8_t* w,
                           int64_t E, bool early_prefetch) {
  if (plan.max_rows == 0 || E <= 0 || g.N <= 0) return;
  g.blocks = plan.blocks;
  g.blocks_per_cta = plan.blocks_per_cta;
  g.stages = plan.stages;
  g.early_prefetch = early_prefetch ? 1 : 0;
  const int64_t Nw = kGateUp ? 2 * int64_t{g.N} : g.N;
  const auto map = l.map(w, E * Nw, g.Kd, kW8a8StreamK, kStreamTileRows, true);
  const int grid_x = (plan.blocks + plan.blocks_per_cta - 1) / plan.blocks_per_cta;
  switch (plan.max_rows) {
    case 16:
      l.template w8a8<kGateUp, 16>(map, g, grid_x, E, plan.smem);
      break;
    case 32:
      l.template w8a8<kGateUp, 32>(map, g, grid_x, E, plan.smem);
      break;
    default:
      l.template w8a8<kGateUp, 64>(map, g, grid_x, E, plan.smem);
      break;
  }
}

}  // namespace
}  // namespace dgemma::cuda
