#pragma once
// The shared-memory operand descriptors of the wgmma kernels (moe/grouped_wgmma_kernel.cuh,
// moe/grouped_tma_kernel.cuh, quant/w8a8_experts_kernel.cuh, attention/flash_wgmma_kernel.cuh): plain
// arithmetic, also compiled by the emulated unit tests (whose wgmma emulation reads the operands
// through it).
#include <cstdint>

namespace dgemma::cuda {

// K-major operand descriptor, 128-byte swizzle: start address / 16 (bits 0-13), leading byte offset
// unused by this layout (1), stride byte offset 1024 / 16 (8-row groups), swizzle mode 1 (bits 62-63).
__host__ __device__ __forceinline__ uint64_t sw128_desc(uint32_t smem_byte_addr) {
  return static_cast<uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

// MN-major operand descriptor (the transposed B of wgmma_m64n256k16_rs_mn), 128-byte swizzle: the
// operand is K rows of N contiguous elements, stored as atoms of 8 K rows x 64 N elements (8 rows of
// 128 bytes, 1024 bytes, 16-byte chunk c of row r at c ^ (r % 8)); atoms along K 1024 bytes apart (the
// stride byte offset), atoms along N `n_atom_bytes` apart (the leading byte offset). Element (k, n) at
// start + (n / 64) n_atom_bytes + (k / 8) 1024 + (k % 8) 128 + 2 (n % 64), before the swizzle. A
// K-major tile of rows of 64-element chunks, [chunk][row][128 bytes] (the layout sw128_desc reads),
// is this layout of its transpose: the flash kernel reads one V tile as both.
__host__ __device__ __forceinline__ uint64_t sw128_mn_desc(uint32_t smem_byte_addr, uint32_t n_atom_bytes) {
  return static_cast<uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((n_atom_bytes >> 4) & 0x3FFFu) << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

}  // namespace dgemma::cuda
