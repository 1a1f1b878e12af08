// The vision tower's own ops on the CPU (Backend::rope_2d, Backend::vision_pool), fp32 maths with bf16
// rounding where the reference rounds.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/rope_math.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cpu {

void rope_2d(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  DG_CHECK(x.type == ScalarType::kBF16 && x.ndim == 3 && positions.type == ScalarType::kI32);
  const int64_t T = x.dim(0), NH = x.dim(1), D = x.dim(2), quarter = D / 4;
  DG_CHECK(D % 4 == 0 && inv_freq.numel() == quarter && positions.numel() == 2 * T);
  const int32_t* pos = positions.ptr<int32_t>();
  const float* inv = inv_freq.ptr<float>();
  uint16_t* data = x.ptr<uint16_t>();
  parallel_for(static_cast<size_t>(T), [&](size_t b, size_t e) {
    std::vector<float> c(static_cast<size_t>(2 * quarter)), s(static_cast<size_t>(2 * quarter));
    for (size_t t = b; t < e; ++t) {
      for (int axis = 0; axis < 2; ++axis) {
        const float p = static_cast<float>(pos[2 * t + static_cast<size_t>(axis)]);
        for (int64_t j = 0; j < quarter; ++j) {
          const float f = inv[j] * p;  // fp32, as inv_freq @ position_ids
          c[static_cast<size_t>(axis * quarter + j)] = round_bf16(std::cos(f));
          s[static_cast<size_t>(axis * quarter + j)] = round_bf16(std::sin(f));
        }
      }
      for (int64_t h = 0; h < NH; ++h) {
        uint16_t* v = data + (static_cast<int64_t>(t) * NH + h) * D;
        rope_rotate_block(v, quarter, c.data(), s.data());                                    // columns: x
        rope_rotate_block(v + 2 * quarter, quarter, c.data() + quarter, s.data() + quarter);  // rows: y
      }
    }
  });
}

void vision_pool(const VisionPoolArgs& a) {
  DG_CHECK(a.x.type == ScalarType::kBF16 && a.out.type == ScalarType::kBF16 && a.kernel >= 1);
  DG_CHECK(a.std_bias.empty() == a.std_scale.empty());
  const int64_t H = a.x.dim(-1), k = a.kernel, N = a.x.numel() / H, S = a.out.numel() / H;
  const uint16_t* x = a.x.ptr<uint16_t>();
  uint16_t* out = a.out.ptr<uint16_t>();
  const uint16_t* bias = a.std_bias.empty() ? nullptr : a.std_bias.ptr<uint16_t>();
  const uint16_t* scale = a.std_scale.empty() ? nullptr : a.std_scale.ptr<uint16_t>();
  DG_CHECK(!bias || (a.std_bias.numel() == H && a.std_scale.numel() == H));
  const float w = 1.0f / static_cast<float>(k * k);
  for (const VisionPoolItem& it : a.items) {
    const int64_t gw = it.grid_w, gh = it.grid_h, pw = gw / k, ph = gh / k;
    DG_CHECK(gw % k == 0 && gh % k == 0 && it.row_first >= 0 && it.row_first + gw * gh <= N);
    DG_CHECK(it.out_first >= 0 && it.out_first + pw * ph <= S);
    parallel_for(static_cast<size_t>(pw * ph), [&](size_t b, size_t e) {
      std::vector<float> acc(static_cast<size_t>(H));
      for (size_t cell = b; cell < e; ++cell) {
        const int64_t cx = static_cast<int64_t>(cell) % pw, cy = static_cast<int64_t>(cell) / pw;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t dy = 0; dy < k; ++dy)
          for (int64_t dx = 0; dx < k; ++dx) {
            const uint16_t* row = x + (it.row_first + (cy * k + dy) * gw + cx * k + dx) * H;
            for (int64_t i = 0; i < H; ++i) acc[static_cast<size_t>(i)] += bf16_to_f32(row[i]) * w;
          }
        uint16_t* o = out + (it.out_first + static_cast<int64_t>(cell)) * H;
        for (int64_t i = 0; i < H; ++i) {
          float v = round_bf16(acc[static_cast<size_t>(i)]) * a.scale;
          if (bias) v = (v - bf16_to_f32(bias[i])) * bf16_to_f32(scale[i]);
          o[i] = f32_to_bf16(v);
        }
      }
    });
  }
}

}  // namespace dgemma::cpu
