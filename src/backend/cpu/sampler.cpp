// The per-position sampler maths of one denoising step (docs/MODEL.md §6.2, §6.4), per canvas position:
//   s = softcap * tanh(float(logit) / softcap)          (fp32, the reference's LM-head epilogue)
//   z = s / T                                            (the "processed" logits, fp32)
//   argmax(z); sample = argmax(z + Gumbel) with the counter-based noise of (key, position, token)
//   H = log S - (sum e (z - zmax)) / S with e = exp(z - zmax), S = sum e   (= -sum p log p, in fp64)
//   probs for self-conditioning = bf16(softmax_fp32(bf16(z)))  (written over the logits; the
//   denominator summed in double)
// With a sample filter (backend/sample_filter.h) the sample is the argmax of z + Gumbel over the tokens
// with z >= the row's floor; the floor comes from a histogram of the row's bf16 logits. top_n: the
// row's largest z by (z descending, id ascending) with their log-probabilities.
// The vocabulary sums run over kVocabBlocks blocks (backend.h) added in block order. With a vocabulary
// shard (SamplerArgs::collective) each rank computes its columns' statistics, histograms, top-N lists
// and block sums, the ranks exchange them (gathers: values move unchanged; histogram counts add
// exactly) and each combines all of them in the same order — so every output equals the one-rank
// result bit for bit. One rank runs the same functions in one pass.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/collective.h"
#include "backend/cpu/cpu_ops.h"
#include "util/bf16.h"
#include "util/counter_rng.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cpu {
namespace {

using sample_filter::Mass;

// Top-2 of z and of z + Gumbel (over the tokens with z >= floor) over a run of columns; indices are
// global vocabulary ids.
struct Stats {
  float zmax = -INFINITY, z2 = -INFINITY;
  int32_t am = 0, smp = 0;
  double best = -INFINITY, best2 = -INFINITY;
};

// Sums of one vocabulary block given the position's global zmax.
struct BlockSums {
  double s = 0;   // sum exp(z - zmax)
  double sz = 0;  // sum exp(z - zmax) * (z - zmax)
  double sb = 0;  // sum float(exp(bf16(z) - bf16(zmax)))  (the probabilities' denominator)
};

// One entry of a top-N list.
struct TopEntry {
  float z;
  int32_t id;
};

float z_of(uint16_t bits, float cap, float T) {
  float s = bf16_to_f32(bits) / cap;
  s = std::tanh(s);
  s = s * cap;
  return s / T;
}

// A guided gap's token mask (backend.h GuidedGap) as the rows of one canvas see it: nullptr for a row
// outside the gap. Bit (vocab_first + v) allows column v.
// Ids at or past the constraint's vocabulary (a tokenizer smaller than the LM head) are never allowed.
struct RowMask {
  const uint32_t* words = nullptr;
  int32_t first = 0, last = 0;
  int64_t vocab_first = 0;
  explicit RowMask(const SamplerArgs& a) : vocab_first(a.vocab_first) {
    if (!a.guided.active()) return;
    words = a.guided.tables->gap_mask.ptr<uint32_t>();
    limit = a.guided.tables->vocab_size;
    first = a.guided.first;
    last = a.guided.last;
  }
  const uint32_t* of(int64_t p) const { return words != nullptr && p >= first && p < last ? words : nullptr; }
  bool allowed(const uint32_t* m, int64_t id) const {
    return id < limit && ((m[id >> 5] >> (id & 31)) & 1u) != 0;
  }
  int64_t limit = 0;
};

// z of a row; with a mask, the disallowed columns' z is -inf (first: the row's first vocabulary id).
void compute_z(const uint16_t* row, int64_t n, float cap, float temp, float* z, const RowMask* rm = nullptr,
               const uint32_t* mask = nullptr, int64_t first = 0) {
  for (int64_t v = 0; v < n; ++v) z[v] = z_of(row[v], cap, temp);
  if (mask != nullptr)
    for (int64_t v = 0; v < n; ++v)
      if (!rm->allowed(mask, first + v)) z[v] = -INFINITY;
}

// Counts of the row's valid bf16 keys added to hist (kBins entries); with a mask, allowed columns only.
void add_histogram(const uint16_t* row, int64_t n, uint32_t* hist, const RowMask* rm = nullptr,
                   const uint32_t* mask = nullptr, int64_t first = 0) {
  for (int64_t v = 0; v < n; ++v) {
    if (mask != nullptr && !rm->allowed(mask, first + v)) continue;
    const uint32_t key = sample_filter::key_of(row[v]);
    if (sample_filter::valid_key(key)) hist[key] += 1;
  }
}

// The row's floor on z from its histogram (hist[key] = count; keys outside [kMinKey, kMaxKey] are
// zero), sample_filter.h's stages in order. kmax is the row's largest valid key.
float row_floor(const uint32_t* hist, uint32_t kmax, float cap, float T, const SampleFilter& f) {
  auto zf = [&](uint32_t key) { return z_of(sample_filter::bits_of(key), cap, T); };
  const float m = zf(kmax);
  uint32_t lo = sample_filter::kMinKey;
  if (f.min_p > 0) lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(m) + std::log(f.min_p), lo, kmax);
  if (f.top_k > 0) {
    uint64_t c = 0;
    uint32_t x = lo;
    for (uint32_t k = kmax; k >= lo; --k) {
      c += hist[k];
      if (c >= static_cast<uint64_t>(f.top_k)) {
        x = k;
        break;
      }
      if (k == lo) break;
    }
    lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(zf(x)), lo, kmax);
  }
  if (f.top_p < 1) {
    auto mass = [&](uint32_t k) {
      return static_cast<Mass>(hist[k]) * sample_filter::mass_units(std::exp(static_cast<double>(zf(k)) - m));
    };
    Mass total = 0;
    for (uint32_t k = lo; k <= kmax; ++k)
      if (hist[k] != 0) total += mass(k);
    const double target = f.top_p * sample_filter::mass_to_double(total);
    Mass s = 0;
    uint32_t x = lo;
    for (uint32_t k = kmax; k >= lo; --k) {
      if (hist[k] != 0) {
        s += mass(k);
        if (sample_filter::mass_to_double(s) >= target) {
          x = k;
          break;
        }
      }
      if (k == lo) break;
    }
    lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(zf(x)), lo, kmax);
  }
  while (hist[lo] == 0) ++lo;  // the least z present (kmax is)
  return zf(lo);
}

