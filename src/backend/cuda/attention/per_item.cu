// The element-wise and row-wise parts of attention; the two matrix products run on cuBLAS
// (attention/attention.cpp). The softmax keeps the reference's rounding points: bf16 scores (the bf16
// output of the score GEMM, times scaling, rounded again), an fp32 softmax over the visible keys,
// probabilities rounded to bf16 before P.V.
#include <cmath>

#include "backend/cuda/attention/per_item.cuh"
#include "backend/cuda/core/common.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void gather_q_kernel(const uint16_t* __restrict__ q, int64_t Hq, int64_t D, int64_t i0, int64_t nc,
                                uint16_t* __restrict__ qh) {
  const int64_t total = Hq * nc * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % D, r = e / D;  // r = h * nc + il
    const int64_t il = r % nc, h = r / nc;
    qh[e] = q[((i0 + il) * Hq + h) * D + d];
  }
}

__global__ void scatter_out_kernel(const float* __restrict__ oh, int64_t Hq, int64_t D, int64_t i0,
                                   int64_t nc, uint16_t* __restrict__ out) {
  const int64_t total = Hq * nc * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % D, r = e / D;
    const int64_t il = r % nc, h = r / nc;
    out[((i0 + il) * Hq + h) * D + d] = f32_to_bf16(oh[e]);
  }
}

// Word forms of the two (D a multiple of 8, 16-byte aligned): one 16-byte word of eight head-dim
// elements per thread; dw = D / 8 words per head row.
__global__ void gather_q_vec_kernel(const uint4* __restrict__ q, int64_t Hq, int64_t dw, int64_t i0,
                                    int64_t nc, uint4* __restrict__ qh) {
  const int64_t total = Hq * nc * dw;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % dw, r = e / dw;
    const int64_t il = r % nc, h = r / nc;
    qh[e] = q[((i0 + il) * Hq + h) * dw + d];
  }
}

__global__ void scatter_out_vec_kernel(const float4* __restrict__ oh, int64_t Hq, int64_t dw, int64_t i0,
                                       int64_t nc, uint4* __restrict__ out) {
  const int64_t total = Hq * nc * dw;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % dw, r = e / dw;
    const int64_t il = r % nc, h = r / nc;
    const float4 a = oh[2 * e], b = oh[2 * e + 1];
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    out[((i0 + il) * Hq + h) * dw + d] = pack_bf16x8(v);
  }
}

// One block per score row. Three passes over the row (max, sum, write); the row is read from L2.
__global__ void softmax_kernel(uint16_t* S, int64_t ld, int64_t nc, int64_t Lpad, int64_t i0,
                               const ItemKeys rule, float scaling) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  uint16_t* s = S + row * ld;
  const int64_t L = rule.L, n = rule.n;
  const int64_t i = i0 + row % nc;  // query index among the new tokens
  const int64_t total = L + n;
  // Visible keys form one contiguous range [j_lo, j_hi) (backend/attention_keys.h).
  const KeyRange keys = query_keys(rule, static_cast<int>(i));
  const int64_t j_lo = keys.lo, j_hi = keys.hi;
  auto col = [&](int64_t j) { return j < L ? j : Lpad + (j - L); };
  auto score = [&](int64_t j) { return round_bf16(__fmul_rn(bf16_to_f32(s[col(j)]), scaling)); };

  float mx = -INFINITY;
  for (int64_t j = j_lo + threadIdx.x; j < j_hi; j += blockDim.x) mx = fmaxf(mx, score(j));
  mx = block_reduce(mx, MaxOp{}, -INFINITY, shared);
  float sum = 0.f;
  for (int64_t j = j_lo + threadIdx.x; j < j_hi; j += blockDim.x) sum += expf(score(j) - mx);
  sum = block_reduce(sum, SumOp{}, 0.f, shared);
  // Every thread has read what it needs (the reduction's barriers order the reads before the writes);
  // each column below is read and then written by the same thread.
  const bool any = mx > -INFINITY;
  for (int64_t j = threadIdx.x; j < total; j += blockDim.x) {
    float p = 0.f;
    if (any && j >= j_lo && j < j_hi) p = round_bf16(__fdiv_rn(expf(score(j) - mx), sum));
    s[col(j)] = f32_to_bf16(p);
  }
}

// The same softmax with one warp per score row and 16-byte words (ld and S 16-byte aligned): no block
// barriers, eight columns per load. Column c holds key j = c (c < L), padding (L <= c < Lpad), or key
// L + c - Lpad; padding and the tail past the last key are written as zeros, which the P.V products
// never read.
constexpr int kSoftmaxWarps = 8;
constexpr int64_t kWarpRowMax = 4096;

