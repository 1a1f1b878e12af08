#pragma once
// What the weight-streaming ("swap-AB") expert GEMM kernels share (quant/expert_stream_w8a8_kernel.cuh:
// W8A8 on E4M3 wgmma; quant/expert_stream_w4a16_kernel.cuh: NVFP4 W4A16 / FP8 W8A16 on bf16 wgmma with
// A from registers): their arguments, the shared-memory ring's bookkeeping and the launch plan. Plain
// C++ and device code with no CUDA API call, so that the emulated unit tests compile it on the host.
//
// The regime: few routed rows per expert (batch-1 denoising: ~16), every expert hit, so a step must
// stream every expert weight once and the GEMMs are bound by the weight bytes. The MMA's M side is the
// weight rows (64 a tile), its N side the expert's token rows (16 .. 64, chosen per expert), so no MMA
// work is spent on rows an expert does not have:
//   * a CTA (blockIdx.x, expert blockIdx.y) takes blocks_per_cta consecutive weight blocks of its
//     expert: gate_up, 64 gate rows [i0, i0 + 64) with the matching up rows [N + i0, ..) (two 64-row
//     tiles, so each thread holds gate and up of the same (i, row) for the gelu(gate) * up epilogue);
//     down, 128 output rows as two 64-row tiles;
//   * warpgroup 0 produces: one thread streams the weight tiles of every (row chunk, block, K tile) of
//     the CTA through a ring of `stages` shared-memory stages by TMA (L2 evict-first) on transaction
//     barriers; the other warpgroups consume each stage with wgmma and hand it back;
//   * the expert's rows are loaded into shared memory once per CTA (and per chunk of max_rows rows:
//     an expert with more rows runs its weight blocks once per chunk), as the MMA's B operand;
//   * an expert with no rows reads no weights (unless early_prefetch, below).
// Programmatic dependent launch (core/griddep.cuh): the kernels read the routing (offsets,
// pairs) and the activations only after DG_GRIDDEP_WAIT(); with early_prefetch the first ring stages'
// weight loads, which depend on nothing upstream, are issued before it (an expert found empty then has
// read those stages' bytes: at most `stages` stages, instead of none); the blocks signal
// DG_GRIDDEP_LAUNCH_DEPENDENTS() once their prologue is done.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/core/griddep.cuh"
#include "backend/cuda/core/kernel_macros.cuh"

