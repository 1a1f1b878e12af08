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
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

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

// Internal linkage (as layer/residual_kernel.cuh): the unit tests' host build of the kernel shares a binary
// with the device build's host stub.
namespace {

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
  for (int i = threadIdx.x; i < kGeluTableEntries; i += blockDim.x) {
    const uint32_t sign = static_cast<uint32_t>(i / (kGeluBinades * 128)), rest = static_cast<uint32_t>(i % (kGeluBinades * 128));
    const uint32_t b = (sign << 15) | ((kGeluExpLo + rest / 128) << 7) | (rest % 128);
    table[i] = f32_to_bf16(gelu_tanh(bf16_to_f32(static_cast<uint16_t>(b))));
  }
  __syncthreads();
  for (; w0 < words; w0 += stride) {
    DG_UNROLL
    for (int q = 0; q < 2; ++q) {
      const int64_t w = w0 + q * static_cast<int64_t>(blockDim.x);
      if (w >= words) break;
      float x[8], y[8];
      unpack_bf16x8(g[q], x);
      unpack_bf16x8(u[q], y);
      const uint32_t gw[4] = {g[q].x, g[q].y, g[q].z, g[q].w};
      if (w + stride < words) load(w + stride, g[q], u[q]);  // the next round's, in flight meanwhile
      DG_UNROLL
      for (int k = 0; k < 8; ++k) {
        const uint32_t b = (gw[k / 2] >> (16 * (k % 2))) & 0xffffu;
        const int e = gelu_table_index(b);
        const float a = e >= 0 ? bf16_to_f32(table[e]) : round_bf16(gelu_tanh(x[k]));
        x[k] = __fmul_rn(a, y[k]);
      }
      out[w] = pack_bf16x8_rn(x);
    }
  }
}

}  // namespace
}  // namespace dgemma::cuda
