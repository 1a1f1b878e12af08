// Device-side grouping of the MoE (token, slot) pairs by expert and the grouped expert GEMM (tensor
// cores via mma.sync m16n8k16 bf16 -> fp32, cp.async multi-stage pipelines), with the rounding points
// of the CPU reference (cpu/moe.cpp): every output element is one fp32 dot product rounded once to
// bf16; the gate_up epilogue applies the activation exactly as launch_moe_act, the down epilogue the
// routing weight exactly as launch_moe_weight.
//
// Two GEMM kernels, both 128 threads (4 warps), BK = 64, cp.async.cg 16-byte chunks into XOR-swizzled
// rows of 128 bytes (ldmatrix bank-conflict free). For gate_up a tile's weight rows are half gate rows
// (i0 ..) and half the matching up rows (I + i0 ..), laid out so that each thread holds gate and up of
// the same (row, i) and the activation is fused into the epilogue. The A rows are read by index
// (gate_up: expert_in rows pairs[r] / K, fusing the gather; down: act rows r). Missing rows / columns /
// K tails are zero-filled (cp.async src-size 0) and never stored. Weight copies carry an L2
// evict-first policy (streamed once; the A rows are re-read per N tile).
//
// Small R (the average expert has <= 24 rows; T = 256 denoising, memory bound: ~16 rows per expert):
//   grouped_gemm_kernel<32>: tile 32 x 64 columns, 4 stages, grid (N tiles, E); each CTA loops over its
//   expert's M tiles with the (M tile, K tile) iterations flattened so the pipeline runs on across M
//   tiles. Warp w computes all 32 rows of the tile columns {8w .. 8w+7} and {32+8w .. 32+8w+7}.
// Large R (prefill chunks, batched denoising: ~64+ rows per expert):
//   grouped_gemm_big_kernel: tile 128 rows x 128 columns, 3 stages (96 KB, two CTAs per SM), one tile
//   per CTA from a tile list written by the grouping kernel (expert, first row, rows <= 128). Why:
//   - an expert's weights are read from HBM once: with 64-row tiles about half the experts at T = 1024
//     (64 +- 8 rows) needed a second M tile, and that CTA's second sweep over the weight slice came
//     from HBM again (1.5x the 1.52 GB). Experts with more than 128 rows get several tiles that sit next
//     to each other in blockIdx.x (the fastest grid index), so they run together and share the weight
//     lines through L2;
//   - 128 columns per CTA halve the re-reads of the A rows (one per N tile) against 64;
//   - warp w computes all the used rows of 32 columns (gate_up: 16 gate + 16 up), so each B fragment
//     feeds up to 8 MMAs and each A fragment 4; m16 fragments past the tile's rows are neither copied
//     nor multiplied (all warps skip alike), so a 70-row tile costs 80 rows of MMAs, not 128.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/grouped_moe.cuh"
#include "backend/cuda/ptx.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kBN = 64;        // output columns per CTA (gate_up: 32 gate + 32 up)
constexpr int kBK = 64;        // K per stage: a smem row is 128 bytes = 8 chunks of 16 bytes
constexpr int kStages = 4;
constexpr int kRowBytes = kBK * 2;

constexpr int kGroupThreads = 1024;
constexpr int kGroupSmemLimit = 48 * 1024;

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile (rows of 128 bytes).
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// ---- grouping -----------------------------------------------------------------------------------

