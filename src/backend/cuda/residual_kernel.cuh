#pragma once
// The layer's residual junctions (norm_rope.cuh launch_attn_residual / launch_ffn_residual) with the
// row in registers, in a header so that the unit tests run them on the host through
// tests/unit/backend/cuda_emulator.h. On the device, norm_rope.cu includes common.cuh first. What the
// kernels need: threadIdx / blockIdx / blockDim, __syncthreads, __shfl_xor_sync (double),
// __fmul_rn / __fadd_rn, uint4, round_bf16 and the word helpers of bf16_words.cuh;
// DG_KERNEL_DYNAMIC_SMEM(name), the dynamic shared-memory buffer.
//
// Why they are faster than the loop kernels they replace (one block of 128 threads per row, a pass
// over the row per norm, every norm's sum a block_reduce with two barriers): the junctions move a few
// [T, H] bf16 tensors (~1 us of traffic at T = 256, H = 2816), so their time is latency, which this
// form cuts three ways:
//   - each thread owns kPer words of the row (H = 2816: one word, 352 threads), and issues the loads
//     of the row's inputs and first weights together before their first use, the later weights'
//     loads before the reduction that precedes their use: one memory latency per row instead of one
//     per pass and loop trip;
//   - the intermediates stay in registers (bf16-rounded values, so packed words lose nothing): no
//     store-then-reload through L1/L2 between passes;
//   - every norm's sum is one warp butterfly, one barrier and a second butterfly over the warps'
//     partials, each reduction with its own scratch (no leading barrier), and the two independent
//     sums of the FFN junction share one. The sums are of squares of bf16 values in double: exact, so
//     the order of the additions does not change a bit.
// Every output element is computed with exactly the operations and roundings of the loop kernels
// (and of the composed ops, backend.cpp).
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/kernel_macros.cuh"

namespace dgemma::cuda::residual {

constexpr int kMaxThreads = 512;
// Launch bounds: up to 384 threads (one or two words a thread) with three blocks an SM (at most 56
// registers: T = 1024 rows of 352 threads stay resident in two waves), 512 threads for four words.
constexpr int bound_threads(int per) {
  return per == 4 ? 512 : 384;
}
constexpr int bound_blocks(int per) {
  return per == 1 ? 3 : 1;
}
constexpr int kScratchDoubles = 4 * 32;  // the junctions' reductions: four slots of one double per warp

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
};

struct FfnArgs {
  const uint4 *h1, *m1, *m2, *w1, *w2, *wf;
  float scale;
  uint4* out;
  uint4 *m1n, *m2n, *f_out;  // optional
  const uint4* wn;           // with next_out
  uint4* next_out;           // optional
  int64_t words;
  float eps;
};

// Words per thread and threads per block for rows of `words` 16-byte words (per 0: too long, the
// loop kernels take it). One word a thread where the row fits in max_threads (the most parallel
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
// used by another reduction of the same launch; blockDim.x a multiple of 32.
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
    v[n] = lane < warps ? slot[n * 32 + lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v[n] += __shfl_xor_sync(0xffffffffu, v[n], o);
  }
}

__device__ __forceinline__ uint4 zero_word() {
  return make_uint4(0u, 0u, 0u, 0u);
}

