// The W4A16 / W8A16 kernel (quant/weight_only_kernel.cuh) at large R, where every tile of the automatic
// choice runs:
//  * the MoE block with NVFP4 / FP8 experts against the CPU MoE at T = 1024 and 4096, E = 8 (top-2:
//    256 / 1024 rows per expert, many M tiles a CTA) and E = 128 (top-8, the 26B shape: ~64 / ~256),
//    the automatic choice and each tile (CudaOptions::quant_experts), also against each other;
//  * the dense quantised matmul at the 26B dense shapes, each tile (CudaOptions::quant_dense);
//  * `--bench quant` rows of the MoE block's two grouped GEMMs (gate|up + down) per format at
//    T = 256 .. 4096 for every tile, with the packed-weight and tensor-core rates.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/quant/weight_only.cuh"
#include "expert_problem.h"
#include "gpu_check_util.h"
#include "util/bf16.h"

namespace dgemma::gpu_test {

void quant_moe_block_bench(const MoeArgs& m, bool fp8, const std::function<void(const char*, double)>& row);

namespace {

// The automatic choice, then every tile.
std::vector<QuantTile> auto_and_tiles() {
  std::vector<QuantTile> t = quant_tiles();
  t.insert(t.begin(), QuantTile::kAuto);
  return t;
}

// Random experts (expert_problem.h random_experts); FP8 ones carry the checkpoint's per-token FP8
// activations (the CUDA kernels run W8A16 and the CPU is told so).
Weight experts(Data& d, bool fp8, int64_t E, int64_t N, int64_t K, int64_t rows_per_scale, float typical) {
  Weight w = random_experts(d, fp8, E, N, K, rows_per_scale, typical);
  if (fp8) w.act = ActQuant::kFp8Token;
  return w;
}

struct LargeShape {
  std::string name;
  int64_t H, I, E;
  int K;
  bool fp8;
  std::vector<int64_t> tokens;  // the T values run (on the same weights)
  int64_t ref_tokens;           // the CPU reference's tokens: the first ones of each run
};

// Each token's MoE output depends on that token alone, so the CPU computes the first ref_tokens tokens
// while the GPU runs all T (the rows per expert of the full T) and every output row is checked written.
void run_large(Reporter& r, const LargeShape& s) {
  Data d("quant large " + s.name);
  const int64_t H = s.H, I = s.I, E = s.E, K = s.K, Tmax = *std::max_element(s.tokens.begin(), s.tokens.end());
  const int64_t Tr = s.ref_tokens;
  const Tensor router_in = d.bf16({Tmax, H}, 3.0f), expert_in = d.bf16({Tmax, H}, 1.0f);
  MoeArgs c;
  c.router_in = router_in.rows(0, Tr);
  c.expert_in = expert_in.rows(0, Tr);
  c.router_scale = d.bf16({H}, 0.2f, 1.0f);
  c.router_proj = d.bf16({E, H}, 1.0f);
  c.per_expert_scale = d.bf16_uniform({E}, 0.5f, 1.5f);
  const float tg = 1.0f / std::sqrt(static_cast<float>(H)), td = 1.0f / std::sqrt(static_cast<float>(I));
  c.gate_up = experts(d, s.fp8, E, 2 * I, H, I, tg);  // gate and up scales differ
  c.down = experts(d, s.fp8, E, H, I, H, td);
  c.top_k = static_cast<int>(K);
  c.eps = 1e-6f;
  c.out = host_tensor(ScalarType::kBF16, {Tr, H});
  c.dbg_probs = host_tensor(ScalarType::kF32, {Tr, E});
  c.dbg_weights = host_tensor(ScalarType::kF32, {Tr, K});
  c.dbg_index = host_tensor(ScalarType::kI32, {Tr, K});
  MoeArgs g = c;
  // FP8: the W8A16 kernels this check is about.
  const WithOptions w8a16(options_with([](CudaOptions& o) { o.fp8_experts = Fp8Experts::kW8A16; }));
  const Tensor g_router_in = up(router_in), g_expert_in = up(expert_in);
  g.router_scale = up(c.router_scale);
  g.router_proj = up(c.router_proj);
  g.per_expert_scale = up(c.per_expert_scale);
  g.gate_up = cuda().upload_weight(c.gate_up);
  g.down = cuda().upload_weight(c.down);
  if (g.gate_up.format != c.gate_up.format || g.down.format != c.down.format) {
    r.fail(s.name + ": the CUDA backend did not keep the experts quantised");
    return;
  }
  c.gate_up.act = c.down.act = ActQuant::kNone;  // W8A16 on CUDA: the reference with bf16 activations
  cpu().moe(c);
  const std::vector<uint16_t> oc = u16(c.out);
  const char* fmt = s.fp8 ? " W8A16" : " W4A16";

  for (const int64_t T : s.tokens) {
    g.router_in = g_router_in.rows(0, T);
    g.expert_in = g_expert_in.rows(0, T);
    g.dbg_probs = host_tensor(ScalarType::kF32, {T, E});
    g.dbg_weights = host_tensor(ScalarType::kF32, {T, K});
    g.dbg_index = host_tensor(ScalarType::kI32, {T, K});
    const std::string at = s.name + " T" + std::to_string(T);
    auto run = [&](QuantTile tile) {
      {
        const WithOptions scope(options_with([&](CudaOptions& o) { o.quant_experts = tile; }));
        g.out = poisoned(ScalarType::kBF16, {T, H});
        cuda().moe(g);
      }
      const std::vector<uint16_t> og = u16(g.out);
      for (size_t i = 0; i < og.size(); ++i)
        if (og[i] == 0xFFFF) {
          r.fail(at + " tile " + quant_tile_word(tile) + ": output element " + std::to_string(i) + " was not written");
          break;
        }
      return og;
    };
    // The reference's tokens with the CPU's routing (router maths is not this kernel's).
    const std::vector<uint16_t> first = run(QuantTile::kAuto);
    const std::vector<char> same = compare_routing(r, at, c, g, 4);
    auto routed = [&](const std::vector<uint16_t>& o) {
      std::vector<uint16_t> v;
      for (int64_t t = 0; t < Tr; ++t)
        if (same[static_cast<size_t>(t)]) v.insert(v.end(), o.begin() + t * H, o.begin() + (t + 1) * H);
      return v;
    };
    const std::vector<uint16_t> sc = routed(oc);
    // Bound: the weights enter the tensor cores as the exact bf16 values of the CPU's dequantised
    // weights (decode exact, quant/layout.h) and the row scale multiplies the fp32 sum once, as on the
    // CPU; the kernel and the CPU only sum in different orders. So the bound of the bf16 grouped
    // kernels (gpu_check_grouped_moe.cpp): fp32 sums that differ in their last bits move a bf16 result
    // by one step in a small fraction of the elements, a few steps after gelu.up and the down
    // projection's further roundings, more near zero after cancellation (the floor).
    const Tol tol{4, 2e-3, 2e-2, 0.8, 1e-5};
    expect_bf16(r, at + " auto" + fmt + " vs CPU reference", routed(first), sc, tol);
    // Each tile; all T tokens against the automatic choice, GPU routing on both sides: every tile sums
    // each element over K in the same order (K tiles of 64, four k16 MMAs each), so bit for bit.
    for (const QuantTile tile : quant_tiles()) {
      const std::vector<uint16_t> og = run(tile);
      const std::string what = at + " tile " + quant_tile_word(tile) + fmt;
      expect_bf16(r, what + " vs CPU reference", routed(og), sc, tol);
      expect_bf16(r, what + " vs auto", og, first, exact_tol());
    }
  }
}

// The dense quantised matmul, the automatic choice and each tile (CudaOptions::quant_dense), against
// the CPU reference with bf16 activations, at the 26B dense shapes with T = 256 and a T that leaves a
// partial M tile. Bound: gemm_tol, as the dense kernel's check (gpu_check_quant.cpp run_dense): exact
// weights, one fp32 sum per output in another order, one bf16 rounding.
void run_dense_tiles(Reporter& r, bool fp8, int64_t T, int64_t N, int64_t K) {
  const std::string what = std::string("dense ") + (fp8 ? "fp8" : "nvfp4") + " T" + std::to_string(T) + " N" +
                           std::to_string(N) + " K" + std::to_string(K);
  Data d(what);
  Weight w = experts(d, fp8, 1, N, K, N, 1.0f / std::sqrt(static_cast<float>(K)));
  w.data = w.data.reshape({N, fp8 ? K : K / 2});
  if (!fp8) w.block = w.block.reshape({N, K / 16});
  w.row_scale = w.row_scale.reshape({N});
  w.act = ActQuant::kNone;  // the CUDA kernels keep activations bf16
  const Tensor x = d.bf16({T, K}, 1.0f);
  Tensor oc = host_tensor(ScalarType::kBF16, {T, N});
  cpu().matmul(x, w, oc);
  Weight wg;
  {
    const WithOptions path(options_with([](CudaOptions& o) { o.dense_quant = DenseQuant::kKernel; }));
    wg = cuda().upload_weight(w);
  }
  if (!wg.quantized()) {
    r.fail(what + ": upload_weight did not keep the weight quantised");
    return;
  }
  const Tensor xg = up(x);
  const std::vector<uint16_t> want = u16(oc);
  for (const QuantTile tile : auto_and_tiles()) {
    Tensor og = poisoned(ScalarType::kBF16, {T, N});
    {
      const WithOptions scope(options_with([&](CudaOptions& o) { o.quant_dense = tile; }));
      cuda().matmul(xg, wg, og);
    }
    expect_bf16(r, what + " tile " + quant_tile_word(tile) + " vs CPU", u16(og), want, gemm_tol());
  }
}

// Random top-k routing of T tokens over E experts, grouped by expert (offsets [E + 1], pairs [T K]).
void random_groups(Data& d, int64_t T, int64_t E, int64_t K, std::vector<int32_t>& offsets, std::vector<int32_t>& pairs) {
  std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(E));
  std::vector<int32_t> p(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) p[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    for (int64_t k = 0; k < K; ++k) {  // a partial Fisher-Yates: K distinct experts
      std::swap(p[static_cast<size_t>(k)], p[static_cast<size_t>(d.integer(k, E - 1))]);
      by_expert[static_cast<size_t>(p[static_cast<size_t>(k)])].push_back(static_cast<int32_t>(t * K + k));
    }
  }
  offsets.assign(static_cast<size_t>(E) + 1, 0);
  pairs.clear();
  for (int64_t e = 0; e < E; ++e) {
    offsets[static_cast<size_t>(e)] = static_cast<int32_t>(pairs.size());
    pairs.insert(pairs.end(), by_expert[static_cast<size_t>(e)].begin(), by_expert[static_cast<size_t>(e)].end());
  }
  offsets[static_cast<size_t>(E)] = static_cast<int32_t>(T * K);
}

}  // namespace

