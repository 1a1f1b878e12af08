// One expert-GEMM problem for the expert GEMM benchmarks (expert_problem.h).
#include "expert_problem.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backend/cuda/core/context.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "backend/cuda/quant/fp8_gemm.h"
#include "backend/cuda/quant/layout.h"
#include "backend/cuda/quant/w8a8_experts.cuh"
#include "backend/cuda/quant/weight_only.cuh"
#include "util/bf16.h"

namespace dgemma::gpu_test {
namespace {

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

const char* format_name(ExpertFormat f) {
  switch (f) {
    case ExpertFormat::kW8a8:
      return "FP8 W8A8";
    case ExpertFormat::kNvfp4:
      return "NVFP4 W4A16";
    case ExpertFormat::kW8a16:
      return "FP8 W8A16";
    default:
      return "bf16";
  }
}

double bytes_per_weight(ExpertFormat f) {
  return f == ExpertFormat::kNvfp4 ? 0.5 + 1.0 / 16 : (f == ExpertFormat::kBf16 ? 2.0 : 1.0);
}

int64_t k_granule(ExpertFormat f) {
  switch (f) {
    case ExpertFormat::kW8a8:
      return 16;  // grouped_w8a8_supported
    case ExpertFormat::kBf16:
      return 8;  // grouped_moe_supported
    default:
      return cuda::kQuantStageK;  // grouped_fp4_supported / grouped_fp8_supported
  }
}

int64_t ExpertProblem::experts_hit() const {
  int64_t n = 0;
  for (int64_t e = 0; e < E; ++e) n += offsets[static_cast<size_t>(e) + 1] > offsets[static_cast<size_t>(e)];
  return n;
}
double ExpertProblem::gate_up_bytes() const {
  return static_cast<double>(experts_hit()) * 2.0 * static_cast<double>(I * H) * bytes_per_weight(format);
}
double ExpertProblem::down_bytes() const {
  return gate_up_bytes() / 2;
}

cuda::Stream cuda_stream() {
  return cuda::context_of(cuda()).stream;
}

ExpertProblem make_expert_problem(Data& d, ExpertFormat f, int64_t H, int64_t I, int64_t E, int64_t K,
                                  const std::vector<int32_t>& top_idx, const ExpertProblem* weights_of) {
  ExpertProblem p;
  p.format = f;
  p.R = static_cast<int64_t>(top_idx.size());
  p.T = p.R / K, p.H = H, p.I = I, p.E = E, p.K = K;
  const cuda::Context& ctx = cuda::context_of(cuda());
  if (f == ExpertFormat::kW8a8) p.plan = cuda::grouped_w8a8_plan(p.R, E, ctx.options.moe);
  if (f == ExpertFormat::kBf16) p.plan = cuda::grouped_moe_plan(p.R, E, ctx.options.moe, ctx.hopper());
  Grouping g = group_by_expert(top_idx, E, p.plan.tile_rows, p.plan.max_tiles);
  p.offsets = std::move(g.offsets);
  p.pairs = std::move(g.pairs);
  p.tiles = std::move(g.tiles);
  p.top_w.resize(static_cast<size_t>(p.R));
  for (float& w : p.top_w) w = d.uniform(0.05f, 0.5f);

  const bool fp8 = f != ExpertFormat::kNvfp4;
  if (weights_of != nullptr &&
      (weights_of->format != f || weights_of->E != E || weights_of->H != H || weights_of->I != I))
    weights_of = nullptr;
  if (weights_of == nullptr && f != ExpertFormat::kBf16) {
    p.gate_up = random_experts(d, fp8, E, 2 * I, H, I, 1.0f / std::sqrt(static_cast<float>(H)));
    p.down = random_experts(d, fp8, E, H, I, H, 1.0f / std::sqrt(static_cast<float>(I)));
  }
  p.x = d.bf16({p.T, H}, 1.0f);
  {  // rows of very different magnitudes and outlier channels (the per-row FP8 scales then differ)
    uint16_t* x = p.x.ptr<uint16_t>();
    for (int64_t t = 0; t < p.T; ++t) {
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
  } else if (f == ExpertFormat::kBf16) {  // random on the GPU (GBs at this shape)
    p.d_gu = cuda().alloc(ScalarType::kBF16, {E, 2 * I, H});
    p.d_dn = cuda().alloc(ScalarType::kBF16, {E, H, I});
    cuda().fill_normal(p.d_gu, d.engine()(), 0.0f, 1.0f / std::sqrt(static_cast<float>(H)));
    cuda().fill_normal(p.d_dn, d.engine()(), 0.0f, 1.0f / std::sqrt(static_cast<float>(I)));
  } else {
    const bool repack = f != ExpertFormat::kW8a8;
    p.d_gu = device_data(p.gate_up, repack);
    p.d_dn = device_data(p.down, repack);
    p.d_gu_block = device_block(p.gate_up);
    p.d_dn_block = device_block(p.down);
    p.d_gu_rs = up(p.gate_up.row_scale);
    p.d_dn_rs = up(p.down.row_scale);
  }
  if (p.plan.max_tiles > 0) p.d_tiles = up(host_i32(p.tiles));
  if (f == ExpertFormat::kW8a8) {
    p.d_q = cuda().alloc(ScalarType::kU8, {std::max(p.T * H, p.R * I)});
    p.d_s = cuda().alloc(ScalarType::kF32, {std::max(p.T, p.R)});
  }
  return p;
}

namespace {

// Expert e0's first byte of a [E, ...] stack on the GPU (empty: nullptr).
template <typename T>
const T* expert_ptr(const Tensor& t, int64_t E, int64_t e0) {
  if (t.empty()) return nullptr;
  return reinterpret_cast<const T*>(t.ptr<uint8_t>() + e0 * (static_cast<int64_t>(t.nbytes()) / E));
}

struct SliceArgs {
  int64_t El;
  const int32_t *offsets, *tiles;
  const uint8_t *gu, *gu_block, *dn, *dn_block;
  const float *gu_rs, *dn_rs;
};
SliceArgs slice_args(const ExpertProblem& p, const ExpertSlice& s) {
  const int64_t e0 = s.first;
  return {s.count,
          p.d_offsets.ptr<int32_t>() + e0,
          p.plan.max_tiles > 0 ? s.d_tiles.ptr<int32_t>() : nullptr,
          expert_ptr<uint8_t>(p.d_gu, p.E, e0),
          expert_ptr<uint8_t>(p.d_gu_block, p.E, e0),
          expert_ptr<uint8_t>(p.d_dn, p.E, e0),
          expert_ptr<uint8_t>(p.d_dn_block, p.E, e0),
          expert_ptr<float>(p.d_gu_rs, p.E, e0),
          expert_ptr<float>(p.d_dn_rs, p.E, e0)};
}

ExpertSlice whole(const ExpertProblem& p) {
  return {0, p.E, p.d_tiles};
}

}  // namespace

ExpertSlice expert_slice(const ExpertProblem& p, int64_t first, int64_t count) {
  if (first < 0 || count < 1 || first + count > p.E)
    throw std::invalid_argument("expert_slice: experts outside the problem's");
  ExpertSlice s{first, count, Tensor{}};
  if (p.plan.max_tiles > 0) {
    s.d_tiles = up(host_i32(p.tiles));
    cuda::launch_moe_tiles_local(s.d_tiles.ptr<int32_t>(), p.plan.max_tiles, static_cast<int>(first),
                                 static_cast<int>(first + count), cuda_stream());
    cuda().synchronize();
  }
  return s;
}

void grouped_gate_up(const ExpertProblem& p, const ExpertSlice& sl, const Tensor& act, cuda::Stream st) {
  const SliceArgs a = slice_args(p, sl);
  const uint16_t* x = p.d_x.ptr<uint16_t>();
  const int32_t* pairs = p.d_pairs.ptr<int32_t>();
  uint16_t* out = act.ptr<uint16_t>();
  switch (p.format) {
    case ExpertFormat::kW8a8:
      cuda::launch_quantize_fp8_rows(x, p.T, p.H, p.d_q.ptr<uint8_t>(), p.d_s.ptr<float>(), st);
      cuda::launch_grouped_gate_up_w8a8(p.plan, p.d_q.ptr<uint8_t>(), p.d_s.ptr<float>(), a.gu, a.gu_rs,
                                        a.offsets, pairs, a.tiles, p.R, a.El, p.K, p.H, p.I, out, st);
      return;
    case ExpertFormat::kNvfp4:
      cuda::launch_grouped_gate_up_fp4(x, a.gu, a.gu_block, a.gu_rs, a.offsets, pairs, p.R, a.El, p.K, p.H,
                                       p.I, out, QuantTile::kAuto, st);
      return;
    case ExpertFormat::kW8a16:
      cuda::launch_grouped_gate_up_fp8(x, a.gu, a.gu_rs, a.offsets, pairs, p.R, a.El, p.K, p.H, p.I, out,
                                       QuantTile::kAuto, st);
      return;
    case ExpertFormat::kBf16:
      cuda::launch_grouped_gate_up(p.plan, x, reinterpret_cast<const uint16_t*>(a.gu), a.offsets, pairs,
                                   a.tiles, p.R, a.El, p.K, p.H, p.I, out, st);
      return;
  }
}

void grouped_down(const ExpertProblem& p, const ExpertSlice& sl, const Tensor& act_in, const Tensor& y,
                  cuda::Stream st) {
  const SliceArgs a = slice_args(p, sl);
  const uint16_t* in = act_in.ptr<uint16_t>();
  const int32_t* pairs = p.d_pairs.ptr<int32_t>();
  const float* top_w = p.d_top_w.ptr<float>();
  uint16_t* out = y.ptr<uint16_t>();
  switch (p.format) {
    case ExpertFormat::kW8a8:
      cuda::launch_quantize_fp8_rows(in, p.R, p.I, p.d_q.ptr<uint8_t>(), p.d_s.ptr<float>(), st);
      cuda::launch_grouped_down_w8a8(p.plan, p.d_q.ptr<uint8_t>(), p.d_s.ptr<float>(), a.dn, a.dn_rs,
                                     a.offsets, pairs, a.tiles, top_w, p.R, a.El, p.H, p.I, out, st);
      return;
    case ExpertFormat::kNvfp4:
      cuda::launch_grouped_down_fp4(in, a.dn, a.dn_block, a.dn_rs, a.offsets, pairs, top_w, p.R, a.El, p.H,
                                    p.I, out, QuantTile::kAuto, false, st);
      return;
    case ExpertFormat::kW8a16:
      cuda::launch_grouped_down_fp8(in, a.dn, a.dn_rs, a.offsets, pairs, top_w, p.R, a.El, p.H, p.I, out,
                                    QuantTile::kAuto, false, st);
      return;
    case ExpertFormat::kBf16:
      cuda::launch_grouped_down(p.plan, in, reinterpret_cast<const uint16_t*>(a.dn), a.offsets, pairs,
                                a.tiles, top_w, p.R, a.El, p.H, p.I, out, st);
      return;
  }
}

void grouped_gate_up(const ExpertProblem& p, const Tensor& act, cuda::Stream st) {
  grouped_gate_up(p, whole(p), act, st);
}

void grouped_down(const ExpertProblem& p, const Tensor& act_in, const Tensor& y, cuda::Stream st) {
  grouped_down(p, whole(p), act_in, y, st);
}

double time_launches(const std::function<void()>& launch) {
  const cuda::Stream st = cuda_stream();
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  constexpr int kReps = 10;
  double best = 1e30;
  for (int burst = 0; burst < 5; ++burst) {
    cudaEventRecord(e0, st);
    for (int i = 0; i < kReps; ++i) launch();
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    best = std::min(best, static_cast<double>(ms) / kReps);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}

}  // namespace dgemma::gpu_test
