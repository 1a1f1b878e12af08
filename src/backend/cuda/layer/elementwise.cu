// Element-wise kernels: grid-stride loops over int64 indices, one bf16 rounding per output as in the
// CPU backend, explicit __f*_rn arithmetic so that nvcc never contracts a multiply-add into an FMA.
#include <algorithm>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/layer/elementwise.cuh"
#include "backend/cuda/layer/gelu_kernel.cuh"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = f32_to_bf16(__fadd_rn(bf16_to_f32(a[i]), bf16_to_f32(b[i])));
}

__global__ void scale_kernel(const uint16_t* x, float s, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = f32_to_bf16(__fmul_rn(bf16_to_f32(x[i]), s));
}

__global__ void mul_kernel(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n, int64_t m) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = f32_to_bf16(__fmul_rn(bf16_to_f32(a[i]), bf16_to_f32(b[i % m])));
}

__global__ void gelu_mul_kernel(const uint16_t* g, const uint16_t* u, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = f32_to_bf16(__fmul_rn(round_bf16(gelu_tanh(bf16_to_f32(g[i]))), bf16_to_f32(u[i])));
}

// Vectorised forms (16-byte words of eight bf16; vec8_ok holds): the same per-element maths.
template <typename F>
__device__ __forceinline__ void for_each_word(int64_t words, F f) {
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x)
    f(w);
}

__global__ void add_vec_kernel(const uint4* a, const uint4* b, uint4* out, int64_t words) {
  for_each_word(words, [&](int64_t w) {
    float x[8], y[8];
    unpack_bf16x8(a[w], x);
    unpack_bf16x8(b[w], y);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = __fadd_rn(x[k], y[k]);
    out[w] = pack_bf16x8(x);
  });
}

__global__ void scale_vec_kernel(const uint4* x, float s, uint4* out, int64_t words) {
  for_each_word(words, [&](int64_t w) {
    float v[8];
    unpack_bf16x8(x[w], v);
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __fmul_rn(v[k], s);
    out[w] = pack_bf16x8(v);
  });
}

// b broadcast over rows of m elements (m a multiple of 8): word w of a pairs with word w % (m / 8) of b.
__global__ void mul_vec_kernel(const uint4* a, const uint4* b, uint4* out, int64_t words, int64_t mwords) {
  for_each_word(words, [&](int64_t w) {
    float x[8], y[8];
    unpack_bf16x8(a[w], x);
    unpack_bf16x8(b[mwords == words ? w : w % mwords], y);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = __fmul_rn(x[k], y[k]);
    out[w] = pack_bf16x8(x);
  });
}

__global__ void gelu_mul_vec_kernel(const uint4* g, const uint4* u, uint4* out, int64_t words) {
  for_each_word(words, [&](int64_t w) {
    float x[8], y[8];
    unpack_bf16x8(g[w], x);
    unpack_bf16x8(u[w], y);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = __fmul_rn(round_bf16(gelu_tanh(x[k])), y[k]);
    out[w] = pack_bf16x8(x);
  });
}

// The halves of rows of 2I (the fused gate|up projection): element (t, i) pairs gate_up[t, i] with
// gate_up[t, I + i]; in words of eight when I % 8 == 0 (iw = I / 8 words a half row).
__global__ void gelu_mul_halves_kernel(const uint16_t* gu, uint16_t* out, int64_t n, int64_t I) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / I, j = i - t * I;
    const uint16_t* g = gu + t * 2 * I + j;
    out[i] = f32_to_bf16(__fmul_rn(round_bf16(gelu_tanh(bf16_to_f32(g[0]))), bf16_to_f32(g[I])));
  }
}

__global__ void gelu_mul_halves_vec_kernel(const uint4* gu, uint4* out, int64_t words, int64_t iw) {
  for_each_word(words, [&](int64_t w) {
    const int64_t t = w / iw, j = w - t * iw;
    float x[8], y[8];
    unpack_bf16x8(gu[t * 2 * iw + j], x);
    unpack_bf16x8(gu[t * 2 * iw + iw + j], y);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = __fmul_rn(round_bf16(gelu_tanh(x[k])), y[k]);
    out[w] = pack_bf16x8(x);
  });
}

