// Fused attention: scores, softmax and P.V in one kernel, with the reference's rounding points
// (cpu/attention.cpp):
//   S = bf16(fp32 q . k)   s = bf16(S * scaling)   (tensor cores, fp32 accumulation, one rounding each)
//   m = max s, sum = sum exp(s - m) in fp32, P = bf16(exp(s - m) / sum) over the visible keys
//   O = bf16(sum_j P_j V_j) with fp32 accumulation (tensor cores)
// Because P is rounded after dividing by the final sum, O cannot be accumulated with the usual
// online-softmax rescaling; the kernel makes two passes over the keys instead:
//   pass 1: S tiles -> per-row max and sum (online rescaling of the fp32 sum: only its rounding order
//           differs from the reference's);
//   pass 2: S tiles again -> P (bf16, staged in shared memory) -> O += P . V in registers.
// Memory use is independent of the context length (no score buffer).
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
// rows >= n * groups, keys >= the CTA's last visible key) are zero-filled, never read from global.
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fused_attention.cuh"

namespace dgemma::cuda {
namespace {

struct Params {
  const uint16_t* q;
  const uint16_t* kc;
  const uint16_t* vc;
  const uint16_t* kn;
  const uint16_t* vn;
  uint16_t* out;
  int64_t n, Hq, Hkv, L, cap;
  int64_t window;
  int causal;
  float scaling;
};

template <int D_, int WM_, int WD_, int BN_, int MinBlocks_>
struct Cfg {
  static constexpr int D = D_, WM = WM_, WD = WD_, BN = BN_, kMinBlocks = MinBlocks_;
  static constexpr int kWarps = WM * WD;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int BM = 16 * WM;   // rows per CTA
  static constexpr int DW = D / WD;    // O columns per warp
  static constexpr int SW = BN / WD;   // S columns per warp
  static constexpr int NS = SW / 8;    // S n8 tiles per warp
  static constexpr int NO = DW / 8;    // O n8 tiles per warp
  static constexpr int LDK = D + 8;    // row stride (elements) of Q, K, V in shared memory
  static constexpr int LDP = BN + 8;   // row stride of P
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr size_t kSmemBytes = static_cast<size_t>(BM + 2 * BN) * LDK * 2 +
                                       static_cast<size_t>(BM) * LDP * 2 + static_cast<size_t>(2 * WD * BM) * 4;
  static_assert(D % 16 == 0 && BN % 16 == 0 && DW % 16 == 0 && SW % 8 == 0);
  static_assert(NS == 1 || NS % 2 == 0, "S tiles are loaded in pairs (or a single one)");
};

// ---- PTX wrappers (sm_80+) -------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; ok == false writes 16 zero bytes and reads nothing (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// c (16x8 fp32) += a (16x16 bf16, row) . b (16x8 bf16, col)
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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

// ---- the kernel ------------------------------------------------------------------------------------

template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) fused_attention_kernel(const Params p) {
  constexpr int D = C::D, BM = C::BM, BN = C::BN, WD = C::WD, LDK = C::LDK, LDP = C::LDP;
  constexpr int SW = C::SW, DW = C::DW, NS = C::NS, NO = C::NO;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* const Qs = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* const buf0 = Qs + BM * LDK;  // pass 1: K (even tiles); pass 2: K
  uint16_t* const buf1 = buf0 + BN * LDK;  // pass 1: K (odd tiles); pass 2: V
  uint16_t* const Ps = buf1 + BN * LDK;
  float* const stat_m = reinterpret_cast<float*>(Ps + BM * LDP);  // [WD][BM]
  float* const stat_l = stat_m + WD * BM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WD, wd = warp % WD;
  const int64_t groups = p.Hq / p.Hkv;
  const int64_t R = p.n * groups;  // rows of this KV head
  const int64_t kvh = blockIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int64_t L = p.L;
  const int64_t total = L + p.n;

  // Keys visible to at least one row of the CTA: [j_begin, j_end) (every row sees its own key).
  const int64_t r_last = (r0 + BM < R ? r0 + BM : R) - 1;
  int64_t j_begin = 0, j_end = total;
  if (p.causal) {
    j_end = L + r_last / groups + 1;
    if (p.window > 0) {
      const int64_t lo = L + r0 / groups - p.window + 1;
      j_begin = lo > 0 ? lo : 0;
    }
  }
  const int64_t ntiles = (j_end - j_begin + BN - 1) / BN;

  // This thread's two rows (accumulator rows lane/4 and lane/4 + 8 of the warp's 16) and their
  // visible key ranges [lo, hi) (empty for rows past the end).
  int64_t vis_lo[2], vis_hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = r0 + 16 * wm + lane / 4 + 8 * h;
    vis_lo[h] = 0;
    vis_hi[h] = 0;
    if (r < R) {
      const int64_t i = r / groups;
      vis_hi[h] = total;
      if (p.causal) {
        vis_hi[h] = L + i + 1;
        if (p.window > 0) vis_lo[h] = L + i - p.window + 1 > 0 ? L + i - p.window + 1 : 0;
      }
    }
  }

