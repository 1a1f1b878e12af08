#pragma once
// The support filters of the per-position sample (vLLM's min_p, top_k, top_p; docs/MODEL.md §6.7) and
// the arithmetic both backends share to find a row's threshold exactly.
//
// Over one canvas row, z = softcap(logit) / T (fp32) and p = softmax(z). In this order:
//   min_p: keep v iff p_v >= min_p * max p, evaluated as double(z_v) >= double(max z) + ln(min_p);
//   top_k: of those, keep v iff z_v >= the k-th largest of their z (all of them when fewer than k);
//   top_p: of those, with their mass renormalised, keep v iff the mass of the kept tokens with z
//          strictly greater than z_v is < top_p (the smallest prefix, by z, whose mass reaches top_p).
// Each stage keeps every token tied in z with one it keeps, so the result is one threshold per row:
// allowed iff z_v >= floor. The sample is the argmax over allowed tokens of z + Gumbel.
//
// z is a non-decreasing function of the bf16 logit, so counts and masses are taken per bf16 value (a
// 65,536-bin histogram of the row) and every order statistic is found over bins. A bin's mass is
// count * exp(z - max z) in double, quantised to a 2^-80 fixed point and summed in 128-bit integers:
// the sums are exact and independent of the order of summation, so the CPU's sequential loop and
// the GPU's parallel scans find the same thresholds from the same z.
#include <cstdint>

#if defined(__CUDACC__)
#define DG_SF_HD __host__ __device__
#else
#define DG_SF_HD
#endif

namespace dgemma {

// Off: top_k <= 0, top_p >= 1, min_p <= 0.
struct SampleFilter {
  int32_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  DG_SF_HD bool active() const { return top_k > 0 || top_p < 1.0 || min_p > 0.0; }
};

namespace sample_filter {

using Mass = unsigned __int128;

constexpr uint32_t kBins = 65536;
// Keys of the non-NaN bf16 values: -inf .. +inf (NaN logits are never allowed).
constexpr uint32_t kMinKey = 0x007F;
constexpr uint32_t kMaxKey = 0xFF80;

// Order-preserving key of a bf16 bit pattern: key(a) < key(b) iff a < b for non-NaN values (-0 sits
// just below +0; both give the same z, which the threshold handles as a tie).
DG_SF_HD inline uint32_t key_of(uint16_t bits) {
  return (bits & 0x8000u) ? (~static_cast<uint32_t>(bits) & 0xFFFFu) : (static_cast<uint32_t>(bits) | 0x8000u);
}
DG_SF_HD inline uint16_t bits_of(uint32_t key) {
  return static_cast<uint16_t>((key & 0x8000u) ? (key & 0x7FFFu) : (~key & 0xFFFFu));
}
DG_SF_HD inline bool valid_key(uint32_t key) { return key >= kMinKey && key <= kMaxKey; }

// floor(e * 2^80) for e in [0, 1] (e * 2^80 is exact in double; the split into two 64-bit halves too).
DG_SF_HD inline Mass mass_units(double e) {
  if (!(e > 0)) return 0;
  const double v = e * 1208925819614629174706176.0;  // 2^80
  const double hi = static_cast<double>(static_cast<uint64_t>(v * 5.421010862427522e-20));  // 2^-64
  const double lo = v - hi * 18446744073709551616.0;  // 2^64
  return (static_cast<Mass>(static_cast<uint64_t>(hi)) << 64) | static_cast<Mass>(static_cast<uint64_t>(lo));
}
// Round-to-nearest of each half, then one rounded add: the same double on every backend.
DG_SF_HD inline double mass_to_double(Mass m) {
  return static_cast<double>(static_cast<uint64_t>(m >> 64)) * 18446744073709551616.0 +
         static_cast<double>(static_cast<uint64_t>(m));
}

// The lowest key in [lo, hi] whose z = zf(key) satisfies double(z) >= t, given that zf is
// non-decreasing and the answer exists (double(zf(hi)) >= t).
template <typename ZOfKey>
DG_SF_HD inline uint32_t lowest_key_at_least(const ZOfKey& zf, double t, uint32_t lo, uint32_t hi) {
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (static_cast<double>(zf(mid)) >= t) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

}  // namespace sample_filter
}  // namespace dgemma