__global__ void softcap_kernel(const uint16_t* __restrict__ in, float cap, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __fmul_rn(tanh_f32(__fdiv_rn(bf16_to_f32(in[i]), cap)), cap);
}

__global__ void fill_normal_kernel(uint16_t* __restrict__ out, int64_t n, uint64_t key, float mean, float std) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = f32_to_bf16(__fadd_rn(mean, __fmul_rn(std, rng::normal(key, static_cast<uint64_t>(i)))));
}

// One block per token.
__global__ void embed_kernel(const int32_t* __restrict__ ids, const uint16_t* __restrict__ table, int64_t V,
                             int64_t H, float scale, uint16_t* __restrict__ out, unsigned* error_word) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  uint16_t* o = out + t * H;
  if (id < 0 || id >= V) {
    if (threadIdx.x == 0) atomicOr(error_word, kErrEmbedTokenId);
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) o[i] = 0;
    return;
  }
  const uint16_t* row = table + static_cast<int64_t>(id) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) o[i] = f32_to_bf16(__fmul_rn(bf16_to_f32(row[i]), scale));
}

}  // namespace

void launch_add(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n, Stream stream) {
  if (n <= 0) return;
  if (vec8_ok(n, a, b, out)) {
    launch_kernel(stream, add_vec_kernel, grid_for(n / 8, kThreads), kThreads, 0,
                  reinterpret_cast<const uint4*>(a), reinterpret_cast<const uint4*>(b),
                  reinterpret_cast<uint4*>(out), n / 8);
    return;
  }
  launch_kernel(stream, add_kernel, grid_for(n, kThreads), kThreads, 0, a, b, out, n);
}

void launch_scale(const uint16_t* x, float s, uint16_t* out, int64_t n, Stream stream) {
  if (n <= 0) return;
  if (vec8_ok(n, x, out)) {
    launch_kernel(stream, scale_vec_kernel, grid_for(n / 8, kThreads), kThreads, 0,
                  reinterpret_cast<const uint4*>(x), s, reinterpret_cast<uint4*>(out), n / 8);
    return;
  }
  launch_kernel(stream, scale_kernel, grid_for(n, kThreads), kThreads, 0, x, s, out, n);
}

void launch_mul(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n, int64_t m, Stream stream) {
  if (n <= 0) return;
  if (vec8_ok(n, a, b, out) && m % 8 == 0 && m > 0 && n % m == 0) {
    launch_kernel(stream, mul_vec_kernel, grid_for(n / 8, kThreads), kThreads, 0,
                  reinterpret_cast<const uint4*>(a), reinterpret_cast<const uint4*>(b),
                  reinterpret_cast<uint4*>(out), n / 8, m / 8);
    return;
  }
  launch_kernel(stream, mul_kernel, grid_for(n, kThreads), kThreads, 0, a, b, out, n, m);
}

void launch_gelu_mul(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n, Stream stream) {
  if (n <= 0) return;
  if (vec8_ok(n, gate, up, out)) {
    launch_kernel(stream, gelu_mul_vec_kernel, grid_for(n / 8, kThreads), kThreads, 0,
                  reinterpret_cast<const uint4*>(gate), reinterpret_cast<const uint4*>(up),
                  reinterpret_cast<uint4*>(out), n / 8);
    return;
  }
  launch_kernel(stream, gelu_mul_kernel, grid_for(n, kThreads), kThreads, 0, gate, up, out, n);
}

namespace {

// From ~2M elements (T ~ 1,000 at I = 2,112) the table kernels (layer/gelu_kernel.cuh): a table a block
// costs ~3 gelu_tanh a thread, repaid where the threads have many elements each.
constexpr int64_t kTableFrom = int64_t{1} << 21;

template <int kPer>
void launch_gelu_fp8_rows(const uint4* gu, uint4* out, uint2* q, float* scales, int64_t T, int64_t iw,
                          int threads, Stream stream) {
  if (T * iw * 8 >= kTableFrom) {  // a few blocks an SM, each filling its table once for many rows
    const unsigned grid =
        static_cast<unsigned>(std::min<int64_t>(T, 2 * int64_t{stream.occupancy->sm_count()}));
    launch_kernel(stream, gelu_mul_halves_fp8_kernel<kPer, true>, grid, threads, 0, gu, out, q, scales, T,
                  iw);
    return;
  }
  launch_kernel(stream, gelu_mul_halves_fp8_kernel<kPer, false>, static_cast<unsigned>(T), threads, 0, gu,
                out, q, scales, T, iw);
}

}  // namespace

