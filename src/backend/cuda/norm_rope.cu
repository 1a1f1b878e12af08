// RMSNorm (Gemma-4: x * (mean(x^2) + eps)^-0.5 * w, no 1+w) and NeoX RoPE with the CPU reference's
// rounding points.
//
// RMSNorm: the CPU sums squares in double. Squares of bf16 values are exact in double and their sum
// stays exact for any realistic dynamic range, so the parallel double sum here gives the same mean
// bit for bit. (mean + eps)^-0.5 is evaluated as 1/sqrt in double and rounded once: the correctly
// rounded fp32 value that glibc's powf returns in all but rare cases (CUDA's powf may be ulps off).
#include "backend/cuda/common.cuh"
#include "backend/cuda/norm_rope.cuh"
#include "backend/cuda/residual_kernel.cuh"

namespace dgemma::cuda {
namespace {

__device__ __forceinline__ float row_inv_rms(const uint16_t* xr, int64_t n, float eps, double* shared) {
  double ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = bf16_to_f32(xr[i]);
    ss += static_cast<double>(v) * v;
  }
  ss = block_reduce(ss, SumOp{}, 0.0, shared);
  const float ms = __fadd_rn(static_cast<float>(ss / static_cast<double>(n)), eps);
  return static_cast<float>(1.0 / sqrt(static_cast<double>(ms)));
}

// One block per row. x and out may alias: each element is read and written by the same thread, and
// all reads of the first pass finish before the reduction's barrier.
__global__ void rmsnorm_kernel(const uint16_t* x, const uint16_t* __restrict__ w, uint16_t* out, int64_t n, float eps) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * n;
  uint16_t* o = out + row * n;
  const float inv = row_inv_rms(xr, n, eps, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = __fmul_rn(bf16_to_f32(xr[i]), inv);
    if (w != nullptr) v = __fmul_rn(v, bf16_to_f32(w[i]));
    o[i] = f32_to_bf16(v);
  }
}

__global__ void router_norm_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ scale, float root,
                                   uint16_t* __restrict__ out, int64_t n, float eps) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * n;
  uint16_t* o = out + row * n;
  const float inv = row_inv_rms(xr, n, eps, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = round_bf16(__fmul_rn(bf16_to_f32(xr[i]), inv));  // rmsnorm without scale
    v = round_bf16(__fmul_rn(v, bf16_to_f32(scale[i])));        // * router.scale
    o[i] = f32_to_bf16(__fmul_rn(v, root));                     // * hidden^-0.5
  }
}

// Vectorised RMSNorm (rows of n = 8 * words elements, vec8_ok): the same maths as above, read as
// 16-byte words. kRouter selects the router's form (no weight; * scale, * root, with its roundings).
// Rows of up to 64 words get one warp each (no block barrier; the per-head q/k norms), longer rows
// one block. Each word is read and written by the same thread, so x and out may alias.
template <bool kRouter>
__device__ __forceinline__ void norm_word(const uint4* xr, const uint4* w, const uint4* scale, float root, float inv,
                                          uint4* o, int64_t i) {
  float v[8];
  unpack_bf16x8(xr[i], v);
  float ww[8];
  if (kRouter) {
    unpack_bf16x8(scale[i], ww);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(round_bf16(__fmul_rn(round_bf16(__fmul_rn(v[k], inv)), ww[k])), root);
  } else if (w != nullptr) {
    unpack_bf16x8(w[i], ww);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(__fmul_rn(v[k], inv), ww[k]);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(v[k], inv);
  }
  o[i] = pack_bf16x8(v);
}

template <bool kRouter>
__global__ void rmsnorm_warp_kernel(const uint4* x, const uint4* __restrict__ w, const uint4* __restrict__ scale,
                                    float root, uint4* out, int64_t rows, int64_t words, float eps) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  const uint4* xr = x + row * words;
  uint4* o = out + row * words;
  double ss = 0;
  for (int64_t i = lane; i < words; i += 32) ss += word_squares(xr[i]);
  ss = warp_reduce(ss, SumOp{});
  const float inv = inv_rms_of(ss, words * 8, eps);
  for (int64_t i = lane; i < words; i += 32) norm_word<kRouter>(xr, w, scale, root, inv, o, i);
}

template <bool kRouter>
__global__ void rmsnorm_block_kernel(const uint4* x, const uint4* __restrict__ w, const uint4* __restrict__ scale,
                                     float root, uint4* out, int64_t words, float eps) {
  __shared__ double shared[32];
  const int64_t row = blockIdx.x;
  const uint4* xr = x + row * words;
  uint4* o = out + row * words;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) ss += word_squares(xr[i]);
  ss = block_reduce(ss, SumOp{}, 0.0, shared);
  const float inv = inv_rms_of(ss, words * 8, eps);
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) norm_word<kRouter>(xr, w, scale, root, inv, o, i);
}