// The kernels have internal linkage: the unit tests compile them for the host into a binary that
// also links the device build's host stubs of the same names.
namespace {

template <int kPer>
__global__ void __launch_bounds__(bound_threads(kPer), bound_blocks(kPer)) attn_residual_kernel(AttnArgs a) {
  DG_KERNEL_DYNAMIC_SMEM(smem);
  double* scratch = reinterpret_cast<double*>(smem);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * a.words;
  const bool router = a.z_out != nullptr;  // block-uniform
  int64_t idx[kPer];
  bool ok[kPer];
  uint4 ou[kPer], xu[kPer], wpu[kPer], wau[kPer], wbu[kPer], wru[kPer];
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {  // the loads of the row first (see the top)
    idx[j] = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    ok[j] = idx[j] < a.words;
    const int64_t i = ok[j] ? idx[j] : 0;
    ou[j] = ok[j] ? a.o[base + i] : zero_word();
    xu[j] = ok[j] ? a.x[base + i] : zero_word();
    wpu[j] = ok[j] ? a.wp[i] : zero_word();
  }
  double s[1] = {0.0};
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) s[0] += word_squares(ou[j]);  // zero words add nothing
  block_sums<1>(s, scratch);
  const float inv_o = inv_rms_of(s[0], a.words * 8, a.eps);
  uint4 hu[kPer];
  s[0] = 0.0;
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    float ov[8], w[8], xv[8], h[8];
    unpack_bf16x8(ou[j], ov);
    unpack_bf16x8(wpu[j], w);
    unpack_bf16x8(xu[j], xv);
    double sj = 0.0;
    DG_UNROLL
    for (int k = 0; k < 8; ++k) {
      ov[k] = round_bf16(__fmul_rn(__fmul_rn(ov[k], inv_o), w[k]));
      h[k] = round_bf16(__fadd_rn(xv[k], ov[k]));
      sj += static_cast<double>(h[k]) * h[k];
    }
    hu[j] = pack_bf16x8(h);  // exact: h is bf16 already
    if (!ok[j]) continue;    // padding words (zero) are not summed
    s[0] += sj;
    a.h1[base + idx[j]] = hu[j];
    if (a.on_out != nullptr) a.on_out[base + idx[j]] = pack_bf16x8(ov);
  }
  // The last weights' loads (L1/L2-resident vectors) in flight across the reduction; issued only now
  // to keep the registers live at once low (more blocks an SM).
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    const int64_t i = ok[j] ? idx[j] : 0;
    wau[j] = ok[j] ? a.wa[i] : zero_word();
    wbu[j] = ok[j] ? a.wb[i] : zero_word();
    wru[j] = ok[j] && router ? a.wr[i] : zero_word();
  }
  block_sums<1>(s, scratch + 32);
  const float inv_h = inv_rms_of(s[0], a.words * 8, a.eps);
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    if (!ok[j]) continue;
    const int64_t at = base + idx[j];
    float h[8], w[8], y[8];
    unpack_bf16x8(hu[j], h);
    unpack_bf16x8(wau[j], w);
    DG_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(__fmul_rn(h[k], inv_h), w[k]);
    a.oa[at] = pack_bf16x8(y);
    unpack_bf16x8(wbu[j], w);
    DG_UNROLL
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(__fmul_rn(h[k], inv_h), w[k]);
    a.ob[at] = pack_bf16x8(y);
    if (!router) continue;
    unpack_bf16x8(wru[j], w);  // the router's input, as router_norm_kernel
    DG_UNROLL
    for (int k = 0; k < 8; ++k)
      y[k] = __fmul_rn(round_bf16(__fmul_rn(round_bf16(__fmul_rn(h[k], inv_h)), w[k])), a.root);
    a.z_out[at] = pack_bf16x8(y);
  }
}