// The floor of a whole row's histogram; +inf when the row has only NaN logits (nothing is allowed:
// the sample stays token 0).
float histogram_floor(const uint32_t* hist, float cap, float T, const SampleFilter& f) {
  uint32_t kmax = sample_filter::kMaxKey;
  while (kmax >= sample_filter::kMinKey && hist[kmax] == 0) --kmax;
  if (kmax < sample_filter::kMinKey) return INFINITY;
  return row_floor(hist, kmax, cap, T, f);
}

Stats local_stats(const float* z, int64_t n, int64_t first, uint64_t key, uint32_t pos, float floor, bool want_sample) {
  Stats st;
  for (int64_t v = 0; v < n; ++v) {
    const float zv = z[v];
    const int32_t id = static_cast<int32_t>(first + v);
    if (zv > st.zmax) {
      st.z2 = st.zmax;
      st.zmax = zv;
      st.am = id;
    } else if (zv > st.z2) {
      st.z2 = zv;
    }
    if (!want_sample || !(zv >= floor)) continue;  // outside the sample's support (NaN never enters it)
    const double g = static_cast<double>(zv) + rng::gumbel(key, pos, static_cast<uint32_t>(id));
    if (g > st.best) {
      st.best2 = st.best;
      st.best = g;
      st.smp = id;
    } else if (g > st.best2) {
      st.best2 = g;
    }
  }
  return st;
}

// a covers lower vocabulary ids than b: exactly what one scan over a then b would give (the first
// maximum wins; the runner-up is the second largest of the multiset).
Stats combine(const Stats& a, const Stats& b) {
  Stats o;
  if (b.zmax > a.zmax) {
    o.zmax = b.zmax, o.am = b.am, o.z2 = std::max(b.z2, a.zmax);
  } else {
    o.zmax = a.zmax, o.am = a.am, o.z2 = std::max(a.z2, b.zmax);
  }
  if (b.best > a.best) {
    o.best = b.best, o.smp = b.smp, o.best2 = std::max(b.best2, a.best);
  } else {
    o.best = a.best, o.smp = a.smp, o.best2 = std::max(a.best2, b.best);
  }
  return o;
}

