// The vision tower's ops on the CPU backend: rope_2d is the 1-D rope applied to each half of a head with
// the column / row positions, bit for bit; vision_pool averages k x k blocks of each image's patch grid,
// rounds to bf16, scales and standardizes in fp32, exactly as written out here.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "model/diffusion_gemma.h"
#include "util/bf16.h"

namespace dgemma {
namespace {

Tensor random_bf16(std::initializer_list<int64_t> dims, uint32_t seed, float scale = 1.0f) {
  Tensor t = host_tensor(ScalarType::kBF16, dims);
  uint32_t s = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.ptr<uint16_t>()[i] = f32_to_bf16(scale * (static_cast<float>(s >> 8) / 16777216.0f - 0.5f));
  }
  return t;
}

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = host_tensor(ScalarType::kI32, {static_cast<int64_t>(v.size())});
  std::memcpy(t.data, v.data(), v.size() * 4);
  return t;
}

TEST(VisionOps, Rope2dIsRopeOnEachHalfWithColumnAndRowPositions) {
  auto be = make_cpu_backend();
  const int64_t T = 7, NH = 3, D = 12, Q = D / 4;
  const Tensor x = random_bf16({T, NH, D}, 5, 4.0f);
  const std::vector<int32_t> px = {0, 1, 2, 9, 0, 300, 17}, py = {0, 0, 5, 1, 1023, 2, 40};
  std::vector<int32_t> pos;
  for (int64_t t = 0; t < T; ++t)
    pos.insert(pos.end(), {px[static_cast<size_t>(t)], py[static_cast<size_t>(t)]});
  const std::vector<float> inv =
      rope_inv_freq(RopeParams{RopeType::kDefault, 100.0, 1.0}, static_cast<int>(D / 2));
  ASSERT_EQ(static_cast<int64_t>(inv.size()), Q);
  Tensor inv_t = host_tensor(ScalarType::kF32, {Q});
  std::memcpy(inv_t.data, inv.data(), inv.size() * 4);

  Tensor got = host_tensor(ScalarType::kBF16, {T, NH, D});
  std::memcpy(got.data, x.data, x.nbytes());
  Tensor pos_t = i32(pos);
  pos_t = pos_t.reshape({T, 2});
  be->rope_2d(got, pos_t, inv_t);

  // The reference: each half as its own [T, heads, D/2] tensor through rope().
  for (int half = 0; half < 2; ++half) {
    Tensor part = host_tensor(ScalarType::kBF16, {T, NH, D / 2});
    for (int64_t r = 0; r < T * NH; ++r)
      std::memcpy(part.ptr<uint16_t>() + r * (D / 2), x.ptr<uint16_t>() + r * D + half * (D / 2),
                  (D / 2) * 2);
    be->rope(part, i32(half == 0 ? px : py), inv_t);
    for (int64_t r = 0; r < T * NH; ++r)
      for (int64_t j = 0; j < D / 2; ++j)
        ASSERT_EQ(got.ptr<uint16_t>()[r * D + half * (D / 2) + j], part.ptr<uint16_t>()[r * (D / 2) + j])
            << "row " << r << " half " << half << " channel " << j;
  }
}

TEST(VisionOps, PoolAveragesBlocksPerImageThenScalesAndStandardizes) {
  auto be = make_cpu_backend();
  const int64_t H = 5, k = 2;
  // Image 0: 4 x 6 patches (rows 0..23) -> 2 x 3 cells; image 1: 2 x 2 patches (rows 24..27) -> 1 cell.
  const Tensor x = random_bf16({28, H}, 9, 3.0f);
  const Tensor bias = random_bf16({H}, 11), scale = random_bf16({H}, 13, 2.0f);
  const std::vector<VisionPoolItem> items = {{0, 4, 6, 0}, {24, 2, 2, 6}};
  for (bool standardize : {false, true}) {
    VisionPoolArgs a;
    a.x = x;
    a.items = items;
    a.kernel = static_cast<int>(k);
    a.scale = 5.5f;
    if (standardize) {
      a.std_bias = bias;
      a.std_scale = scale;
    }
    a.out = host_tensor(ScalarType::kBF16, {7, H});
    be->vision_pool(a);
    for (const VisionPoolItem& it : items) {
      const int64_t pw = it.grid_w / k, cells = (it.grid_h / k) * pw;
      for (int64_t s = 0; s < cells; ++s)
        for (int64_t i = 0; i < H; ++i) {
          float acc = 0.0f;
          for (int64_t dy = 0; dy < k; ++dy)
            for (int64_t dx = 0; dx < k; ++dx) {
              const int64_t n = it.row_first + ((s / pw) * k + dy) * it.grid_w + (s % pw) * k + dx;
              acc += bf16_to_f32(x.ptr<uint16_t>()[n * H + i]) * 0.25f;
            }
          float want = round_bf16(acc) * 5.5f;
          if (standardize)
            want = (want - bf16_to_f32(bias.ptr<uint16_t>()[i])) * bf16_to_f32(scale.ptr<uint16_t>()[i]);
          ASSERT_EQ(a.out.ptr<uint16_t>()[(it.out_first + s) * H + i], f32_to_bf16(want)) << s << " " << i;
        }
    }
  }
  // k = 1: each patch scaled.
  VisionPoolArgs one;
  one.x = x;
  const std::vector<VisionPoolItem> single = {{0, 4, 7, 0}};
  one.items = single;
  one.kernel = 1;
  one.scale = 2.0f;
  one.out = host_tensor(ScalarType::kBF16, {28, H});
  be->vision_pool(one);
  for (int64_t i = 0; i < 28 * H; ++i)
    ASSERT_EQ(one.out.ptr<uint16_t>()[i], f32_to_bf16(bf16_to_f32(x.ptr<uint16_t>()[i]) * 2.0f));
}

}  // namespace
}  // namespace dgemma
