// Device-side grouping of the MoE (token, slot) pairs by expert and the grouped expert GEMM (tensor
// cores via mma.sync m16n8k16 bf16 -> fp32, cp.async multi-stage pipelines), with the rounding points
// of the CPU reference (cpu/moe.cpp): every output element is one fp32 dot product rounded once to
// bf16; the gate_up epilogue applies the activation exactly as launch_moe_act, the down epilogue the
// routing weight exactly as launch_moe_weight.
//
// GEMM design (memory bound at T = 256, ~16 rows per expert: the expert weights are streamed once):
//   CTA: 128 threads (4 warps), tile BM x 64 output columns, BK = 64, 4 stages of cp.async.cg (16-byte
//   chunks, XOR-swizzled rows of 128 bytes so ldmatrix is bank-conflict free). Grid (N tiles, E): each
//   CTA loops over its expert's M tiles (0 .. T rows); the (M tile, K tile) iterations are flattened
//   so the pipeline runs on across M tiles. BM = 32 when the average expert has <= 24 rows, else 64.
//   Warp w computes all BM rows of the tile columns {8w .. 8w+7} and {32+8w .. 32+8w+7}. For gate_up
//   the tile's 64 weight rows are 32 gate rows (i0 .. i0+31) and the 32 matching up rows (I+i0 ..), so
//   each thread holds gate and up of the same (row, i) and the activation is fused into the epilogue.
//   The A rows are read by index (gate_up: expert_in rows pairs[r] / K, fusing the gather; down: act
//   rows r). Missing rows / columns / K tails are zero-filled (cp.async src-size 0) and never stored.
//   Weight copies carry an L2 evict-first policy (streamed once; the A rows are re-read per N tile).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/grouped_moe.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kBN = 64;        // output columns per CTA (gate_up: 32 gate + 32 up)
constexpr int kBK = 64;        // K per stage: a smem row is 128 bytes = 8 chunks of 16 bytes
constexpr int kStages = 4;
constexpr int kRowBytes = kBK * 2;

constexpr int kGroupThreads = 1024;
constexpr int kGroupSmemLimit = 48 * 1024;

// ---- PTX wrappers ---------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; when !valid nothing is read and the 16 bytes are zero-filled (`src` must
// still be a valid address: callers pass the tensor's base).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
// The same with an L2 eviction policy (the expert weights: read once, evict first, so the activation
// rows that every N tile of an expert re-reads stay in L2).
__device__ __forceinline__ void cp_async16_hint(uint32_t dst, const void* src, bool valid, uint64_t policy) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(n),
               "l"(policy)
               : "memory");
}
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

// d += a (16x16, row) * b (16x8, col), bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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
__global__ void __launch_bounds__(kGroupThreads) group_kernel(const int32_t* __restrict__ top_idx, int R, int E,
                                                              int nw, int32_t* __restrict__ offsets,
                                                              int32_t* __restrict__ pairs) {
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

template <int BM, bool kGateUp>
void launch_grouped(const GroupedArgs& g, int64_t E, int64_t n_tiles, cudaStream_t stream) {
  const int smem = kStages * (BM + kBN) * kRowBytes;
  auto* kernel = grouped_gemm_kernel<BM, kGateUp>;
  if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<dim3(static_cast<unsigned>(n_tiles), static_cast<unsigned>(E)), kThreads, smem, stream>>>(g);
  CUDA_CHECK_LAUNCH();
}

// BM = 32 while the average expert has at most 24 rows (weight streaming: fewer padded MMA rows),
// BM = 64 beyond (twice the weight-tile reuse per M tile).
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
  return T >= 1 && H >= 8 && I >= 8 && H % 8 == 0 && I % 8 == 0 && E >= 1 && E <= 6144 && K >= 1 && K <= E &&
         T * K <= (int64_t{1} << 30) && H * 2 * I < (int64_t{1} << 31) && aligned(x) && aligned(gate_up) &&
         aligned(down);
}

void launch_moe_group(const int32_t* top_idx, int64_t R, int64_t E, int32_t* offsets, int32_t* pairs,
                      cudaStream_t stream) {
  if (E <= 0) return;
  const int nw = group_warps(E);
  const size_t smem = static_cast<size_t>(nw + 1) * static_cast<size_t>(E) * 4;
  group_kernel<<<1, kGroupThreads, smem, stream>>>(top_idx, static_cast<int>(R), static_cast<int>(E), nw, offsets,
                                                   pairs);
  CUDA_CHECK_LAUNCH();
}

void launch_grouped_gate_up(const uint16_t* x, const uint16_t* gate_up, const int32_t* offsets,
                            const int32_t* pairs, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                            uint16_t* act, cudaStream_t stream) {
  if (R <= 0 || E <= 0 || I <= 0) return;
  GroupedArgs g{x, gate_up, offsets, pairs, nullptr, act, static_cast<int>(H), static_cast<int>(I),
                static_cast<int>(K)};
  const int64_t tiles = ceil_div(I, kBN / 2);
  if (small_tiles(R, E)) {
    launch_grouped<32, true>(g, E, tiles, stream);
  } else {
    launch_grouped<64, true>(g, E, tiles, stream);
  }
}

void launch_grouped_down(const uint16_t* act, const uint16_t* down, const int32_t* offsets, const int32_t* pairs,
                         const float* top_w, int64_t R, int64_t E, int64_t H, int64_t I, uint16_t* y,
                         cudaStream_t stream) {
  if (R <= 0 || E <= 0 || H <= 0) return;
  GroupedArgs g{act, down, offsets, pairs, top_w, y, static_cast<int>(I), static_cast<int>(H), 1};
  const int64_t tiles = ceil_div(H, kBN);
  if (small_tiles(R, E)) {
    launch_grouped<32, false>(g, E, tiles, stream);
  } else {
    launch_grouped<64, false>(g, E, tiles, stream);
  }
}

}  // namespace dgemma::cuda
