// Quantised weights on the CUDA backend against the CPU reference (backend/quant_reference.h):
//  * the W4A16 grouped expert kernels (quant/weight_only.cu): NVFP4 experts kept packed on the device,
//    random packed values, block scales spanning E4M3's range and gate / up / down global scales that
//    all differ, at small shapes and the 26B shape (E128 k8 H2816 I704), T = 1 .. 2048, skewed routing;
//  * the W8A16 FP8 expert kernels (the same kernel with E4M3 weights), against the CPU reference with
//    bf16 activations; the W8A8 ones (FP8 wgmma, quant/w8a8_experts.cuh) against it with FP8 activations
//    (w8a8_moe_cases, registered last in gpu_checks.cpp);
//  * dense quantised linears: the W8A16 / W4A16 dense kernel and the bf16 dequantisation fallback;
//  * whole forward passes of the quantised fixtures (tests/fixtures/quant/*_pow2: their dequantised
//    weights are exact bf16 values, so the CPU reference and the CUDA path compute the same maths up
//    to summation order): with the dense linears on the W8A16 kernel, FP8-dynamic's activation
//    quantisation off on the CPU; with them on W8A8 (DenseQuant::kW8A8, gpu_check_w8a8.cpp), on for
//    the CPU's dense linears too (the experts run W8A16 on CUDA, so their activations stay bf16).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/quant/weight_only.cuh"
#include "backend/quant_reference.h"
#include "engine/kv_pool.h"
#include "gpu_check_util.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/weights.h"
#include "support/forward.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma::gpu_test {

void quant_moe_block_bench(const MoeArgs& m, bool fp8, const std::function<void(const char*, double)>& row);

namespace {

// A random NVFP4 expert stack [E, N, K]: uniform random nibbles, block scale codes 0x20..0x5f (2^-3 ..
// ~2^4, so products span the bf16 exponent range the kernel must keep exact), per-row scales constant
// over each projection but different between projections (gate rows 0..N/2-1 vs up rows when split).
Weight random_nvfp4(Data& d, int64_t E, int64_t N, int64_t K, int64_t rows_per_scale, float typical) {
  Weight w;
  w.format = WeightFormat::kNvfp4;
  w.data = host_tensor(ScalarType::kU8, {E, N, K / 2});
  w.block = host_tensor(ScalarType::kF8E4M3, {E, N, K / 16});
  w.row_scale = host_tensor(ScalarType::kF32, {E, N});
  for (int64_t i = 0; i < w.data.numel(); ++i) w.data.ptr<uint8_t>()[i] = static_cast<uint8_t>(d.integer(0, 255));
  for (int64_t i = 0; i < w.block.numel(); ++i) w.block.ptr<uint8_t>()[i] = static_cast<uint8_t>(d.integer(0x20, 0x5f));
  // about one block in 64 with a zero scale (its values, random nibbles, are zero)
  for (int64_t i = 0; i < w.block.numel(); ++i)
    if (d.integer(0, 63) == 0) w.block.ptr<uint8_t>()[i] = 0;
  // A typical |e2m1 * block| is ~2 * 2; scale so the dequantised weights have rms ~ typical.
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r0 = 0; r0 < N; r0 += rows_per_scale) {
      const float s = typical / 4.0f * d.uniform(0.5f, 2.0f);
      for (int64_t r = r0; r < std::min(N, r0 + rows_per_scale); ++r) w.row_scale.ptr<float>()[e * N + r] = s;
    }
  return w;
}

// A random FP8 expert stack: E4M3 codes of magnitude 2^-2 .. 2^2 (random sign / mantissa), channel scales.
Weight random_fp8(Data& d, int64_t E, int64_t N, int64_t K, float typical) {
  Weight w;
  w.format = WeightFormat::kFp8Channel;
  w.act = ActQuant::kFp8Token;  // the checkpoint's; the CUDA kernels run W8A16 and the CPU is told so below
  w.data = host_tensor(ScalarType::kF8E4M3, {E, N, K});
  w.row_scale = host_tensor(ScalarType::kF32, {E, N});
  for (int64_t i = 0; i < w.data.numel(); ++i) {
    const uint8_t v = static_cast<uint8_t>(d.integer(0, 255));
    w.data.ptr<uint8_t>()[i] = static_cast<uint8_t>((v & 0x87) | ((5 + d.integer(0, 4)) << 3));
  }
  for (int64_t i = 0; i < E * N; ++i) w.row_scale.ptr<float>()[i] = typical / 1.6f * d.uniform(0.5f, 2.0f);
  return w;
}

