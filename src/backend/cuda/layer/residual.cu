// The layer's residual junctions (residual.cuh): rows of up to residual_kernel.cuh's limit with the
// row in registers, longer rows by the loop kernels below. The norms' sums are as in norm.cu.
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/layer/residual.cuh"
#include "backend/cuda/layer/residual_kernel.cuh"

namespace dgemma::cuda {
namespace {

// The residual junctions for rows longer than layer/residual_kernel.cuh's kernels take (H > 16384): one block
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

}  // namespace

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

}  // namespace dgemma::cuda