template <int kPer>
__global__ void __launch_bounds__(bound_threads(kPer), bound_blocks(kPer)) ffn_residual_kernel(FfnArgs a) {
  DG_KERNEL_DYNAMIC_SMEM(smem);
  double* scratch = reinterpret_cast<double*>(smem);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * a.words;
  const bool next = a.next_out != nullptr;  // block-uniform
  int64_t idx[kPer];
  bool ok[kPer];
  uint4 m1u[kPer], m2u[kPer], hu[kPer], w1u[kPer], w2u[kPer], wfu[kPer], wnu[kPer];
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    idx[j] = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    ok[j] = idx[j] < a.words;
    const int64_t i = ok[j] ? idx[j] : 0;
    m1u[j] = ok[j] ? a.m1[base + i] : zero_word();  // the loads of the row first (see the top)
    m2u[j] = ok[j] ? a.m2[base + i] : zero_word();
    hu[j] = ok[j] ? a.h1[base + i] : zero_word();
    w1u[j] = ok[j] ? a.w1[i] : zero_word();
    w2u[j] = ok[j] ? a.w2[i] : zero_word();
  }
  double s[2] = {0.0, 0.0};
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    s[0] += word_squares(m1u[j]);
    s[1] += word_squares(m2u[j]);
  }
  block_sums<2>(s, scratch);  // the two norms' sums in one reduction
  const float inv1 = inv_rms_of(s[0], a.words * 8, a.eps), inv2 = inv_rms_of(s[1], a.words * 8, a.eps);
  uint4 fu[kPer];
  double sf[1] = {0.0};
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    float x[8], y[8], w[8], f[8];
    unpack_bf16x8(m1u[j], x);
    unpack_bf16x8(w1u[j], w);
    DG_UNROLL
    for (int k = 0; k < 8; ++k) x[k] = round_bf16(__fmul_rn(__fmul_rn(x[k], inv1), w[k]));
    unpack_bf16x8(m2u[j], y);
    unpack_bf16x8(w2u[j], w);
    double sj = 0.0;
    DG_UNROLL
    for (int k = 0; k < 8; ++k) {
      y[k] = round_bf16(__fmul_rn(__fmul_rn(y[k], inv2), w[k]));
      f[k] = round_bf16(__fadd_rn(x[k], y[k]));
      sj += static_cast<double>(f[k]) * f[k];
    }
    fu[j] = pack_bf16x8(f);  // exact: f is bf16 already
    if (!ok[j]) continue;
    sf[0] += sj;
    if (a.m1n != nullptr) a.m1n[base + idx[j]] = pack_bf16x8(x);
    if (a.m2n != nullptr) a.m2n[base + idx[j]] = pack_bf16x8(y);
  }
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {  // as in the attention junction: the later weights' loads now
    const int64_t i = ok[j] ? idx[j] : 0;
    wfu[j] = ok[j] ? a.wf[i] : zero_word();
    wnu[j] = ok[j] && next ? a.wn[i] : zero_word();
  }
  block_sums<1>(sf, scratch + 64);
  const float inv_f = inv_rms_of(sf[0], a.words * 8, a.eps);
  double sn[1] = {0.0};
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    float f[8], w[8], h[8];
    unpack_bf16x8(fu[j], f);
    unpack_bf16x8(wfu[j], w);
    unpack_bf16x8(hu[j], h);
    double sj = 0.0;
    DG_UNROLL
    for (int k = 0; k < 8; ++k) {
      f[k] = round_bf16(__fmul_rn(__fmul_rn(f[k], inv_f), w[k]));
      h[k] = round_bf16(__fmul_rn(round_bf16(__fadd_rn(h[k], f[k])), a.scale));
      sj += static_cast<double>(h[k]) * h[k];
    }
    hu[j] = pack_bf16x8(h);  // the output row, kept for the next layer's norm
    if (!ok[j]) continue;
    sn[0] += sj;
    if (a.f_out != nullptr) a.f_out[base + idx[j]] = pack_bf16x8(f);
    a.out[base + idx[j]] = hu[j];
  }
  if (!next) return;  // block-uniform
  block_sums<1>(sn, scratch + 96);
  const float inv_n = inv_rms_of(sn[0], a.words * 8, a.eps);
  DG_UNROLL
  for (int j = 0; j < kPer; ++j) {
    if (!ok[j]) continue;
    float h[8], w[8];
    unpack_bf16x8(hu[j], h);
    unpack_bf16x8(wnu[j], w);
    DG_UNROLL
    for (int k = 0; k < 8; ++k) h[k] = __fmul_rn(__fmul_rn(h[k], inv_n), w[k]);
    a.next_out[base + idx[j]] = pack_bf16x8(h);
  }
}

}  // namespace

}  // namespace dgemma::cuda::residual