template <bool kRouter>
void launch_norm_vec(const uint16_t* x, const uint16_t* w, const uint16_t* scale, float root, uint16_t* out,
                     int64_t rows, int64_t n, float eps, Stream stream) {
  const int64_t words = n / 8;
  auto* xv = reinterpret_cast<const uint4*>(x);
  auto* wv = reinterpret_cast<const uint4*>(w);
  auto* sv = reinterpret_cast<const uint4*>(scale);
  auto* ov = reinterpret_cast<uint4*>(out);
  if (words <= 64) {
    constexpr int kWarpsPerBlock = 8;
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, kWarpsPerBlock));
    rmsnorm_warp_kernel<kRouter><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(xv, wv, sv, root, ov, rows, words, eps);
  } else {
    const int threads = threads_for_row(ceil_div(words, 2));
    rmsnorm_block_kernel<kRouter><<<static_cast<unsigned>(rows), threads, 0, stream>>>(xv, wv, sv, root, ov, words, eps);
  }
  CUDA_CHECK_LAUNCH(stream);
}

// The residual junctions for rows longer than residual_kernel.cuh's kernels take (H > 16384): one block
// per row, three passes over the row's words (the row stays in L1/L2 between them); each word is read
// back only by the thread that wrote it. Same roundings as the composed ops (backend.cpp).
constexpr int kResidualThreads = 128;

__device__ __forceinline__ void load8(const uint4* p, int64_t i, float (&v)[8]) { unpack_bf16x8(p[i], v); }

__global__ void __launch_bounds__(kResidualThreads)
    attn_residual_kernel(const uint4* __restrict__ x, const uint4* __restrict__ o, const uint4* __restrict__ wp,
                         uint4* __restrict__ h1, const uint4* __restrict__ wa, uint4* __restrict__ oa,
                         const uint4* __restrict__ wb, uint4* __restrict__ ob, uint4* __restrict__ on_out,
                         const uint4* __restrict__ wr, float root, uint4* __restrict__ z_out, int64_t words,
                         float eps) {
  __shared__ double shared[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * words;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) ss += word_squares(o[base + i]);
  const float inv_o = inv_rms_of(block_reduce(ss, SumOp{}, 0.0, shared), words * 8, eps);
  double sh = 0;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    float ov[8], w[8], xv[8], h[8];
    load8(o, base + i, ov);
    load8(wp, i, w);
    load8(x, base + i, xv);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      ov[k] = round_bf16(__fmul_rn(__fmul_rn(ov[k], inv_o), w[k]));
      h[k] = round_bf16(__fadd_rn(xv[k], ov[k]));
      sh += static_cast<double>(h[k]) * h[k];
    }
    h1[base + i] = pack_bf16x8(h);
    if (on_out != nullptr) on_out[base + i] = pack_bf16x8(ov);
  }
  const float inv_h = inv_rms_of(block_reduce(sh, SumOp{}, 0.0, shared), words * 8, eps);
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    float h[8], w[8], y[8];
    load8(h1, base + i, h);
    load8(wa, i, w);
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(__fmul_rn(h[k], inv_h), w[k]);
    oa[base + i] = pack_bf16x8(y);
    load8(wb, i, w);
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(__fmul_rn(h[k], inv_h), w[k]);
    ob[base + i] = pack_bf16x8(y);
    if (z_out == nullptr) continue;
    load8(wr, i, w);  // the router's input, as router_norm_kernel
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(round_bf16(__fmul_rn(round_bf16(__fmul_rn(h[k], inv_h)), w[k])), root);
    z_out[base + i] = pack_bf16x8(y);
  }
}