struct Shape {
  std::string name;
  int64_t T, H, I, E;
  int K;
  bool skewed = false;
  bool fp8 = false;
  bool every_tile = false;  // also each tile of the W4A16 / W8A16 kernel (CudaOptions::quant_experts)
  bool w8a8 = false;        // FP8 experts on the W8A8 kernels (Fp8Experts::kW8A8: the hopper family)
};

void run_fp4_moe(Reporter& r, const Shape& s) {
  Data d("fp4 moe " + s.name);
  if (s.w8a8 && !sm90_gpu()) {
    r.note(s.name + ": the W8A8 experts are hopper-family kernels, not on this GPU");
    return;
  }
  // FP8: the W8A8 kernels (the hopper family) or the W8A16 ones, for the whole check.
  const WithOptions path(options_with([&](CudaOptions& o) {
    o.fp8_experts = s.w8a8 ? Fp8Experts::kW8A8 : Fp8Experts::kW8A16;
    if (s.w8a8) o.family = KernelFamily::kHopper;
  }));
  const int64_t T = s.T, H = s.H, I = s.I, E = s.E, K = s.K;
  MoeArgs c;
  c.router_in = d.bf16({T, H}, s.skewed ? 1.0f : 3.0f, s.skewed ? 3.0f : 0.0f);
  c.expert_in = d.bf16({T, H}, 1.0f);
  c.router_scale = d.bf16({H}, 0.2f, 1.0f);
  c.router_proj = d.bf16({E, H}, 1.0f);
  if (s.skewed) {  // one expert in every token's top-k (see gpu_check_grouped_moe.cpp)
    const float unit = 1.0f / (0.95f * std::sqrt(static_cast<float>(H)));
    std::fill_n(c.router_proj.ptr<uint16_t>() + (E / 2 + 1) * H, H, f32_to_bf16(8.0f * unit));
  }
  c.per_expert_scale = d.bf16_uniform({E}, 0.5f, 1.5f);
  const float tg = 1.0f / std::sqrt(static_cast<float>(H)), td = 1.0f / std::sqrt(static_cast<float>(I));
  c.gate_up = s.fp8 ? random_fp8(d, E, 2 * I, H, tg) : random_nvfp4(d, E, 2 * I, H, I, tg);  // gate, up scales differ
  c.down = s.fp8 ? random_fp8(d, E, H, I, td) : random_nvfp4(d, E, H, I, H, td);
  c.top_k = static_cast<int>(K);
  c.eps = 1e-6f;
  c.out = host_tensor(ScalarType::kBF16, {T, H});
  c.dbg_probs = host_tensor(ScalarType::kF32, {T, E});
  c.dbg_weights = host_tensor(ScalarType::kF32, {T, K});
  c.dbg_index = host_tensor(ScalarType::kI32, {T, K});
  MoeArgs g = c;
  g.router_in = up(c.router_in);
  g.expert_in = up(c.expert_in);
  g.router_scale = up(c.router_scale);
  g.router_proj = up(c.router_proj);
  g.per_expert_scale = up(c.per_expert_scale);
  g.gate_up = cuda().upload_weight(c.gate_up);
  g.down = cuda().upload_weight(c.down);
  if (g.gate_up.format != c.gate_up.format || g.down.format != c.down.format) {
    r.fail(s.name + ": the CUDA backend did not keep the experts quantised");
    return;
  }
  if (s.w8a8 && (g.gate_up.act != ActQuant::kFp8Token || g.down.act != ActQuant::kFp8Token)) {
    r.fail(s.name + ": the CUDA backend did not keep the experts for W8A8");
    return;
  }
  // W8A16 on CUDA: the reference with bf16 activations; W8A8: with the checkpoint's FP8 activations.
  if (!s.w8a8) c.gate_up.act = c.down.act = ActQuant::kNone;
  g.out = poisoned(ScalarType::kBF16, {T, H});
  g.dbg_probs = host_tensor(ScalarType::kF32, {T, E});
  g.dbg_weights = host_tensor(ScalarType::kF32, {T, K});
  g.dbg_index = host_tensor(ScalarType::kI32, {T, K});
  cpu().moe(c);
  cuda().moe(g);
  const std::vector<char> same = compare_routing(r, s.name, c, g, 4);
  const std::vector<uint16_t> oc = u16(c.out);
  std::vector<uint16_t> sc;
  for (int64_t t = 0; t < T; ++t)
    if (same[static_cast<size_t>(t)]) sc.insert(sc.end(), oc.begin() + t * H, oc.begin() + (t + 1) * H);
  auto check = [&](const std::string& what) {
    std::vector<uint16_t> og = u16(g.out), sg;
    for (int64_t t = 0; t < T; ++t)
      if (same[static_cast<size_t>(t)]) sg.insert(sg.end(), og.begin() + t * H, og.begin() + (t + 1) * H);
    // The bound of the bf16 grouped kernel (gpu_check_grouped_moe.cpp compare_out): the weights enter
    // the MMAs as exact bf16 values and the row scale multiplies the fp32 sum once, as on the CPU, so
    // only the summation order differs.
    // W8A8: both sides quantise the activations identically, but Hopper's FP8 MMA adds with fewer
    // bits than fp32 between promotions (w8a8_gemm_tol, gpu_check_w8a8.cpp), so gate_up's bf16 output
    // rounds the other way in ~10% of the elements, and ~1/32 of those (a bf16 step against an E4M3
    // step, 2^-8 / 2^-3) land on the other side of an E4M3 boundary in the down input: a 2^-4 step of
    // a few of I terms, ~0.6% of the output's rms, NMSE ~4e-5 (seen at the five shapes of
    // fp8_w8a8_moe_*: bit-identical 0.49-0.91, up to 6.5% of the elements outside 4 steps or 4e-3
    // rms, NMSE 1.8e-5-3.7e-5). Bound: NMSE 1e-4, the elements 12%, bit-identical 0.4; W8A16 is off
    // from this reference by ~6e-4 a GEMM, so the NMSE bound still tells the two apart.
    const Tol tol = s.w8a8 ? Tol{4, 4e-3, 0.12, 0.4, 1e-4} : Tol{4, 2e-3, 2e-2, 0.8, 1e-5};
    expect_bf16(r, what + (s.w8a8 ? " W8A8" : s.fp8 ? " W8A16" : " W4A16") + " grouped vs CPU reference", sg, sc, tol);
    for (size_t i = 0; i < og.size(); ++i)
      if (og[i] == 0xFFFF) {
        r.fail(what + ": output element " + std::to_string(i) + " was not written");
        break;
      }
  };
  check(s.name);
  if (!s.every_tile) return;
  if (s.w8a8) {  // both W8A8 kernels at every size: the few-rows mma.sync one and the wgmma tiles
    for (const MoeKernel k : {MoeKernel::kSmallRows, MoeKernel::kWgmma64x128}) {
      {
        const WithOptions scope(options_with([&](CudaOptions& o) {
          o.fp8_experts = Fp8Experts::kW8A8;
          o.family = KernelFamily::kHopper;
          o.moe = k;
        }));
        g.out = poisoned(ScalarType::kBF16, {T, H});
        cuda().moe(g);
      }
      check(s.name + " kernel " + moe_kernel_word(k));
    }
    return;
  }
  for (const QuantTile tile : quant_tiles()) {
    {
      const WithOptions scope(options_with([&](CudaOptions& o) { o.quant_experts = tile; }));
      g.out = poisoned(ScalarType::kBF16, {T, H});
      cuda().moe(g);
    }
    check(s.name + " tile " + quant_tile_word(tile));
  }
}

