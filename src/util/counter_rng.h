#pragma once
// The project's counter-based RNG (mirrored bit for bit by tools/golden/dgemma_rng.py).
// Every random number is a pure function of (seed, canvas, step, purpose, position, index), so a
// seeded request reproduces exactly whatever else runs in its batch, on CPU and GPU alike, and golden
// tests can inject the same noise into the reference implementation.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define DG_HOST_DEVICE __host__ __device__
#else
#define DG_HOST_DEVICE
#endif

namespace dgemma::rng {

enum Purpose : uint32_t {
  kInitCanvas = 1,  // the random canvas a block starts from (step 0)
  kRenoise = 2,     // fresh tokens for the positions rejected at step `step`
  kSample = 3,      // Gumbel noise of the per-position sample at step `step`
};

DG_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Key of one stream of numbers: (seed, canvas index within the request, step index, purpose).
DG_HOST_DEVICE inline uint64_t stream_key(uint64_t seed, uint64_t canvas, uint64_t step, uint32_t purpose) {
  uint64_t k = splitmix64(seed);
  k = splitmix64(k ^ canvas);
  return splitmix64(k ^ (((step & 0xFFFFFFFFFFFFFFull) << 8) | purpose));
}

// 64 random bits for (position, index) within a stream; position, index < 2^32.
DG_HOST_DEVICE inline uint64_t bits(uint64_t key, uint32_t position, uint32_t index) {
  return splitmix64(key ^ splitmix64((static_cast<uint64_t>(position) << 32) | index));
}

// Uniform integer in [0, n): floor(bits * n / 2^64), exact.
DG_HOST_DEVICE inline uint32_t uniform_token(uint64_t key, uint32_t position, uint32_t n) {
  const uint64_t b = bits(key, position, 0);
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__umul64hi(b, n));
#else
  return static_cast<uint32_t>((static_cast<unsigned __int128>(b) * n) >> 64);
#endif
}

// Uniform double in (0, 1) from 64 random bits: ((b >> 11) + 0.5) / 2^53.
DG_HOST_DEVICE inline double uniform01_from_bits(uint64_t b) {
  return (static_cast<double>(b >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
DG_HOST_DEVICE inline double uniform01(uint64_t key, uint32_t position, uint32_t index) {
  return uniform01_from_bits(bits(key, position, index));
}

// Gumbel(0, 1) noise in double precision: -log(-log(u)).
DG_HOST_DEVICE inline double gumbel_from_bits(uint64_t b) { return -log(-log(uniform01_from_bits(b))); }
DG_HOST_DEVICE inline double gumbel(uint64_t key, uint32_t position, uint32_t index) {
  return gumbel_from_bits(bits(key, position, index));
}

// Standard normal (Box-Muller) for element `i` of a fill keyed by `key` (dummy weights only).
DG_HOST_DEVICE inline float normal(uint64_t key, uint64_t i) {
  const uint64_t b = splitmix64(key ^ splitmix64(i));
  const double u1 = (static_cast<double>(b >> 40) + 0.5) * (1.0 / 16777216.0);
  const double u2 = static_cast<double>((b >> 16) & 0xFFFFFF) * (1.0 / 16777216.0);
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

}  // namespace dgemma::rng
