// One expert-GEMM problem for the expert GEMM benchmark (expert_problem.h).
#include "expert_problem.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/cuda/core/context.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/quant/fp8_gemm.h"
#include "backend/cuda/quant/layout.h"
#include "backend/cuda/quant/w8a8_experts.cuh"
#include "backend/cuda/quant/weight_only.cuh"
#include "util/bf16.h"

namespace dgemma::gpu_test {
namespace {

// Random bytes fast enough for the 26B shapes (hundreds of MB), mapped by `f`.
template <typename F>
void fill_bytes(Data& d, const Tensor& t, F f) {
  uint8_t* p = t.ptr<uint8_t>();
  const int64_t n = static_cast<int64_t>(t.nbytes());
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t v = d.engine()();
    for (int64_t j = i; j < std::min(n, i + 8); ++j, v >>= 8) p[j] = f(static_cast<uint8_t>(v));
  }
}

// An expert stack [E, N, K]: FP8 E4M3 codes of magnitude 2^-2 .. 2^2 (random sign and mantissa) with
// channel scales around typical / 1.6; NVFP4 random nibbles with block scale codes 0x20 .. 0x5f (about
// one block in 64 zero) and one global scale per `rows_per_scale` rows (gate and up differ).
Weight random_experts(Data& d, bool fp8, int64_t E, int64_t N, int64_t K, int64_t rows_per_scale,
                      float typical) {
  Weight w;
  w.format = fp8 ? WeightFormat::kFp8Channel : WeightFormat::kNvfp4;
  w.data = host_tensor(fp8 ? ScalarType::kF8E4M3 : ScalarType::kU8, {E, N, fp8 ? K : K / 2});
  w.row_scale = host_tensor(ScalarType::kF32, {E, N});
  float* rs = w.row_scale.ptr<float>();
  if (fp8) {
    fill_bytes(d, w.data,
               [](uint8_t b) { return static_cast<uint8_t>((b & 0x87) | ((5 + (b >> 3) % 5) << 3)); });
    for (int64_t i = 0; i < E * N; ++i) rs[i] = typical / 1.6f * d.uniform(0.5f, 2.0f);
    return w;
  }
  fill_bytes(d, w.data, [](uint8_t b) { return b; });
  w.block = host_tensor(ScalarType::kF8E4M3, {E, N, K / 16});
  fill_bytes(d, w.block, [](uint8_t b) { return static_cast<uint8_t>(b < 4 ? 0 : 0x20 + (b & 0x3f)); });
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r0 = 0; r0 < N; r0 += rows_per_scale) {
      const float s = typical / 4.0f * d.uniform(0.5f, 2.0f);  // |e2m1 * block| is ~2 * 2
      for (int64_t r = r0; r < std::min(N, r0 + rows_per_scale); ++r) rs[e * N + r] = s;
    }
  return w;
}

// The device layout of quant_layout.h (NVFP4 and W8A16; W8A8 takes the checkpoint's bytes).
Tensor device_data(const Weight& w, bool repack) {
  if (!repack) return up(w.data);
  Tensor t = clone(w.data);
  const bool fp8 = w.format == WeightFormat::kFp8Channel;
  const int64_t K = w.data.dim(2) * (fp8 ? 1 : 2);
  if (!fp8)
    cuda::zero_unscaled_blocks(t.ptr<uint8_t>(), w.block.ptr<uint8_t>(), w.data.dim(0) * w.data.dim(1), K);
  cuda::repack_quant_weights(fp8, t.ptr<uint8_t>(), static_cast<int64_t>(t.nbytes()));
  return up(t);
}
Tensor device_block(const Weight& w) {
  if (w.format != WeightFormat::kNvfp4) return Tensor{};
  Tensor t = clone(w.block);
  const int64_t E = w.block.dim(0), N = w.block.dim(1), K = w.block.dim(2) * 16;
  cuda::repack_block_scales(w.block.ptr<uint8_t>(), t.ptr<uint8_t>(), E, N, K);
  return up(t);
}

}  // namespace

const char* format_name(ExpertFormat f) {
  switch (f) {
    case ExpertFormat::kW8a8:
      return "FP8 W8A8";
    case ExpertFormat::kNvfp4:
      return "NVFP4 W4A16";
    default:
      return "FP8 W8A16";
  }
}

int64_t ExpertProblem::experts_hit() const {
  int64_t n = 0;
  for (int64_t e = 0; e < E; ++e) n += offsets[static_cast<size_t>(e) + 1] > offsets[static_cast<size_t>(e)];
  return n;
}
double ExpertProblem::gate_up_bytes() const {
  const double per = format == ExpertFormat::kNvfp4 ? 0.5 + 1.0 / 16 : 1.0;
  return static_cast<double>(experts_hit()) * 2.0 * static_cast<double>(I * H) * per;
}
double ExpertProblem::down_bytes() const {
  return gate_up_bytes() / 2;
}