__global__ void softmax_warp_kernel(uint16_t* S, int64_t rows, int64_t ld, int64_t nc, int64_t Lpad,
                                    int64_t i0, const ItemKeys rule, float scaling) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kSoftmaxWarps) + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  uint4* s = reinterpret_cast<uint4*>(S + row * ld);
  const int64_t L = rule.L, n = rule.n;
  const int64_t i = i0 + row % nc;
  const KeyRange keys = query_keys(rule, static_cast<int>(i));
  const int64_t j_lo = keys.lo, j_hi = keys.hi;
  const int64_t words = (Lpad + n + 7) / 8;
  auto visible = [&](int64_t c) {
    const int64_t j = c < Lpad ? (c < L ? c : -1) : (c - Lpad < n ? L + c - Lpad : -1);
    return j >= j_lo && j < j_hi;
  };
  // The words holding visible keys: the cached part [j_lo, min(j_hi, L)) and the new part, in columns.
  int64_t seg[2][2] = {{j_lo, j_hi < L ? j_hi : L}, {Lpad + (j_lo > L ? j_lo - L : 0), Lpad + (j_hi - L)}};
  auto for_visible_words = [&](auto&& f) {
    for (auto& g : seg) {
      if (g[0] >= g[1]) continue;
      for (int64_t w = g[0] / 8 + lane; w < (g[1] + 7) / 8; w += 32) f(w);
    }
  };
  // The two parts never share a word: Lpad is a multiple of 8.
  float mx = -INFINITY;
  for_visible_words([&](int64_t w) {
    float v[8];
    unpack_bf16x8(s[w], v);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (visible(8 * w + k)) mx = fmaxf(mx, round_bf16(__fmul_rn(v[k], scaling)));
  });
  mx = warp_reduce(mx, MaxOp{});
  float sum = 0.f;
  for_visible_words([&](int64_t w) {
    float v[8];
    unpack_bf16x8(s[w], v);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (visible(8 * w + k)) sum += expf(round_bf16(__fmul_rn(v[k], scaling)) - mx);
  });
  sum = warp_reduce(sum, SumOp{});
  const bool any = mx > -INFINITY;
  for (int64_t w = lane; w < words; w += 32) {
    float v[8];
    unpack_bf16x8(s[w], v);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      v[k] = any && visible(8 * w + k)
                 ? round_bf16(__fdiv_rn(expf(round_bf16(__fmul_rn(v[k], scaling)) - mx), sum))
                 : 0.f;
    s[w] = pack_bf16x8(v);
  }
}

}  // namespace

void launch_attn_gather_q(const uint16_t* q, int64_t Hq, int64_t D, int64_t i0, int64_t nc, uint16_t* qh,
                          Stream stream) {
  const int64_t total = Hq * nc * D;
  if (total <= 0) return;
  if (vec8_ok(D, q, qh)) {
    launch_kernel(stream, gather_q_vec_kernel, grid_for(total / 8, kThreads), kThreads, 0,
                  reinterpret_cast<const uint4*>(q), Hq, D / 8, i0, nc, reinterpret_cast<uint4*>(qh));
    return;
  }
  launch_kernel(stream, gather_q_kernel, grid_for(total, kThreads), kThreads, 0, q, Hq, D, i0, nc, qh);
}

void launch_attn_softmax(uint16_t* S, int64_t rows, int64_t ld, int64_t nc, int64_t Lpad, int64_t i0,
                         const ItemKeys& rule, float scaling, Stream stream) {
  if (rows <= 0) return;
  const int64_t n = rule.n;
  // Rows up to a few thousand columns: one warp each; longer rows keep one block each (more loads in
  // flight per row).
  if (vec8_ok(ld, S) && Lpad + n <= kWarpRowMax) {
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, kSoftmaxWarps));
    launch_kernel(stream, softmax_warp_kernel, blocks, 32 * kSoftmaxWarps, 0, S, rows, ld, nc, Lpad, i0, rule,
                  scaling);
    return;
  }
  launch_kernel(stream, softmax_kernel, static_cast<unsigned>(rows), threads_for_row(rule.L + n), 0, S, ld,
                nc, Lpad, i0, rule, scaling);
}

void launch_attn_scatter_out(const float* oh, int64_t Hq, int64_t D, int64_t i0, int64_t nc, uint16_t* out,
                             Stream stream) {
  const int64_t total = Hq * nc * D;
  if (total <= 0) return;
  if (vec8_ok(D, oh, out)) {
    launch_kernel(stream, scatter_out_vec_kernel, grid_for(total / 8, kThreads), kThreads, 0,
                  reinterpret_cast<const float4*>(oh), Hq, D / 8, i0, nc, reinterpret_cast<uint4*>(out));
    return;
  }
  launch_kernel(stream, scatter_out_kernel, grid_for(total, kThreads), kThreads, 0, oh, Hq, D, i0, nc, out);
}

}  // namespace dgemma::cuda
