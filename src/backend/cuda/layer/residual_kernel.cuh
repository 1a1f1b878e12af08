#pragma once
// The layer's residual junctions (layer/residual.cuh launch_attn_residual / launch_ffn_residual) with the
// row in registers, in a header so that the unit tests run them on the host through
// tests/unit/backend/cuda_emulator.h. On the device, layer/residual.cu includes core/common.cuh first. What
// the kernels need: threadIdx / blockIdx / blockDim / gridDim, __syncthreads, __shfl_xor_sync (double),
// __fmul_rn / __fadd_rn, __ldg, __byte_perm, uint4, round_bf16 and the word helpers of core/bf16_words.cuh;
// DG_KERNEL_DYNAMIC_SMEM(name), the dynamic shared-memory buffer.
//
// Each thread owns kPer 16-byte words of a row (H = 2816: one word, 352 threads) and the blocks loop
// over the rows (a grid of as many blocks as are resident at once: launch_attn_residual). The kernels
// are bound by memory latency and instruction issue, and are written for both:
//   - a block issues the next row's loads at the top of a row, so they are in flight across the row's
//     reductions and arithmetic; at one row a block it still issues its row's loads and weights
//     together before their first use;
//   - rounding goes through pack_bf16x2_rn (one cvt per two values), and values that are bf16 already
//     are packed by byte permutation (pack_bf16x8_exact): every element is rounded to bf16 several
//     times (five or six roundings in the FFN junction);
//   - every norm's sum is one warp butterfly, one barrier, then every thread adds the warps' partials
//     from shared memory (no second butterfly), each reduction with its own scratch (no leading
//     barrier: a reduction's slot is written again only by the next row, after a later reduction's
//     barrier that every reader of it has passed), and the two independent sums of the FFN junction
//     share one. The sums are of squares of bf16 values in double: exact, so the order of the
//     additions does not change a bit.
// Every output element is computed with exactly the operations and roundings of the composed ops
// (backend.cpp).
//
// The FFN junction's MoE input comes either as the MoE's output rows (m2) or as its slot rows before
// their sum (m2_slots, m2_order: MoeArgs::out_slots); then each thread sums its words of the row's
// slots itself, exactly as the combine kernel does (core/ordered_sum.cuh), and the combine launch is saved.
//
// The FP8 forms (attn_residual_fp8_kernel, ffn_residual_fp8_kernel: the same rows with kFp8) also write
// the FP8 rows (backend.h Fp8Rows) of out_a / out_b (attention junction) and next_out (FFN junction),
// each where its pointers are set: the row's amax over the bf16-rounded output words (kept in
// registers), one block max, then the codes and the scale with quant/fp8_quant_kernel.cuh's helpers, bit
// for bit what launch_quantize_fp8_rows writes for the bf16 output. The plain kernels do no FP8 work and
// keep their parameters.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/core/kernel_macros.cuh"
#include "backend/cuda/core/ordered_sum.cuh"
#include "backend/cuda/quant/fp8_quant_kernel.cuh"

