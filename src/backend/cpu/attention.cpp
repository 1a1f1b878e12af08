// Eager attention as the reference computes it: scores = bf16(q . k^T) * scaling, fp32 softmax,
// probabilities rounded to bf16, out = bf16(P . V) with fp32 accumulation; GQA maps query head h to
// KV head h / (Hq / Hkv).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dot.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cpu {

void attention(const AttentionArgs& a) {
  const int64_t n = a.q.dim(0), Hq = a.q.dim(1), D = a.q.dim(2);
  const int64_t Hkv = a.k_new.dim(1);
  DG_CHECK(a.k_new.dim(0) == n && a.k_new.dim(2) == D && Hq % Hkv == 0);
  const int64_t L = a.cache_len, first = a.cache_first;
  const int64_t P = L > 0 ? a.k_pages.dim(2) : 1;
  DG_CHECK(L == 0 || (a.k_pages.ndim == 4 && a.k_pages.dim(1) == Hkv && a.k_pages.dim(3) == D &&
                      a.v_pages.numel() == a.k_pages.numel() && a.page_table.type == ScalarType::kI32 &&
                      (first + L - 1) / P < a.page_table.numel()));
  const int64_t groups = Hq / Hkv;
  const int64_t total = L + n;
  const uint16_t* q = a.q.ptr<uint16_t>();
  const uint16_t* kc = L > 0 ? a.k_pages.ptr<uint16_t>() : nullptr;
  const uint16_t* vc = L > 0 ? a.v_pages.ptr<uint16_t>() : nullptr;
  const int32_t* table = L > 0 ? a.page_table.ptr<int32_t>() : nullptr;
  const int64_t num_pages = L > 0 ? a.k_pages.dim(0) : 0;
  const uint16_t* kn = a.k_new.ptr<uint16_t>();
  const uint16_t* vn = a.v_new.ptr<uint16_t>();
  uint16_t* out = a.out.ptr<uint16_t>();

  // Cached key j (0 <= j < L) is absolute position first + j: row (pos % P) of its page.
  auto cached_row = [&](int64_t kvh, int64_t j) -> int64_t {
    const int64_t pos = first + j, page = table[pos / P];
    DG_CHECK(page >= 0 && page < num_pages);
    return ((page * Hkv + kvh) * P + pos % P) * D;
  };
  auto key = [&](int64_t kvh, int64_t j) -> const uint16_t* {
    return j < L ? kc + cached_row(kvh, j) : kn + ((j - L) * Hkv + kvh) * D;
  };
  auto val = [&](int64_t kvh, int64_t j) -> const uint16_t* {
    return j < L ? vc + cached_row(kvh, j) : vn + ((j - L) * Hkv + kvh) * D;
  };

  check_image_blocks(a.blocks, n);
  const ItemKeys rule{static_cast<int>(L),
                      static_cast<int>(n),
                      a.causal ? 1 : 0,
                      static_cast<int>(a.window),
                      reinterpret_cast<const int32_t*>(a.blocks.data()),
                      static_cast<int>(a.blocks.size()),
                      a.blocks_windowed ? 1 : 0};
  parallel_for(static_cast<size_t>(n * Hq), [&](size_t b, size_t e) {
    std::vector<float> qf(D), kf(D), scores(total), acc(D);
    for (size_t task = b; task < e; ++task) {
      const int64_t i = static_cast<int64_t>(task) / Hq, h = static_cast<int64_t>(task) % Hq;
      const int64_t kvh = h / groups;
      for (int64_t d = 0; d < D; ++d) qf[d] = bf16_to_f32(q[(i * Hq + h) * D + d]);
      const KeyRange keys = query_keys(rule, static_cast<int>(i));
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < total; ++j) {
        if (j < keys.lo || j >= keys.hi) {
          scores[j] = -std::numeric_limits<float>::infinity();
          continue;
        }
        const uint16_t* kp = key(kvh, j);
        for (int64_t d = 0; d < D; ++d) kf[d] = bf16_to_f32(kp[d]);
        const float s = round_bf16(round_bf16(dot_f32(qf.data(), kf.data(), D)) * a.scaling);
        scores[j] = s;
        mx = std::max(mx, s);
      }
      float sum = 0.f;
      for (int64_t j = 0; j < total; ++j) {
        const float p = std::isinf(scores[j]) ? 0.f : std::exp(scores[j] - mx);
        scores[j] = p;
        sum += p;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t j = 0; j < total; ++j) {
        const float p = round_bf16(scores[j] / sum);
        if (p == 0.f) continue;
        const uint16_t* vp = val(kvh, j);
        for (int64_t d = 0; d < D; ++d) acc[d] += p * bf16_to_f32(vp[d]);
      }
      for (int64_t d = 0; d < D; ++d) out[(i * Hq + h) * D + d] = f32_to_bf16(acc[d]);
    }
  });
}

}  // namespace dgemma::cpu
