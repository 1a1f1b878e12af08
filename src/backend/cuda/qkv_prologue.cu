// The fused attention prologue (qkv_prologue.cuh). Unfused, a layer runs three rmsnorm launches (q, k,
// v), two rope launches and, for K=V layers, a copy; each re-reads its rows and each rope launch
// recomputes the token's cos/sin. Here one block per token computes the bf16 cos/sin once, and each
// warp takes two head rows at a time (see the kernel): sum of squares (lane-strided words, then the
// warp butterfly), the normed row rounded to bf16 into shared memory, then RoPE from
// there (each lane one output word: x1 * c - x2 * s for the first half, x2 * c + x1 * s for the
// second, every product and the sum rounded to bf16 as rope_kernel does). A K=V layer's k row also
// gives the v row (the unit norm of the raw k: the same sum of squares).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/norm_rope.cuh"
#include "backend/cuda/qkv_prologue.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kMaxWarps = 16;  // 512 threads: two or three blocks per SM, all of a 256-token canvas at once
constexpr int kMaxD = 512;
constexpr size_t kSmemLimit = 48 * 1024;

struct QkvLaunch {
  uint4* q;
  uint4* k;
  uint4* v;
  // The inputs: head row h of token t of q at q_in + t * in_words + h * words (likewise k_in, v_in):
  // the outputs themselves (in place), or the column blocks of the fused projection.
  const uint4* q_in;
  const uint4* k_in;
  const uint4* v_in;
  int64_t q_in_words, k_in_words, v_in_words;
  const uint4* q_norm;
  const uint4* k_norm;
  const int32_t* positions;
  const float* inv_freq;
  int Hq, Hkv, D;
  bool k_eq_v;
  float eps;
};

// A head row of the launch: where it is written (x) and read (src: x itself unless the input is the
// fused projection), its norm weight (null: none), K=V's v output (null: none), and whether RoPE
// follows the norm.
struct Row {
  uint4* x;
  const uint4* src;
  const uint4* w;
  uint4* v_out;
  bool rope;
};

__device__ __forceinline__ Row row_of(const QkvLaunch& a, int64_t t, int r, int words) {
  if (r < a.Hq) return {a.q + (t * a.Hq + r) * words, a.q_in + t * a.q_in_words + r * words, a.q_norm, nullptr, true};
  if (r < a.Hq + a.Hkv) {
    const int64_t row = t * a.Hkv + (r - a.Hq);
    return {a.k + row * words, a.k_in + t * a.k_in_words + (r - a.Hq) * words, a.k_norm,
            a.k_eq_v ? a.v + row * words : nullptr, true};
  }
  const int hv = r - a.Hq - a.Hkv;
  return {a.v + (t * a.Hkv + hv) * words, a.v_in + t * a.v_in_words + hv * words, nullptr, nullptr, false};
}