cuda::Stream cuda_stream() {
  return cuda::context_of(cuda()).stream;
}

ExpertProblem make_expert_problem(Data& d, ExpertFormat f, int64_t T, int64_t H, int64_t I, int64_t E,
                                  int64_t K, const ExpertProblem* weights_of) {
  ExpertProblem p;
  p.format = f;
  p.T = T, p.H = H, p.I = I, p.E = E, p.K = K, p.R = T * K;
  // Routing: per token K distinct experts drawn uniformly.
  const std::vector<double> weight(static_cast<size_t>(E), 1.0);
  std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> w = weight;
    for (int64_t k = 0; k < K; ++k) {
      std::discrete_distribution<int64_t> pick(w.begin(), w.end());
      const int64_t e = pick(d.engine());
      w[static_cast<size_t>(e)] = 0.0;
      by_expert[static_cast<size_t>(e)].push_back(static_cast<int32_t>(t * K + k));
    }
  }
  p.offsets.assign(static_cast<size_t>(E) + 1, 0);
  for (int64_t e = 0; e < E; ++e) {
    p.offsets[static_cast<size_t>(e)] = static_cast<int32_t>(p.pairs.size());
    p.pairs.insert(p.pairs.end(), by_expert[static_cast<size_t>(e)].begin(),
                   by_expert[static_cast<size_t>(e)].end());
  }
  p.offsets[static_cast<size_t>(E)] = static_cast<int32_t>(p.R);
  p.top_w.resize(static_cast<size_t>(p.R));
  for (float& w : p.top_w) w = d.uniform(0.05f, 0.5f);

  const bool fp8 = f != ExpertFormat::kNvfp4;
  if (weights_of != nullptr &&
      (weights_of->format != f || weights_of->E != E || weights_of->H != H || weights_of->I != I))
    weights_of = nullptr;
  if (weights_of == nullptr) {
    p.gate_up = random_experts(d, fp8, E, 2 * I, H, I, 1.0f / std::sqrt(static_cast<float>(H)));
    p.down = random_experts(d, fp8, E, H, I, H, 1.0f / std::sqrt(static_cast<float>(I)));
  }
  p.x = d.bf16({T, H}, 1.0f);
  {  // rows of very different magnitudes and outlier channels (the per-row FP8 scales then differ)
    uint16_t* x = p.x.ptr<uint16_t>();
    for (int64_t t = 0; t < T; ++t) {
      const float row = t % 4 == 0 ? 30.0f : (t % 4 == 1 ? 0.05f : 1.0f);
      for (int64_t k = 0; k < H; ++k)
        x[t * H + k] = f32_to_bf16(bf16_to_f32(x[t * H + k]) * row * (k % 61 == 7 ? 20.0f : 1.0f));
    }
  }

  p.d_offsets = up(host_i32(p.offsets));
  p.d_pairs = up(host_i32(p.pairs));
  p.d_top_w = up(host_f32(p.top_w));
  p.d_x = up(p.x);
  if (weights_of != nullptr) {
    p.gate_up = weights_of->gate_up, p.down = weights_of->down;
    p.d_gu = weights_of->d_gu, p.d_dn = weights_of->d_dn;
    p.d_gu_block = weights_of->d_gu_block, p.d_dn_block = weights_of->d_dn_block;
    p.d_gu_rs = weights_of->d_gu_rs, p.d_dn_rs = weights_of->d_dn_rs;
  } else {
    const bool repack = f != ExpertFormat::kW8a8;
    p.d_gu = device_data(p.gate_up, repack);
    p.d_dn = device_data(p.down, repack);
    p.d_gu_block = device_block(p.gate_up);
    p.d_dn_block = device_block(p.down);
    p.d_gu_rs = up(p.gate_up.row_scale);
    p.d_dn_rs = up(p.down.row_scale);
  }
  if (f == ExpertFormat::kW8a8) {  // the grouped W8A8 kernels' tile list, as the grouping kernel writes it
    p.w8a8_plan = cuda::grouped_w8a8_plan(p.R, E);
    std::vector<int32_t> tiles;
    for (int64_t e = 0; e < E && p.w8a8_plan.max_tiles > 0; ++e)
      for (int32_t r = p.offsets[static_cast<size_t>(e)]; r < p.offsets[static_cast<size_t>(e) + 1];
           r += p.w8a8_plan.tile_rows)
        tiles.insert(tiles.end(),
                     {static_cast<int32_t>(e), r,
                      std::min(p.w8a8_plan.tile_rows, p.offsets[static_cast<size_t>(e) + 1] - r), 0});
    while (static_cast<int64_t>(tiles.size()) < 4 * std::max<int64_t>(1, p.w8a8_plan.max_tiles))
      tiles.insert(tiles.end(), {-1, 0, 0, 0});
    p.d_tiles = up(host_i32(tiles));
    p.d_q = cuda().alloc(ScalarType::kU8, {std::max(T * H, p.R * I)});
    p.d_s = cuda().alloc(ScalarType::kF32, {std::max(T, p.R)});
  }
  return p;
}

