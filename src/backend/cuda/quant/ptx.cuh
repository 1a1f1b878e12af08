#pragma once
// Inline-PTX wrappers of the quantised kernel (quant/weight_only_kernel.cuh), sm_80+: shared-memory loads
// of 4 / 8 / 16 bytes and an exact bf16x2 multiply.
// tests/unit/backend/cuda_emulator.h has host versions of the same functions.
#include <cstdint>

namespace dgemma::cuda {

__device__ __forceinline__ uint32_t lds_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ void lds_v2(uint32_t addr, uint32_t (&v)[2]) {
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v[0]), "=r"(v[1]) : "r"(addr) : "memory");
}

__device__ __forceinline__ void lds_v4(uint32_t addr, uint32_t (&v)[4]) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr)
               : "memory");
}

// a * b in bf16x2, exact here (powers of two, or products of at most 8 significant bits in range);
// -0 as the addend keeps a * b's sign of zero.
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

}  // namespace dgemma::cuda