__global__ void __launch_bounds__(kResidualThreads)
    ffn_residual_kernel(const uint4* __restrict__ h1, const uint4* __restrict__ m1, const uint4* __restrict__ m2,
                        const uint4* __restrict__ w1, const uint4* __restrict__ w2, const uint4* __restrict__ wf,
                        float scale, uint4* __restrict__ out, uint4* __restrict__ m1n, uint4* __restrict__ m2n,
                        uint4* __restrict__ f_out, const uint4* __restrict__ wn, uint4* __restrict__ next_out,
                        int64_t words, float eps) {
  __shared__ double shared[32];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * words;
  double s1 = 0, s2 = 0;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    s1 += word_squares(m1[base + i]);
    s2 += word_squares(m2[base + i]);
  }
  const float inv1 = inv_rms_of(block_reduce(s1, SumOp{}, 0.0, shared), words * 8, eps);
  const float inv2 = inv_rms_of(block_reduce(s2, SumOp{}, 0.0, shared), words * 8, eps);
  uint4* const fbuf = f_out != nullptr ? f_out : out;  // bf16(m1n + m2n) until pass 3
  double sf = 0;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    float a[8], b[8], w[8], f[8];
    load8(m1, base + i, a);
    load8(w1, i, w);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = round_bf16(__fmul_rn(__fmul_rn(a[k], inv1), w[k]));
    load8(m2, base + i, b);
    load8(w2, i, w);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      b[k] = round_bf16(__fmul_rn(__fmul_rn(b[k], inv2), w[k]));
      f[k] = round_bf16(__fadd_rn(a[k], b[k]));
      sf += static_cast<double>(f[k]) * f[k];
    }
    if (m1n != nullptr) m1n[base + i] = pack_bf16x8(a);
    if (m2n != nullptr) m2n[base + i] = pack_bf16x8(b);
    fbuf[base + i] = pack_bf16x8(f);
  }
  const float inv_f = inv_rms_of(block_reduce(sf, SumOp{}, 0.0, shared), words * 8, eps);
  double sn = 0;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    float f[8], w[8], h[8];
    load8(fbuf, base + i, f);
    load8(wf, i, w);
    load8(h1, base + i, h);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      f[k] = round_bf16(__fmul_rn(__fmul_rn(f[k], inv_f), w[k]));
      h[k] = round_bf16(__fmul_rn(round_bf16(__fadd_rn(h[k], f[k])), scale));
      sn += static_cast<double>(h[k]) * h[k];
    }
    if (f_out != nullptr) f_out[base + i] = pack_bf16x8(f);
    out[base + i] = pack_bf16x8(h);
  }
  if (next_out == nullptr) return;  // block-uniform
  // The next layer's attention input norm of out (read back by the thread that wrote it).
  const float inv_n = inv_rms_of(block_reduce(sn, SumOp{}, 0.0, shared), words * 8, eps);
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    float h[8], w[8];
    load8(out, base + i, h);
    load8(wn, i, w);
#pragma unroll
    for (int k = 0; k < 8; ++k) h[k] = __fmul_rn(__fmul_rn(h[k], inv_n), w[k]);
    next_out[base + i] = pack_bf16x8(h);
  }
}

// One block per token: bf16 cos/sin of the token's angles in shared memory, then every (head, pair).
__global__ void rope_kernel(uint16_t* x, const int32_t* __restrict__ positions, const float* __restrict__ inv_freq,
                            int64_t heads, int64_t D) {
  extern __shared__ float cs[];  // cos [half], then sin [half]
  const int64_t t = blockIdx.x, half = D / 2;
  float* c = cs;
  float* s = cs + half;
  const float p = static_cast<float>(positions[t]);
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    const float f = __fmul_rn(inv_freq[j], p);  // fp32, as inv_freq @ position_ids
    c[j] = round_bf16(cos_f32(f));
    s[j] = round_bf16(sin_f32(f));
  }
  __syncthreads();
  uint16_t* base = x + t * heads * D;
  for (int64_t k = threadIdx.x; k < heads * half; k += blockDim.x) {
    const int64_t h = k / half, j = k % half;
    uint16_t* v = base + h * D;
    const float x1 = bf16_to_f32(v[j]), x2 = bf16_to_f32(v[j + half]);
    // (x * cos) + (rotate_half(x) * sin): each product and the sum rounded to bf16
    const float o1 = round_bf16(__fadd_rn(round_bf16(__fmul_rn(x1, c[j])), round_bf16(__fmul_rn(-x2, s[j]))));
    const float o2 = round_bf16(__fadd_rn(round_bf16(__fmul_rn(x2, c[j])), round_bf16(__fmul_rn(x1, s[j]))));
    v[j] = f32_to_bf16(o1);
    v[j + half] = f32_to_bf16(o2);
  }
}

}  // namespace

void launch_rmsnorm(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t rows, int64_t n, float eps,
                    Stream stream) {
  if (rows <= 0 || n <= 0) return;
  if (vec8_ok(n, x, w, out)) return launch_norm_vec<false>(x, w, nullptr, 1.0f, out, rows, n, eps, stream);
  rmsnorm_kernel<<<static_cast<unsigned>(rows), threads_for_row(n), 0, stream>>>(x, w, out, n, eps);
  CUDA_CHECK_LAUNCH(stream);
}

void launch_router_norm(const uint16_t* x, const uint16_t* scale, float root, uint16_t* out, int64_t rows, int64_t n,
                        float eps, Stream stream) {
  if (rows <= 0 || n <= 0) return;
  if (vec8_ok(n, x, scale, out)) return launch_norm_vec<true>(x, nullptr, scale, root, out, rows, n, eps, stream);
  router_norm_kernel<<<static_cast<unsigned>(rows), threads_for_row(n), 0, stream>>>(x, scale, root, out, n, eps);
  CUDA_CHECK_LAUNCH(stream);
}