void grouped_gate_up(const ExpertProblem& p, const Tensor& act, cuda::Stream st) {
  switch (p.format) {
    case ExpertFormat::kW8a8: {
      const Tensor &q = p.d_q, &s = p.d_s;
      cuda::launch_quantize_fp8_rows(p.d_x.ptr<uint16_t>(), p.T, p.H, q.ptr<uint8_t>(), s.ptr<float>(), st);
      cuda::launch_grouped_gate_up_w8a8(p.w8a8_plan, q.ptr<uint8_t>(), s.ptr<float>(), p.d_gu.ptr<uint8_t>(),
                                        p.d_gu_rs.ptr<float>(), p.d_offsets.ptr<int32_t>(),
                                        p.d_pairs.ptr<int32_t>(), p.d_tiles.ptr<int32_t>(), p.R, p.E, p.K,
                                        p.H, p.I, act.ptr<uint16_t>(), st);
      return;
    }
    case ExpertFormat::kNvfp4:
      cuda::launch_grouped_gate_up_fp4(p.d_x.ptr<uint16_t>(), p.d_gu.ptr<uint8_t>(),
                                       p.d_gu_block.ptr<uint8_t>(), p.d_gu_rs.ptr<float>(),
                                       p.d_offsets.ptr<int32_t>(), p.d_pairs.ptr<int32_t>(), p.R, p.E, p.K,
                                       p.H, p.I, act.ptr<uint16_t>(), QuantTile::kAuto, st);
      return;
    case ExpertFormat::kW8a16:
      cuda::launch_grouped_gate_up_fp8(p.d_x.ptr<uint16_t>(), p.d_gu.ptr<uint8_t>(), p.d_gu_rs.ptr<float>(),
                                       p.d_offsets.ptr<int32_t>(), p.d_pairs.ptr<int32_t>(), p.R, p.E, p.K,
                                       p.H, p.I, act.ptr<uint16_t>(), QuantTile::kAuto, st);
      return;
  }
}

void grouped_down(const ExpertProblem& p, const Tensor& act_in, const Tensor& y, cuda::Stream st) {
  switch (p.format) {
    case ExpertFormat::kW8a8: {
      const Tensor &q = p.d_q, &s = p.d_s;
      cuda::launch_quantize_fp8_rows(act_in.ptr<uint16_t>(), p.R, p.I, q.ptr<uint8_t>(), s.ptr<float>(), st);
      cuda::launch_grouped_down_w8a8(p.w8a8_plan, q.ptr<uint8_t>(), s.ptr<float>(), p.d_dn.ptr<uint8_t>(),
                                     p.d_dn_rs.ptr<float>(), p.d_offsets.ptr<int32_t>(),
                                     p.d_pairs.ptr<int32_t>(), p.d_tiles.ptr<int32_t>(),
                                     p.d_top_w.ptr<float>(), p.R, p.E, p.H, p.I, y.ptr<uint16_t>(), st);
      return;
    }
    case ExpertFormat::kNvfp4:
      cuda::launch_grouped_down_fp4(
          act_in.ptr<uint16_t>(), p.d_dn.ptr<uint8_t>(), p.d_dn_block.ptr<uint8_t>(), p.d_dn_rs.ptr<float>(),
          p.d_offsets.ptr<int32_t>(), p.d_pairs.ptr<int32_t>(), p.d_top_w.ptr<float>(), p.R, p.E, p.H, p.I,
          y.ptr<uint16_t>(), QuantTile::kAuto, st);
      return;
    case ExpertFormat::kW8a16:
      cuda::launch_grouped_down_fp8(act_in.ptr<uint16_t>(), p.d_dn.ptr<uint8_t>(), p.d_dn_rs.ptr<float>(),
                                    p.d_offsets.ptr<int32_t>(), p.d_pairs.ptr<int32_t>(),
                                    p.d_top_w.ptr<float>(), p.R, p.E, p.H, p.I, y.ptr<uint16_t>(),
                                    QuantTile::kAuto, st);
      return;
  }
}

}  // namespace dgemma::gpu_test
