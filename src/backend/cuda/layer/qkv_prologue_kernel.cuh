#pragma once
// The kernels of the fused attention prologue (layer/qkv_prologue.cuh; launched by layer/qkv_prologue.cu) in
// a header so that the unit tests run them on the host through tests/unit/backend/cuda_emulator.h. On
// the device, layer/qkv_prologue.cu includes core/common.cuh first. What the kernels need: threadIdx /
// blockIdx / blockDim / gridDim, __syncthreads, __syncwarp, __shfl_xor_sync (double), __fmul_rn, __byte_perm,
// uint4, round_bf16, cos_f32 / sin_f32, warp_reduce / SumOp and the word helpers of core/bf16_words.cuh;
// DG_KERNEL_DYNAMIC_SMEM(name).
//
// Per head row (q's, k's, v's of a token): the sum of squares in double (exact: any order), the row
// times (mean + eps)^-0.5 (inv_rms_of) times the norm weight (q_norm, k_norm; v none), rounded to
// bf16, then for q and k NeoX RoPE with the token's bf16 cos / sin (inv_freq * position in fp32, the
// cos and sin in double rounded once, as rope_kernel): x1 * c - x2 * s for the first half, x2 * c +
// x1 * s for the second, every product and the sum rounded to bf16. A K=V layer's k row also gives
// the v row (the unit norm of the raw k: the same sum of squares).
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

namespace dgemma::cuda {

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
  int64_t T;
  int lanes;  // qkv_prologue_kernel: threads per head row (qkv_lanes)
};

// The threads of qkv_prologue_kernel per head row: D / 16 (each owns word l of the first half row
// and its RoPE partner, word l + D / 16), rounded up to a power of two so that a row's threads are an
// aligned group of one warp (its butterfly stays inside the group).
inline int qkv_lanes(int64_t D) {
  int l = 1;
  while (l < D / 16) l *= 2;
  return l;
}
// qkv_prologue_kernel's largest block (the 26B-A4B: 512 and 576 threads), with two blocks an SM (at
// most 56 registers).
constexpr int kQkvMaxThreads = 576;