namespace dgemma::cuda::residual {

constexpr int kMaxThreads = 512;
// Launch bounds: up to 384 threads for one word a thread, three blocks an SM for the attention
// junction (at most 56 registers; two for its FP8 form, which spills in 56) and two for the FFN's (80:
// this row's and the next row's words stay in registers), 384 threads for two words and 512 for four
// with one block an SM (H > 4096, not the model's: registers for both rows' words without spilling; at
// four words a thread the next row is not loaded ahead, kAhead).
constexpr int bound_threads(int per) {
  return per == 4 ? 512 : 384;
}
constexpr int bound_blocks(int per, bool attn, bool fp8 = false) {
  return per == 1 ? (attn && !fp8 ? 3 : 2) : 1;
}
constexpr int kScratchDoubles = 5 * 32;  // the junctions' reductions: five slots of one double per warp

struct AttnArgs {
  const uint4 *x, *o, *wp;
  uint4* h1;
  const uint4* wa;
  uint4* oa;
  const uint4* wb;
  uint4* ob;
  uint4* on_out;    // optional
  const uint4* wr;  // with z_out
  float root;
  uint4* z_out;  // optional
  int64_t words;
  float eps;
  int64_t rows;
};

struct FfnArgs {
  const uint4 *h1, *m1, *m2, *w1, *w2, *wf;  // m2 null: the sum of m2_slots
  float scale;
  uint4* out;
  uint4 *m1n, *m2n, *f_out;  // optional
  const uint4* wn;           // with next_out
  uint4* next_out;           // optional
  int64_t words;
  float eps;
  int64_t rows;
  // Instead of m2: the MoE's slot rows ([rows * top_k] rows) and their order ([rows, top_k]); m2 is
  // their sum (core/ordered_sum.cuh), bit for bit what the combine kernel writes.
  const uint4* m2_slots = nullptr;
  const int32_t* m2_order = nullptr;
  int top_k = 0;
};

// FP8 rows an FP8 form writes (backend.h Fp8Rows): codes, eight a word, and the row scales; q null: not
// written. A parameter of the FP8 forms only, so the plain kernels keep their parameters.
struct Fp8RowsOut {
  uint2* q;
  float* s;
};

// Words per thread and threads per block for rows of `words` 16-byte words (per 0: too long for these
// kernels). One word a thread where the row fits in max_threads (the most parallel
// latency hiding), else two or four.
struct Plan {
  int per, threads;
};
inline Plan plan_for(int64_t words, int max_threads = kMaxThreads) {
  for (int per : {1, 2, 4}) {
    const int64_t t = ((words + per - 1) / per + 31) / 32 * 32;
    if (t <= std::min(max_threads, bound_threads(per))) return {per, static_cast<int>(t)};
  }
  return {0, 0};
}

// Sums N doubles over the block; every thread gets the totals. `slot` (N * 32 doubles) must not be
// read by any thread of an earlier use still (see the top); blockDim.x a multiple of 32.
template <int N>
__device__ __forceinline__ void block_sums(double (&v)[N], double* slot) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  DG_UNROLL
  for (int n = 0; n < N; ++n)
    for (int o = 16; o > 0; o >>= 1) v[n] += __shfl_xor_sync(0xffffffffu, v[n], o);
  if (lane == 0)
    for (int n = 0; n < N; ++n) slot[n * 32 + warp] = v[n];
  __syncthreads();
  DG_UNROLL
  for (int n = 0; n < N; ++n) {
    double t = 0.0;
    DG_UNROLL
    for (int w = 0; w < kMaxThreads / 32; ++w)
      if (w < warps) t += slot[n * 32 + w];  // the same address for every lane: a broadcast
    v[n] = t;
  }
}

// The maxima of N non-negative floats over the block (kept in `slot`, N * 32 doubles, as block_sums);
// every thread gets them.
template <int N>
__device__ __forceinline__ void block_maxes(float (&v)[N], double* slot) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  DG_UNROLL
  for (int n = 0; n < N; ++n)
    for (int o = 16; o > 0; o >>= 1) v[n] = fmaxf(v[n], __shfl_xor_sync(0xffffffffu, v[n], o));
  if (lane == 0)
    for (int n = 0; n < N; ++n) slot[n * 32 + warp] = v[n];
  __syncthreads();
  DG_UNROLL
  for (int n = 0; n < N; ++n) {
    float m = 0.0f;
    DG_UNROLL
    for (int w = 0; w < kMaxThreads / 32; ++w)
      if (w < warps) m = fmaxf(m, static_cast<float>(slot[n * 32 + w]));
    v[n] = m;
  }
}

// The FP8 codes of the row's bf16 output words `out` at scale s into q (the row's words from base).
template <int kPer>
__device__ __forceinline__ void fp8_row_codes(const uint4 (&out)[kPer], const bool (&ok)[kPer],
                                              const int (&idx)[kPer], float s, uint2* q, int64_t base) {
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    if (!ok[j]) continue;
    float f[8];
    unpack_bf16x8(out[j], f);
    q[base + idx[j]] = fp8_codes8(f, s);
  }
}

__device__ __forceinline__ float amax_of_word(float amax, const uint4 w) {
  float f[8];
  unpack_bf16x8(w, f);
  return fp8_amax8(amax, f);
}

__device__ __forceinline__ uint4 zero_word() {
  return make_uint4(0u, 0u, 0u, 0u);
}

