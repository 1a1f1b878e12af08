#pragma once
// The shared-memory operand descriptor of the wgmma kernels (grouped_moe_wgmma_kernel.cuh,
// grouped_moe_fp4_wgmma_kernel.cuh): plain arithmetic, also compiled by the emulated unit tests (whose
// wgmma emulation reads the operands through it).
#include <cstdint>

namespace dgemma::cuda {

// K-major operand descriptor, 128-byte swizzle: start address / 16 (bits 0-13), leading byte offset
// unused by this layout (1), stride byte offset 1024 / 16 (8-row groups), swizzle mode 1 (bits 62-63).
__host__ __device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_byte_addr) {
  return static_cast<uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

}  // namespace dgemma::cuda