// One block of kGroupThreads. Warp w owns the contiguous pair segment [w * seg, (w + 1) * seg);
// shared: cnt[nw][E] (per-warp counts, then per-warp start within the expert) and base[E].
// Pass 1 counts per warp (lanes with equal experts found by __match_any_sync, the lowest one adds),
// then per expert the counts become exclusive prefixes over warps, warp 0 scans the expert totals
// into offsets, and pass 2 places each pair at base[e] + warp start + rank among earlier lanes of the
// same expert. Segments, chunks and lanes are visited in pair order, so the grouping is stable.
// With a tile list (tiles != nullptr), warp 0 then cuts every expert's rows into tiles of tile_rows
// (the expert's base[] is final since the barrier before pass 2, and pass 2 leaves it alone) and pads
// the list with {-1, 0, 0, 0} up to max_tiles entries.
__global__ void __launch_bounds__(kGroupThreads) group_kernel(const int32_t* __restrict__ top_idx, int R, int E,
                                                              int nw, int32_t* __restrict__ offsets,
                                                              int32_t* __restrict__ pairs, int tile_rows,
                                                              int max_tiles, int4* __restrict__ tiles) {
  extern __shared__ int32_t gsm[];
  int32_t* cnt = gsm;             // [nw][E]
  int32_t* base = gsm + nw * E;   // [E]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < nw * E; i += blockDim.x) cnt[i] = 0;
  __syncthreads();
  const int64_t seg = (static_cast<int64_t>(R) + nw - 1) / nw;
  const int begin = warp < nw ? static_cast<int>(min(static_cast<int64_t>(R), warp * seg)) : R;
  const int end = warp < nw ? static_cast<int>(min(static_cast<int64_t>(R), begin + seg)) : R;
  const unsigned lt_mask = (1u << lane) - 1u;
  for (int b = begin; b < end; b += 32) {  // warp-uniform bounds
    const int p = b + lane;
    const bool valid = p < end;
    const int e = valid ? top_idx[p] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (valid && (same & lt_mask) == 0) cnt[warp * E + e] += __popc(same);
    __syncwarp();  // match/shuffle imply no memory order: the next chunk's adder of e must see this add
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0;
    for (int w = 0; w < nw; ++w) {
      const int c = cnt[w * E + e];
      cnt[w * E + e] = run;
      run += c;
    }
    base[e] = run;  // the total for now
  }
  __syncthreads();
  if (warp == 0) {
    int carry = 0;
    for (int e0 = 0; e0 < E; e0 += 32) {
      const int e = e0 + lane;
      const int v = e < E ? base[e] : 0;
      int incl = v;
#pragma unroll
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
  __syncthreads();
  for (int b = begin; b < end; b += 32) {
    const int p = b + lane;
    const bool valid = p < end;
    const int e = valid ? top_idx[p] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (valid) pairs[base[e] + cnt[warp * E + e] + __popc(same & lt_mask)] = p;
    __syncwarp();  // every lane has read cnt before the group's first lane advances it
    if (valid && (same & lt_mask) == 0) cnt[warp * E + e] += __popc(same);
    __syncwarp();
  }
  if (tiles == nullptr || warp != 0) return;
  int carry = 0;  // tiles of the experts before this chunk
  for (int e0 = 0; e0 < E; e0 += 32) {
    const int e = e0 + lane;
    const int first_row = e < E ? base[e] : 0;
    const int n_rows = e < E ? (e + 1 < E ? base[e + 1] : R) - first_row : 0;
    const int n_tiles = (n_rows + tile_rows - 1) / tile_rows;
    int incl = n_tiles;
#pragma unroll
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

// ---- grouped GEMM -------------------------------------------------------------------------------

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

template <int BM, bool kGateUp>
__global__ void __launch_bounds__(kThreads, BM == 32 ? 4 : 3) grouped_gemm_kernel(GroupedArgs g) {
  constexpr int MF = BM / 16;              // m16 fragments per warp
  constexpr int kAChunks = BM * 8 / kThreads;  // 16-byte chunks per thread per A stage
  constexpr int kBChunks = kBN * 8 / kThreads;
  constexpr int kAStage = BM * kRowBytes, kBStage = kBN * kRowBytes;
  static_assert(BM % 16 == 0 && kAChunks >= 1 && kBChunks == 4, "tile shape");
  extern __shared__ __align__(128) unsigned char smem[];

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
#pragma unroll
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
#pragma unroll
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
#pragma unroll
    for (int j = 0; j < kAChunks; ++j) {
      const int r = (tid >> 3) + 16 * j;
      const bool ok = a_ok[j] && k_ok;
      cp_async16(sa + swz(r, chunk), ok ? a_src[j] + k : g.a, ok);
    }
#pragma unroll
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
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int nf = 0; nf < 2; ++nf)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mf][nf][q] = 0.f;

  // Prologue: stages 0 .. kStages - 2 (a group is committed even when empty, so the wait counts hold).
#pragma unroll
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
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(sb + swz(b_row, 2 * kk + b_chunk), b[0], b[1], b[2], b[3]);
#pragma unroll
      for (int mf = 0; mf < MF; ++mf) {
        uint32_t a[4];
        ldmatrix_x4(sa + swz(mf * 16 + a_row, 2 * kk + a_chunk), a[0], a[1], a[2], a[3]);
        mma_bf16(acc[mf][0], a, b[0], b[1]);
        mma_bf16(acc[mf][1], a, b[2], b[3]);
      }
    }

    if (++kt == KT) {  // epilogue of M tile mt: registers -> global (no shared memory involved)
      const int g_row = lane >> 2, g_col = 2 * (lane & 3);
#pragma unroll
      for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = mt * BM + mf * 16 + g_row + 8 * h;
          if (m >= rows) continue;
          const int64_t r = row0 + m;
          if (kGateUp) {
            const int i = blockIdx.x * (kBN / 2) + 8 * warp + g_col;
            if (i >= N) continue;  // N % 8 == 0, so i + 1 < N as well
            uint32_t packed = 0;
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float gate = round_bf16(gelu_tanh(round_bf16(acc[mf][0][2 * h + c])));
              const uint16_t v = f32_to_bf16(__fmul_rn(gate, round_bf16(acc[mf][1][2 * h + c])));
              packed |= static_cast<uint32_t>(v) << (16 * c);
            }
            *reinterpret_cast<uint32_t*>(g.out + r * N + i) = packed;
          } else {
            const int p = g.pairs[r];
            const float wt = g.top_w[p];
#pragma unroll
            for (int nf = 0; nf < 2; ++nf) {
              const int n = blockIdx.x * kBN + 32 * nf + 8 * warp + g_col;
              if (n >= N) continue;
              uint32_t packed = 0;
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                const uint16_t v = f32_to_bf16(__fmul_rn(round_bf16(acc[mf][nf][2 * h + c]), wt));
                packed |= static_cast<uint32_t>(v) << (16 * c);
              }
              *reinterpret_cast<uint32_t*>(g.out + static_cast<int64_t>(p) * N + n) = packed;
            }
          }
        }