// The residual add of a normed word: normed = bf16(v * inv * w), sum = bf16(x + normed), eight values
// (the attention junction's o into x, the FFN junction's f into h1).
__device__ __forceinline__ void normed_residual8(const uint4 v, float inv, const uint4 w, const uint4 x,
                                                 float (&normed)[8], float (&sum)[8]) {
  unpack_bf16x8(v, normed);
  norm8(normed, inv, w, normed);
  round_bf16x8(normed);
  unpack_bf16x8(x, sum);
  DG_UNROLL
  for (int k = 0; k < 8; ++k) sum[k] = __fadd_rn(sum[k], normed[k]);
  round_bf16x8(sum);
}

// The kernels have internal linkage: the unit tests compile them for the host into a binary that
// also links the device build's host stubs of the same names.
namespace {

// The attention junction's rows (attn_residual_kernel, attn_residual_fp8_kernel below).
template <int kPer, bool kFp8>
__device__ __forceinline__ void attn_residual_rows(const AttnArgs& a, const Fp8RowsOut qa,
                                                   const Fp8RowsOut qb) {
  DG_KERNEL_DYNAMIC_SMEM(smem);
  double* scratch = reinterpret_cast<double*>(smem);
  const bool router = a.z_out != nullptr;  // uniform
  constexpr bool kAhead = kPer < 4;        // four words a thread: one row's registers only
  int idx[kPer];
  bool ok[kPer];
  uint4 ou[kPer], xu[kPer];
  int64_t row = blockIdx.x;
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {  // the first row's loads (kAhead)
    idx[j] = threadIdx.x + j * blockDim.x;
    ok[j] = idx[j] < a.words;
    const bool load = kAhead && ok[j] && row < a.rows;
    ou[j] = load ? a.o[row * a.words + idx[j]] : zero_word();
    xu[j] = load ? a.x[row * a.words + idx[j]] : zero_word();
  }
  for (; row < a.rows; row += gridDim.x) {  // block-uniform
    const int64_t base = row * a.words, next = row + gridDim.x;
    uint4 oc[kPer], xc[kPer], wpu[kPer];
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {  // this row's words; the next row's loads in flight meanwhile
      const int64_t at = (kAhead ? next : row) * a.words + idx[j];
      oc[j] = kAhead ? ou[j] : ok[j] ? a.o[at] : zero_word();
      xc[j] = kAhead ? xu[j] : ok[j] ? a.x[at] : zero_word();
      if (kAhead && next < a.rows && ok[j]) {
        ou[j] = a.o[at];
        xu[j] = a.x[at];
      }
      wpu[j] = ok[j] ? a.wp[idx[j]] : zero_word();  // the weights (L1 / L2) before the reduction
    }
    double s[1] = {0.0};
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) s[0] += word_squares(oc[j]);  // zero words add nothing
    block_sums<1>(s, scratch);
    const float inv_o = inv_rms_of(s[0], a.words * 8, a.eps);
    uint4 hu[kPer];
    s[0] = 0.0;
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {
      float ov[8], h[8];
      normed_residual8(oc[j], inv_o, wpu[j], xc[j], ov, h);
      hu[j] = pack_bf16x8_exact(h);
      if (!ok[j]) continue;  // padding words (zero) are not summed
      s[0] += squares8(h);
      a.h1[base + idx[j]] = hu[j];
      if (a.on_out != nullptr) a.on_out[base + idx[j]] = pack_bf16x8_exact(ov);
    }
    uint4 wau[kPer], wbu[kPer], wru[kPer];
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {  // the later weights' loads in flight across the reduction
      wau[j] = ok[j] ? a.wa[idx[j]] : zero_word();
      wbu[j] = ok[j] ? a.wb[idx[j]] : zero_word();
      wru[j] = ok[j] && router ? a.wr[idx[j]] : zero_word();
    }
    block_sums<1>(s, scratch + 32);
    const float inv_h = inv_rms_of(s[0], a.words * 8, a.eps);
    uint4 oaw[kFp8 ? kPer : 1], obw[kFp8 ? kPer : 1];  // kFp8: the outputs' words, kept for their codes
    float amax[2] = {0.0f, 0.0f};
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {
      if (!ok[j]) continue;
      const int64_t at = base + idx[j];
      float h[8], w[8], y[8];
      unpack_bf16x8(hu[j], h);
      norm8(h, inv_h, wau[j], y);
      const uint4 oa = pack_bf16x8_rn(y);
      a.oa[at] = oa;
      norm8(h, inv_h, wbu[j], y);
      const uint4 ob = pack_bf16x8_rn(y);
      a.ob[at] = ob;
      if constexpr (kFp8) {
        oaw[j] = oa;
        obw[j] = ob;
        amax[0] = amax_of_word(amax[0], oa);
        amax[1] = amax_of_word(amax[1], ob);
      }
      if (!router) continue;
      // The router's input, as the router norm (layer/norm.cu): bf16(bf16(bf16(h * inv) * w) * root).
      DG_UNROLL
      for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(h[k], inv_h);
      round_bf16x8(y);
      unpack_bf16x8(wru[j], w);
      DG_UNROLL
      for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(y[k], w[k]);
      round_bf16x8(y);
      DG_UNROLL
      for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(y[k], a.root);
      a.z_out[at] = pack_bf16x8_rn(y);
    }
    if constexpr (kFp8) {
      block_maxes<2>(amax, scratch + 64);
      const float sa = fp8_row_scale(amax[0]), sb = fp8_row_scale(amax[1]);
      if (qa.q != nullptr) fp8_row_codes(oaw, ok, idx, sa, qa.q, base);
      if (qb.q != nullptr) fp8_row_codes(obw, ok, idx, sb, qb.q, base);
      if (threadIdx.x == 0) {
        if (qa.q != nullptr) qa.s[row] = sa;
        if (qb.q != nullptr) qb.s[row] = sb;
      }
    }
  }
}

