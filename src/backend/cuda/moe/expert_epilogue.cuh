#pragma once
// What the grouped expert GEMM kernels (moe/grouped_kernel.cuh, moe/grouped_wgmma_kernel.cuh,
// moe/grouped_tma_kernel.cuh, quant/weight_only_kernel.cuh, quant/w8a8_experts_kernel.cuh) do with their
// fp32 accumulators, written once: zeroing them, and the output epilogue of two adjacent columns of
// one row with the CPU reference's roundings (cpu/moe.cpp):
//   gate | up, the activation fused: act = bf16(bf16(gelu_tanh(bf16(gate))) * bf16(up));
//   down, the routing weight fused:  y = bf16(bf16(v) * w), stored at the pair's row.
// Device code that the emulated unit tests compile on the host too; the includer provides round_bf16,
// gelu_tanh, f32_to_bf16 and __fmul_rn (core/common.cuh on the device).
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

namespace dgemma::cuda {
namespace {

// Every element of an accumulator array (of any rank) set to 0.
template <int N>
__device__ __forceinline__ void zero_acc(float (&acc)[N]) {
DG_UNROLL
  for (int i = 0; i < N; ++i) acc[i] = 0.f;
}
template <class A, int N>
__device__ __forceinline__ void zero_acc(A (&acc)[N]) {
DG_UNROLL
  for (int i = 0; i < N; ++i) zero_acc(acc[i]);
}

// Columns c = 0, 1 of the gate | up output at `out` (4-byte aligned): gate(c) and up(c) are the fp32
// values of the gate and the matching up column (any scales applied).
template <class Gate, class Up>
__device__ __forceinline__ void store_act_pair(uint16_t* out, Gate&& gate, Up&& up) {
  uint32_t packed = 0;
DG_UNROLL
  for (int c = 0; c < 2; ++c) {
    const float a = round_bf16(gelu_tanh(round_bf16(gate(c))));
    const uint16_t v = f32_to_bf16(__fmul_rn(a, round_bf16(up(c))));
    packed |= static_cast<uint32_t>(v) << (16 * c);
  }
  *reinterpret_cast<uint32_t*>(out) = packed;
}

// Columns c = 0, 1 of the down output at `out` (4-byte aligned): value(c) the fp32 value, wt the pair's
// routing weight (1 for a dense matmul: bf16(bf16(y) * 1) = bf16(y)).
template <class Value>
__device__ __forceinline__ void store_weighted_pair(uint16_t* out, Value&& value, float wt) {
  uint32_t packed = 0;
DG_UNROLL
  for (int c = 0; c < 2; ++c)
    packed |= static_cast<uint32_t>(f32_to_bf16(__fmul_rn(round_bf16(value(c)), wt))) << (16 * c);
  *reinterpret_cast<uint32_t*>(out) = packed;
}

}  // namespace
}  // namespace dgemma::cuda
