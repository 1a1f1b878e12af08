// Fused attention: scores, softmax and P.V without a score buffer, with the reference's rounding
// points (cpu/attention.cpp):
//   S = bf16(fp32 q . k)   s = bf16(S * scaling)   (tensor cores, fp32 accumulation, one rounding each)
//   m = max s, sum = sum exp(s - m) in fp32, P = bf16(exp(s - m) / sum) over the visible keys
//   O = bf16(sum_j P_j V_j) with fp32 accumulation (tensor cores)
// Because P is rounded after dividing by the final sum, O cannot be accumulated with the usual
// online-softmax rescaling; the keys are walked twice instead:
//   pass 1 (kernel 1): S tiles -> per-row max and sum (online rescaling of the fp32 sum: only its
//           rounding order differs from the reference's);
//   pass 2 (kernel 2): S tiles again -> P (bf16, staged in shared memory) -> O += P . V in registers.
// Key splits (flash-decoding style): the visible key range of each row block is cut into `splits`
// parts of whole key tiles, one CTA each (grid z), so that short query sets still fill the GPU. Pass 1
// writes each split's partial (max, sum) per row to the workspace (an empty split: -inf, 0); pass 2
// first combines a row's partials over all splits in split order, so every split's CTA uses
// bit-identical global statistics, then writes its fp32 partial O; a third kernel sums the partial O's
// in split order and rounds once to bf16. With one split pass 2 writes the bf16 output itself. No float
// atomics anywhere: a rerun is bit-identical.
// Memory use is independent of the context length (no score buffer); the workspace is
// splits x rows x (D + 2) fp32.
//
// CTA: one KV head (blockIdx.y) and BM = 16 * WM consecutive "rows" of that head, row r = i * groups + g
// (query i, query head kvh * groups + g), so the groups query heads sharing a KV head read each K/V
// tile once. WM x WD warps: warp (wm, wd) owns rows [16 wm, 16 wm + 16); for S it computes the key
// columns [wd * BN / WD, ...) of the tile, for O the head-dim columns [wd * D / WD, ...). Splitting D
// keeps the fp32 O accumulator at 16 x 128 per warp (64 registers per thread) even at D = 512; P is
// shared by the WD warps of a row block through shared memory.
// Shared memory: Q [BM, D], two key/value buffers [BN, D] (pass 1: K double buffer; pass 2: K and V),
// P [BM, BN] bf16, and the per-warp row statistics. Rows are padded by 16 bytes so that ldmatrix's
// eight row addresses fall into distinct banks. Tiles arrive by cp.async; rows outside the data (query
// rows >= n * groups, keys >= the end of the CTA's key range) are zero-filled, never read from global.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fused_attention.cuh"
#include "backend/cuda/ptx.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kMaxSplits = 64;

struct Params {
  const uint16_t* q;
  const uint16_t* kc;
  const uint16_t* vc;
  const uint16_t* kn;
  const uint16_t* vn;
  uint16_t* out;
  float2* stats;  // [splits][Hkv][rpad] partial (max, sum) of pass 1
  float* opart;   // [splits][Hkv][rpad][D] partial O of pass 2 (splits > 1; else null)
  int64_t n, Hq, Hkv, L, cap;
  int64_t window;
  // Paged cache (table != null): kc / vc are a layer's pools [pages, Hkv, 2^page_shift, D] and cached
  // key j sits at absolute position first + j, in pool page table[pos >> page_shift].
  const int32_t* table;
  int64_t first;
  int page_shift;
  int64_t rpad;  // rows per KV head rounded up to the row block
  int causal;
  int splits;
  float scaling;
};

template <int D_, int WM_, int WD_, int BN_, int MinBlocks_>
struct Cfg {
  static constexpr int D = D_, WM = WM_, WD = WD_, BN = BN_, kMinBlocks = MinBlocks_;
  static constexpr int kWarps = WM * WD;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int BM = 16 * WM;     // rows per CTA
  static constexpr int DW = D / WD;      // O columns per warp
  static constexpr int SW = BN / WD;     // S columns per warp
  static constexpr int NS = SW / 8;      // S n8 tiles per warp
  static constexpr int NO = DW / 8;      // O n8 tiles per warp
  static constexpr int LDK = D + 8;      // row stride (elements) of Q, K, V in shared memory
  static constexpr int LDP = BN + 8;     // row stride of P
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr size_t kSmemBytes = static_cast<size_t>(BM + 2 * BN) * LDK * 2 +
                                       static_cast<size_t>(BM) * LDP * 2 +
                                       static_cast<size_t>(2 * WD * BM) * 4;
  static_assert(D % 16 == 0 && BN % 16 == 0 && DW % 16 == 0 && SW % 8 == 0);
  static_assert(NS == 1 || NS % 2 == 0, "S tiles are loaded in pairs (or a single one)");
};