#pragma unroll
      for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int nf = 0; nf < 2; ++nf)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[mf][nf][q] = 0.f;
      kt = 0;
      ++mt;
    }
  }
  cp_async_wait<0>();  // nothing is outstanding (the last groups are empty), but leave no copy behind
}

// ---- grouped GEMM, large R: one 128 x 128 tile per CTA from the tile list -------------------------

constexpr int kBigBM = 128;  // rows per tile (the tile list's tile_rows)
constexpr int kBigBN = 128;  // output columns per CTA (gate_up: 64 gate + 64 up)
constexpr int kBigStages = 3;  // 3 x 32 KB: two CTAs (8 warps) per SM within the 227 KB

// Grid (tile list entries, N tiles): blockIdx.x is the tile, so the tiles of one expert (and one N
// tile) are neighbours in launch order and share the weight lines through L2. Warp w computes the used
// m16 fragments (rows 0 .. rows - 1, rounded up to 16) of 32 columns: down: tile columns 32w .. 32w+31
// (n fragments nf = 0..3 at 32w + 8nf); gate_up: gate i0+16w .. i0+16w+15 (nf 0, 1 at tile rows
// 16w + 8nf) and the matching up rows (nf 2, 3 at tile rows 64 + 16w + 8(nf - 2)).
template <bool kGateUp>
__global__ void __launch_bounds__(kThreads, 2) grouped_gemm_big_kernel(GroupedArgs g, const int4* __restrict__ tiles) {
  constexpr int MF = kBigBM / 16;                 // m16 fragments of a full tile
  constexpr int NF = 4;                           // n8 fragments per warp
  constexpr int kCopies = kBigBM * 8 / kThreads;  // A (and B) 16-byte chunks per thread per stage
  constexpr int kAStage = kBigBM * kRowBytes, kBStage = kBigBN * kRowBytes;
  static_assert(kBigBN * 8 / kThreads == kCopies && kCopies * 16 == kBigBM && NF * 8 * 4 == kBigBN, "tile shape");
  extern __shared__ __align__(128) unsigned char smem[];

  const int4 tile = tiles[blockIdx.x];
  const int e = tile.x;
  if (e < 0) return;  // past the list's used entries; uniform over the CTA, before any barrier
  const int row0 = tile.y, rows = tile.z;  // grouped rows row0 .. row0 + rows - 1, 1 <= rows <= kBigBM
  const int mfs = (rows + 15) >> 4;        // used m16 fragments: copy j (tile rows 16j ..) is fragment j
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int Kd = g.Kd, N = g.N;
  const int KT = (Kd + kBK - 1) / kBK;
  const int n0 = blockIdx.y * (kGateUp ? kBigBN / 2 : kBigBN);  // first output column (gate_up: i)
  const uint32_t s_a = smem_addr(smem), s_b = s_a + kBigStages * kAStage;
  const int trow = tid >> 3, chunk = tid & 7;  // copies: tile rows trow + 16 j, K offset chunk * 8

  // Weight rows: gate_up j < 4 gate row i = n0 + trow + 16 j, j >= 4 the up row N + i of i = n0 + trow +
  // 16 (j - 4) (tile row trow + 16 j >= 64 is up row i0 + tile row - 64); down row n0 + trow + 16 j.
  const uint16_t* w_e = g.w + static_cast<int64_t>(e) * (kGateUp ? 2 * N : N) * Kd;
  const uint16_t* b_src[kCopies];
  bool b_ok[kCopies];
#pragma unroll
  for (int j = 0; j < kCopies; ++j) {
    int n;
    if (kGateUp) {
      const int i = n0 + trow + 16 * (j & 3);
      b_ok[j] = i < N;
      n = j < 4 ? i : N + i;
    } else {
      n = n0 + trow + 16 * j;
      b_ok[j] = n < N;
    }
    b_src[j] = b_ok[j] ? w_e + static_cast<int64_t>(n) * Kd : g.w;
  }
  // A rows (-1: past the tile's rows, zero-filled within a used fragment).
  int a_row[kCopies];
#pragma unroll
  for (int j = 0; j < kCopies; ++j) {
    const int m = trow + 16 * j;
    a_row[j] = -1;
    if (m < rows) a_row[j] = kGateUp ? g.pairs[row0 + m] / g.top_k : row0 + m;
  }

  const uint64_t w_policy = evict_first_policy();
  auto load_stage = [&](int stage, int kt) {
    const int k = kt * kBK + chunk * 8;
    const bool k_ok = k < Kd;  // Kd % 8 == 0: a chunk is entirely inside or outside
    const uint32_t sa = s_a + stage * kAStage, sb = s_b + stage * kBStage;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      if (j >= mfs) break;  // fragment j is neither multiplied nor read by ldmatrix
      const bool ok = a_row[j] >= 0 && k_ok;
      cp_async16(sa + swz(trow + 16 * j, chunk), ok ? g.a + static_cast<int64_t>(a_row[j]) * Kd + k : g.a, ok);
    }
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const bool ok = b_ok[j] && k_ok;
      cp_async16_hint(sb + swz(trow + 16 * j, chunk), ok ? b_src[j] + k : g.w, ok, w_policy);
    }
  };

  float acc[MF][NF][4];
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int nf = 0; nf < NF; ++nf)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mf][nf][q] = 0.f;

  // Prologue: K tiles 0 .. kBigStages - 2 (a group is committed even when empty, so the wait counts
  // hold: before iteration kt, kBigStages - 1 + kt groups are committed and group kt is K tile kt).
