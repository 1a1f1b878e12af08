#pragma once
// The device layout of quantised weights for the W4A16 / W8A16 kernels (quant/weight_only.cu), and the
// host repacks that produce it at upload (CudaBackend::upload_weight). Plain C++ (also compiled by the
// unit tests, which check the repacks against the mma.sync fragment definition and the decodes).
//
// The kernels run K in stages of 64 values. Per weight row a stage is a slice of 32 bytes (NVFP4) or
// 64 bytes (FP8). mma.sync m16n8k16's B fragment gives lane quad b = lane % 4, for k16 step kk of the
// stage, the k pairs 16 kk + 2 b (+1) (register b0, "half" h = 0) and 16 kk + 8 + 2 b (+1) (b1, h = 1).
// Quad b's 16 values of a slice are the slice's bytes 8 b .. 8 b + 7 (NVFP4: two 32-bit words, word t
// holding steps 2 t and 2 t + 1) or 16 b .. 16 b + 15 (FP8: four words, word t step t), one 8- or
// 16-byte shared-memory load per row and stage.
//
// Inside a word the bits are placed so that each k pair becomes the bit pattern of a bf16x2 with one
// rotate and one mask (bit placements below; no per-element shifting or masking): bf16x2 "pair" j of
// the word = the pair's two codes, lower k in the low half, each code's bits at its bf16 position
// (E2M1 s e1 e0 m -> bf16 bits 15, 8, 7, 6: the value e2m1 * 2^-126, bf16 subnormal for e = 0; E4M3
// s eeee mmm -> bits 15, 10..7, 6..4: the value e4m3 * 2^-120). The kernels multiply by the block
// scale (NVFP4) or 2^120 (FP8) with one exact bf16x2 multiply per pair.
//   NVFP4 word (4 pairs, j = 2 (kk & 1) + h):  pair 0 = w & M, pair 1 = rotr(w, 4) & M,
//         pair 2 = rotr(w, 10) & M, pair 3 = rotr(w, 30) & 0x80C080C0 | rotr(w, 22) & 0x01000100
//         (M = 0x81C081C0; three rotations of M tile 24 of the 32 bits, the last pair takes two).
//   FP8 word (2 pairs, j = h):  pair 0 = w & M8, pair 1 = rotr(w, 28) & 0x80F080F0 | rotr(w, 4) & 0x07000700
//         (M8 = 0x87F087F0).
// The NVFP4 block scales [E, N, K/16] (one E4M3 per 16 values: 4 a row and stage, one per k16 step)
// are stored stage major, [E, K/64, N, 4], so a stage's scales of consecutive rows are one contiguous
// run that 16-byte copies fetch (4 rows a copy), and re-encoded (scale_code): a code q whose bf16x2
// q * 16 + 0x76007600 (both halves: one byte permute and one integer multiply-add in the kernel) is
// scale * 2^119, so the pair's multiply yields e2m1 * scale * 2^-7 (exact in bf16) and the epilogue
// multiplies by 2^7. A zero scale has no such code: the repack zeroes the block's values instead
// (zero_unscaled_blocks), which is the same weights.
#include <array>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define DG_QUANT_HD __host__ __device__
#else
#define DG_QUANT_HD
#endif

namespace dgemma::cuda {

constexpr int kQuantStageK = 64;  // K values per stage: the kernels' BK

DG_QUANT_HD inline uint32_t rotr32(uint32_t x, int s) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(x, x, s);  // one SHF
#else
  return (x >> (s & 31)) | (x << ((32 - s) & 31));
#endif
}

constexpr uint32_t kFp4PairMask = 0x81C081C0u;
constexpr uint32_t kFp8PairMask = 0x87F087F0u;

// NVFP4 word -> bf16x2 bits of pair j (value e2m1 * 2^-126 in each half).
DG_QUANT_HD inline uint32_t fp4_pair_bits(uint32_t w, int j) {
  switch (j) {
    case 0: return w & kFp4PairMask;
    case 1: return rotr32(w, 4) & kFp4PairMask;
    case 2: return rotr32(w, 10) & kFp4PairMask;
    default: return (rotr32(w, 30) & 0x80C080C0u) | (rotr32(w, 22) & 0x01000100u);
  }
}
// FP8 word -> bf16x2 bits of pair h (value e4m3 * 2^-120 in each half).
DG_QUANT_HD inline uint32_t fp8_pair_bits(uint32_t w, int h) {
  return h == 0 ? w & kFp8PairMask : (rotr32(w, 28) & 0x80F080F0u) | (rotr32(w, 4) & 0x07000700u);
}

// The word bit that lands on bit p (a bit of the pair mask) of pair j: the inverse of the decodes.
constexpr int fp4_source_bit(int j, int p) {
  switch (j) {
    case 0: return p;
    case 1: return (p + 4) % 32;
    case 2: return (p + 10) % 32;
    default: return ((0x80C080C0u >> p) & 1) ? (p + 30) % 32 : (p + 22) % 32;
  }
}
constexpr int fp8_source_bit(int h, int p) {
  if (h == 0) return p;
  return ((0x80F080F0u >> p) & 1) ? (p + 28) % 32 : (p + 4) % 32;
}
// bf16 bit of code bit i: E2M1 (m, e0, e1, s) -> 6, 7, 8, 15; E4M3 bits 0..6 -> 4..10, sign 15.
constexpr int fp4_code_bit(int i) { return i < 3 ? 6 + i : 15; }
constexpr int fp8_code_bit(int i) { return i < 7 ? 4 + i : 15; }