// Combines two (max, sum of exp(s - max)) pairs. Commutative bit for bit (fmaxf and the fp32 addition
// are), so lanes that combine the same pairs in either order agree exactly.
__device__ __forceinline__ void combine_stats(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;  // both empty (l and l2 are 0)
  const float a = m == -INFINITY ? 0.f : l * expf(m - mn);
  const float b = m2 == -INFINITY ? 0.f : l2 * expf(m2 - mn);
  m = mn;
  l = a + b;
}

// ---- the kernels -----------------------------------------------------------------------------------

// kPass2 == false: pass 1, the partial (max, sum) of every row over this CTA's key split -> p.stats.
// kPass2 == true: pass 2, the global statistics from all splits' partials, then this split's partial
// O -> p.opart (or, with one split, the bf16 output).
template <class C, bool kPass2>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) fused_attention_kernel(const Params p) {
  constexpr int D = C::D, BM = C::BM, BN = C::BN, WD = C::WD, LDK = C::LDK, LDP = C::LDP;
  constexpr int SW = C::SW, DW = C::DW, NS = C::NS, NO = C::NO;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* const Qs = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* const buf0 = Qs + BM * LDK;    // pass 1: K (even tiles); pass 2: K
  uint16_t* const buf1 = buf0 + BN * LDK;  // pass 1: K (odd tiles); pass 2: V
  uint16_t* const Ps = buf1 + BN * LDK;
  float* const stat_m = reinterpret_cast<float*>(Ps + BM * LDP);  // [WD][BM]
  float* const stat_l = stat_m + WD * BM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WD, wd = warp % WD;
  const int64_t groups = p.Hq / p.Hkv;
  const int64_t R = p.n * groups;  // rows of this KV head
  const int64_t kvh = blockIdx.y;
  const int64_t split = blockIdx.z;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int64_t L = p.L;
  const int64_t total = L + p.n;

  // Keys visible to at least one row of the row block: [j_begin, j_end) (every row sees its own key).
  // It is cut into p.splits parts of kps keys (whole tiles; the last parts may be short or empty);
  // this CTA walks part `split`, [k_lo, k_hi). The same for both passes.
  const int64_t r_last = (r0 + BM < R ? r0 + BM : R) - 1;
  int64_t j_begin = 0, j_end = total;
  if (p.causal) {
    j_end = L + r_last / groups + 1;
    if (p.window > 0) {
      const int64_t lo = L + r0 / groups - p.window + 1;
      j_begin = lo > 0 ? lo : 0;
    }
  }
  const int64_t kps = ((j_end - j_begin + p.splits - 1) / p.splits + BN - 1) / BN * BN;
  const int64_t k_lo = j_begin + split * kps < j_end ? j_begin + split * kps : j_end;
  const int64_t k_hi = k_lo + kps < j_end ? k_lo + kps : j_end;
  const int64_t ntiles = (k_hi - k_lo + BN - 1) / BN;

  // This thread's two rows (accumulator rows lane/4 and lane/4 + 8 of the warp's 16) and the keys of
  // this split they see, [k_lo + lo, k_lo + hi) (empty for rows past the end). Offsets from k_lo fit
  // in 32 bits (the plan refuses 2^31 keys), which saves registers in the score loops.
  int vis_lo[2], vis_hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = r0 + 16 * wm + lane / 4 + 8 * h;
    vis_lo[h] = 0;
    vis_hi[h] = 0;
    if (r < R) {
      const int64_t i = r / groups;
      int64_t lo = 0, hi = total;
      if (p.causal) {
        hi = L + i + 1;
        if (p.window > 0) lo = L + i - p.window + 1 > 0 ? L + i - p.window + 1 : 0;
      }
      lo = lo > k_lo ? lo : k_lo;
      hi = hi < k_hi ? hi : k_hi;
      if (lo < hi) {
        vis_lo[h] = static_cast<int>(lo - k_lo);
        vis_hi[h] = static_cast<int>(hi - k_lo);
      }
    }
  }

  auto load_q = [&]() {
    for (int c = tid; c < BM * C::kChunks; c += C::kThreads) {
      const int rr = c / C::kChunks, cc = c % C::kChunks;
      const int64_t r = r0 + rr;
      const bool ok = r < R;
      const uint16_t* src = p.q;
      if (ok) src = p.q + ((r / groups) * p.Hq + kvh * groups + r % groups) * D + cc * 8;
      cp_async16(Qs + rr * LDK + cc * 8, src, ok);
    }
  };

  // Row of cached key j of this KV head, contiguous or through the page table.
  auto cached_row = [&](const uint16_t* cache, int64_t j) -> const uint16_t* {
    if (p.table == nullptr) return cache + (kvh * p.cap + j) * D;
    const int64_t pos = p.first + j;
    const int64_t page = p.table[pos >> p.page_shift];
    return cache + (((page * p.Hkv + kvh) << p.page_shift) + (pos & ((int64_t{1} << p.page_shift) - 1))) * D;
  };

  // Loads keys (or values) [js, js + BN) of this KV head into dst; keys >= k_hi are zero rows.
  auto load_keys = [&](uint16_t* dst, const uint16_t* cache, const uint16_t* fresh, int64_t js) {
    for (int c = tid; c < BN * C::kChunks; c += C::kThreads) {
      const int kr = c / C::kChunks, cc = c % C::kChunks;
      const int64_t j = js + kr;
      const bool ok = j < k_hi;
      const uint16_t* src = fresh;
      if (ok) src = (j < L ? cached_row(cache, j) : fresh + ((j - L) * p.Hkv + kvh) * D) + cc * 8;
      cp_async16(dst + kr * LDK + cc * 8, src, ok);
    }
  };

  // acc = Q[warp rows] . K[warp's key columns]^T over D, from shared memory.
  auto compute_scores = [&](const uint16_t* Ks, float(&acc)[NS][4]) {
#pragma unroll
    for (int t = 0; t < NS; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
    const uint16_t* qa = Qs + (16 * wm + (lane & 15)) * LDK + (lane >> 4) * 8;
#pragma unroll 4
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, qa + kk * 16);
      if constexpr (NS == 1) {
        uint32_t b[2];
        ldsm_x2(b, Ks + (wd * SW + (lane & 7)) * LDK + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_bf16(acc[0], a, b[0], b[1]);
      } else {
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
          uint32_t b[4];
          ldsm_x4(b, Ks + (wd * SW + np * 16 + (lane >> 4) * 8 + (lane & 7)) * LDK + kk * 16 +
                         ((lane >> 3) & 1) * 8);
          mma_bf16(acc[2 * np], a, b[0], b[1]);
          mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
    }
  };

  // Accumulator element e of n-tile t: row h = e / 2, key js + wd * SW + 8 t + 2 (lane % 4) + e % 2,
  // j its offset from k_lo. Returns the scaled bf16 score, or -inf when masked (also outside this split).
  auto score_at = [&](float raw, int j, int h) -> float {
    if (j < vis_lo[h] || j >= vis_hi[h]) return -INFINITY;
    return round_bf16(__fmul_rn(round_bf16(raw), p.scaling));
  };

  if constexpr (!kPass2) {
    // ---- pass 1: this split's row max and sum ----
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    if (ntiles > 0) {  // uniform over the CTA
      load_q();
      load_keys(buf0, p.kc, p.kn, k_lo);
      cp_async_commit();
      for (int64_t t = 0; t < ntiles; ++t) {
        const int64_t js = k_lo + t * BN;
        if (t + 1 < ntiles) load_keys((t & 1) ? buf0 : buf1, p.kc, p.kn, js + BN);
        cp_async_commit();
        cp_async_wait<1>();  // tile t (and Q) landed
        __syncthreads();
        float acc[NS][4];
        compute_scores((t & 1) ? buf1 : buf0, acc);
        const int jw = static_cast<int>(t) * BN + wd * SW + 2 * (lane & 3);  // offset from k_lo
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float s[NS][2];
          float mt = -INFINITY;
#pragma unroll
          for (int u = 0; u < NS; ++u) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              s[u][e] = score_at(acc[u][2 * h + e], jw + 8 * u + e, h);
              mt = fmaxf(mt, s[u][e]);
            }
          }
          if (mt == -INFINITY) continue;  // nothing visible in this row's part of the tile
          if (mt > m_run[h]) {
            l_run[h] = m_run[h] == -INFINITY ? 0.f : l_run[h] * expf(m_run[h] - mt);
            m_run[h] = mt;
          }
#pragma unroll
          for (int u = 0; u < NS; ++u) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              if (s[u][e] != -INFINITY) l_run[h] += expf(s[u][e] - m_run[h]);
            }
          }
        }
        __syncthreads();  // everyone is done with this buffer before tile t + 2 is loaded into it
      }
      cp_async_wait<0>();
    }

    // Row statistics of the split: the four lanes of a row, then the WD warps of a row block.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int o = 1; o <= 2; o <<= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m_run[h], o);
        const float l2 = __shfl_xor_sync(0xffffffffu, l_run[h], o);
        combine_stats(m_run[h], l_run[h], m2, l2);
      }
    }
    if constexpr (WD > 1) {
      if ((lane & 3) == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int rl = 16 * wm + lane / 4 + 8 * h;
          stat_m[wd * BM + rl] = m_run[h];
          stat_l[wd * BM + rl] = l_run[h];
        }
      }
      __syncthreads();
      if (wd == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int rl = 16 * wm + lane / 4 + 8 * h;
#pragma unroll
          for (int w = 1; w < WD; ++w)
            combine_stats(m_run[h], l_run[h], stat_m[w * BM + rl], stat_l[w * BM + rl]);
        }
      }
    }
    if (wd == 0 && (lane & 3) == 0) {
      float2* st = p.stats + (split * p.Hkv + kvh) * p.rpad + r0;
#pragma unroll
      for (int h = 0; h < 2; ++h) st[16 * wm + lane / 4 + 8 * h] = make_float2(m_run[h], l_run[h]);
    }
  } else {
    // ---- pass 2: global statistics, P and this split's O ----
    // Every thread combines its rows' partials over all splits in split order: each split's CTA (and
    // each warp of it) gets bit-identical max and sum.
    float row_max[2], row_sum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2* st = p.stats + kvh * p.rpad + r0 + 16 * wm + lane / 4 + 8 * h;
      float m = -INFINITY, l = 0.f;
      for (int z = 0; z < p.splits; ++z) {
        const float2 v = st[static_cast<int64_t>(z) * p.Hkv * p.rpad];
        combine_stats(m, l, v.x, v.y);
      }
      row_max[h] = m;
      row_sum[h] = l;
    }

    float o[NO][4];