#pragma unroll
  for (int s = 0; s < kBigStages - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }

  // ldmatrix lane addressing. A: lane -> tile row 16 mf + (lane & 15), chunk 2 kk + (lane >> 4) (the
  // four 8x8 matrices are a0..a3). B, x4 number p covers n fragments 2p, 2p + 1: matrix q = lane >> 3 ->
  // fragment 2p + (q >> 1), chunk 2 kk + (q & 1) (b0, b1).
  const int a_lrow = lane & 15, a_chunk = lane >> 4, b_chunk = (lane >> 3) & 1;
  int b_row[2];
#pragma unroll
  for (int p = 0; p < 2; ++p)
    b_row[p] = (kGateUp ? 64 * p + 16 * warp : 16 * p + 32 * warp) + ((lane >> 4) << 3) + (lane & 7);

  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kBigStages - 2>();  // this thread's copies of K tile kt have landed ...
    __syncthreads();                  // ... everyone's; and everyone is done with the stage refilled below
    if (kt + kBigStages - 1 < KT) load_stage((kt + kBigStages - 1) % kBigStages, kt + kBigStages - 1);
    cp_async_commit();

    const int stage = kt % kBigStages;
    const uint32_t sa = s_a + stage * kAStage, sb = s_b + stage * kBStage;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t b[NF][2];