// Dense quantised linears: the W8A16 / W4A16 dense kernel (DenseQuant::kKernel) against the CPU
// reference with bf16 activations, and the dequantise-to-bf16 path (kBf16) against the CPU's bf16 GEMM
// on bf16(dequantised weights).
void run_dense(Reporter& r, bool fp8, bool kernel, int64_t T, int64_t N, int64_t K) {
  Data d(std::string("dense quant ") + (fp8 ? "fp8" : "nvfp4") + (kernel ? " kernel" : " fallback"));
  const float typical = 1.0f / std::sqrt(static_cast<float>(K));
  Weight w = fp8 ? random_fp8(d, 1, N, K, typical) : random_nvfp4(d, 1, N, K, N, typical);
  w.data = w.data.reshape({N, fp8 ? K : K / 2});
  if (!fp8) w.block = w.block.reshape({N, K / 16});
  w.row_scale = w.row_scale.reshape({N});
  w.act = ActQuant::kNone;  // the CUDA kernels keep activations bf16
  Tensor x = d.bf16({T, K}, 1.0f);
  Tensor oc = host_tensor(ScalarType::kBF16, {T, N});
  if (kernel) {
    cpu().matmul(x, w, oc);
  } else {
    std::vector<float> deq(static_cast<size_t>(N * K));
    quant_ref::dequantize(w, deq.data());
    Tensor wb = host_tensor(ScalarType::kBF16, {N, K});
    for (size_t i = 0; i < deq.size(); ++i) wb.ptr<uint16_t>()[i] = f32_to_bf16(deq[i]);
    cpu().matmul(x, wb, oc);
  }
  Weight wg;
  {
    const WithOptions path(options_with([&](CudaOptions& o) { o.dense_quant = kernel ? DenseQuant::kKernel : DenseQuant::kBf16; }));
    wg = cuda().upload_weight(w);
  }
  if (wg.quantized() != kernel) {
    r.fail("dense quant: upload_weight kept the weight " + std::string(wg.quantized() ? "quantised" : "bf16"));
    return;
  }
  Tensor og = poisoned(ScalarType::kBF16, {T, N});
  cuda().matmul(up(x), wg, og);
  expect_bf16(r, std::string("dense ") + (fp8 ? "fp8" : "nvfp4") + (kernel ? " kernel" : " bf16 fallback") + " T" +
                     std::to_string(T) + " N" + std::to_string(N) + " K" + std::to_string(K) + " vs CPU",
              u16(og), u16(oc), gemm_tol());
}