bool gelu_mul_halves_fp8_fusable(int64_t I, std::initializer_list<const void*> ptrs) {
  if (I <= 0 || I % 8 != 0 || gelu_row_plan(I / 8).per == 0) return false;
  for (const void* p : ptrs)
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

void launch_gelu_mul_halves_fp8(const uint16_t* gate_up, uint16_t* out, uint8_t* q, float* scales, int64_t T,
                                int64_t I, Stream stream) {
  if (T <= 0 || I <= 0) return;
  const GeluRowPlan plan = gelu_row_plan(I / 8);
  DG_CHECK(plan.per > 0 && I % 8 == 0);  // gelu_mul_halves_fp8_fusable
  const auto* gu = reinterpret_cast<const uint4*>(gate_up);
  auto* o = reinterpret_cast<uint4*>(out);
  auto* qw = reinterpret_cast<uint2*>(q);
  if (plan.per == 1)
    launch_gelu_fp8_rows<1>(gu, o, qw, scales, T, I / 8, plan.threads, stream);
  else if (plan.per == 2)
    launch_gelu_fp8_rows<2>(gu, o, qw, scales, T, I / 8, plan.threads, stream);
  else
    launch_gelu_fp8_rows<4>(gu, o, qw, scales, T, I / 8, plan.threads, stream);
}

void launch_gelu_mul_halves(const uint16_t* gate_up, uint16_t* out, int64_t T, int64_t I, Stream stream) {
  const int64_t n = T * I;
  if (n <= 0) return;
  // The table kernel from kTableFrom elements; below, the vectorised kernel.
  if (vec8_ok(I, gate_up, out) && n >= kTableFrom) {
    const int64_t words = n / 8;
    const unsigned grid =
        resident_grid(stream, gelu_mul_halves_table_kernel, kGeluThreads, 0, ceil_div(words, 2 * kGeluThreads));
    launch_kernel(stream, gelu_mul_halves_table_kernel, grid, kGeluThreads, 0,
                  reinterpret_cast<const uint4*>(gate_up), reinterpret_cast<uint4*>(out), words, I / 8);
    return;
  }
  if (vec8_ok(I, gate_up, out)) {
    launch_kernel(stream, gelu_mul_halves_vec_kernel, grid_for(n / 8, kThreads), kThreads, 0,
                  reinterpret_cast<const uint4*>(gate_up), reinterpret_cast<uint4*>(out), n / 8, I / 8);
    return;
  }
  launch_kernel(stream, gelu_mul_halves_kernel, grid_for(n, kThreads), kThreads, 0, gate_up, out, n, I);
}

void launch_softcap(const uint16_t* logits, float softcap, float* out, int64_t n, Stream stream) {
  if (n <= 0) return;
  launch_kernel(stream, softcap_kernel, grid_for(n, kThreads), kThreads, 0, logits, softcap, out, n);
}

void launch_fill_normal(uint16_t* out, int64_t n, uint64_t key, float mean, float std, Stream stream) {
  if (n <= 0) return;
  launch_kernel(stream, fill_normal_kernel, grid_for(n, kThreads), kThreads, 0, out, n, key, mean, std);
}

void launch_embed(const int32_t* ids, int64_t T, const uint16_t* table, int64_t V, int64_t H, float scale,
                  uint16_t* out, unsigned* error_word, Stream stream) {
  if (T <= 0 || H <= 0) return;
  launch_kernel(stream, embed_kernel, static_cast<unsigned>(T), threads_for_row(H), 0, ids, table, V, H,
                scale, out, error_word);
}

}  // namespace dgemma::cuda
