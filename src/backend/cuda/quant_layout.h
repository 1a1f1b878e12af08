#pragma once
// The device layout of quantised weights for the W4A16 / W8A16 kernels (grouped_moe_fp4.cu), and the
// host repacks that produce it at upload (CudaBackend::upload_weight). Plain C++ (also compiled by the
// unit tests, which check the repacks against the mma.sync fragment definition).
//
// The kernels run K in stages of 64 values. Per weight row a stage is a slice of 32 bytes (NVFP4, two
// values a byte, element 2j in the low nibble) or 64 bytes (FP8). mma.sync m16n8k16's B fragment gives
// lane quad b = lane % 4, for k16 step kk of the stage, the k pairs 16 kk + 2 b (+1) (register b0) and
// 16 kk + 8 + 2 b (+1) (b1). Within each slice the bytes are reordered so that quad b's bytes for all
// four steps are contiguous: one 8-byte (NVFP4) or 16-byte (FP8) shared-memory load per row and stage.
//   NVFP4: slice byte 8 b + 2 kk + h  <-  checkpoint byte 8 kk + 4 h + b  (h = 0: b0's pair, 1: b1's)
//   FP8:   slice bytes 16 b + 4 kk + 2 h + {0, 1}  <-  checkpoint bytes 16 kk + 8 h + 2 b + {0, 1}
// The NVFP4 block scales [E, N, K/16] (one E4M3 per 16 values: 4 a row and stage) are stored stage
// major, [E, K/64, N, 4], so a stage's scales of consecutive rows are one contiguous run that 16-byte
// copies fetch (4 rows a copy).
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define DG_QUANT_HD __host__ __device__
#else
#define DG_QUANT_HD
#endif

namespace dgemma::cuda {

constexpr int kQuantStageK = 64;  // K values per stage: the kernels' BK

// Offset in a row's stage slice of the byte(s) lane quad b reads for step kk, half h, and the
// checkpoint offset they come from.
DG_QUANT_HD constexpr int fp4_slice_pos(int b, int kk, int h) { return 8 * b + 2 * kk + h; }
DG_QUANT_HD constexpr int fp4_slice_src(int b, int kk, int h) { return 8 * kk + 4 * h + b; }
DG_QUANT_HD constexpr int fp8_slice_pos(int b, int kk, int h) { return 16 * b + 4 * kk + 2 * h; }
DG_QUANT_HD constexpr int fp8_slice_src(int b, int kk, int h) { return 16 * kk + 8 * h + 2 * b; }

// Register conversions (the kernels multiply the results by kBf16x2Pow120 / kBf16x2Pow126 with one
// exact bf16x2 FMA, which also turns the subnormal encodings into the right values):
//   E4M3 code c (sign s, exponent e, mantissa m) -> bf16 bits s | e << 7 | m << 4, i.e. the bf16 value
//   value(c) * 2^-120 (e == 0: (m / 8) * 2^-126 = m * 2^-9 * 2^-120, a bf16 subnormal);
//   E2M1 nibble (sign, e, m) -> bf16 bits s | e << 7 | m << 6, the value e2m1 * 2^-126.
constexpr uint32_t kBf16x2Pow120 = 0x7B807B80u;  // bf16 2^120 (exponent field 247) in both halves
constexpr uint32_t kBf16x2Pow126 = 0x7E807E80u;  // bf16 2^126 (253)
// Codes in bits 0-7 and 16-23 of x -> the two bf16 bit patterns (low half from bits 0-7).
DG_QUANT_HD constexpr uint32_t e4m3x2_bits(uint32_t x) {
  return ((x << 4) & 0x07f007f0u) | ((x << 8) & 0x80008000u);
}
// Byte c of two E2M1 nibbles (element 2j low) -> the two bf16 bit patterns (low half: the low nibble).
DG_QUANT_HD constexpr uint32_t e2m1x2_bits(uint32_t c) {
  const uint32_t y = (c & 0x0fu) | ((c & 0xf0u) << 12);
  return ((y & 0x00070007u) << 6) | ((y & 0x00080008u) << 12);
}
// Bytes 0 and 1 (lo) or 2 and 3 (hi) of w spread to bits 0-7 and 16-23.
DG_QUANT_HD constexpr uint32_t spread_lo(uint32_t w) { return (w & 0xffu) | ((w & 0xff00u) << 8); }
DG_QUANT_HD constexpr uint32_t spread_hi(uint32_t w) { return ((w >> 16) & 0xffu) | ((w >> 8) & 0xff0000u); }

// Reorders whole rows of packed weight bytes in place (`n_bytes` a multiple of the slice: rows of K / 2
// or K bytes with K % 64 == 0).
inline void repack_quant_weights(bool fp8, uint8_t* bytes, int64_t n_bytes) {
  const int slice = fp8 ? kQuantStageK : kQuantStageK / 2;
  uint8_t tmp[kQuantStageK];
  for (int64_t i = 0; i + slice <= n_bytes; i += slice) {
    std::memcpy(tmp, bytes + i, static_cast<size_t>(slice));
    for (int b = 0; b < 4; ++b)
      for (int kk = 0; kk < 4; ++kk)
        for (int h = 0; h < 2; ++h) {
          if (fp8) {
            bytes[i + fp8_slice_pos(b, kk, h)] = tmp[fp8_slice_src(b, kk, h)];
            bytes[i + fp8_slice_pos(b, kk, h) + 1] = tmp[fp8_slice_src(b, kk, h) + 1];
          } else {
            bytes[i + fp4_slice_pos(b, kk, h)] = tmp[fp4_slice_src(b, kk, h)];
          }
        }
  }
}

// Block scales [E, N, K / 16] -> [E, K / 64, N, 4] (K % 64 == 0).
inline void repack_block_scales(const uint8_t* src, uint8_t* dst, int64_t E, int64_t N, int64_t K) {
  const int64_t G = K / 16, KT = K / kQuantStageK;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t kt = 0; kt < KT; ++kt)
        std::memcpy(dst + ((e * KT + kt) * N + n) * 4, src + (e * N + n) * G + kt * 4, 4);
}

}  // namespace dgemma::cuda