// The decoders' subnormal codes: every FP8 weight an E4M3 subnormal (m * 2^-9, random sign), or every
// NVFP4 block scale one (codes 1 .. 7). The kernels build their bf16 values through a bf16 subnormal
// pattern times 2^120 (quant/layout.h); flushing it would zero these outputs, off by 100 %.
void run_dense_subnormal(Reporter& r, bool fp8) {
  Data d(std::string("dense quant subnormal ") + (fp8 ? "fp8" : "nvfp4"));
  const int64_t T = 40, N = 64, K = 256;
  Weight w = fp8 ? random_fp8(d, 1, N, K, 1.0f) : random_nvfp4(d, 1, N, K, N, 1.0f);
  w.data = w.data.reshape({N, fp8 ? K : K / 2});
  w.row_scale = w.row_scale.reshape({N});
  if (fp8) {
    for (int64_t i = 0; i < w.data.numel(); ++i)
      w.data.ptr<uint8_t>()[i] = static_cast<uint8_t>((d.integer(0, 1) << 7) | d.integer(1, 7));
  } else {
    w.block = w.block.reshape({N, K / 16});
    for (int64_t i = 0; i < w.block.numel(); ++i) w.block.ptr<uint8_t>()[i] = static_cast<uint8_t>(d.integer(1, 7));
  }
  for (int64_t n = 0; n < N; ++n) w.row_scale.ptr<float>()[n] = 64.0f;  // outputs of order 1
  w.act = ActQuant::kNone;
  const Tensor x = d.bf16({T, K}, 1.0f);
  Tensor oc = host_tensor(ScalarType::kBF16, {T, N});
  cpu().matmul(x, w, oc);
  Weight wg;
  {
    const WithOptions path(options_with([](CudaOptions& o) { o.dense_quant = DenseQuant::kKernel; }));
    wg = cuda().upload_weight(w);
  }
  Tensor og = poisoned(ScalarType::kBF16, {T, N});
  cuda().matmul(up(x), wg, og);
  expect_bf16(r, std::string("dense ") + (fp8 ? "fp8 subnormal weights" : "nvfp4 subnormal block scales") + " vs CPU",
              u16(og), u16(oc), gemm_tol());
}