void block_sums(const float* z, int64_t n, int64_t blocks, float zmax, BlockSums* out) {
  const float bmax = round_bf16(zmax);  // max of bf16(z): rounding is monotone
  const int64_t len = n / blocks;
  for (int64_t b = 0; b < blocks; ++b) {
    BlockSums s;
    for (int64_t v = b * len; v < (b + 1) * len; ++v) {
      if (z[v] == -INFINITY) continue;  // a masked column (guided gap): no mass
      const double d = static_cast<double>(z[v]) - zmax;
      const double e = std::exp(d);
      s.s += e;
      s.sz += e * d;
      s.sb += std::exp(round_bf16(z[v]) - bmax);
    }
    out[b] = s;
  }
}

// Token order of the top-N lists: z descending (NaN last), then id ascending (a strict total order).
bool ranks_before(const TopEntry& x, const TopEntry& y) {
  const float kx = std::isnan(x.z) ? -INFINITY : x.z, ky = std::isnan(y.z) ? -INFINITY : y.z;
  return kx > ky || (kx == ky && x.id < y.id);
}

// The n first entries of a run of columns, in order.
void local_top(const float* z, int64_t len, int64_t first, int n, std::vector<TopEntry>& scratch, TopEntry* out) {
  scratch.resize(static_cast<size_t>(len));
  for (int64_t v = 0; v < len; ++v) scratch[static_cast<size_t>(v)] = {z[v], static_cast<int32_t>(first + v)};
  std::partial_sort(scratch.begin(), scratch.begin() + n, scratch.end(), ranks_before);
  std::copy(scratch.begin(), scratch.begin() + n, out);
}

void write_probs(const float* z, int64_t n, float zmax, float bsum, uint16_t* row) {
  const float bmax = round_bf16(zmax);
  for (int64_t v = 0; v < n; ++v) row[v] = f32_to_bf16(std::exp(round_bf16(z[v]) - bmax) / bsum);
}

struct Outputs {
  const SamplerArgs& a;
  // Writes position p's outputs from its combined statistics, all block sums, its floor and its
  // candidates for the top-N list (a superset in any order, at least top_n of them); returns the
  // probabilities' fp32 denominator.
  float finish(int64_t p, const Stats& st, const BlockSums* sums, int64_t blocks, float floor, TopEntry* cand,
               size_t ncand) const {
    double s = 0, sz = 0, sb = 0;
    for (int64_t b = 0; b < blocks; ++b) s += sums[b].s, sz += sums[b].sz, sb += sums[b].sb;
    const double lse = st.zmax + std::log(s);
    a.entropy.ptr<float>()[p] = static_cast<float>(std::log(s) - sz / s);
    a.argmax.ptr<int32_t>()[p] = st.am;
    a.sample.ptr<int32_t>()[p] = a.want_sample ? st.smp : st.am;
    if (!a.argmax_logprob.empty()) a.argmax_logprob.ptr<float>()[p] = static_cast<float>(static_cast<double>(st.zmax) - lse);
    if (!a.argmax_gap.empty()) a.argmax_gap.ptr<float>()[p] = st.zmax - st.z2;
    if (!a.sample_gap.empty())
      a.sample_gap.ptr<float>()[p] = a.want_sample ? static_cast<float>(st.best - st.best2) : st.zmax - st.z2;
    if (!a.sample_floor.empty()) a.sample_floor.ptr<float>()[p] = floor;
    if (a.top_n > 0) {
      const size_t n = static_cast<size_t>(a.top_n);
      std::partial_sort(cand, cand + n, cand + ncand, ranks_before);
      int32_t* ids = a.top_ids.ptr<int32_t>() + p * a.top_n;
      float* lps = a.top_logprobs.ptr<float>() + p * a.top_n;
      for (size_t j = 0; j < n; ++j) {
        ids[j] = cand[j].id;
        lps[j] = static_cast<float>(static_cast<double>(cand[j].z) - lse);
      }
    }
    return static_cast<float>(sb);
  }
};

void check_outputs(const SamplerArgs& a, int64_t C, int64_t vocab) {
  DG_CHECK(a.top_n >= 0 && a.top_n <= vocab);
  if (a.top_n > 0) DG_CHECK(a.top_ids.numel() == C * a.top_n && a.top_logprobs.numel() == C * a.top_n);
  if (!a.sample_floor.empty()) DG_CHECK(a.sample_floor.numel() == C);
}