// Word bits of one source byte in a pair slot: NVFP4 slot j takes a checkpoint byte (two nibbles, the
// lower k low); FP8 slot 2 h + x takes code x (0: lower k) of pair h.
struct QuantWordTables {
  std::array<std::array<uint32_t, 256>, 4> fp4{}, fp8{};
};
inline const QuantWordTables& quant_word_tables() {
  static const QuantWordTables t = [] {
    QuantWordTables r;
    for (int v = 0; v < 256; ++v)
      for (int slot = 0; slot < 4; ++slot) {
        uint32_t a = 0, b = 0;
        for (int i = 0; i < 8; ++i) {
          if (!((v >> i) & 1)) continue;
          // NVFP4: bit i of the byte is bit i % 4 of nibble i / 4 (half i / 4).
          a |= 1u << fp4_source_bit(slot, fp4_code_bit(i % 4) + 16 * (i / 4));
          b |= 1u << fp8_source_bit(slot / 2, fp8_code_bit(i) + 16 * (slot % 2));
        }
        r.fp4[slot][v] = a;
        r.fp8[slot][v] = b;
      }
    return r;
  }();
  return t;
}

// Checkpoint byte offset in a row's stage slice of the lower k of pair (kk, h) of quad b: NVFP4 one byte
// (both values), FP8 two bytes.
constexpr int fp4_pair_src(int b, int kk, int h) { return 8 * kk + 4 * h + b; }
constexpr int fp8_pair_src(int b, int kk, int h) { return 16 * kk + 8 * h + 2 * b; }

// Reorders whole rows of packed weight bytes in place (`n_bytes` a multiple of the slice: rows of K / 2
// or K bytes with K % 64 == 0) into the device words.
inline void repack_quant_weights(bool fp8, uint8_t* bytes, int64_t n_bytes) {
  const QuantWordTables& t = quant_word_tables();
  const int slice = fp8 ? kQuantStageK : kQuantStageK / 2;
  uint8_t tmp[kQuantStageK];
  for (int64_t i = 0; i + slice <= n_bytes; i += slice) {
    std::memcpy(tmp, bytes + i, static_cast<size_t>(slice));
    uint32_t words[16];
    for (int b = 0; b < 4; ++b) {
      if (fp8) {
        for (int kk = 0; kk < 4; ++kk) {
          uint32_t w = 0;
          for (int h = 0; h < 2; ++h)
            for (int x = 0; x < 2; ++x) w |= t.fp8[2 * h + x][tmp[fp8_pair_src(b, kk, h) + x]];
          words[4 * b + kk] = w;
        }
      } else {
        for (int wt = 0; wt < 2; ++wt) {
          uint32_t w = 0;
          for (int j = 0; j < 4; ++j) w |= t.fp4[j][tmp[fp4_pair_src(b, 2 * wt + (j >> 1), j & 1)]];
          words[2 * b + wt] = w;
        }
      }
    }
    std::memcpy(bytes + i, words, static_cast<size_t>(slice));  // little-endian words, as the GPU loads them
  }
}

// Block scale E4M3 code (finite, non-negative: the loader's rule) -> the device code q: 0 for zero,
// else (e + 10) << 3 | m3 with the scale = (1 + m3 / 8) * 2^e, e in [-9, 8] (subnormal codes normalised).
constexpr uint8_t scale_code(uint8_t c) {
  int e = (c >> 3) & 15, m = c & 7;
  if (e == 0 && m == 0) return 0;
  if (e == 0) {  // m * 2^-9: normalise
    e = 1;
    while (m < 8) {
      m <<= 1;
      --e;
    }
    m &= 7;
  }
  // here the value is (1 + m / 8) * 2^(e - 7)
  return static_cast<uint8_t>(((e - 7 + 10) << 3) | m);
}
// bf16 bits of the scale code q times 2^119, in both halves, given q in bytes 0 and 2 (the kernel's
// byte permute); the exponent field is e + 10 + 236 = e + 246, the value (1 + m3 / 8) 2^(e + 119).
constexpr uint32_t kScaleCodeBase = 0x76007600u;
DG_QUANT_HD constexpr uint32_t scale_code_bits(uint32_t q2) { return q2 * 16u + kScaleCodeBase; }

// Block scales [E, N, K / 16] -> [E, K / 64, N, 4] (K % 64 == 0), re-encoded by scale_code.
inline void repack_block_scales(const uint8_t* src, uint8_t* dst, int64_t E, int64_t N, int64_t K) {
  const int64_t G = K / 16, KT = K / kQuantStageK;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t kt = 0; kt < KT; ++kt)
        for (int q = 0; q < 4; ++q) dst[((e * KT + kt) * N + n) * 4 + q] = scale_code(src[(e * N + n) * G + kt * 4 + q]);
}

// Zeroes the packed values (checkpoint layout, rows of K / 2 bytes) of every 16-value block whose scale
// (rows of K / 16 codes) is zero: e2m1 * 0 = 0 whatever the nibbles (run before repack_quant_weights).
inline void zero_unscaled_blocks(uint8_t* packed, const uint8_t* block, int64_t rows, int64_t K) {
  const int64_t G = K / 16;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g)
      if ((block[r * G + g] & 0x7f) == 0) std::memset(packed + r * (K / 2) + g * 8, 0, 8);
}

}  // namespace dgemma::cuda