template <int kPer>
__global__ void __launch_bounds__(bound_threads(kPer), bound_blocks(kPer, true)) attn_residual_kernel(AttnArgs a) {
  attn_residual_rows<kPer, false>(a, Fp8RowsOut{nullptr, nullptr}, Fp8RowsOut{nullptr, nullptr});
}

// With the FP8 rows of out_a (qa) and / or out_b (qb).
template <int kPer>
__global__ void __launch_bounds__(bound_threads(kPer), bound_blocks(kPer, true, true))
    attn_residual_fp8_kernel(AttnArgs a, Fp8RowsOut qa, Fp8RowsOut qb) {
  attn_residual_rows<kPer, true>(a, qa, qb);
}

// The FFN junction's rows (ffn_residual_kernel, ffn_residual_fp8_kernel below).
template <int kPer, bool kFp8>
__device__ __forceinline__ void ffn_residual_rows(const FfnArgs& a, const Fp8RowsOut qn) {
  DG_KERNEL_DYNAMIC_SMEM(smem);
  double* scratch = reinterpret_cast<double*>(smem);
  const bool next_norm = a.next_out != nullptr;  // uniform
  const bool slots = a.m2_slots != nullptr;      // uniform: m2 is summed here from the MoE's slot rows
  constexpr bool kAhead = kPer < 4;              // four words a thread: one row's registers only
  int idx[kPer];
  bool ok[kPer];
  uint4 m1u[kPer], m2u[kPer], hu[kPer];
  int64_t row = blockIdx.x;
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {  // the first row's loads (kAhead)
    idx[j] = threadIdx.x + j * blockDim.x;
    ok[j] = idx[j] < a.words;
    const bool load = kAhead && ok[j] && row < a.rows;
    m1u[j] = load ? a.m1[row * a.words + idx[j]] : zero_word();
    m2u[j] = load && !slots ? a.m2[row * a.words + idx[j]] : zero_word();
    hu[j] = load ? a.h1[row * a.words + idx[j]] : zero_word();
  }
  for (; row < a.rows; row += gridDim.x) {  // block-uniform
    const int64_t base = row * a.words, next = row + gridDim.x;
    uint4 m1c[kPer], m2c[kPer], hc[kPer], w1u[kPer], w2u[kPer];
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {  // this row's words; the next row's loads in flight meanwhile
      const int64_t at = (kAhead ? next : row) * a.words + idx[j];
      m1c[j] = kAhead ? m1u[j] : ok[j] ? a.m1[at] : zero_word();
      hc[j] = kAhead ? hu[j] : ok[j] ? a.h1[at] : zero_word();
      if (slots)  // this row's slot rows, summed now (their loads are not held across rows)
        m2c[j] = ok[j] ? ordered_sum_word(a.m2_slots + row * a.top_k * a.words + idx[j],
                                          a.m2_order + row * a.top_k, a.top_k, a.words)
                       : zero_word();
      else
        m2c[j] = kAhead ? m2u[j] : ok[j] ? a.m2[at] : zero_word();
      if (kAhead && next < a.rows && ok[j]) {
        m1u[j] = a.m1[at];
        if (!slots) m2u[j] = a.m2[at];
        hu[j] = a.h1[at];
      }
      w1u[j] = ok[j] ? a.w1[idx[j]] : zero_word();  // the weights (L1 / L2) before the reduction
      w2u[j] = ok[j] ? a.w2[idx[j]] : zero_word();
    }
    double s[2] = {0.0, 0.0};
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {
      s[0] += word_squares(m1c[j]);
      s[1] += word_squares(m2c[j]);
    }
    block_sums<2>(s, scratch);  // the two norms' sums in one reduction
    const float inv1 = inv_rms_of(s[0], a.words * 8, a.eps), inv2 = inv_rms_of(s[1], a.words * 8, a.eps);
    uint4 fu[kPer];
    double sf[1] = {0.0};
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {
      float x[8], y[8], w[8];
      unpack_bf16x8(m1c[j], x);
      norm8(x, inv1, w1u[j], x);
      round_bf16x8(x);
      unpack_bf16x8(m2c[j], y);
      norm8(y, inv2, w2u[j], y);
      round_bf16x8(y);
      DG_UNROLL
      for (int k = 0; k < 8; ++k) w[k] = __fadd_rn(x[k], y[k]);  // f
      round_bf16x8(w);
      fu[j] = pack_bf16x8_exact(w);
      if (!ok[j]) continue;
      sf[0] += squares8(w);
      if (a.m1n != nullptr) a.m1n[base + idx[j]] = pack_bf16x8_exact(x);
      if (a.m2n != nullptr) a.m2n[base + idx[j]] = pack_bf16x8_exact(y);
    }
    uint4 wfu[kPer], wnu[kPer];
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {  // the later weights' loads in flight across the reduction
      wfu[j] = ok[j] ? a.wf[idx[j]] : zero_word();
      wnu[j] = ok[j] && next_norm ? a.wn[idx[j]] : zero_word();
    }
    block_sums<1>(sf, scratch + 64);
    const float inv_f = inv_rms_of(sf[0], a.words * 8, a.eps);
    double sn[1] = {0.0};
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {
      float f[8], h[8];
      normed_residual8(fu[j], inv_f, wfu[j], hc[j], f, h);
      DG_UNROLL
      for (int k = 0; k < 8; ++k) h[k] = __fmul_rn(h[k], a.scale);
      round_bf16x8(h);
      hc[j] = pack_bf16x8_exact(h);  // the output row, kept for the next layer's norm
      if (!ok[j]) continue;
      sn[0] += squares8(h);
      if (a.f_out != nullptr) a.f_out[base + idx[j]] = pack_bf16x8_exact(f);
      a.out[base + idx[j]] = hc[j];
    }
    if (!next_norm) continue;  // uniform
    block_sums<1>(sn, scratch + 96);
    const float inv_n = inv_rms_of(sn[0], a.words * 8, a.eps);
    float amax[1] = {0.0f};
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {
      if (!ok[j]) continue;
      float h[8];
      unpack_bf16x8(hc[j], h);
      norm8(h, inv_n, wnu[j], h);
      if constexpr (kFp8) {
        hc[j] = pack_bf16x8_rn(h);  // next_out's word, kept for its codes
        a.next_out[base + idx[j]] = hc[j];
        amax[0] = amax_of_word(amax[0], hc[j]);
      } else {
        a.next_out[base + idx[j]] = pack_bf16x8_rn(h);
      }
    }
    if constexpr (kFp8) {
      block_maxes<1>(amax, scratch + 128);
      const float sn = fp8_row_scale(amax[0]);
      fp8_row_codes(hc, ok, idx, sn, qn.q, base);
      if (threadIdx.x == 0) qn.s[row] = sn;
    }
  }
}

template <int kPer>
__global__ void __launch_bounds__(bound_threads(kPer), bound_blocks(kPer, false)) ffn_residual_kernel(FfnArgs a) {
  ffn_residual_rows<kPer, false>(a, Fp8RowsOut{nullptr, nullptr});
}

// With the FP8 rows of next_out (qn; next_out set).
template <int kPer>
__global__ void __launch_bounds__(bound_threads(kPer), bound_blocks(kPer, false))
    ffn_residual_fp8_kernel(FfnArgs a, Fp8RowsOut qn) {
  ffn_residual_rows<kPer, true>(a, qn);
}

}  // namespace

}  // namespace dgemma::cuda::residual