// Dynamic shared memory: cos [D/2] f32, sin [D/2] f32, then kRowsAtOnce rows of D bf16 per warp.
// kLaneWords: a lane's words of a head row (D <= 256: one, D <= 512: two), held in registers;
// kRowsAtOnce: the head rows a warp works on together (two; one: set_small_kernel_variant(1)).
//
// Why this order (the earlier kernel computed the cos/sin table first, then took one row at a time,
// each a global load, a warp reduction, the 1/sqrt in double, then RoPE, all in one dependent chain):
//   - each warp issues the loads of its first rows before the block computes the cos/sin table (one
//     sin and one cos in double per pair of columns), so the table's time hides the loads' latency;
//   - a warp takes its rows two at a time (at the 26B-A4B shapes, every row of the token: 32 rows or
//     18 over 16 warps), their loads, butterflies and double-precision norms interleaved as two
//     independent chains instead of two in sequence.
// The maths per row is the earlier kernel's (and rmsnorm + rope's) operation for operation.
template <int kLaneWords, int kRowsAtOnce>
__global__ void __launch_bounds__(kMaxWarps * 32) qkv_prologue_kernel(QkvLaunch a) {
  extern __shared__ uint4 qsm[];
  const int D = a.D, half = D / 2, words = D / 8, hw = half / 8;
  float* c = reinterpret_cast<float*>(qsm);
  float* s = c + half;
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  const int rows = a.Hq + (a.k_eq_v ? 1 : 2) * a.Hkv;
  uint4 u[kRowsAtOnce][kLaneWords];
  auto load_rows = [&](int r0) {  // warp-uniform; only the words stay live (row_of again later)
#pragma unroll
    for (int q = 0; q < kRowsAtOnce; ++q) {
      const int r = r0 + q * nwarps;
      const uint4* x = r < rows ? row_of(a, t, r, words).src : nullptr;
#pragma unroll
      for (int m = 0; m < kLaneWords; ++m) {
        const int i = lane + 32 * m;
        u[q][m] = x != nullptr && i < words ? x[i] : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  load_rows(warp);
  const float pos = static_cast<float>(a.positions[t]);
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    const float f = __fmul_rn(a.inv_freq[j], pos);  // fp32, as inv_freq @ position_ids
    c[j] = round_bf16(cos_f32(f));
    s[j] = round_bf16(sin_f32(f));
  }
  __syncthreads();
  uint4* bufs = qsm + D / 4 + warp * kRowsAtOnce * words;  // D / 4 words: the cos and sin tables
  for (int r0 = warp; r0 < rows; r0 += kRowsAtOnce * nwarps) {  // warp-uniform
    if (r0 != warp) load_rows(r0);  // (not at the 26B-A4B shapes: one round a warp)
    Row row[kRowsAtOnce];
#pragma unroll
    for (int q = 0; q < kRowsAtOnce; ++q)
      if (r0 + q * nwarps < rows) row[q] = row_of(a, t, r0 + q * nwarps, words);
    double ss[kRowsAtOnce];
#pragma unroll
    for (int q = 0; q < kRowsAtOnce; ++q) {
      ss[q] = 0;
#pragma unroll
      for (int m = 0; m < kLaneWords; ++m) ss[q] += word_squares(u[q][m]);  // zero words add nothing
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int q = 0; q < kRowsAtOnce; ++q) ss[q] += __shfl_xor_sync(0xffffffffu, ss[q], o);
    float invs[kRowsAtOnce];  // side by side: two independent double-precision chains
#pragma unroll
    for (int q = 0; q < kRowsAtOnce; ++q) invs[q] = inv_rms_of(ss[q], D, a.eps);
#pragma unroll
    for (int q = 0; q < kRowsAtOnce; ++q) {
      if (r0 + q * nwarps >= rows) continue;  // warp-uniform
      const Row& rw = row[q];
      uint4* buf = bufs + q * words;
      const float inv = invs[q];
#pragma unroll
      for (int m = 0; m < kLaneWords; ++m) {
        const int i = lane + 32 * m;
        if (i >= words) continue;
        float xv[8], y[8];
        unpack_bf16x8(u[q][m], xv);
        if (rw.v_out != nullptr) {
#pragma unroll
          for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(xv[k], inv);
          rw.v_out[i] = pack_bf16x8(y);
        }
        if (rw.w != nullptr) {
          float ww[8];
          unpack_bf16x8(rw.w[i], ww);
#pragma unroll
          for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(__fmul_rn(xv[k], inv), ww[k]);
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(xv[k], inv);
        }
        if (rw.rope)
          buf[i] = pack_bf16x8(y);  // read back by the lane that owns the partner word
        else
          rw.x[i] = pack_bf16x8(y);
      }
    }
    __syncwarp();
#pragma unroll
    for (int q = 0; q < kRowsAtOnce; ++q) {
      if (r0 + q * nwarps >= rows || !row[q].rope) continue;  // warp-uniform
      const uint4* buf = bufs + q * words;
      for (int i = lane; i < words; i += 32) {
        const bool first = i < hw;
        const int i1 = first ? i : i - hw;  // the word of x1 (x2 sits half a row later)
        float x1[8], x2[8], o[8];
        unpack_bf16x8(buf[i1], x1);
        unpack_bf16x8(buf[i1 + hw], x2);
        const float* cj = c + i1 * 8;
        const float* sj = s + i1 * 8;
#pragma unroll
        for (int k = 0; k < 8; ++k)
          o[k] = first ? round_bf16(__fadd_rn(round_bf16(__fmul_rn(x1[k], cj[k])), round_bf16(__fmul_rn(-x2[k], sj[k]))))
                       : round_bf16(__fadd_rn(round_bf16(__fmul_rn(x2[k], cj[k])), round_bf16(__fmul_rn(x1[k], sj[k]))));
        row[q].x[i] = pack_bf16x8(o);
      }
    }
    __syncwarp();  // the warp's next rows reuse the buffers
  }
}

size_t smem_bytes(int64_t D, int warps, int rows_at_once) {
  return static_cast<size_t>(D) * 4 + static_cast<size_t>(warps) * rows_at_once * D * 2;
}

}  // namespace

bool qkv_prologue_fusable(int64_t D, std::initializer_list<const void*> ptrs) {
  if (D <= 0 || D % 16 != 0 || D > kMaxD) return false;
  for (const void* p : ptrs)
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

void launch_qkv_prologue(uint16_t* q, uint16_t* k, uint16_t* v, bool k_eq_v, const uint16_t* q_norm,
                         const uint16_t* k_norm, const int32_t* positions, const float* inv_freq, int64_t T,
                         int64_t Hq, int64_t Hkv, int64_t D, float eps, cudaStream_t stream, const uint16_t* qkv) {
  if (T <= 0) return;
  const int64_t rows = Hq + (k_eq_v ? 1 : 2) * Hkv;
  int warps = static_cast<int>(std::clamp<int64_t>(rows, 1, kMaxWarps));
  const int at_once = small_kernel_variant() == 1 ? 1 : 2;
  while (warps > 1 && smem_bytes(D, warps, at_once) > kSmemLimit) --warps;
  const int64_t words = D / 8;
  // Fused input: one row of `rows` head rows per token, q's heads, then k's, then v's.
  const uint4* fused = reinterpret_cast<const uint4*>(qkv);
  QkvLaunch a{reinterpret_cast<uint4*>(q),
              reinterpret_cast<uint4*>(k),
              reinterpret_cast<uint4*>(v),
              fused ? fused : reinterpret_cast<const uint4*>(q),
              fused ? fused + Hq * words : reinterpret_cast<const uint4*>(k),
              fused ? fused + (Hq + Hkv) * words : reinterpret_cast<const uint4*>(v),
              fused ? rows * words : Hq * words,
              fused ? rows * words : Hkv * words,
              fused ? rows * words : Hkv * words,
              reinterpret_cast<const uint4*>(q_norm),
              reinterpret_cast<const uint4*>(k_norm),
              positions,
              inv_freq,
              static_cast<int>(Hq),
              static_cast<int>(Hkv),
              static_cast<int>(D),
              k_eq_v,
              eps};
  const unsigned grid = static_cast<unsigned>(T);
  const size_t smem = smem_bytes(D, warps, at_once);
  if (D <= 256 && at_once == 2)
    qkv_prologue_kernel<1, 2><<<grid, warps * 32, smem, stream>>>(a);
  else if (D <= 256)
    qkv_prologue_kernel<1, 1><<<grid, warps * 32, smem, stream>>>(a);
  else if (at_once == 2)
    qkv_prologue_kernel<2, 2><<<grid, warps * 32, smem, stream>>>(a);
  else
    qkv_prologue_kernel<2, 1><<<grid, warps * 32, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dgemma::cuda