#pragma unroll
      for (int p = 0; p < 2; ++p)
        ldmatrix_x4(sb + swz(b_row[p], 2 * kk + b_chunk), b[2 * p][0], b[2 * p][1], b[2 * p + 1][0], b[2 * p + 1][1]);
      // A fragments double-buffered: fragment mf + 1 is loaded before the MMAs of fragment mf.
      uint32_t a[2][4];
      ldmatrix_x4(sa + swz(a_lrow, 2 * kk + a_chunk), a[0][0], a[0][1], a[0][2], a[0][3]);
#pragma unroll
      for (int mf = 0; mf < MF; ++mf) {
        if (mf >= mfs) break;  // uniform over the CTA
        if (mf + 1 < mfs) {
          uint32_t(&nx)[4] = a[(mf + 1) & 1];
          ldmatrix_x4(sa + swz(16 * (mf + 1) + a_lrow, 2 * kk + a_chunk), nx[0], nx[1], nx[2], nx[3]);
        }
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) mma_bf16(acc[mf][nf], a[mf & 1], b[nf][0], b[nf][1]);
      }
    }
  }
  cp_async_wait<0>();  // nothing is outstanding (the last groups are empty), but leave no copy behind

  // Epilogue: registers -> global (no shared memory involved). Thread: rows 16 mf + g_row + 8 h,
  // column pairs g_col, g_col + 1 of each n fragment.
  const int g_row = lane >> 2, g_col = 2 * (lane & 3);
  if (kGateUp) {
#pragma unroll
    for (int mf = 0; mf < MF; ++mf) {
      if (mf >= mfs) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = 16 * mf + g_row + 8 * h;
        if (m >= rows) continue;
        const int64_t r = row0 + m;
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const int i = n0 + 16 * warp + 8 * p + g_col;
          if (i >= N) continue;  // N % 8 == 0, so i + 1 < N as well
          uint32_t packed = 0;
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float gate = round_bf16(gelu_tanh(round_bf16(acc[mf][p][2 * h + c])));
            const uint16_t v = f32_to_bf16(__fmul_rn(gate, round_bf16(acc[mf][p + 2][2 * h + c])));
            packed |= static_cast<uint32_t>(v) << (16 * c);
          }
          *reinterpret_cast<uint32_t*>(g.out + r * N + i) = packed;
        }
      }
    }
  } else {
    // The pair ids and routing weights of the thread's rows first (two dependent loads in all, not two
    // per row: the stores below may alias them as far as the compiler knows).
    int pid[MF][2];
    float wt[MF][2];
#pragma unroll
    for (int mf = 0; mf < MF; ++mf)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = 16 * mf + g_row + 8 * h;
        pid[mf][h] = m < rows ? g.pairs[row0 + m] : -1;
      }
#pragma unroll
    for (int mf = 0; mf < MF; ++mf)
#pragma unroll
      for (int h = 0; h < 2; ++h) wt[mf][h] = pid[mf][h] >= 0 ? g.top_w[pid[mf][h]] : 0.f;
#pragma unroll
    for (int mf = 0; mf < MF; ++mf) {
      if (mf >= mfs) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (pid[mf][h] < 0) continue;
        const int64_t p = pid[mf][h];
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
          const int n = n0 + 32 * warp + 8 * nf + g_col;
          if (n >= N) continue;
          uint32_t packed = 0;
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const uint16_t v = f32_to_bf16(__fmul_rn(round_bf16(acc[mf][nf][2 * h + c]), wt[mf][h]));
            packed |= static_cast<uint32_t>(v) << (16 * c);
          }
          *reinterpret_cast<uint32_t*>(g.out + p * N + n) = packed;
        }
      }
    }
  }
}

template <int BM, bool kGateUp>
void launch_grouped(const GroupedArgs& g, int64_t E, int64_t n_tiles, cudaStream_t stream) {
  const int smem = kStages * (BM + kBN) * kRowBytes;
  auto* kernel = grouped_gemm_kernel<BM, kGateUp>;
  if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<dim3(static_cast<unsigned>(n_tiles), static_cast<unsigned>(E)), kThreads, smem, stream>>>(g);
  CUDA_CHECK_LAUNCH();
}

template <bool kGateUp>
void launch_grouped_big(const GroupedArgs& g, const int32_t* tiles, int64_t max_tiles, int64_t n_tiles,
                        cudaStream_t stream) {
  constexpr int smem = kBigStages * (kBigBM + kBigBN) * kRowBytes;
  auto* kernel = grouped_gemm_big_kernel<kGateUp>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  // The most shared memory the SM offers (two 96 KB CTAs), whatever the driver would pick otherwise.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  kernel<<<dim3(static_cast<unsigned>(max_tiles), static_cast<unsigned>(n_tiles)), kThreads, smem, stream>>>(
      g, reinterpret_cast<const int4*>(tiles));
  CUDA_CHECK_LAUNCH();
}

