#pragma once
// The dense MLP's activation of the fused gate|up projection at large T (layer/elementwise.cuh
// launch_gelu_mul_halves): out[t, i] = bf16(bf16(gelu_tanh(gate)) * up), gate = gate_up[t, i], up =
// gate_up[t, I + i], in a header so that the unit tests run it on the host through
// tests/unit/backend/cuda_emulator.h. On the device, layer/elementwise.cu includes core/common.cuh first.
// What the kernel needs: threadIdx / blockIdx / blockDim / gridDim, __syncthreads, static shared arrays,
// __fmul_rn, __byte_perm, uint4, gelu_tanh, f32_to_bf16 / bf16_to_f32 / round_bf16 and the word
// helpers of core/bf16_words.cuh.
//
// What limited the vectorised kernel (gelu_mul_halves_vec_kernel, ~30 us a layer at T = 4,096
// against ~11 us of HBM traffic): gelu_tanh evaluates tanh in double (the CPU's tanhf, correctly
// rounded in all but rare cases), ~30 fp64 instructions and two fp32 <-> fp64 conversions an element:
// the SM's fp64 pipe, not memory, set the time. But bf16(gelu_tanh(gate)) depends only on the gate's
// 16 bits. So each block first tabulates it, with the same gelu_tanh, for the gates the MLP produces
// almost always (|gate| in [2^-8, 16): 3,072 bf16 values, both signs), then looks every element up in
// shared memory; a gate outside that range (zero, tiny, huge, NaN) is evaluated as before. Every
// output bit is the vectorised kernel's: the table holds exactly the values it computes.
//
// gelu_mul_halves_fp8_kernel (launch_gelu_mul_halves_fp8) writes the same output and its FP8 rows
// (backend.h Fp8Rows) for the W8A8 down projection: a block a row at a time, the row's words in
// registers, the amax over the bf16-rounded output, one block max, then the codes and the scale with
// quant/fp8_quant_kernel.cuh's helpers: bit for bit launch_quantize_fp8_rows of the output. With kTable
// (many rows a block) it looks the gates up as the table kernel does.
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"
#include "backend/cuda/quant/fp8_quant_kernel.cuh"