// Position rows of a [C, n] byte tensor: the gather's unit.
Tensor bytes(std::vector<uint8_t>& v, int64_t rows) {
  return borrow_tensor(v.data(), ScalarType::kU8, {rows, static_cast<int64_t>(v.size()) / rows});
}

// Rows whose histograms one gather moves (bounds the memory: kBins counts per row and rank).
constexpr int64_t kFilterRows = 16;

void sampler_sharded(const SamplerArgs& a) {
  Collective& comm = *a.collective;
  const int N = comm.size();
  const int64_t C = a.logits.dim(0), V = a.logits.dim(1);
  DG_CHECK(a.vocab_total == V * N && a.vocab_first == V * comm.rank() && kVocabBlocks % N == 0);
  check_outputs(a, C, a.vocab_total);
  const int64_t nb = kVocabBlocks / N;  // blocks of this rank
  uint16_t* logits = a.logits.ptr<uint16_t>();
  const float cap = a.softcap, T = a.temperature;
  const RowMask mask(a);

  // 0. The sample filter's floors: every rank's histograms gathered and added (counts are exact),
  //    so every rank finds the one-rank floor.
  std::vector<float> floor(static_cast<size_t>(C), -INFINITY);
  if (a.filter.active()) {
    const size_t row_bytes = sample_filter::kBins * sizeof(uint32_t);
    for (int64_t r0 = 0; r0 < C; r0 += kFilterRows) {
      const int64_t rows = std::min(kFilterRows, C - r0);
      std::vector<uint8_t> mine(static_cast<size_t>(rows) * row_bytes, 0), all(mine.size() * static_cast<size_t>(N));
      parallel_for(static_cast<size_t>(rows), [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i)
          add_histogram(logits + (r0 + static_cast<int64_t>(i)) * V, V,
                        reinterpret_cast<uint32_t*>(mine.data() + i * row_bytes), &mask,
                        mask.of(r0 + static_cast<int64_t>(i)), a.vocab_first);
      });
      comm.all_gather_last(bytes(mine, rows), bytes(all, rows));
      parallel_for(static_cast<size_t>(rows), [&](size_t b, size_t e) {
        std::vector<uint32_t> hist(sample_filter::kBins);
        for (size_t i = b; i < e; ++i) {
          std::fill(hist.begin(), hist.end(), 0u);
          for (int r = 0; r < N; ++r) {
            const uint32_t* h = reinterpret_cast<const uint32_t*>(all.data() + (i * static_cast<size_t>(N) + static_cast<size_t>(r)) * row_bytes);
            for (uint32_t k = 0; k < sample_filter::kBins; ++k) hist[k] += h[k];
          }
          floor[static_cast<size_t>(r0) + i] = histogram_floor(hist.data(), cap, T, a.filter);
        }
      });
    }
  }

  // 1. Each rank's top-2s, gathered; every rank combines them in rank (= vocabulary) order.
  std::vector<uint8_t> mine(static_cast<size_t>(C) * sizeof(Stats)), all(mine.size() * static_cast<size_t>(N));
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(static_cast<size_t>(V));
    for (size_t p = b; p < e; ++p) {
      compute_z(logits + p * V, V, cap, T, z.data(), &mask, mask.of(static_cast<int64_t>(p)), a.vocab_first);
      const Stats st = local_stats(z.data(), V, a.vocab_first, a.sample_key, static_cast<uint32_t>(p), floor[p], a.want_sample);
      std::memcpy(mine.data() + p * sizeof(Stats), &st, sizeof(Stats));
    }
  });
  comm.all_gather_last(bytes(mine, C), bytes(all, C));
  std::vector<Stats> st(static_cast<size_t>(C));
  for (int64_t p = 0; p < C; ++p) {
    const uint8_t* row = all.data() + static_cast<size_t>(p * N) * sizeof(Stats);
    Stats acc;
    std::memcpy(&acc, row, sizeof(Stats));
    for (int r = 1; r < N; ++r) {
      Stats s;
      std::memcpy(&s, row + static_cast<size_t>(r) * sizeof(Stats), sizeof(Stats));
      acc = combine(acc, s);
    }
    st[static_cast<size_t>(p)] = acc;
  }

  // 2. Block sums against the global maximum and each rank's top-N list, gathered into block (rank)
  //    order. The global top-N lies in the union of the ranks' lists (the order is total).
  const int ln = static_cast<int>(std::min<int64_t>(a.top_n, V));  // each rank's list length
  std::vector<uint8_t> sums(static_cast<size_t>(C * nb) * sizeof(BlockSums)), all_sums(sums.size() * static_cast<size_t>(N));
  std::vector<uint8_t> tops(static_cast<size_t>(C * std::max(ln, 1)) * sizeof(TopEntry)), all_tops(tops.size() * static_cast<size_t>(N));
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(static_cast<size_t>(V));
    std::vector<TopEntry> scratch;
    for (size_t p = b; p < e; ++p) {
      compute_z(logits + p * V, V, cap, T, z.data(), &mask, mask.of(static_cast<int64_t>(p)), a.vocab_first);
      block_sums(z.data(), V, nb, st[p].zmax, reinterpret_cast<BlockSums*>(sums.data()) + p * nb);
      if (ln > 0) local_top(z.data(), V, a.vocab_first, ln, scratch, reinterpret_cast<TopEntry*>(tops.data()) + p * ln);
    }
  });
  comm.all_gather_last(bytes(sums, C), bytes(all_sums, C));
  if (ln > 0) comm.all_gather_last(bytes(tops, C), bytes(all_tops, C));

  // 3. Outputs (the same on every rank) and this rank's columns of the probabilities.
  const Outputs out{a};
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(static_cast<size_t>(V));
    for (size_t p = b; p < e; ++p) {
      TopEntry* cand = ln > 0 ? reinterpret_cast<TopEntry*>(all_tops.data()) + p * static_cast<size_t>(N * ln) : nullptr;
      const float bsum = out.finish(static_cast<int64_t>(p), st[p],
                                    reinterpret_cast<const BlockSums*>(all_sums.data()) + p * kVocabBlocks, kVocabBlocks,
                                    floor[p], cand, static_cast<size_t>(N * ln));
      if (!a.want_probs) continue;
      compute_z(logits + p * V, V, cap, T, z.data(), &mask, mask.of(static_cast<int64_t>(p)), a.vocab_first);
      write_probs(z.data(), V, st[p].zmax, bsum, logits + p * V);
    }
  });
}

}  // namespace

