#pragma once
// The sampler's main pass (slice_stats_kernel), made to spend few instructions per vocabulary element
// (the pass is bound by instruction issue, not memory):
//   * the entropy sums and the probabilities' denominator from an e^z table: each entry of the
//     per-canvas table of the 65,536 bf16 logits holds, beside z and bf16(z), E(z) = e^(z - c) and
//     E(bf16(z)) for a per-canvas shift c, so that sum e^(z - m) = e^(c - m) sum E(z) takes no exp
//     per element (rows the table cannot serve exactly enough keep the per-element exps);
//   * 32-bit element indices, and the counter-based hash with its per-row half computed once
//     (counter_bits: rng::bits bit for bit);
//   * the fp32 noise estimate in base 2 without branches (noise_estimate);
//   * the bound test as one comparison against a threshold set once a round;
//   * the exact double noise of the candidates that pass the screen deferred to the end of the
//     slice, where the block's final screen turns away all but a few.
// Emulated by the unit tests as sampler/sampler_kernel.cuh; additionally __reduce_max_sync (int),
// __int_as_float, atomicAdd on a shared unsigned and __log2f.
#include "backend/cuda/sampler/sampler_kernel.cuh"

namespace dgemma::cuda {
namespace {

// ---- the e^z table ---------------------------------------------------------------------------------

// The entries of a canvas are e^(z - c) with c = cap / T - kExpTableTop: z <= cap / T (tanh <= 1), so
// no entry a row reads exceeds e^80 while c keeps the largest z of most rows far from the bottom of
// the fp32 range.
constexpr double kExpTableTop = 80.0;
__device__ __forceinline__ double exp_table_shift(float cap, float temp) {
  return static_cast<double>(cap) / static_cast<double>(temp) - kExpTableTop;
}

// Whether the table serves a row whose largest z is m (bmax = bf16(m)): the sums then run over E(z)
// and E(bf16(z)), every one at most E(m) (E(bf16(z)) at most E(bmax)). Above: eight of them (a run,
// below) stay under the fp32 maximum e^88.72 when m - c <= 86. Below: E(m) >= e^-40 = 2^-57.7, so the
// terms under the normal range (absolute rounding error at most 2^-150 each, at most 2^31 of them)
// err by at most 2^-119 in all: 2^-61 of the row's largest term, and, with the factor (z - m) of the
// second sum, under 1e-9 of it for any |z - m| up to 2^31. Every other entry carries one fp32 rounding
// (relative 2^-24) of the double exp. NaN m (no row) fails both.
constexpr double kExpTableLow = -40.0, kExpTableHigh = 86.0;
__device__ __forceinline__ bool exp_table_serves(double c, float m, float bmax) {
  const double dm = static_cast<double>(m) - c, db = static_cast<double>(bmax) - c;
  return dm >= kExpTableLow && dm <= kExpTableHigh && db >= kExpTableLow && db <= kExpTableHigh;
}

// z of every bf16 value with bf16(z), E(z) and E(bf16(z)), per canvas: one 16-byte load an element.
// z is processed() of the same value, bit for bit (sampler/common.cuh).
__global__ void z_exp_table_kernel(const SamplerBatch* bp, uint4* z_tables) {
  const SamplerLaunch& a = bp->c[blockIdx.y];
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  const float z = processed(bf16_to_f32(static_cast<uint16_t>(k)), a.softcap, a.temperature);
  const uint16_t zb = f32_to_bf16(z);
  const double c = exp_table_shift(a.softcap, a.temperature);
  const float e = static_cast<float>(exp(static_cast<double>(z) - c));
  const float eb = static_cast<float>(exp(static_cast<double>(bf16_to_f32(zb)) - c));
  z_tables[static_cast<size_t>(blockIdx.y) * kZTable + k] =
      make_uint4(__float_as_uint(z), zb, __float_as_uint(e), __float_as_uint(eb));
}

// ---- the counter-based noise -----------------------------------------------------------------------

// rng::bits(key, pos, v) = splitmix64(key ^ splitmix64((pos << 32) | v)) for v < 2^31, with what
// depends on the row only computed once. The inner splitmix64's x = (pos << 32 | v) + 0x9E3779B97F4A7C15
// has the low word v + 0x7F4A7C15 without a carry (both are below 2^31) and the high word
// pos + 0x9E3779B9; of z = x ^ (x >> 30), the high word hi ^ (hi >> 30) is the row's, and the low word
// is lo ^ (lo >> 30) ^ (hi << 2); of z * 0xBF58476D1CE4E5B9 (mod 2^64), the term hi * 0x1CE4E5B9 of
// the high word is the row's too. The rest is splitmix64 as written.
struct CounterHash {
  uint64_t key;
  uint32_t hi_shifted;  // (pos + 0x9E3779B9) << 2
  uint32_t hi_term;     // ((pos + 0x9E3779B9) ^ ((pos + 0x9E3779B9) >> 30)) * 0x1CE4E5B9
};
__device__ __forceinline__ CounterHash counter_hash(uint64_t key, uint32_t pos) {
  const uint32_t hi = pos + 0x9E3779B9u;
  return CounterHash{key, hi << 2, (hi ^ (hi >> 30)) * 0x1CE4E5B9u};
}
__device__ __forceinline__ uint64_t counter_bits(const CounterHash& h, uint32_t v) {
  const uint32_t lo = v + 0x7F4A7C15u;
  const uint32_t zl = lo ^ (lo >> 30) ^ h.hi_shifted;
  uint64_t z = static_cast<uint64_t>(zl) * 0x1CE4E5B9u + (static_cast<uint64_t>(zl * 0xBF58476Du + h.hi_term) << 32);
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return rng::splitmix64(h.key ^ z);
}

// z + g for the Gumbel noise g of 64 random bits (rng::gumbel_from_bits: -ln(-ln u), u = ((b >> 11) +
// 0.5) / 2^53 in double), estimated in fp32 without branches, given zk = fl(z + K) with
// K = -ln(ln 2): with t2 = -log2(u) = -ln(u) / ln 2, g = -ln(ln 2 t2) = K - ln 2 log2(t2).
// With m = b >> 11: below 2^52 (u < 1/2) x = u = (m + 0.5) 2^-53, else
// x = 1 - u = k 2^-53 exactly with k = 2^53 - m - (m & 1) (k = 0: u = 1, the noise +inf). Then:
//   u < 1/2:             x = fl(fl(m) 2^-53 + 2^-54) within 2^-23 relative of u; __log2f(x) (x < 1/2:
//                        2 ulp of |log2 x| >= 1) within 2^-21 + 2^-23 / ln 2 = 6.5e-7 relative: t2
//                        within 6.5e-7;
//   1/2 <= u, x >= 1/16: 1 - x within 2^-24 of u (x's rounding, then 1 - x's, each 2^-25), __log2f
//                        on [1/2, 2] within 2^-22 absolute: t2 within 2^-24 / (u ln 2) + 2^-22
//                        <= 4.1e-7 of t2 >= -log2(15/16) = 0.093, so 4.4e-6 relative;
//   x < 1/16:            t2 = x (1 + x/2 + x^2/3 + x^3/4) / ln 2 (the coefficients divided by ln 2):
//                        the series of -ln(1 - x) cut after its fourth term, within x^4 / 5 / (1 - x)
//                        <= 3.3e-6 relative, and a few fp32 roundings (2.4e-7): 3.6e-6;
// so t2 is within 4.4e-6 relative, which moves g = K - ln(t2) by at most 4.4e-6; then __log2f(t2)
// errs by 2 ulp of |log2 t2| <= 52.5 (2^-17, times ln 2: 5.3e-6 of g) or, on [1/2, 2], 2^-22
// absolute: g within 9.7e-6. The fp32 roundings of zk and of the fused multiply-add add
// 2^-24 (|z + K| + |z + g|) <= 2^-23 |z + g| + 2^-24 |g - K| <= 2^-23 |z + g| + 2.2e-6. In all the
// estimate is within 1.2e-5 + 2^-23 |z + g| of the double value: twice that is below the screen's
// margin (kGumbelScreen + 2^-18 |estimate|) at every magnitude.
// The noise +inf (k = 0: x = 0, series 0, log2 0 = -inf) comes out +inf, as the reference's.
constexpr float kLnLn2 = 0.36651292058166432f;  // -ln(ln 2)
__device__ __forceinline__ float noise_estimate(uint64_t b, float zk) {
  constexpr float kInv53 = 1.0f / 9007199254740992.0f;
  constexpr float kLn2 = 0.69314718055994531f;
  constexpr float kS0 = 1.0f / kLn2, kS1 = 0.5f / kLn2, kS2 = (1.0f / 3.0f) / kLn2, kS3 = 0.25f / kLn2;
  const uint64_t m = b >> 11;
  const bool low = static_cast<int64_t>(b) >= 0;  // m < 2^52
  const uint64_t k = low ? m : (uint64_t{1} << 53) - m - (m & 1);
  const float x = __fmaf_rn(static_cast<float>(k), kInv53, low ? 0.5f * kInv53 : 0.0f);  // u, or 1 - u
  const float series = __fmul_rn(x, __fmaf_rn(x, __fmaf_rn(x, __fmaf_rn(x, kS3, kS2), kS1), kS0));
  const float by_log = -__log2f(low ? x : __fsub_rn(1.0f, x));
  const float t2 = !low && x < 0.0625f ? series : by_log;
  return __fmaf_rn(__log2f(t2), -kLn2, zk);
}

// The largest of the warp's values (no NaN) through the integer reduction: an order-preserving map of
// the fp32 bits to int (negative values' magnitude bits flipped), and back.
__device__ __forceinline__ float warp_max_f32(float v) {
  int k = __float_as_int(v);
  k ^= (k >> 31) & 0x7fffffff;
  k = __reduce_max_sync(0xffffffffu, k);
  return __int_as_float(k ^ ((k >> 31) & 0x7fffffff));
}

// A candidate of the sample kept for the end of the slice: its estimate, z and index.
struct Candidate {
  float gf, z;
  int v, unused;
};
constexpr int kCandidates = 32;  // per warp; more in a slice take their exact noise at once

// Pass 1 over a slice: argmax and second-best z, the entropy sums, Gumbel-max, the bf16 softmax sum.
//
// The sample, exactly as the CPU's double z + gumbel_from_bits with the lowest index on ties:
//   bound:     the noise is at most kGumbelMax (36.0437 a little widened), so an element with
//              z + kGumbelMax below the screen or below m + kGumbelMin (the row's argmax alone reaches
//              that) cannot win: it draws no noise. Tested as z >= thr with thr = lim - kGumbelMax -
//              2^-18 |lim| (lim the larger of the two, once a round; fp32 roundings of at most 2^-24
//              |lim| each stay inside the widening), so z < thr means z + 36.0437 < lim. The
//              filter's floor (or -inf) joins the threshold; NaN (no noise drawn) fails every z, as
//              NaN z fails every threshold.
//   screen:    the block's best estimate so far less the margin (kGumbelScreen + 2^-18 |estimate|,
//              more than twice noise_estimate's error), raised every round by each warp's best: an
//              estimate below the screen cannot be the best nor tie it (its exact value is within
//              half the margin of it, the screen's source element's exact value above the screen).
//   deferral:  an estimate at or above the screen of its round becomes a candidate (up to
//              kCandidates a warp in shared memory; past that its exact value is taken at once); at
//              the end of the slice the block's final screen is read and only the candidates at or
//              above it take the exact double noise (lanes in parallel). Every element whose exact
//              value reaches the best is among them: the final screen's source element passed its
//              round's screen (every screen is at most the final one) and so did anything within half
//              a margin of it; a stale screen only lets more through.
//   ties:      the candidates are pushed out of index order, so the thread's exact best keeps the
//              lower index on equal values (Top2::push_tied), as the merges do.
// With sample_gap asked (the runner-up of z + g is wanted) every element in the support takes the
// exact noise in index order instead.
// A guided gap's rows (kGuided, row_gap_mask): a token the mask does not allow has z = -inf (stored as
// bf16 -inf, so pass 2 gives it probability 0) and adds nothing to the sums; it is never a candidate.
// kGuided false (the launcher's choice when no canvas of the batch has a gap) is the unguided kernel.
// The warps sweep the slice in lockstep rounds (a lane past the end contributes nothing), so the
// warp-wide maxima are well defined. kCap: the candidates a warp keeps (the unit tests shrink it).
template <int kCap = kCandidates, bool kGuided = false>
__global__ void __launch_bounds__(kThreads, 2) slice_stats_kernel(const SamplerBatch* bp, const float* slice_max,
                                                                const float* row_floor, const uint4* z_tables,
                                                                Stats* partials) {
  const SamplerBatch& b = *bp;
  __shared__ Stats warp_partials[kWarps];
  __shared__ float block_screen;
  __shared__ Candidate cands[kWarps][kCap];
  __shared__ unsigned cand_count[kWarps];
  const SamplerLaunch& a = b.c[blockIdx.z];
  const int pos = static_cast<int>(blockIdx.y);
  if (pos >= a.C) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) block_screen = -INFINITY;
  if (lane == 0) cand_count[warp] = 0;
  __syncthreads();
  const int splits = b.splits;
  uint16_t* row = a.logits + static_cast<int64_t>(pos) * a.V;
  const float cap = a.softcap, temp = a.temperature;
  const float m = row_shift(a, splits, slice_max, pos);
  const float bmax = round_bf16(m);  // = max of bf16(z): rounding is monotonic
  const bool want_probs = a.want_probs, sampling = a.want_sample;
  const bool all_exact = sampling && a.sample_gap != nullptr;  // the runner-up of z + g is wanted: no screening
  const uint64_t key = a.sample_key;
  const float floor = a.filter.active() ? row_floor[a.row0 + pos] : -INFINITY;
  const uint4* z_table = z_tables + static_cast<size_t>(blockIdx.z) * kZTable;
  DG_OPAQUE(z_table);
  // The row's best z + g is at least m + kGumbelMin (the argmax is always in the support).
  const float best_floor = __fadd_rn(m, kGumbelMin);
  const CounterHash hash = counter_hash(key, static_cast<uint32_t>(pos));
  int v0, v1;
  {
    int64_t s0, s1;
    slice_of(a.V, splits, s0, s1);
    v0 = static_cast<int>(s0), v1 = static_cast<int>(s1);  // V < 2^31: ids are int
  }
  const double c = exp_table_shift(cap, temp);
  const bool from_table = !all_exact && exp_table_serves(c, m, bmax);
  Stats st;
  empty_stats(st);
  float screen = -INFINITY;
  auto z_of = [&](uint16_t x) { return __uint_as_float(__ldg(&z_table[x].x)); };
  auto exact_value = [&](float z, int v) {
    return static_cast<double>(z) + rng::gumbel_from_bits(rng::bits(key, static_cast<uint32_t>(pos), static_cast<uint32_t>(v)));
  };