  // Loads keys (or values) [js, js + BN) of this KV head into dst; keys >= j_end are zero rows.
  auto load_keys = [&](uint16_t* dst, const uint16_t* cache, const uint16_t* fresh, int64_t js) {
    for (int c = tid; c < BN * C::kChunks; c += C::kThreads) {
      const int kr = c / C::kChunks, cc = c % C::kChunks;
      const int64_t j = js + kr;
      const bool ok = j < j_end;
      const uint16_t* src = fresh;
      if (ok) src = (j < L ? cache + (kvh * p.cap + j) * D : fresh + ((j - L) * p.Hkv + kvh) * D) + cc * 8;
      cp_async16(dst + kr * LDK + cc * 8, src, ok);
    }
  };

  // acc = Q[warp rows] . K[warp's key columns]^T over D, from shared memory.
  auto compute_scores = [&](const uint16_t* Ks, float (&acc)[NS][4]) {
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
          ldsm_x4(b, Ks + (wd * SW + np * 16 + (lane >> 4) * 8 + (lane & 7)) * LDK + kk * 16 + ((lane >> 3) & 1) * 8);
          mma_bf16(acc[2 * np], a, b[0], b[1]);
          mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
        }
      }
    }
  };

  // Accumulator element e of n-tile t: row h = e / 2, key js + wd * SW + 8 t + 2 (lane % 4) + e % 2.
  // Returns the scaled bf16 score, or -inf when masked.
  auto score_at = [&](float raw, int64_t j, int h) -> float {
    if (j < vis_lo[h] || j >= vis_hi[h]) return -INFINITY;
    return round_bf16(__fmul_rn(round_bf16(raw), p.scaling));
  };

  // ---- pass 1: row max and sum ----
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  for (int c = tid; c < BM * C::kChunks; c += C::kThreads) {
    const int rr = c / C::kChunks, cc = c % C::kChunks;
    const int64_t r = r0 + rr;
    const bool ok = r < R;
    const uint16_t* src = p.q;
    if (ok) src = p.q + ((r / groups) * p.Hq + kvh * groups + r % groups) * D + cc * 8;
    cp_async16(Qs + rr * LDK + cc * 8, src, ok);
  }
  if (ntiles > 0) load_keys(buf0, p.kc, p.kn, j_begin);
  cp_async_commit();
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t js = j_begin + t * BN;
    if (t + 1 < ntiles) load_keys((t & 1) ? buf0 : buf1, p.kc, p.kn, js + BN);
    cp_async_commit();
    cp_async_wait<1>();  // tile t (and Q) landed
    __syncthreads();
    float acc[NS][4];
    compute_scores((t & 1) ? buf1 : buf0, acc);
    const int64_t jw = js + wd * SW + 2 * (lane & 3);
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

  // Row statistics: the four lanes of a row, then the WD warps of a row block (same order in every
  // warp, so all warps of a row block use bit-identical max and sum).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m_run[h], o);
      const float l2 = __shfl_xor_sync(0xffffffffu, l_run[h], o);
      combine_stats(m_run[h], l_run[h], m2, l2);
    }
  }
  float row_max[2], row_sum[2];
  if constexpr (WD == 1) {
    row_max[0] = m_run[0], row_max[1] = m_run[1];
    row_sum[0] = l_run[0], row_sum[1] = l_run[1];
  } else {
    if ((lane & 3) == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rl = 16 * wm + lane / 4 + 8 * h;
        stat_m[wd * BM + rl] = m_run[h];
        stat_l[wd * BM + rl] = l_run[h];
      }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rl = 16 * wm + lane / 4 + 8 * h;
      float m = stat_m[rl], l = stat_l[rl];
#pragma unroll
      for (int w = 1; w < WD; ++w) combine_stats(m, l, stat_m[w * BM + rl], stat_l[w * BM + rl]);
      row_max[h] = m;
      row_sum[h] = l;
    }
  }

  // ---- pass 2: P and O ----
  float o[NO][4];