bool residual_fusable(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n <= 0 || n % 8 != 0) return false;
  for (const void* p : ptrs)
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

void launch_attn_residual(const uint16_t* x, const uint16_t* o, const uint16_t* post_norm, uint16_t* h1,
                          const uint16_t* norm_a, uint16_t* out_a, const uint16_t* norm_b, uint16_t* out_b,
                          uint16_t* o_normed, const uint16_t* router_scale, float router_root, uint16_t* router_out,
                          int64_t rows, int64_t n, float eps, Stream stream) {
  if (rows <= 0) return;
  auto v = [](const uint16_t* p) { return reinterpret_cast<const uint4*>(p); };
  auto m = [](uint16_t* p) { return reinterpret_cast<uint4*>(p); };
  const residual::Plan plan = residual::plan_for(n / 8);
  if (plan.per == 0) {
    attn_residual_kernel<<<static_cast<unsigned>(rows), kResidualThreads, 0, stream>>>(
        v(x), v(o), v(post_norm), m(h1), v(norm_a), m(out_a), v(norm_b), m(out_b), m(o_normed), v(router_scale),
        router_root, m(router_out), n / 8, eps);
    CUDA_CHECK_LAUNCH(stream);
    return;
  }
  const residual::AttnArgs a{v(x),        v(o),         v(post_norm), m(h1),   v(norm_a),
                             m(out_a),    v(norm_b),    m(out_b),     m(o_normed), v(router_scale),
                             router_root, m(router_out), n / 8,       eps,     rows};
  auto run = [&](auto kernel) {  // the blocks loop over the rows: as many as are resident at once
    constexpr size_t kSmem = residual::kScratchDoubles * sizeof(double);
    kernel<<<resident_grid(stream, kernel, plan.threads, kSmem, rows), plan.threads, kSmem, stream>>>(a);
  };
  switch (plan.per) {
    case 1: run(residual::attn_residual_kernel<1>); break;
    case 2: run(residual::attn_residual_kernel<2>); break;
    default: run(residual::attn_residual_kernel<4>); break;
  }
  CUDA_CHECK_LAUNCH(stream);
}

void launch_ffn_residual(const uint16_t* h1, const uint16_t* m1, const uint16_t* m2, const uint16_t* norm1,
                         const uint16_t* norm2, const uint16_t* norm_f, float scale, uint16_t* out, uint16_t* m1n,
                         uint16_t* m2n, uint16_t* f, const uint16_t* next_norm, uint16_t* next_out, int64_t rows,
                         int64_t n, float eps, Stream stream) {
  if (rows <= 0) return;
  auto v = [](const uint16_t* p) { return reinterpret_cast<const uint4*>(p); };
  auto m = [](uint16_t* p) { return reinterpret_cast<uint4*>(p); };
  const residual::Plan plan = residual::plan_for(n / 8);
  if (plan.per == 0) {
    ffn_residual_kernel<<<static_cast<unsigned>(rows), kResidualThreads, 0, stream>>>(
        v(h1), v(m1), v(m2), v(norm1), v(norm2), v(norm_f), scale, m(out), m(m1n), m(m2n), m(f), v(next_norm),
        m(next_out), n / 8, eps);
    CUDA_CHECK_LAUNCH(stream);
    return;
  }
  const residual::FfnArgs a{v(h1),  v(m1),  v(m2), v(norm1),     v(norm2),    v(norm_f), scale, m(out),
                            m(m1n), m(m2n), m(f),  v(next_norm), m(next_out), n / 8,     eps,   rows};
  auto run = [&](auto kernel) {  // the blocks loop over the rows: as many as are resident at once
    constexpr size_t kSmem = residual::kScratchDoubles * sizeof(double);
    kernel<<<resident_grid(stream, kernel, plan.threads, kSmem, rows), plan.threads, kSmem, stream>>>(a);
  };
  switch (plan.per) {
    case 1: run(residual::ffn_residual_kernel<1>); break;
    case 2: run(residual::ffn_residual_kernel<2>); break;
    default: run(residual::ffn_residual_kernel<4>); break;
  }
  CUDA_CHECK_LAUNCH(stream);
}

void launch_rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads, int64_t D,
                 Stream stream) {
  if (T <= 0 || heads <= 0 || D < 2) return;
  const size_t shared = static_cast<size_t>(D / 2) * 2 * sizeof(float);
  rope_kernel<<<static_cast<unsigned>(T), threads_for_row(heads * (D / 2)), shared, stream>>>(x, positions, inv_freq,
                                                                                             heads, D);
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace dgemma::cuda