// The MoE block's grouped GEMMs (gate|up, then down) at T = 256 .. 4096 (uniform random top-8 over 128
// experts: ~16 .. ~256 rows per expert) for every tile and the automatic choice: the time of the pair
// (the fastest of 5 bursts of 10 back-to-back), the packed weights (+ block scales) over it, and the
// GEMMs' 6 R H I FLOP over it.
void quant_moe_block_bench(const MoeArgs& m, bool fp8, const std::function<void(const char*, double)>& row) {
  constexpr int64_t H = 2816, I = 704, E = 128, K = 8;
  Data d(std::string("quant moe block bench ") + (fp8 ? "fp8" : "nvfp4"));
  const double w_bytes = static_cast<double>(E) * 3 * I * H * (fp8 ? 1.0 : 0.5 + 1.0 / 16);
  const char* fmt = fp8 ? "FP8  " : "NVFP4";
  for (int64_t T : {int64_t{256}, int64_t{1024}, int64_t{2048}, int64_t{4096}}) {
    const int64_t R = T * K;
    std::vector<int32_t> offsets, pairs;
    random_groups(d, T, E, K, offsets, pairs);
    const Tensor off = up(host_i32(offsets)), prs = up(host_i32(pairs));
    const Tensor x = up(d.bf16({T, H}, 1.0f));
    const Tensor top_w = up(host_f32(std::vector<float>(static_cast<size_t>(R), 0.125f)));
    Tensor act = cuda().alloc(ScalarType::kBF16, {R, I}), y = cuda().alloc(ScalarType::kBF16, {R, H});
    const cuda::Stream stream = cuda::context_of(cuda()).stream;
    const bool after_gate_up = cuda::context_of(cuda()).hopper();  // as moe.cpp launches the pair
    auto launch = [&](QuantTile tile) {
      if (fp8) {
        cuda::launch_grouped_gate_up_fp8(x.ptr<uint16_t>(), m.gate_up.data.ptr<uint8_t>(), m.gate_up.row_scale.ptr<float>(),
                                         off.ptr<int32_t>(), prs.ptr<int32_t>(), R, E, K, H, I, act.ptr<uint16_t>(), tile,
                                         stream);
        cuda::launch_grouped_down_fp8(act.ptr<uint16_t>(), m.down.data.ptr<uint8_t>(), m.down.row_scale.ptr<float>(),
                                      off.ptr<int32_t>(), prs.ptr<int32_t>(), top_w.ptr<float>(), R, E, H, I,
                                      y.ptr<uint16_t>(), tile, after_gate_up, stream);
      } else {
        cuda::launch_grouped_gate_up_fp4(x.ptr<uint16_t>(), m.gate_up.data.ptr<uint8_t>(), m.gate_up.block.ptr<uint8_t>(),
                                         m.gate_up.row_scale.ptr<float>(), off.ptr<int32_t>(), prs.ptr<int32_t>(), R, E, K,
                                         H, I, act.ptr<uint16_t>(), tile, stream);
        cuda::launch_grouped_down_fp4(act.ptr<uint16_t>(), m.down.data.ptr<uint8_t>(), m.down.block.ptr<uint8_t>(),
                                      m.down.row_scale.ptr<float>(), off.ptr<int32_t>(), prs.ptr<int32_t>(),
                                      top_w.ptr<float>(), R, E, H, I, y.ptr<uint16_t>(), tile, after_gate_up, stream);
      }
    };
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (const QuantTile tile : auto_and_tiles()) {
      double per = 1e30;
      for (int i = 0; i < 3; ++i) launch(tile);
      constexpr int kReps = 10;
      for (int burst = 0; burst < 5; ++burst) {
        cudaEventRecord(e0, stream);
        for (int i = 0; i < kReps; ++i) launch(tile);
        cudaEventRecord(e1, stream);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        per = std::min(per, static_cast<double>(ms) / kReps);
      }
      char what[160];
      std::snprintf(what, sizeof what, "%s moe block T=%lld tile %-11s %5.2f TB/s %6.1f TFLOP/s", fmt,
                    static_cast<long long>(T), quant_tile_word(tile), w_bytes / (per * 1e-3) / 1e12,
                    6.0 * static_cast<double>(R) * H * I / (per * 1e-3) / 1e12);
      row(what, per);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
}

std::vector<Case> quant_large_cases() {
  constexpr int64_t H = 2816, I = 704;
  auto c = [](const std::string& id, LargeShape s) { return Case{id, [s](Reporter& r) { run_large(r, s); }}; };
  return {
      c("quant_large_fp4_E8_k2", {"fp4 E8 k2 H2816 I704", H, I, 8, 2, false, {1024, 4096}, 96}),
      c("quant_large_fp8_E8_k2", {"fp8 E8 k2 H2816 I704", H, I, 8, 2, true, {1024, 4096}, 96}),
      c("quant_large_fp4_E128_k8", {"fp4 E128 k8 H2816 I704", H, I, 128, 8, false, {1024, 4096}, 192}),
      c("quant_large_fp8_E128_k8", {"fp8 E128 k8 H2816 I704", H, I, 128, 8, true, {1024, 4096}, 192}),
      {"quant_dense_tiles_fp8", [](Reporter& r) { run_dense_tiles(r, true, 256, 4096, H); run_dense_tiles(r, true, 200, H, 2112); }},
      {"quant_dense_tiles_nvfp4", [](Reporter& r) { run_dense_tiles(r, false, 256, 2112, H); run_dense_tiles(r, false, 70, H, 2112); }},
  };
}

}  // namespace dgemma::gpu_test