// Which linears of the CPU reference keep FP8-dynamic's per-token activation quantisation: those the
// CUDA path quantises too (none for W8A16; the dense linears for W8A8, whose experts run W8A16).
enum class CpuActs { kAll, kNone, kDenseOnly };

std::vector<uint16_t> forward_logits(Backend& be, const std::string& dir, CpuActs acts) {
  const ModelConfig c = load_model_config(dir);
  ModelWeights w = load_weights(c, dir, be);
  for (auto& L : w.layers) {
    if (acts == CpuActs::kNone)
      for (Weight* p : {&L.qkv_proj, &L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.mlp_gate_up, &L.mlp_gate, &L.mlp_up,
                        &L.mlp_down})
        p->act = ActQuant::kNone;
    if (acts != CpuActs::kAll)
      for (Weight* p : {&L.experts_gate_up, &L.experts_down}) p->act = ActQuant::kNone;
  }
  DiffusionGemma m(c, std::move(w), be);
  // A paged pool of canvas-sized pages in order, enough for the prompt.
  const int64_t V = c.text.vocab_size, C = c.canvas_length;
  const int64_t pages = (20 + C - 1) / C + 1;
  KvPoolPlan plan;
  plan.pages = {pages, pages};
  const KvStorage kv = allocate_kv_storage(c, be, plan);
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int64_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>(i);
  ItemKv item;
  item.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
  std::vector<int32_t> prompt, canvas;
  for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 5) % V));
  for (int64_t i = 0; i < C; ++i) canvas.push_back(static_cast<int32_t>((i * 7 + 3) % V));
  std::vector<ForwardItem> items{{ForwardItem::Kind::kEncode, prompt, item, {}, {}, {}}};
  forward_items(be, m, items, kv);
  Tensor logits = be.alloc(ScalarType::kBF16, {C, V});
  item.cached = static_cast<int64_t>(prompt.size());
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, item, {}, logits, {}};
  forward_items(be, m, items, kv);
  return u16(logits);
}

// Forward of a quantised fixture: CPU reference vs CUDA, with the dense linears on `path` (W8A8:
// FP8-dynamic's dense linears quantise their activations on both backends). Bound: the golden
// forward's (NMSE 2.5e-4 of the logits' scale, gpu_check_model.cpp), a few compounded bf16 roundings.
// With activation quantisation on both sides no free-running forward meets bf16 bounds against
// another implementation (docs/QUANTIZATION.md): a GEMM's 1-ulp summation-order difference puts an
// activation on the other side of an E4M3 rounding boundary (a 2^-4 step) and later layers compound
// it; two CPU variants differing only in x / s against x * (1 / s) differ by logits NMSE 1.9e-3. So
// W8A8 gets 1e-2 here (the golden test's free-running FP8-dynamic bound is 2e-2); the op-level
// check (gpu_check_w8a8.cpp w8a8_dense) is where W8A8 meets the GEMM bound. all_w8a8: the experts on
// the W8A8 kernels too (Fp8Experts::kW8A8, the hopper family), the whole model as the checkpoint
// prescribes on both sides.
void run_fixture(Reporter& r, const std::string& fixture, DenseQuant path = DenseQuant::kKernel, bool all_w8a8 = false) {
  const std::string dir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/quant/" + fixture + "/model";
  const bool w8a8 = path == DenseQuant::kW8A8;
  DG_CHECK(w8a8 || !all_w8a8);
  if (all_w8a8 && !sm90_gpu()) {
    r.note(fixture + ": the W8A8 experts are hopper-family kernels, not on this GPU");
    return;
  }
  const std::vector<uint16_t> c =
      forward_logits(cpu(), dir, all_w8a8 ? CpuActs::kAll : w8a8 ? CpuActs::kDenseOnly : CpuActs::kNone);
  std::vector<uint16_t> g;
  {
    const WithOptions scope(options_with([&](CudaOptions& o) {
      o.dense_quant = path;
      o.fp8_experts = all_w8a8 ? Fp8Experts::kW8A8 : Fp8Experts::kW8A16;
      if (all_w8a8) o.family = KernelFamily::kHopper;
    }));
    g = forward_logits(cuda(), dir, CpuActs::kAll);
  }
  const std::string what = fixture + (all_w8a8 ? " (W8A8 dense and experts)" : w8a8 ? " (dense W8A8)" : "");
  double ss_w = 0, ss_d = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double a = bf16_to_f32(g[i]), b = bf16_to_f32(c[i]);
    if (!std::isfinite(a)) {
      r.fail(what + ": CUDA logit " + std::to_string(i) + " is not finite");
      return;
    }
    ss_d += (a - b) * (a - b);
    ss_w += b * b;
  }
  const double nmse = ss_d / ss_w;
  r.note(what + " cuda vs cpu logits nmse " + fmt_double(nmse));
  const double bound = w8a8 ? 1e-2 : 2.5e-4;
  if (!(nmse <= bound)) r.fail(what + ": logits NMSE " + fmt_double(nmse) + " > " + fmt_double(bound));
}