#pragma unroll
  for (int t = 0; t < NO; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
  __syncthreads();  // pass 1's reads of the buffers are over (also when ntiles is 0 or 1)
  if (ntiles > 0) load_keys(buf0, p.kc, p.kn, j_begin);
  cp_async_commit();
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t js = j_begin + t * BN;
    load_keys(buf1, p.vc, p.vn, js);  // values of tile t
    cp_async_commit();
    cp_async_wait<1>();  // keys of tile t landed
    __syncthreads();
    float acc[NS][4];
    compute_scores(buf0, acc);
    const int64_t jw = js + wd * SW + 2 * (lane & 3);
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

  // ---- output: one rounding of the fp32 accumulator ----
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = r0 + 16 * wm + lane / 4 + 8 * h;
    if (r >= R) continue;
    uint16_t* dst = p.out + ((r / groups) * p.Hq + kvh * groups + r % groups) * D + wd * DW + 2 * (lane & 3);
#pragma unroll
    for (int t = 0; t < NO; ++t) {
      const uint32_t lo = f32_to_bf16(o[t][2 * h]), hi = f32_to_bf16(o[t][2 * h + 1]);
      *reinterpret_cast<uint32_t*>(dst + 8 * t) = lo | (hi << 16);
    }
  }
}

// ---- host side -------------------------------------------------------------------------------------

// D = 64 / 128: 4 warps over 64 rows, 64-key tiles (O: 16 x D per warp).
// D = 256: 2 x 2 warps over 32 rows (O: 16 x 128 per warp), 64-key tiles, ~90 KB shared memory.
// D = 512: 2 x 4 warps over 32 rows (O: 16 x 128 per warp), 32-key tiles, ~103 KB: two CTAs per SM.
using Cfg64 = Cfg<64, 4, 1, 64, 2>;
using Cfg128 = Cfg<128, 4, 1, 64, 2>;
using Cfg256 = Cfg<256, 2, 2, 64, 2>;
using Cfg512 = Cfg<512, 2, 4, 32, 2>;

template <class C>
bool launch(const Params& p, int device, cudaStream_t stream) {
  const int64_t R = p.n * (p.Hq / p.Hkv);
  const int64_t blocks = (R + C::BM - 1) / C::BM;
  if (blocks > 0x7fffffff || p.Hkv > 65535) return false;
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (static_cast<size_t>(optin) < C::kSmemBytes) return false;
  CUDA_CHECK(cudaFuncSetAttribute(fused_attention_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(C::kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.Hkv));
  fused_attention_kernel<C><<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  return true;
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

bool launch_fused_attention(const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache,
                            const uint16_t* k_new, const uint16_t* v_new, uint16_t* out, int64_t n, int64_t Hq,
                            int64_t Hkv, int64_t D, int64_t L, int64_t cap, bool causal, int64_t window,
                            float scaling, int device, cudaStream_t stream) {
  if (n <= 0 || Hkv <= 0 || Hq % Hkv != 0 || L < 0 || (L > 0 && cap < L)) return false;
  // cp.async moves 16-byte chunks and the output is stored in 4-byte pairs: every base must be 16-byte
  // aligned (rows are, since D is a multiple of 8).
  if (!aligned16(q) || !aligned16(k_new) || !aligned16(v_new) || !aligned16(out)) return false;
  if (L > 0 && (k_cache == nullptr || v_cache == nullptr || !aligned16(k_cache) || !aligned16(v_cache))) return false;
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) return false;  // bf16 mma.sync, ldmatrix, cp.async
  Params p{q, L > 0 ? k_cache : nullptr, L > 0 ? v_cache : nullptr, k_new, v_new, out, n, Hq, Hkv, L, cap,
           window, causal ? 1 : 0, scaling};
  switch (D) {
    case 64: return launch<Cfg64>(p, device, stream);
    case 128: return launch<Cfg128>(p, device, stream);
    case 256: return launch<Cfg256>(p, device, stream);
    case 512: return launch<Cfg512>(p, device, stream);
    default: return false;
  }
}

}  // namespace dgemma::cuda