  // The sums over runs of kRun of the thread's elements in fp32, each run's sum then added in double:
  // a run's sum of k same-sign terms, each within 2u of its double value (u = 2^-24: the term's own
  // rounding — the table's E, or expf of the rounded z - m — and the fused multiply-add), is within
  // (k + 1) u = 5.4e-7 relative of the double sum, so S1, S2 and the probabilities' denominator are
  // within that of the double sums; the entropy log S1 - S2 / S1 then moves by at most
  // 5.4e-7 (1 + 2 |S2 / S1|) <= 5.4e-7 (1 + 2 H) (S1 >= 1, so -S2 / S1 <= H), under the 1e-5 (1 + H)
  // the CUDA-vs-CPU checks allow, and the fp32 denominator by an ulp or so.
  // From the table the sums are of E(z) = e^(z - c), E(z) (z - m) and E(bf16(z)); the block's totals
  // are scaled by e^(c - m) and e^(c - bmax) in double at the end (relative error 2^-52).
  constexpr int kRun = 8;
  const uint32_t* const mask = kGuided ? row_gap_mask(a, pos) : nullptr;
  const int32_t mask_limit = a.gap_limit;
  // One sweep of the slice: kExp, the sums from the table; kExact, every noise value exact in order;
  // kMask, the row's gap mask applied.
  auto sweep = [&](auto exp_tag, auto exact_tag, auto mask_tag) {
    constexpr bool kExp = decltype(exp_tag)::value, kExact = decltype(exact_tag)::value;
    constexpr bool kMask = decltype(mask_tag)::value;
    float r1 = 0.0f, r2 = 0.0f, rb = 0.0f;
    int run = 0;
    // One element: z and bf16(z) (returned), the argmax, the sums, the noise's estimate (gf, or
    // -inf) or its exact value.
    auto element = [&](uint16_t x, int v, float thr, float& gf) -> uint32_t {
      // The same processed() of the same value, its bf16 rounding and exps.
      const uint4 t = __ldg(z_table + x);
      const bool live = !kMask || gap_allows(mask, mask_limit, v);  // allowed by the gap mask
      const float z = live ? __uint_as_float(t.x) : -INFINITY;
      const float e = __uint_as_float(t.z), eb = __uint_as_float(t.w);
      const uint32_t zb = live ? t.y : 0xFF80u;  // bf16 -inf
      // Top2::push without branches (the thread's elements come in ascending order).
      const bool better = z > st.z.v1;
      st.z.v2 = fmaxf(st.z.v2, better ? st.z.v1 : z);
      st.z.v1 = better ? z : st.z.v1;
      st.z.i1 = better ? v : st.z.i1;
      const float dz = __fsub_rn(z, m);
      if (!live) {
        // A masked token: no mass, no noise.
      } else if constexpr (kExp) {
        r1 = __fadd_rn(r1, e);
        r2 = __fmaf_rn(e, dz, r2);
        rb = __fadd_rn(rb, eb);  // unused without want_probs
      } else {
        const float ex = expf(dz);  // terms far below 1 carry the rounding of z - m
        r1 = __fadd_rn(r1, ex);
        r2 = __fmaf_rn(ex, dz, r2);
        if (want_probs) rb = __fadd_rn(rb, expf(__fsub_rn(bf16_to_f32(static_cast<uint16_t>(zb)), bmax)));
      }
      gf = -INFINITY;
      if constexpr (kExact) {
        if (live && z >= floor) st.g.push(exact_value(z, v), v);
      } else if (live && z >= thr) {
        gf = noise_estimate(counter_bits(hash, static_cast<uint32_t>(v)), __fadd_rn(z, kLnLn2));
      }
      return zb;
    };
    // One round: this thread's N elements [first, first + N) (N = 8: one 16-byte load of consecutive
    // logits; N = 1: the scalar sweep of slices that are not 16-byte aligned or a multiple of 8 long),
    // live or not (past the slice's end), in three phases: the elements; the screen raised to the
    // warp's best estimate of the round less the margin, and shared with the block; the candidates.
    auto round = [&](auto n_tag, const uint16_t (&x)[decltype(n_tag)::value], int first, bool live, bool last) {
      constexpr int N = decltype(n_tag)::value;
      float gf[N];
      uint32_t zb[N];
      float thr = NAN;
      if (sampling && !kExact) {
        const float lim = fmaxf(screen, best_floor);
        thr = fmaxf(floor, __fsub_rn(lim, __fmaf_rn(fabsf(lim), kGumbelScreenRel, kGumbelMax)));
      }
      float w = -INFINITY;  // the thread's best estimate of the round
      if (live) {
DG_UNROLL
        for (int k = 0; k < N; ++k) {
          zb[k] = element(x[k], first + k, thr, gf[k]);
          w = fmaxf(w, gf[k]);
        }
        if (want_probs) {  // pass 2 reads bf16(z) back instead of recomputing the soft-cap
          if constexpr (N == 8) {
            *reinterpret_cast<uint4*>(row + first) =
                make_uint4(zb[0] | (zb[1] << 16), zb[2] | (zb[3] << 16), zb[4] | (zb[5] << 16), zb[6] | (zb[7] << 16));
          } else {
            row[first] = static_cast<uint16_t>(zb[0]);
          }
        }
      } else {
DG_UNROLL
        for (int k = 0; k < N; ++k) gf[k] = -INFINITY;
      }
      run += N;
      if (run >= kRun || last) {
        st.s1 += static_cast<double>(r1);
        st.s2 += static_cast<double>(r2);
        st.bsum += static_cast<double>(rb);
        r1 = r2 = rb = 0.0f;
        run = 0;
      }
      if (!sampling || kExact) return;
      const float wmax = warp_max_f32(w);
      const float mine = __fsub_rn(wmax, __fmaf_rn(fabsf(wmax), kGumbelScreenRel, kGumbelScreen));
      const float shared_screen = *static_cast<volatile float*>(&block_screen);
      if (lane == 0 && mine > shared_screen) atomic_max_f32(&block_screen, mine);
      screen = fmaxf(screen, fmaxf(mine, shared_screen));
      if (!(w >= screen && w > -INFINITY)) return;  // none of this thread's estimates is a candidate
DG_UNROLL
      for (int k = 0; k < N; ++k) {
        if (gf[k] >= screen) {
          const unsigned slot = atomicAdd(&cand_count[warp], 1u);
          const float z = z_of(x[k]);
          if (slot < kCap) cands[warp][slot] = Candidate{gf[k], z, first + k, 0};
          else st.g.push_tied(exact_value(z, first + k), first + k);
        }
      }
    };
    if (vectorisable(row, v0, v1)) {
      // Lane-consecutive 16-byte chunks: round r covers [v0 + 8 kThreads r, v0 + 8 kThreads (r + 1)).
      uint4* vec = reinterpret_cast<uint4*>(row + v0);
      const int chunks = (v1 - v0) / 8;
      const int t = static_cast<int>(threadIdx.x);
      uint4 next = t < chunks ? vec[t] : make_uint4(0, 0, 0, 0);
      for (int base = 0; base < chunks; base += kThreads) {
        const int ch = base + t;
        const uint4 q = next;
        if (ch + kThreads < chunks) next = vec[ch + kThreads];  // the thread's own chunks only (stores above)
        const uint16_t x[8] = {static_cast<uint16_t>(q.x), static_cast<uint16_t>(q.x >> 16), static_cast<uint16_t>(q.y),
                               static_cast<uint16_t>(q.y >> 16), static_cast<uint16_t>(q.z), static_cast<uint16_t>(q.z >> 16),
                               static_cast<uint16_t>(q.w), static_cast<uint16_t>(q.w >> 16)};
        round(std::integral_constant<int, 8>{}, x, v0 + 8 * ch, ch < chunks, base + kThreads >= chunks);
      }
    } else {
      for (int base = v0; base < v1; base += kThreads) {
        const int v = base + static_cast<int>(threadIdx.x);
        const uint16_t x[1] = {v < v1 ? row[v] : uint16_t{0}};
        round(std::integral_constant<int, 1>{}, x, v, v < v1, base + kThreads >= v1);
      }
    }
  };
  auto sweep_row = [&](auto mask_tag) {
    if (all_exact) sweep(std::false_type{}, std::true_type{}, mask_tag);
    else if (from_table) sweep(std::true_type{}, std::false_type{}, mask_tag);
    else sweep(std::false_type{}, std::false_type{}, mask_tag);
  };
  if (kGuided && mask != nullptr) sweep_row(std::bool_constant<kGuided>{});
  else sweep_row(std::false_type{});

  // The candidates at or above the block's final screen take their exact noise, lanes in parallel.
  __syncthreads();
  if (sampling && !all_exact) {
    const float final_screen = *static_cast<volatile float*>(&block_screen);
    const int n = min(static_cast<int>(cand_count[warp]), kCap);
    for (int i = lane; i < n; i += 32) {
      const Candidate cd = cands[warp][i];
      if (cd.gf >= final_screen) st.g.push_tied(exact_value(cd.z, cd.v), cd.v);
    }
  }
  block_reduce_stats(st, warp_partials);
  if (threadIdx.x != 0) return;
  if (from_table) {  // back from e^(z - c) to e^(z - m) (e^(bf16(z) - bmax) for the denominator)
    const double to_m = exp(c - static_cast<double>(m));
    st.s1 *= to_m;
    st.s2 *= to_m;
    st.bsum *= exp(c - static_cast<double>(bmax));
  }
  partials[(a.row0 + pos) * splits + blockIdx.x] = st;
}

}  // namespace
}  // namespace dgemma::cuda