#pragma unroll
    for (int t = 0; t < NO; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    if (ntiles > 0) {  // uniform over the CTA
      load_q();
      load_keys(buf0, p.kc, p.kn, k_lo);
      cp_async_commit();
      for (int64_t t = 0; t < ntiles; ++t) {
        const int64_t js = k_lo + t * BN;
        load_keys(buf1, p.vc, p.vn, js);  // values of tile t
        cp_async_commit();
        cp_async_wait<1>();  // keys of tile t (and Q) landed
        __syncthreads();
        float acc[NS][4];
        compute_scores(buf0, acc);
        const int jw = static_cast<int>(t) * BN + wd * SW + 2 * (lane & 3);  // offset from k_lo
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int rl = 16 * wm + lane / 4 + 8 * h;
          const bool any = row_max[h] > -INFINITY;
#pragma unroll
          for (int u = 0; u < NS; ++u) {
            uint16_t pb[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float s = score_at(acc[u][2 * h + e], jw + 8 * u + e, h);
              float pr = 0.f;
              if (any && s != -INFINITY) pr = __fdiv_rn(expf(s - row_max[h]), row_sum[h]);
              pb[e] = f32_to_bf16(pr);
            }
            *reinterpret_cast<uint32_t*>(Ps + rl * LDP + wd * SW + 8 * u + 2 * (lane & 3)) =
                static_cast<uint32_t>(pb[0]) | (static_cast<uint32_t>(pb[1]) << 16);
          }
        }
        cp_async_wait<0>();  // values of tile t landed
        __syncthreads();     // P complete; every warp is done with the keys
        if (t + 1 < ntiles) load_keys(buf0, p.kc, p.kn, js + BN);  // overlaps the P.V below
        cp_async_commit();
        const uint16_t* pa = Ps + (16 * wm + (lane & 15)) * LDP + (lane >> 4) * 8;
        const uint16_t* vb = buf1 + ((lane & 7) + ((lane >> 3) & 1) * 8) * LDK + wd * DW + (lane >> 4) * 8;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          uint32_t a[4];
          ldsm_x4(a, pa + kk * 16);
#pragma unroll
          for (int np = 0; np < NO / 2; ++np) {
            uint32_t b[4];
            ldsm_x4_trans(b, vb + kk * 16 * LDK + np * 16);
            mma_bf16(o[2 * np], a, b[0], b[1]);
            mma_bf16(o[2 * np + 1], a, b[2], b[3]);
          }
        }
        __syncthreads();  // P and the values are consumed before they are overwritten
      }
      cp_async_wait<0>();
    }

    // ---- output: one split: one rounding of the fp32 accumulator; several: the fp32 partial ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = r0 + 16 * wm + lane / 4 + 8 * h;
      if (r >= R) continue;
      if (p.splits == 1) {
        uint16_t* dst =
            p.out + ((r / groups) * p.Hq + kvh * groups + r % groups) * D + wd * DW + 2 * (lane & 3);
#pragma unroll
        for (int t = 0; t < NO; ++t) {
          const uint32_t lo = f32_to_bf16(o[t][2 * h]), hi = f32_to_bf16(o[t][2 * h + 1]);
          *reinterpret_cast<uint32_t*>(dst + 8 * t) = lo | (hi << 16);
        }
      } else {
        float* dst = p.opart + ((split * p.Hkv + kvh) * p.rpad + r) * D + wd * DW + 2 * (lane & 3);
#pragma unroll
        for (int t = 0; t < NO; ++t)
          *reinterpret_cast<float2*>(dst + 8 * t) = make_float2(o[t][2 * h], o[t][2 * h + 1]);
      }
    }
  }
}