namespace dgemma::cuda {
namespace {

struct ExpertStreamArgs {
  // bf16: gate_up x [T, Kd] (a routed row reads its token's row); down act [R, Kd]
  const uint16_t* x = nullptr;
  const float* row_scale = nullptr;  // [E, Nw] (Nw = 2 N for gate_up, N for down)
  const int32_t* offsets = nullptr;  // [E + 1]: expert e's grouped rows offsets[e] .. offsets[e + 1] - 1
  const int32_t* pairs = nullptr;    // [R]: the pair id t * top_k + slot of each grouped row
  const float* top_w = nullptr;      // [R] by pair id (down)
  uint16_t* out = nullptr;           // gate_up: act [R, N]; down: y [R, N] by pair id
  int Kd = 0;                        // reduction length (H for gate_up, I for down)
  int N = 0;                         // output columns (I for gate_up, H for down)
  int top_k = 1;                     // gate_up: the token of a pair is pair / top_k
  int blocks = 0;                    // weight blocks per expert (expert_stream_blocks)
  int blocks_per_cta = 1;            // consecutive blocks a CTA takes
  int stages = 2;                    // ring stages
  int early_prefetch = 0;            // nonzero: the first ring stages are loaded before DG_GRIDDEP_WAIT()
};

constexpr int kStreamThreads = 256;  // W8A8: warpgroup 0 produces, warpgroup 1 consumes
constexpr int kStreamTileRows = 64;                      // weight rows of an MMA tile (wgmma's M)
constexpr int kStreamTileBytes = kStreamTileRows * 128;  // one tile of 128-byte rows: 8 KB
constexpr int kStreamMaxSmem = 232448;                   // dynamic shared memory of a block (227 KB on sm_90)
constexpr int kStreamSmemPerSm = 233472;  // an SM's shared memory (228 KB), 1 KB of it per block reserved
constexpr int kStreamMaxStages = 8;

// Weight rows of a block (two tiles) and the blocks of an expert: gate_up's block is 64 i columns
// (gate and up tiles), down's 128 output rows.
__host__ __device__ constexpr int expert_stream_block_cols(bool gate_up) {
  return gate_up ? 64 : 128;
}
__host__ __device__ constexpr int expert_stream_blocks(bool gate_up, int N) {
  return (N + expert_stream_block_cols(gate_up) - 1) / expert_stream_block_cols(gate_up);
}
// The first weight row (of the [E Nw, .] matrix) of tile t (0, 1) of block j of expert e.
__host__ __device__ constexpr int expert_stream_tile_row(bool gate_up, int e, int N, int j, int t) {
  return gate_up ? e * 2 * N + t * N + 64 * j : e * N + 128 * j + 64 * t;
}

// The ring: stage it of the CTA's sequence (row chunk, block, K tile) sits in slot it % stages, and
// its barriers complete their (it / stages)-th phase when it lands (full) and when it has been read
// (empty). Counted incrementally (no division per stage).
struct RingPos {
  int slot = 0;
  uint32_t phase = 0;  // parity of the current pass over the ring
  __device__ __forceinline__ void next(int stages) {
    if (++slot == stages) {
      slot = 0;
      phase ^= 1u;
    }
  }
};

// The ring's barriers and its producer (thread 0 of the block): stage `issued` of the CTA's sequence is
// (row chunk issued / (nb KT), block b0 + (issued / KT) % nb, K tile issued % KT). full[slot]
// completes when the stage's stage_bytes have landed (one arrival: the expect_tx), empty[slot] when the
// consumer warps have read it. The barrier functions come from the includer (tma_ptx.cuh or the
// emulator).
struct StreamRing {
  uint32_t ring = 0, full = 0, empty = 0;  // shared-memory addresses: slot s at ring + s stage_bytes, its
                                           // barriers at full + 8 s and empty + 8 s
  int stage_bytes = 0, stages = 0, KT = 0, nb = 0, b0 = 0;
  int consumer_warps = 4;  // the warps that read each stage (empty[slot]'s arrivals)
  RingPos pos;
  int issued = 0;
  __device__ __forceinline__ void init_barriers() const {  // one thread, then a block barrier
    for (int s = 0; s < stages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, static_cast<uint32_t>(consumer_warps));
    }
    mbar_fence_init();
  }
  // Issues the next stage once its slot is free: load(dst, bar, block, kt) starts its copies, which
  // complete_tx on bar.
  template <class Load>
  __device__ __forceinline__ void issue(Load&& load) {
    const int kt = issued % KT, j = b0 + (issued / KT) % nb;
    const uint32_t bar = full + 8 * pos.slot;
    mbar_wait(empty + 8 * pos.slot, pos.phase ^ 1u);  // the slot's previous stage has been read
    mbar_arrive_expect_tx(bar, static_cast<uint32_t>(stage_bytes));
    load(ring + static_cast<uint32_t>(pos.slot * stage_bytes), bar, j, kt);
    pos.next(stages);
    ++issued;
  }
  // Before a block with stages in flight leaves without reading them: they land first.
  __device__ __forceinline__ void drain() const {
    for (int s = 0; s < issued && s < stages; ++s) mbar_wait(full + 8 * s, 0);
  }
};

// Shared memory of a kernel instance: the ring, then the activation rows (B operand), then the
// per-row scales (FP8) and the barriers, after up to 1 KB of alignment slack (the 128-byte swizzle's
// 1024-byte atoms).
struct StreamSmem {
  int stage_bytes = 0;  // weight bytes a stage (expect_tx)
  int rows_bytes = 0;   // the B operand of a row chunk
  int scale_bytes = 0;
  __host__ __device__ constexpr int total(int stages) const {
    return 1024 + stages * stage_bytes + rows_bytes + scale_bytes + 16 * stages;
  }
};

// How a launch runs (expert_stream_plan): rows a chunk (16 .. 64), ring stages, blocks a CTA, the CTAs
// an SM the shared memory allows, and the dynamic shared memory. max_rows == 0: the shape cannot run.
struct ExpertStreamPlan {
  int max_rows = 0;
  int stages = 0;
  int blocks = 0;
  int blocks_per_cta = 0;
  int ctas_per_sm = 0;
  int smem = 0;
};

// `layout(max_rows)` gives the StreamSmem of a kernel at this Kd. max_rows (rows a chunk: 16, 32 or 64,
// the kernels' instances) may be requested; automatic (0): the smallest that holds twice the mean rows
// per expert (most experts then fit one chunk), lowered while the ring would have fewer than 3
// stages. blocks_per_cta may be requested; automatic (0): about two CTAs per resident slot (a short
// tail). Two CTAs an SM when max_rows <= two_cta_rows (the kernel's instances that fit 128 registers a
// thread) and they fit with 3+ stages, else one with up to kStreamMaxStages.
template <typename Layout>
inline ExpertStreamPlan expert_stream_plan(bool gate_up, int64_t R, int64_t E, int N, int max_rows,
                                           int blocks_per_cta, int sms, int two_cta_rows, Layout layout) {
  ExpertStreamPlan p;
  if (E <= 0 || N <= 0 || (max_rows != 0 && max_rows != 16 && max_rows != 32 && max_rows != 64)) return p;
  const bool automatic = max_rows == 0;
  if (automatic) {
    const int64_t want = 2 * (R / E);
    max_rows = want <= 16 ? 16 : want <= 32 ? 32 : 64;
  }
  for (;; max_rows /= 2) {
    const StreamSmem lay = layout(max_rows);
    auto stages_within = [&](int budget) {
      const int fixed = lay.total(0);
      return budget > fixed ? std::min(kStreamMaxStages, (budget - fixed) / (lay.stage_bytes + 16)) : 0;
    };
    p.ctas_per_sm = 1;
    p.stages = stages_within(kStreamMaxSmem);
    if (max_rows <= two_cta_rows) {
      const int two = stages_within(kStreamSmemPerSm / 2 - 1024);
      if (two >= 3) {
        p.ctas_per_sm = 2;
        p.stages = two;
      }
    }
    p.smem = lay.total(p.stages);
    if (p.stages >= 3 || (!automatic && p.stages >= 2)) break;
    if (!automatic || max_rows == 16) return ExpertStreamPlan{};
  }
  p.max_rows = max_rows;
  p.blocks = expert_stream_blocks(gate_up, N);
  if (blocks_per_cta <= 0) {
    const int64_t slots = static_cast<int64_t>(std::max(sms, 1)) * p.ctas_per_sm;
    const int64_t want = (static_cast<int64_t>(p.blocks) * E + 2 * slots - 1) / (2 * slots);
    blocks_per_cta = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(p.blocks, want)));
  }
  p.blocks_per_cta = std::min(blocks_per_cta, p.blocks);
  return p;
}

}  // namespace
}  // namespace dgemma::cuda