Case moe_case(const std::string& id, Shape s) {
  return {id, [s](Reporter& r) { run_fp4_moe(r, s); }};
}

Weight bench_weight(Data& d, bool fp8, int64_t E, int64_t N, int64_t K) {
  Weight w;
  w.format = fp8 ? WeightFormat::kFp8Channel : WeightFormat::kNvfp4;
  auto dims = [&](ScalarType type, int64_t last) {
    return E > 0 ? host_tensor(type, {E, N, last}) : host_tensor(type, {N, last});
  };
  w.data = dims(fp8 ? ScalarType::kF8E4M3 : ScalarType::kU8, fp8 ? K : K / 2);
  if (fp8) {
    fill_bytes(d, w.data, [](uint8_t v) { return static_cast<uint8_t>((v & 0x87) | ((5 + ((v >> 3) & 3)) << 3)); });
  } else {
    fill_bytes(d, w.data, [](uint8_t v) { return v; });
    w.block = dims(ScalarType::kF8E4M3, K / 16);
    fill_bytes(d, w.block, [](uint8_t v) { return static_cast<uint8_t>(0x20 + (v & 0x3f)); });
  }
  const int64_t rows = std::max<int64_t>(E, 1) * N;
  w.row_scale = E > 0 ? host_tensor(ScalarType::kF32, {E, N}) : host_tensor(ScalarType::kF32, {N});
  for (int64_t i = 0; i < rows; ++i) w.row_scale.ptr<float>()[i] = 0.01f;
  return w;
}

}  // namespace