// out[i, h, d..d+3] = bf16(sum over splits z = 0, 1, ... of opart[z][kvh][r][d..d+3]) in split order.
__global__ void fused_attention_reduce_kernel(const Params p, int D) {
  const int64_t groups = p.Hq / p.Hkv;
  const int64_t q4 = D / 4;
  const int64_t count = p.n * p.Hq * q4;
  const int64_t zstride = p.Hkv * p.rpad * q4;  // float4s between splits
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d4 = idx % q4, rest = idx / q4;
    const int64_t h = rest % p.Hq, i = rest / p.Hq;
    const int64_t r = i * groups + h % groups;
    const float4* src = reinterpret_cast<const float4*>(p.opart) + ((h / groups) * p.rpad + r) * q4 + d4;
    float4 acc = src[0];
    for (int z = 1; z < p.splits; ++z) {
      const float4 v = src[z * zstride];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    const uint32_t lo = f32_to_bf16(acc.x) | (static_cast<uint32_t>(f32_to_bf16(acc.y)) << 16);
    const uint32_t hi = f32_to_bf16(acc.z) | (static_cast<uint32_t>(f32_to_bf16(acc.w)) << 16);
    reinterpret_cast<uint2*>(p.out)[idx] = make_uint2(lo, hi);
  }
}