// The small kernel (BM = 32) while the average expert has at most 24 rows (weight streaming: few
// padded MMA rows, 16 warps per SM in flight), the 128 x 128 tiles of the tile list beyond.
bool small_tiles(int64_t R, int64_t E) { return R <= 24 * E; }

int group_warps(int64_t E) {
  const int64_t per_warp = E * 4;
  int64_t nw = (kGroupSmemLimit - per_warp) / per_warp;  // cnt[nw][E] + base[E] within the limit
  return static_cast<int>(std::clamp<int64_t>(nw, 1, kGroupThreads / 32));
}

}  // namespace

bool grouped_moe_supported(int64_t T, int64_t H, int64_t I, int64_t E, int64_t K, const void* x,
                           const void* gate_up, const void* down) {
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  constexpr int64_t kMaxDim = int64_t{1} << 20;  // N tiles (gridDim.y of the big kernel) <= 16384
  return T >= 1 && H >= 8 && I >= 8 && H % 8 == 0 && I % 8 == 0 && H <= kMaxDim && I <= kMaxDim && E >= 1 &&
         E <= 6144 && K >= 1 && K <= E && T * K <= (int64_t{1} << 30) && H * 2 * I < (int64_t{1} << 31) &&
         aligned(x) && aligned(gate_up) && aligned(down);
}

int64_t grouped_moe_tiles(int64_t R, int64_t E) {
  if (R <= 0 || E <= 0 || small_tiles(R, E)) return 0;
  return R / kBigBM + E;  // sum over experts of ceil(rows / kBigBM) <= floor(R / kBigBM) + E
}

int grouped_moe_tile_rows() { return kBigBM; }

void launch_moe_group(const int32_t* top_idx, int64_t R, int64_t E, int32_t* offsets, int32_t* pairs,
                      int32_t* tiles, cudaStream_t stream) {
  if (E <= 0) return;
  const int nw = group_warps(E);
  const size_t smem = static_cast<size_t>(nw + 1) * static_cast<size_t>(E) * 4;
  const int64_t max_tiles = grouped_moe_tiles(R, E);
  group_kernel<<<1, kGroupThreads, smem, stream>>>(top_idx, static_cast<int>(R), static_cast<int>(E), nw, offsets,
                                                   pairs, kBigBM, static_cast<int>(max_tiles),
                                                   max_tiles > 0 ? reinterpret_cast<int4*>(tiles) : nullptr);
  CUDA_CHECK_LAUNCH();
}

void launch_grouped_gate_up(const uint16_t* x, const uint16_t* gate_up, const int32_t* offsets,
                            const int32_t* pairs, const int32_t* tiles, int64_t R, int64_t E, int64_t K,
                            int64_t H, int64_t I, uint16_t* act, cudaStream_t stream) {
  if (R <= 0 || E <= 0 || I <= 0) return;
  GroupedArgs g{x, gate_up, offsets, pairs, nullptr, act, static_cast<int>(H), static_cast<int>(I),
                static_cast<int>(K)};
  if (small_tiles(R, E)) {
    launch_grouped<32, true>(g, E, ceil_div(I, kBN / 2), stream);
  } else {
    launch_grouped_big<true>(g, tiles, grouped_moe_tiles(R, E), ceil_div(I, kBigBN / 2), stream);
  }
}

void launch_grouped_down(const uint16_t* act, const uint16_t* down, const int32_t* offsets, const int32_t* pairs,
                         const int32_t* tiles, const float* top_w, int64_t R, int64_t E, int64_t H, int64_t I,
                         uint16_t* y, cudaStream_t stream) {
  if (R <= 0 || E <= 0 || H <= 0) return;
  GroupedArgs g{act, down, offsets, pairs, top_w, y, static_cast<int>(I), static_cast<int>(H), 1};
  if (small_tiles(R, E)) {
    launch_grouped<32, false>(g, E, ceil_div(H, kBN), stream);
  } else {
    launch_grouped_big<false>(g, tiles, grouped_moe_tiles(R, E), ceil_div(H, kBigBN), stream);
  }
}

}  // namespace dgemma::cuda