void quant_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                 const std::function<void(const char*, double)>& row) {
  constexpr int64_t C = 256, H = 2816, I = 704, E = 128, K = 8, Hq = 16, D = 256, Im = 2112;
  Backend& be = cuda();
  Data d("quant bench");
  for (bool fp8 : {false, true}) {
    MoeArgs m;
    m.router_in = up(d.bf16({4 * C, H}, 1.0f));
    m.expert_in = up(d.bf16({4 * C, H}, 1.0f));
    m.router_scale = up(d.bf16({H}, 0.1f, 1.0f));
    m.router_proj = up(d.bf16({E, H}, 1.0f));
    m.per_expert_scale = up(d.bf16({E}, 0.1f, 1.0f));
    {  // FP8: the W8A16 kernels (--bench w8a8 has W8A8)
      const WithOptions w8a16(options_with([](CudaOptions& o) { o.fp8_experts = Fp8Experts::kW8A16; }));
      m.gate_up = cuda().upload_weight(bench_weight(d, fp8, E, 2 * I, H));
      m.down = cuda().upload_weight(bench_weight(d, fp8, E, H, I));
    }
    m.top_k = static_cast<int>(K);
    m.eps = 1e-6f;
    for (int64_t T : {C, 4 * C}) {
      MoeArgs mt = m;
      mt.router_in = m.router_in.rows(0, T);
      mt.expert_in = m.expert_in.rows(0, T);
      mt.out = be.alloc(ScalarType::kBF16, {T, H});
      const std::string what = std::string("moe T=") + std::to_string(T) + " E=128 k=8 " + (fp8 ? "FP8 W8A16" : "NVFP4 W4A16");
      row(what.c_str(), time_ms([&] { be.moe(mt); }));
    }
    quant_moe_block_bench(m, fp8, row);  // gpu_check_quant_large.cpp
  }
  // Dense linears at T = 256: q_proj (FP8 checkpoint) and the MLP's gate (FP8 and CT NVFP4), quantised
  // kernel against the bf16 fallback (the same weights dequantised, cuBLAS).
  struct Dense {
    const char* name;
    bool fp8;
    int64_t N, Kd;
  };
  for (const Dense& c : {Dense{"q_proj [4096,2816]", true, Hq * D, H}, Dense{"mlp gate [2112,2816]", true, Im, H},
                         Dense{"mlp gate [2112,2816]", false, Im, H}, Dense{"mlp down [2816,2112]", false, H, Im}}) {
    const Weight host = bench_weight(d, c.fp8, 0, c.N, c.Kd);
    const Tensor x = up(d.bf16({C, c.Kd}, 1.0f));
    Tensor out = be.alloc(ScalarType::kBF16, {C, c.N});
    for (bool kernel : {true, false}) {
      Weight w;
      {
        const WithOptions path(options_with([&](CudaOptions& o) { o.dense_quant = kernel ? DenseQuant::kKernel : DenseQuant::kBf16; }));
        w = cuda().upload_weight(host);
      }
      const std::string what = std::string("matmul T=256 ") + c.name + (c.fp8 ? " FP8" : " NVFP4") +
                               (kernel ? " kernel" : " bf16 cuBLAS");
      row(what.c_str(), time_ms([&] { be.matmul(x, w, out); }));
      if (!kernel) continue;
      for (const QuantTile tile : quant_tiles()) {  // the dense kernel's tiles
        const WithOptions scope(options_with([&](CudaOptions& o) { o.quant_dense = tile; }));
        Backend& b = cuda();
        row((std::string("  tile ") + quant_tile_word(tile)).c_str(), time_ms([&] { b.matmul(x, w, out); }));
      }
    }
  }
}

// The W8A8 expert kernels (FP8 wgmma): the fp8_moe shapes, the CPU with FP8 activations. Listed last
// of all checks (gpu_checks.cpp), as the newest kernels: a fault there cannot take the other checks
// of the process down with it.
std::vector<Case> w8a8_moe_cases() {
  constexpr int64_t H = 2816, I = 704;
  return {
      moe_case("fp8_w8a8_moe_E8_k2", {"fp8 w8a8 moe E8 k2 H64 I64", 37, 64, 64, 8, 2, false, true, true, true}),
      moe_case("fp8_w8a8_moe_probe_H2816_I704", {"fp8 w8a8 moe E4 k2 H2816 I704", 24, H, I, 4, 2, false, true, true, true}),
      moe_case("fp8_w8a8_moe_E128_k8_T1", {"fp8 w8a8 moe E128 k8 T1", 1, H, I, 128, 8, false, true, false, true}),
      moe_case("fp8_w8a8_moe_E128_k8_T256", {"fp8 w8a8 moe E128 k8 T256", 256, H, I, 128, 8, false, true, true, true}),
      moe_case("fp8_w8a8_moe_E128_k8_T2048", {"fp8 w8a8 moe E128 k8 T2048", 2048, H, I, 128, 8, false, true, false, true}),
      // The FP8-dynamic fixtures' forwards with the dense linears on W8A8, then the experts too.
      {"quant_forward_fp8_dynamic_w8a8", [](Reporter& r) {
         run_fixture(r, "tiny_a_fp8_dynamic_pow2", DenseQuant::kW8A8);
         run_fixture(r, "tiny_a_fp8_dynamic_pow2", DenseQuant::kW8A8, true);
       }},
      {"quant_forward_realistic_scales_w8a8", [](Reporter& r) {
         run_fixture(r, "tiny_a_fp8_dynamic", DenseQuant::kW8A8);
         run_fixture(r, "tiny_a_fp8_dynamic", DenseQuant::kW8A8, true);
       }},
  };
}