namespace dgemma::cuda {

// The tabulated gates: exponent fields kGeluExpLo .. kGeluExpLo + kGeluBinades - 1 (|x| in [2^-8, 2^4)),
// both signs, entry ((sign * kGeluBinades) + binade) * 128 + mantissa.
constexpr int kGeluExpLo = 127 - 8;
constexpr int kGeluBinades = 12;
constexpr int kGeluTableEntries = 2 * kGeluBinades * 128;
// Blocks of 1,024 threads, one an SM (a grid of the resident blocks, looping over the words; 64
// registers a thread: four 16-byte loads in flight each, 64 KB an SM): the table is built once a
// block, 3 gelu_tanh a thread, ~5% of the fp64 work it saves at T = 4,096.
constexpr int kGeluThreads = 1024;

// The table entry of the gate with bf16 bits b, or -1 when it is outside the table.
__device__ __forceinline__ int gelu_table_index(uint32_t b) {
  const int binade = static_cast<int>((b >> 7) & 0xffu) - kGeluExpLo;
  if (binade < 0 || binade >= kGeluBinades) return -1;
  return (static_cast<int>(b >> 15) * kGeluBinades + binade) * 128 + static_cast<int>(b & 0x7fu);
}

// Rows of the FP8 kernel: kPer words a thread (1, 2 or 4), threads a multiple of 32 up to
// kGeluRowMaxThreads (per 0: a half row too long, over 2,048 words).
constexpr int kGeluRowMaxThreads = 512;
struct GeluRowPlan {
  int per, threads;
};
inline GeluRowPlan gelu_row_plan(int64_t iw) {
  for (int per : {1, 2, 4}) {
    const int64_t t = ((iw + per - 1) / per + 31) / 32 * 32;
    if (t <= kGeluRowMaxThreads) return {per, static_cast<int>(t)};
  }
  return {0, 0};
}

// Internal linkage (as layer/residual_kernel.cuh): the unit tests' host build of the kernel shares a binary
// with the device build's host stub.
namespace {

// The table of bf16(gelu_tanh(gate)) for the tabulated gates, filled by the block's threads.
__device__ __forceinline__ void gelu_fill_table(uint16_t* table) {
  for (int i = threadIdx.x; i < kGeluTableEntries; i += blockDim.x) {
    const uint32_t sign = static_cast<uint32_t>(i / (kGeluBinades * 128)),
                   rest = static_cast<uint32_t>(i % (kGeluBinades * 128));
    const uint32_t b = (sign << 15) | ((kGeluExpLo + rest / 128) << 7) | (rest % 128);
    table[i] = f32_to_bf16(gelu_tanh(bf16_to_f32(static_cast<uint16_t>(b))));
  }
}

// x[k] = bf16(gelu_tanh(gate k)) * up k (the fp32 product, not yet rounded) of eight pairs; the gate's
// bf16(gelu_tanh) from `table` where it holds it (nullptr: every one evaluated).
__device__ __forceinline__ void gelu_mul8(const uint4 g, const uint4 u, const uint16_t* table,
                                          float (&x)[8]) {
  float y[8];
  unpack_bf16x8(g, x);
  unpack_bf16x8(u, y);
  const uint32_t gw[4] = {g.x, g.y, g.z, g.w};
  DG_UNROLL
  for (int k = 0; k < 8; ++k) {
    const uint32_t b = (gw[k / 2] >> (16 * (k % 2))) & 0xffffu;
    const int e = table != nullptr ? gelu_table_index(b) : -1;
    const float a = e >= 0 ? bf16_to_f32(table[e]) : round_bf16(gelu_tanh(x[k]));
    x[k] = __fmul_rn(a, y[k]);
  }
}

// words: output words (T * I / 8); iw: words of a half row (I / 8). Two output words a thread and
// round, their four loads in flight together.
__global__ void __launch_bounds__(kGeluThreads, 1)
    gelu_mul_halves_table_kernel(const uint4* gu, uint4* out, int64_t words, int64_t iw) {
  __shared__ uint16_t table[kGeluTableEntries];
  const int64_t stride = 2 * static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t w0 = 2 * static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  auto load = [&](int64_t w, uint4& g, uint4& u) {
    if (w >= words) return;
    const int64_t t = w / iw, j = w - t * iw;
    g = gu[t * 2 * iw + j];
    u = gu[t * 2 * iw + iw + j];
  };
  uint4 g[2] = {}, u[2] = {};
  load(w0, g[0], u[0]);  // the first round's loads in flight while the table is built
  load(w0 + blockDim.x, g[1], u[1]);
  gelu_fill_table(table);
  __syncthreads();
  for (; w0 < words; w0 += stride) {
    DG_UNROLL
    for (int q = 0; q < 2; ++q) {
      const int64_t w = w0 + q * static_cast<int64_t>(blockDim.x);
      if (w >= words) break;
      const uint4 gc = g[q], uc = u[q];
      if (w + stride < words) load(w + stride, g[q], u[q]);  // the next round's, in flight meanwhile
      float x[8];
      gelu_mul8(gc, uc, table, x);
      out[w] = pack_bf16x8_rn(x);
    }
  }
}

// rows of gate_up [rows, 2 iw words] into out [rows, iw words] and its FP8 rows: codes q (a uint2 of
// eight codes per output word) and scales. The blocks loop over the rows (one row each with a grid of
// `rows` blocks); with kTable each block first fills its table.
template <int kPer, bool kTable>
__global__ void __launch_bounds__(kGeluRowMaxThreads)
    gelu_mul_halves_fp8_kernel(const uint4* gu, uint4* out, uint2* q, float* scales, int64_t rows,
                               int64_t iw) {
  __shared__ uint16_t table[kTable ? kGeluTableEntries : 1];
  __shared__ float warp_amax[2][kGeluRowMaxThreads / 32];  // by row parity: no barrier before a write
  if (kTable) {
    gelu_fill_table(table);
    __syncthreads();
  }
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>(blockDim.x >> 5);
  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {  // block-uniform
    const uint4* gr = gu + row * 2 * iw;
    uint4 y[kPer];
    float amax = 0.0f;
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i >= iw) continue;
      float x[8];
      gelu_mul8(gr[i], gr[iw + i], kTable ? table : nullptr, x);
      y[j] = pack_bf16x8_rn(x);
      out[row * iw + i] = y[j];
      unpack_bf16x8(y[j], x);  // the output's bf16 values
      amax = fp8_amax8(amax, x);
    }
    DG_UNROLL
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) warp_amax[parity][warp] = amax;
    __syncthreads();
    for (int w = 0; w < warps; ++w) amax = fmaxf(amax, warp_amax[parity][w]);
    const float s = fp8_row_scale(amax);
    DG_UNROLL
    for (int j = 0; j < kPer; ++j) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
      if (i >= iw) continue;
      float x[8];
      unpack_bf16x8(y[j], x);
      q[row * iw + i] = fp8_codes8(x, s);
    }
    if (threadIdx.x == 0) scales[row] = s;
  }
}

}  // namespace
}  // namespace dgemma::cuda