// ---- host side -------------------------------------------------------------------------------------

// D = 64 / 128: 4 warps over 64 rows, 64-key tiles (O: 16 x D per warp), ~37 / ~70 KB.
// D = 256: 2 x 2 warps over 32 rows (O: 16 x 128 per warp), 32-key tiles, ~53 KB: four CTAs (16
//   warps) per SM, the registers capped at 128 per thread.
// D = 512: 2 x 4 warps over 32 rows (O: 16 x 128 per warp), 32-key tiles, ~103 KB: two CTAs per SM.
using Cfg64 = Cfg<64, 4, 1, 64, 2>;
using Cfg128 = Cfg<128, 4, 1, 64, 2>;
using Cfg256 = Cfg<256, 2, 2, 32, 4>;
using Cfg512 = Cfg<512, 2, 4, 32, 2>;

std::atomic<int> g_forced_splits{0};

constexpr int kCachedDevices = 16;

// CTAs of the pass-2 kernel one SM holds (0: the device lacks the shared memory), after allowing both
// passes their dynamic shared memory on `device`; remembered per device.
template <class C>
int resident_ctas(int device) {
  static std::atomic<int> cache[kCachedDevices] = {};  // value + 1; 0: not known yet
  if (device >= 0 && device < kCachedDevices) {
    const int v = cache[device].load();
    if (v > 0) return v - 1;
  }
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  int result = 0;
  if (static_cast<size_t>(optin) >= C::kSmemBytes) {
    const int bytes = static_cast<int>(C::kSmemBytes);
    CUDA_CHECK(cudaFuncSetAttribute(fused_attention_kernel<C, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CUDA_CHECK(cudaFuncSetAttribute(fused_attention_kernel<C, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&result, fused_attention_kernel<C, true>,
                                                             C::kThreads, C::kSmemBytes));
    result = std::max(result, 0);
  }
  if (device >= 0 && device < kCachedDevices) cache[device].store(result + 1);
  return result;
}

// Workspace layout: the (max, sum) partials [splits][Hkv][rpad] float2, padded to 16 bytes, then (only
// with several splits) the partial outputs [splits][Hkv][rpad][D] fp32.
int64_t stats_bytes(int64_t splits, int64_t Hkv, int64_t rpad) {
  return (splits * Hkv * rpad * 8 + 15) / 16 * 16;
}
int64_t workspace_bytes(int64_t splits, int64_t Hkv, int64_t rpad, int64_t D) {
  return stats_bytes(splits, Hkv, rpad) + (splits > 1 ? splits * Hkv * rpad * D * 4 : 0);
}

template <class C>
FusedAttentionPlan plan_for(int64_t n, int64_t Hq, int64_t Hkv, int64_t L, bool causal, int64_t window,
                            int device) {
  const int64_t groups = Hq / Hkv;
  const int64_t blocks = ceil_div(n * groups, C::BM);
  if (blocks > 0x7fffffff || Hkv > 65535) return {};
  const int resident = resident_ctas<C>(device);
  if (resident <= 0) return {};
  // The longest visible key range of a row block (its queries span at most BM / groups + 1 positions).
  const int64_t total = L + n;
  int64_t span = total;
  if (causal && window > 0) span = std::min(total, window + C::BM / groups + 1);
  int64_t splits = g_forced_splits.load();
  if (splits <= 0) {
    // About two waves of CTAs (the passes are uniform work per CTA; a second wave evens out the
    // partial first one), but at least two key tiles per split; then the fewest splits with the same
    // key tiles per split, so that the widest row block has no empty split.
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int64_t base = blocks * Hkv, slots = static_cast<int64_t>(std::max(sms, 1)) * resident;
    splits = std::clamp<int64_t>(std::min(ceil_div(2 * slots, base), span / (2 * C::BN)), 1, kMaxSplits);
    const int64_t kps = ceil_div(ceil_div(span, splits), C::BN) * C::BN;
    splits = ceil_div(span, kps);
  }
  splits = std::clamp<int64_t>(splits, 1, kMaxSplits);
  FusedAttentionPlan plan;
  plan.splits = static_cast<int>(splits);
  plan.workspace_bytes = workspace_bytes(splits, Hkv, blocks * C::BM, C::D);
  return plan;
}

template <class C>
bool launch(const FusedAttentionPlan& plan, Params p, void* workspace, int device, cudaStream_t stream) {
  const int64_t groups = p.Hq / p.Hkv;
  const int64_t blocks = ceil_div(p.n * groups, C::BM);
  if (blocks > 0x7fffffff || p.Hkv > 65535 || plan.splits < 1 || plan.splits > kMaxSplits) return false;
  p.rpad = blocks * C::BM;
  p.splits = plan.splits;
  if (plan.workspace_bytes < workspace_bytes(p.splits, p.Hkv, p.rpad, C::D))
    return false;                                   // another shape's plan
  if (resident_ctas<C>(device) <= 0) return false;  // also sets the kernels' shared-memory limit
  p.stats = static_cast<float2*>(workspace);
  p.opart =
      p.splits > 1
          ? reinterpret_cast<float*>(static_cast<char*>(workspace) + stats_bytes(p.splits, p.Hkv, p.rpad))
          : nullptr;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.Hkv),
                  static_cast<unsigned>(p.splits));
  fused_attention_kernel<C, false><<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  fused_attention_kernel<C, true><<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  if (p.splits > 1) {
    constexpr int kThreads = 256;
    fused_attention_reduce_kernel<<<grid_for(p.n * p.Hq * (C::D / 4), kThreads), kThreads, 0, stream>>>(p,
                                                                                                        C::D);
    CUDA_CHECK_LAUNCH();
  }
  return true;
}