std::vector<Case> quant_cases() {
  constexpr int64_t H = 2816, I = 704;
  return {
      moe_case("fp4_moe_E8_k2", {"fp4 moe E8 k2 H64 I64", 37, 64, 64, 8, 2, false, false, true}),
      moe_case("fp4_moe_E8_k2_H128_I192", {"fp4 moe E8 k2 H128 I192", 100, 128, 192, 8, 2}),
      moe_case("fp4_moe_E128_k8_T1", {"fp4 moe E128 k8 T1", 1, H, I, 128, 8}),
      moe_case("fp4_moe_E128_k8_T256", {"fp4 moe E128 k8 T256", 256, H, I, 128, 8, false, false, true}),
      moe_case("fp4_moe_E128_k8_T1024", {"fp4 moe E128 k8 T1024", 1024, H, I, 128, 8}),
      moe_case("fp4_moe_E128_k8_T2048", {"fp4 moe E128 k8 T2048", 2048, H, I, 128, 8}),
      moe_case("fp4_moe_E128_k8_skewed", {"fp4 moe E128 k8 T256 skewed", 256, H, I, 128, 8, true, false, true}),
      // The 26B rows and K at 4 experts (cheap), every tile.
      moe_case("fp8_moe_probe_H2816_I704", {"fp8 moe E4 k2 H2816 I704", 24, H, I, 4, 2, false, true, true}),
      moe_case("fp4_moe_probe_H2816_I704", {"fp4 moe E4 k2 H2816 I704", 24, H, I, 4, 2, false, false, true}),
      moe_case("fp8_moe_E8_k2", {"fp8 moe E8 k2 H64 I64", 37, 64, 64, 8, 2, false, true, true}),
      moe_case("fp8_moe_E128_k8_T1", {"fp8 moe E128 k8 T1", 1, H, I, 128, 8, false, true}),
      moe_case("fp8_moe_E128_k8_T256", {"fp8 moe E128 k8 T256", 256, H, I, 128, 8, false, true, true}),
      moe_case("fp8_moe_E128_k8_T2048", {"fp8 moe E128 k8 T2048", 2048, H, I, 128, 8, false, true}),
      {"dense_fp8_kernel", [](Reporter& r) { run_dense(r, true, true, 256, 4096, 2816); run_dense(r, true, true, 37, 2816, 2112); }},
      {"dense_nvfp4_kernel", [](Reporter& r) { run_dense(r, false, true, 256, 2112, 2816); run_dense(r, false, true, 1, 2816, 2112); }},
      {"dense_fp8_fallback", [](Reporter& r) { run_dense(r, true, false, 64, 512, 2816); }},
      {"dense_fp8_subnormal", [](Reporter& r) { run_dense_subnormal(r, true); }},
      {"dense_nvfp4_subnormal", [](Reporter& r) { run_dense_subnormal(r, false); }},
      {"quant_forward_nvfp4_modelopt", [](Reporter& r) { run_fixture(r, "tiny_a_nvfp4_modelopt_pow2"); }},
      {"quant_forward_nvfp4_ct", [](Reporter& r) { run_fixture(r, "tiny_a_nvfp4_ct_pow2"); }},
      {"quant_forward_fp8_dynamic", [](Reporter& r) {
         run_fixture(r, "tiny_a_fp8_dynamic_pow2");
       }},
      // The exporters' own (non-power-of-two) scales: the same maths on both backends (exact dequantised
      // weights; CUDA applies the row scale after the fp32 sum as the CPU does), so the same bound.
      {"quant_forward_realistic_scales", [](Reporter& r) {
         for (const char* f : {"tiny_a_nvfp4_modelopt", "tiny_a_nvfp4_ct", "tiny_a_fp8_dynamic"}) run_fixture(r, f);
       }},
  };
}

}  // namespace dgemma::gpu_test