void sampler(const SamplerArgs& a) {
  DG_CHECK(a.logits.type == ScalarType::kBF16);
  if (a.collective != nullptr && a.collective->size() > 1) return sampler_sharded(a);
  const int64_t C = a.logits.dim(0), V = a.logits.dim(1);
  DG_CHECK(a.vocab_first == 0 && (a.vocab_total == 0 || a.vocab_total == V));
  check_outputs(a, C, V);
  const int64_t blocks = V % kVocabBlocks == 0 ? kVocabBlocks : 1;
  uint16_t* logits = a.logits.ptr<uint16_t>();
  const bool filtered = a.filter.active();
  const RowMask mask(a);
  const Outputs out{a};
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(static_cast<size_t>(V));
    std::vector<BlockSums> sums(static_cast<size_t>(blocks));
    std::vector<uint32_t> hist(filtered ? sample_filter::kBins : 0);
    std::vector<TopEntry> top(static_cast<size_t>(a.top_n)), scratch;
    for (size_t p = b; p < e; ++p) {
      uint16_t* row = logits + p * V;
      const uint32_t* m = mask.of(static_cast<int64_t>(p));
      compute_z(row, V, a.softcap, a.temperature, z.data(), &mask, m);
      float floor = -INFINITY;
      if (filtered) {
        std::fill(hist.begin(), hist.end(), 0u);
        add_histogram(row, V, hist.data(), &mask, m);
        floor = histogram_floor(hist.data(), a.softcap, a.temperature, a.filter);
      }
      const Stats st = local_stats(z.data(), V, 0, a.sample_key, static_cast<uint32_t>(p), floor, a.want_sample);
      block_sums(z.data(), V, blocks, st.zmax, sums.data());
      if (a.top_n > 0) local_top(z.data(), V, 0, a.top_n, scratch, top.data());
      const float bsum = out.finish(static_cast<int64_t>(p), st, sums.data(), blocks, floor, top.data(), top.size());
      if (a.want_probs) write_probs(z.data(), V, st.zmax, bsum, row);
    }
  });
}

}  // namespace dgemma::cpu