bool aligned16(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

// Key offsets within a split are 32-bit in the kernel: fewer than 2^31 keys (with room for a tile).
bool shape_ok(int64_t n, int64_t Hq, int64_t Hkv, int64_t L) {
  return n > 0 && Hkv > 0 && Hq > 0 && Hq % Hkv == 0 && L >= 0 && n < (int64_t{1} << 30) &&
         L < (int64_t{1} << 30);
}

}  // namespace

int set_fused_attention_splits(int splits) {
  return g_forced_splits.exchange(std::clamp(splits, 0, kMaxSplits));
}

FusedAttentionPlan plan_fused_attention(int64_t n, int64_t Hq, int64_t Hkv, int64_t D, int64_t L, bool causal,
                                        int64_t window, int device) {
  if (!shape_ok(n, Hq, Hkv, L)) return {};
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) return {};  // bf16 mma.sync, ldmatrix, cp.async
  switch (D) {
    case 64:
      return plan_for<Cfg64>(n, Hq, Hkv, L, causal, window, device);
    case 128:
      return plan_for<Cfg128>(n, Hq, Hkv, L, causal, window, device);
    case 256:
      return plan_for<Cfg256>(n, Hq, Hkv, L, causal, window, device);
    case 512:
      return plan_for<Cfg512>(n, Hq, Hkv, L, causal, window, device);
    default:
      return {};
  }
}