// Internal linkage (as layer/residual_kernel.cuh): the unit tests' host build of the kernels shares a
// binary with the device build's host stubs.
namespace {

// The row kernel, for the head counts qkv_prologue_kernel does not take (more than kQkvMaxThreads
// threads a token): one block a token, the bf16 cos / sin of the token first, then each warp one head
// row at a time: the sum of squares (lane-strided words, then the warp butterfly), the normed row
// rounded to bf16 into shared memory, then RoPE from there (each lane one output word). Dynamic
// shared memory: cos [D/2] f32, sin [D/2] f32, then one row of D bf16 per warp.
__global__ void qkv_prologue_row_kernel(QkvLaunch a) {
  DG_KERNEL_DYNAMIC_SMEM(smem);
  uint4* qsm = reinterpret_cast<uint4*>(smem);
  const int D = a.D, half = D / 2, words = D / 8, hw = half / 8;
  float* c = reinterpret_cast<float*>(qsm);
  float* s = c + half;
  const int64_t t = blockIdx.x;
  const float p = static_cast<float>(a.positions[t]);
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    const float f = __fmul_rn(a.inv_freq[j], p);  // fp32, as inv_freq @ position_ids
    c[j] = round_bf16(cos_f32(f));
    s[j] = round_bf16(sin_f32(f));
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  uint4* buf = qsm + D / 4 + warp * words;  // D / 4 words: the cos and sin tables
  const int rows = a.Hq + (a.k_eq_v ? 1 : 2) * a.Hkv;
  for (int r = warp; r < rows; r += nwarps) {  // warp-uniform
    uint4* x;          // the output row
    const uint4* src;  // the input row (x itself unless the input is the fused projection)
    const uint4* w = nullptr;
    uint4* v_out = nullptr;  // K=V: the unit-normed raw k
    bool rope = true;
    if (r < a.Hq) {
      x = a.q + (t * a.Hq + r) * words;
      src = a.q_in + t * a.q_in_words + r * words;
      w = a.q_norm;
    } else if (r < a.Hq + a.Hkv) {
      const int64_t row = t * a.Hkv + (r - a.Hq);
      x = a.k + row * words;
      src = a.k_in + t * a.k_in_words + (r - a.Hq) * words;
      w = a.k_norm;
      if (a.k_eq_v) v_out = a.v + row * words;
    } else {
      x = a.v + (t * a.Hkv + (r - a.Hq - a.Hkv)) * words;
      src = a.v_in + t * a.v_in_words + (r - a.Hq - a.Hkv) * words;
      rope = false;
    }
    double ss = 0;
    for (int i = lane; i < words; i += 32) {
      const uint4 u = src[i];
      buf[i] = u;
      ss += word_squares(u);
    }
    ss = warp_reduce(ss, SumOp{});
    const float inv = inv_rms_of(ss, D, a.eps);
    for (int i = lane; i < words; i += 32) {
      float xv[8], y[8];
      unpack_bf16x8(buf[i], xv);
      if (v_out != nullptr) {
        DG_UNROLL
        for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(xv[k], inv);
        v_out[i] = pack_bf16x8(y);
      }
      if (w != nullptr) {
        float ww[8];
        unpack_bf16x8(w[i], ww);
        DG_UNROLL
        for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(__fmul_rn(xv[k], inv), ww[k]);
      } else {
        DG_UNROLL
        for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(xv[k], inv);
      }
      if (rope)
        buf[i] = pack_bf16x8(y);  // read back by the lane that owns the partner word
      else
        x[i] = pack_bf16x8(y);
    }
    if (!rope) continue;
    __syncwarp();
    for (int i = lane; i < words; i += 32) {
      const bool first = i < hw;
      const int i1 = first ? i : i - hw;  // the word of x1 (x2 sits half a row later)
      float x1[8], x2[8], o[8];
      unpack_bf16x8(buf[i1], x1);
      unpack_bf16x8(buf[i1 + hw], x2);
      const float* cj = c + i1 * 8;
      const float* sj = s + i1 * 8;
      DG_UNROLL
      for (int k = 0; k < 8; ++k)
        o[k] = first ? round_bf16(__fadd_rn(round_bf16(__fmul_rn(x1[k], cj[k])), round_bf16(__fmul_rn(-x2[k], sj[k]))))
                     : round_bf16(__fadd_rn(round_bf16(__fmul_rn(x2[k], cj[k])), round_bf16(__fmul_rn(x1[k], sj[k]))));
      x[i] = pack_bf16x8(o);
    }
    __syncwarp();  // the warp's next row reuses the buffer
  }
}

// RoPE of a thread's two words of a normed head row (bf16): y1, word l of the first half, and y2, its
// partner l + hw, with the token's table cs (cos [half], sin [half]); writes words l and l + hw of
// dst. Every product and the sum rounded to bf16, as rope_kernel.
__device__ __forceinline__ void rope_words(const float* cs, uint4 y1u, uint4 y2u, uint4* dst, int l, int hw) {
  const int half = 8 * hw;
  float y1[8], y2[8], c[8], s[8], p[8], q[8];
  unpack_bf16x8(y1u, y1);
  unpack_bf16x8(y2u, y2);
  DG_UNROLL
  for (int k = 0; k < 8; ++k) {
    c[k] = cs[8 * l + k];
    s[k] = cs[half + 8 * l + k];
  }
  DG_UNROLL
  for (int k = 0; k < 8; ++k) {
    p[k] = __fmul_rn(y1[k], c[k]);
    q[k] = __fmul_rn(-y2[k], s[k]);
  }
  round_bf16x8(p);
  round_bf16x8(q);
  DG_UNROLL
  for (int k = 0; k < 8; ++k) p[k] = __fadd_rn(p[k], q[k]);
  dst[l] = pack_bf16x8_rn(p);  // x1 * c - x2 * s
  DG_UNROLL
  for (int k = 0; k < 8; ++k) {
    p[k] = __fmul_rn(y2[k], c[k]);
    q[k] = __fmul_rn(y1[k], s[k]);
  }
  round_bf16x8(p);
  round_bf16x8(q);
  DG_UNROLL
  for (int k = 0; k < 8; ++k) p[k] = __fadd_rn(p[k], q[k]);
  dst[l + hw] = pack_bf16x8_rn(p);  // x2 * c + x1 * s
}

// The kernel of every shape it takes (kQkvMaxThreads). Every head row of a token at once, a.lanes
// threads a row (qkv_lanes), each thread two words: word l of the first half row and its RoPE partner,
// word l + D / 16, so RoPE needs nothing from another thread and the normed row never goes through
// shared memory. The blocks loop over the tokens (a grid of as many blocks as are resident at once:
// launch_qkv_prologue), and a thread's row is the same for every token, so its norm weights are
// loaded once. A block issues the next token's loads at the top of a token, so they are in flight
// across this token's reduction and RoPE and the next token's table; the table is computed by all
// threads (one value each), at the end of the token before (when the fewest registers are live); and
// the roundings go through pack_bf16x2_rn (one cvt per two values; four roundings an element of q and
// k).
//
// Dynamic shared memory: two tables (this token's, and the next one's, written while slower threads
// may still read this one) of cos [D/2] then sin [D/2], f32: one barrier a token. Table b is written
// for token k + 1 after token k's barrier and read after token k + 1's; it is written again (token
// k + 3) only after token k + 2's barrier, which every reader of token k + 1's table has passed.
__global__ void __launch_bounds__(kQkvMaxThreads, 2) qkv_prologue_kernel(QkvLaunch a) {
  DG_KERNEL_DYNAMIC_SMEM(smem);
  float* tables = reinterpret_cast<float*>(smem);
  const int D = a.D, half = D / 2, words = D / 8, hw = half / 8, L = a.lanes;
  const int r = static_cast<int>(threadIdx.x) / L, l = static_cast<int>(threadIdx.x) % L;
  const int rows = a.Hq + (a.k_eq_v ? 1 : 2) * a.Hkv;
  const bool active = r < rows && l < hw;
  // The thread's head row: q's head r, k's head r - Hq or v's head r - Hq - Hkv. Its pointers are
  // formed where they are used, from the launch's parameters (constant bank operands), so that few
  // registers stay live across the cos / sin evaluation.
  const int kind = r < a.Hq ? 0 : r < a.Hq + a.Hkv ? 1 : 2;
  const int head = kind == 0 ? r : kind == 1 ? r - a.Hq : r - a.Hq - a.Hkv;
  const bool rope = kind != 2;
  auto src_at = [&](int64_t tok) {  // the token's input row
    return kind == 0   ? a.q_in + tok * a.q_in_words + head * words
           : kind == 1 ? a.k_in + tok * a.k_in_words + head * words
                       : a.v_in + tok * a.v_in_words + head * words;
  };
  auto dst_at = [&](int64_t tok) {  // the token's output row
    return kind == 0 ? a.q + (tok * a.Hq + head) * words : (kind == 1 ? a.k : a.v) + (tok * a.Hkv + head) * words;
  };
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  int64_t t = blockIdx.x;
  uint4 n1 = zero, n2 = zero;  // the next token's two words
  if (active && t < a.T) {
    n1 = src_at(t)[l];
    n2 = src_at(t)[l + hw];
  }
  // A token's cos [half], sin [half] into table b (one value a thread): the first token's now, each
  // next one's at the end of the token before it, when only the next token's words are live.
  auto table = [&](int64_t tok, int b) {
    float* cs = tables + b * D;
    const float pos = static_cast<float>(a.positions[tok]);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
      const bool is_cos = j < half;
      const float f = __fmul_rn(a.inv_freq[is_cos ? j : j - half], pos);  // fp32, as inv_freq @ position_ids
      cs[j] = round_bf16(is_cos ? cos_f32(f) : sin_f32(f));
    }
  };
  if (t < a.T) table(t, 0);
  for (int buf = 0; t < a.T; t += gridDim.x, buf ^= 1) {  // block-uniform
    const uint4 u1 = n1, u2 = n2;
    const int64_t tn = t + gridDim.x;
    if (active && tn < a.T) {  // in flight across this token's work
      n1 = src_at(tn)[l];
      n2 = src_at(tn)[l + hw];
    }
    const uint4* w = kind == 0 ? a.q_norm : kind == 1 ? a.k_norm : nullptr;  // L1 / L2
    const bool weighted = active && w != nullptr;
    const uint4 w1 = weighted ? w[l] : zero, w2 = weighted ? w[l + hw] : zero;
    double ss = word_squares(u1) + word_squares(u2);  // zero for inactive threads
    for (int o = L / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);  // the row's group
    const float inv = inv_rms_of(ss, D, a.eps);
    // The normed row, bf16 (as rmsnorm writes it before rope reads it).
    uint4 y1u = zero, y2u = zero;
    if (active) {
      float x1[8], x2[8], y1[8], y2[8];
      unpack_bf16x8(u1, x1);
      unpack_bf16x8(u2, x2);
      if (kind == 1 && a.k_eq_v) {  // v: the unit norm of the raw k
        DG_UNROLL
        for (int k = 0; k < 8; ++k) {
          y1[k] = __fmul_rn(x1[k], inv);
          y2[k] = __fmul_rn(x2[k], inv);
        }
        uint4* v_out = a.v + (t * a.Hkv + head) * words;
        v_out[l] = pack_bf16x8_rn(y1);
        v_out[l + hw] = pack_bf16x8_rn(y2);
      }
      if (weighted) {
        float ww[8];
        unpack_bf16x8(w1, ww);
        DG_UNROLL
        for (int k = 0; k < 8; ++k) y1[k] = __fmul_rn(__fmul_rn(x1[k], inv), ww[k]);
        unpack_bf16x8(w2, ww);
        DG_UNROLL
        for (int k = 0; k < 8; ++k) y2[k] = __fmul_rn(__fmul_rn(x2[k], inv), ww[k]);
      } else {
        DG_UNROLL
        for (int k = 0; k < 8; ++k) {
          y1[k] = __fmul_rn(x1[k], inv);
          y2[k] = __fmul_rn(x2[k], inv);
        }
      }
      y1u = pack_bf16x8_rn(y1);
      y2u = pack_bf16x8_rn(y2);
      if (!rope) {
        dst_at(t)[l] = y1u;
        dst_at(t)[l + hw] = y2u;
      }
    }
    __syncthreads();  // this token's table
    if (active && rope) rope_words(tables + buf * D, y1u, y2u, dst_at(t), l, hw);
    if (tn < a.T) table(tn, buf ^ 1);
  }
}


}  // namespace
}  // namespace dgemma::cuda
