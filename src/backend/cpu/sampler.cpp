// The per-position sampler maths of one denoising step (docs/MODEL.md §6.2, §6.4), per canvas position:
//   s = softcap * tanh(float(logit) / softcap)          (fp32, the reference's LM-head epilogue)
//   z = s / T                                            (the "processed" logits, fp32)
//   argmax(z); sample = argmax(z + Gumbel) with the counter-based noise of (key, position, token)
//   H = log S - (sum e (z - zmax)) / S with e = exp(z - zmax), S = sum e   (= -sum p log p, in fp64)
//   probs for self-conditioning = bf16(softmax_fp32(bf16(z)))  (written over the logits; the
//   denominator summed in double)
// The vocabulary sums run over kVocabBlocks blocks (backend.h) added in block order. With a vocabulary
// shard (SamplerArgs::collective) each rank computes its columns' statistics and block sums, the ranks
// exchange them (gathers: values move unchanged) and each combines all of them in the same order — so
// every output equals the one-rank result bit for bit. One rank runs the same functions in one pass.
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

// Top-2 of z and of z + Gumbel over a run of columns; indices are global vocabulary ids.
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

void compute_z(const uint16_t* row, int64_t n, float cap, float temp, float* z) {
  for (int64_t v = 0; v < n; ++v) {
    float s = bf16_to_f32(row[v]) / cap;
    s = std::tanh(s);
    s = s * cap;
    z[v] = s / temp;
  }
}

Stats local_stats(const float* z, int64_t n, int64_t first, uint64_t key, uint32_t pos) {
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
      const double d = static_cast<double>(z[v]) - zmax;
      const double e = std::exp(d);
      s.s += e;
      s.sz += e * d;
      s.sb += std::exp(round_bf16(z[v]) - bmax);
    }
    out[b] = s;
  }
}

void write_probs(const float* z, int64_t n, float zmax, float bsum, uint16_t* row) {
  const float bmax = round_bf16(zmax);
  for (int64_t v = 0; v < n; ++v) row[v] = f32_to_bf16(std::exp(round_bf16(z[v]) - bmax) / bsum);
}

struct Outputs {
  const SamplerArgs& a;
  // Writes position p's outputs from its combined statistics and all block sums; returns the
  // probabilities' fp32 denominator.
  float finish(int64_t p, const Stats& st, const BlockSums* sums, int64_t blocks) const {
    double s = 0, sz = 0, sb = 0;
    for (int64_t b = 0; b < blocks; ++b) s += sums[b].s, sz += sums[b].sz, sb += sums[b].sb;
    const double lse = st.zmax + std::log(s);
    a.entropy.ptr<float>()[p] = static_cast<float>(std::log(s) - sz / s);
    a.argmax.ptr<int32_t>()[p] = st.am;
    a.sample.ptr<int32_t>()[p] = st.smp;
    if (!a.argmax_logprob.empty()) a.argmax_logprob.ptr<float>()[p] = static_cast<float>(static_cast<double>(st.zmax) - lse);
    if (!a.argmax_gap.empty()) a.argmax_gap.ptr<float>()[p] = st.zmax - st.z2;
    if (!a.sample_gap.empty()) a.sample_gap.ptr<float>()[p] = static_cast<float>(st.best - st.best2);
    return static_cast<float>(sb);
  }
};

// Position rows of a [C, n] byte tensor: the gather's unit.
Tensor bytes(std::vector<uint8_t>& v, int64_t rows) {
  return borrow_tensor(v.data(), ScalarType::kU8, {rows, static_cast<int64_t>(v.size()) / rows});
}

void sampler_sharded(const SamplerArgs& a) {
  Collective& comm = *a.collective;
  const int N = comm.size();
  const int64_t C = a.logits.dim(0), V = a.logits.dim(1);
  DG_CHECK(a.vocab_total == V * N && a.vocab_first == V * comm.rank() && kVocabBlocks % N == 0);
  const int64_t nb = kVocabBlocks / N;  // blocks of this rank
  uint16_t* logits = a.logits.ptr<uint16_t>();

  // 1. Each rank's top-2s, gathered; every rank combines them in rank (= vocabulary) order.
  std::vector<uint8_t> mine(static_cast<size_t>(C) * sizeof(Stats)), all(mine.size() * static_cast<size_t>(N));
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(static_cast<size_t>(V));
    for (size_t p = b; p < e; ++p) {
      compute_z(logits + p * V, V, a.softcap, a.temperature, z.data());
      const Stats st = local_stats(z.data(), V, a.vocab_first, a.sample_key, static_cast<uint32_t>(p));
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

  // 2. Block sums against the global maximum, gathered into block order.
  std::vector<uint8_t> sums(static_cast<size_t>(C * nb) * sizeof(BlockSums)), all_sums(sums.size() * static_cast<size_t>(N));
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(static_cast<size_t>(V));
    for (size_t p = b; p < e; ++p) {
      compute_z(logits + p * V, V, a.softcap, a.temperature, z.data());
      block_sums(z.data(), V, nb, st[p].zmax, reinterpret_cast<BlockSums*>(sums.data()) + p * nb);
    }
  });
  comm.all_gather_last(bytes(sums, C), bytes(all_sums, C));

  // 3. Outputs (the same on every rank) and this rank's columns of the probabilities.
  const Outputs out{a};
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(static_cast<size_t>(V));
    for (size_t p = b; p < e; ++p) {
      const float bsum = out.finish(static_cast<int64_t>(p), st[p],
                                    reinterpret_cast<const BlockSums*>(all_sums.data()) + p * kVocabBlocks, kVocabBlocks);
      if (!a.want_probs) continue;
      compute_z(logits + p * V, V, a.softcap, a.temperature, z.data());
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
  const int64_t blocks = V % kVocabBlocks == 0 ? kVocabBlocks : 1;
  uint16_t* logits = a.logits.ptr<uint16_t>();
  const Outputs out{a};
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(static_cast<size_t>(V));
    std::vector<BlockSums> sums(static_cast<size_t>(blocks));
    for (size_t p = b; p < e; ++p) {
      uint16_t* row = logits + p * V;
      compute_z(row, V, a.softcap, a.temperature, z.data());
      const Stats st = local_stats(z.data(), V, 0, a.sample_key, static_cast<uint32_t>(p));
      block_sums(z.data(), V, blocks, st.zmax, sums.data());
      const float bsum = out.finish(static_cast<int64_t>(p), st, sums.data(), blocks);
      if (a.want_probs) write_probs(z.data(), V, st.zmax, bsum, row);
    }
  });
}

}  // namespace dgemma::cpu