bool launch_fused_attention(const FusedAttentionPlan& plan, void* workspace, const uint16_t* q,
                            const uint16_t* k_cache, const uint16_t* v_cache, const uint16_t* k_new,
                            const uint16_t* v_new, uint16_t* out, int64_t n, int64_t Hq, int64_t Hkv,
                            int64_t D, int64_t L, int64_t cap, bool causal, int64_t window, float scaling,
                            int device, cudaStream_t stream, const PagedCache* paged) {
  if (paged != nullptr && (paged->table == nullptr || paged->page_shift < 0 || paged->page_shift > 20 || paged->first < 0))
    return false;
  if (plan.splits <= 0 || !shape_ok(n, Hq, Hkv, L) || (paged == nullptr && L > 0 && cap < L)) return false;
  // cp.async moves 16-byte chunks, the output is stored in 4-byte pairs and the partials are read as
  // float4: every base must be 16-byte aligned (rows are, since D is a multiple of 8).
  if (workspace == nullptr || !aligned16(workspace)) return false;
  if (!aligned16(q) || !aligned16(k_new) || !aligned16(v_new) || !aligned16(out)) return false;
  if (L > 0 && (k_cache == nullptr || v_cache == nullptr || !aligned16(k_cache) || !aligned16(v_cache)))
    return false;
  Params p{q,
           L > 0 ? k_cache : nullptr,
           L > 0 ? v_cache : nullptr,
           k_new,
           v_new,
           out,
           nullptr,
           nullptr,
           n,
           Hq,
           Hkv,
           L,
           cap,
           window,
           paged != nullptr ? paged->table : nullptr,
           paged != nullptr ? paged->first : 0,
           paged != nullptr ? paged->page_shift : 0,
           0,
           causal ? 1 : 0,
           0,
           scaling};
  switch (D) {
    case 64:
      return launch<Cfg64>(plan, p, workspace, device, stream);
    case 128:
      return launch<Cfg128>(plan, p, workspace, device, stream);
    case 256:
      return launch<Cfg256>(plan, p, workspace, device, stream);
    case 512:
      return launch<Cfg512>(plan, p, workspace, device, stream);
    default:
      return false;
  }
}

}  // namespace dgemma::cuda
