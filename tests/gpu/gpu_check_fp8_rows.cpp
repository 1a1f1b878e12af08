// The FP8 rows (backend.h Fp8Rows) that the CUDA backend's residual junctions and the dense MLP's
// activation write beside their bf16 outputs for the W8A8 linears reading them (layer/residual_kernel.cuh,
// layer/gelu_kernel.cuh), on the device:
//  * attn_residual (out_a_fp8 and out_b_fp8, together and alone), ffn_residual (next_out_fp8) and
//    gelu_mul_halves (out_fp8) at the 26B-A4B widths (H = 2816, I = 2112), a width of two words a thread,
//    and T = 1 .. 4096 (the gelu table form from ~1,000 rows): every bf16 output bit-identical to the same
//    op without FP8 rows, the codes and scales bit-identical to launch_quantize_fp8_rows of those outputs;
//  * matmul_fp8 and the MoE's expert_in_fp8 from given rows: bit-identical to matmul / moe quantising
//    their input themselves (the same kernels on the same codes).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/core/context.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/quant/fp8_gemm.h"
#include "gpu_check_util.h"
#include "util/bf16.h"

namespace dgemma::gpu_test {
namespace {

Fp8Rows device_rows(int64_t T, int64_t K) {
  Fp8Rows r{cuda().alloc(ScalarType::kU8, {T, K}), poisoned(ScalarType::kF32, {T})};
  poison(r.codes);
  return r;
}

std::vector<uint8_t> bytes(const Tensor& t) {
  std::vector<uint8_t> b(t.nbytes());
  cuda().to_host(t, b.data());
  return b;
}

// rows (written by the op under test) against launch_quantize_fp8_rows of its bf16 output x [T, K].
void expect_rows_of(Reporter& r, const std::string& what, const Tensor& x, const Fp8Rows& rows) {
  const int64_t T = rows.scales.numel(), K = rows.codes.numel() / std::max<int64_t>(T, 1);
  const Fp8Rows want = device_rows(T, K);
  cuda::launch_quantize_fp8_rows(x.ptr<uint16_t>(), T, K, want.codes.ptr<uint8_t>(), want.scales.ptr<float>(),
                                 cuda::context_of(cuda()).stream);
  const std::vector<uint8_t> gq = bytes(rows.codes), wq = bytes(want.codes);
  const std::vector<uint8_t> gs = bytes(rows.scales), ws = bytes(want.scales);
  int64_t bad_q = 0, bad_s = 0, first = -1;
  for (size_t i = 0; i < gq.size(); ++i)
    if (gq[i] != wq[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad_q;
    }
  for (size_t i = 0; i < gs.size(); i += 4) bad_s += std::memcmp(&gs[i], &ws[i], 4) != 0;
  r.note(what + ": " + std::to_string(bad_s) + " scales and " + std::to_string(bad_q) +
         " codes differ from launch_quantize_fp8_rows of the output");
  if (bad_q != 0 || bad_s != 0)
    r.fail(what + ": FP8 rows not bit-identical to launch_quantize_fp8_rows" +
           (first >= 0 ? " (first code at " + std::to_string(first) + ")" : std::string()));
}

// Rows of x [T, H] shaped for the quantisation: row 0 all zero (the floor scale), row 1 with one
// outlier (subnormal codes), row 2 large.
void shape_rows(Tensor& x, int64_t T, int64_t H) {
  uint16_t* p = x.ptr<uint16_t>();
  if (T > 2) {
    std::fill_n(p, H, uint16_t{0});
    p[H + 7] = f32_to_bf16(500.0f);
    for (int64_t k = 0; k < H; ++k) p[2 * H + k] = f32_to_bf16(bf16_to_f32(p[2 * H + k]) * 1000.0f);
  }
}

void check_attn_residual(Reporter& r, int64_t T, int64_t H) {
  const std::string name = "attn_residual T=" + std::to_string(T) + " H=" + std::to_string(H);
  Data d(name);
  Tensor x = d.bf16({T, H}, 3.0f), o = d.bf16({T, H}, 0.5f);
  shape_rows(x, T, H);
  shape_rows(o, T, H);
  AttnResidualArgs a;
  a.x = up(x);
  a.o = up(o);
  a.post_norm = up(d.bf16({H}, 0.3f, 1.0f));
  a.norm_a = up(d.bf16({H}, 0.3f, 1.0f));
  a.norm_b = up(d.bf16({H}, 0.3f, 1.0f));
  a.router_scale = up(d.bf16({H}, 0.2f, 1.0f));
  a.router_root = 1.0f / std::sqrt(static_cast<float>(H));
  a.eps = 1e-6f;
  auto outputs = [&](AttnResidualArgs& g) {
    g.h1 = poisoned(ScalarType::kBF16, {T, H});
    g.out_a = poisoned(ScalarType::kBF16, {T, H});
    g.out_b = poisoned(ScalarType::kBF16, {T, H});
    g.router_out = poisoned(ScalarType::kBF16, {T, H});
  };
  AttnResidualArgs plain = a;
  outputs(plain);
  cuda().attn_residual(plain);
  for (int mode = 0; mode < 3; ++mode) {  // both, out_a alone, out_b alone
    const std::string what = name + (mode == 0 ? " (both)" : mode == 1 ? " (out_a)" : " (out_b)");
    AttnResidualArgs g = a;
    outputs(g);
    if (mode != 2) g.out_a_fp8 = device_rows(T, H);
    if (mode != 1) g.out_b_fp8 = device_rows(T, H);
    cuda().attn_residual(g);
    expect_bf16(r, what + " h1", u16(g.h1), u16(plain.h1), exact_tol());
    expect_bf16(r, what + " out_a", u16(g.out_a), u16(plain.out_a), exact_tol());
    expect_bf16(r, what + " out_b", u16(g.out_b), u16(plain.out_b), exact_tol());
    expect_bf16(r, what + " router_out", u16(g.router_out), u16(plain.router_out), exact_tol());
    if (!g.out_a_fp8.empty()) expect_rows_of(r, what + " out_a_fp8", g.out_a, g.out_a_fp8);
    if (!g.out_b_fp8.empty()) expect_rows_of(r, what + " out_b_fp8", g.out_b, g.out_b_fp8);
  }
}

void check_ffn_residual(Reporter& r, int64_t T, int64_t H) {
  const std::string name = "ffn_residual T=" + std::to_string(T) + " H=" + std::to_string(H);
  Data d(name);
  Tensor h1 = d.bf16({T, H}, 3.0f), m1 = d.bf16({T, H}, 2.0f), m2 = d.bf16({T, H}, 0.2f);
  shape_rows(h1, T, H);
  FfnResidualArgs a;
  a.h1 = up(h1);
  a.m1 = up(m1);
  a.m2 = up(m2);
  a.norm1 = up(d.bf16({H}, 0.3f, 1.0f));
  a.norm2 = up(d.bf16({H}, 0.3f, 1.0f));
  a.norm_f = up(d.bf16({H}, 0.3f, 1.0f));
  a.next_norm = up(d.bf16({H}, 0.3f, 1.0f));
  a.eps = 1e-6f;
  a.scale = 0.37f;
  FfnResidualArgs plain = a, g = a;
  for (FfnResidualArgs* p : {&plain, &g}) {
    p->out = poisoned(ScalarType::kBF16, {T, H});
    p->next_out = poisoned(ScalarType::kBF16, {T, H});
  }
  g.next_out_fp8 = device_rows(T, H);
  cuda().ffn_residual(plain);
  cuda().ffn_residual(g);
  expect_bf16(r, name + " out", u16(g.out), u16(plain.out), exact_tol());
  expect_bf16(r, name + " next_out", u16(g.next_out), u16(plain.next_out), exact_tol());
  expect_rows_of(r, name + " next_out_fp8", g.next_out, g.next_out_fp8);
}

void check_gelu(Reporter& r, int64_t T, int64_t I) {
  const std::string name = "gelu_mul_halves T=" + std::to_string(T) + " I=" + std::to_string(I);
  Data d(name);
  Tensor gu = d.bf16({T, 2 * I}, 1.5f);
  if (T > 2) {  // an all-zero row, a row of large values
    std::fill_n(gu.ptr<uint16_t>(), 2 * I, uint16_t{0});
    uint16_t* up_half = gu.ptr<uint16_t>() + 2 * (2 * I) + I;
    for (int64_t i = 0; i < I; ++i) up_half[i] = f32_to_bf16(bf16_to_f32(up_half[i]) * 3000.0f);
  }
  const Tensor g_gu = up(gu);
  Tensor plain = poisoned(ScalarType::kBF16, {T, I}), fused = poisoned(ScalarType::kBF16, {T, I});
  const Fp8Rows rows = device_rows(T, I);
  cuda().gelu_mul_halves(g_gu, plain, {});
  cuda().gelu_mul_halves(g_gu, fused, rows);
  expect_bf16(r, name + " out", u16(fused), u16(plain), exact_tol());
  expect_rows_of(r, name + " out_fp8", fused, rows);
}

// A W8A8 weight [E?, N, K] (E4M3 codes of magnitude 2^-2 .. 2^2, channel scales around `typical`).
Weight fp8_weight(Data& d, int64_t E, int64_t N, int64_t K, float typical) {
  Weight w;
  w.format = WeightFormat::kFp8Channel;
  w.act = ActQuant::kFp8Token;
  w.data = E > 0 ? host_tensor(ScalarType::kF8E4M3, {E, N, K}) : host_tensor(ScalarType::kF8E4M3, {N, K});
  w.row_scale = E > 0 ? host_tensor(ScalarType::kF32, {E, N}) : host_tensor(ScalarType::kF32, {N});
  for (int64_t i = 0; i < w.data.numel(); ++i) {
    const uint8_t v = static_cast<uint8_t>(d.integer(0, 255));
    w.data.ptr<uint8_t>()[i] = static_cast<uint8_t>((v & 0x87) | ((5 + d.integer(0, 4)) << 3));
  }
  for (int64_t i = 0; i < w.row_scale.numel(); ++i)
    w.row_scale.ptr<float>()[i] = typical * d.uniform(0.5f, 2.0f);
  return w;
}

void check_matmul(Reporter& r) {
  Data d("fp8 rows matmul");
  const int64_t N = 4224, K = 2816;
  Weight wg;
  {
    const WithOptions path(options_with([](CudaOptions& o) { o.dense_quant = DenseQuant::kW8A8; }));
    wg = cuda().upload_weight(fp8_weight(d, 0, N, K, 1.0f / 64));
  }
  if (!takes_fp8_rows(wg)) {
    r.fail("matmul: upload_weight did not keep the weight for W8A8 (cuBLASLt refused the shape?)");
    return;
  }
  for (const int64_t T : {int64_t{1}, int64_t{256}}) {
    const std::string name = "matmul_fp8 T=" + std::to_string(T) + " [4224,2816]";
    const Tensor x = up(d.bf16({T, K}, 1.0f));
    const Fp8Rows rows = device_rows(T, K);
    cuda().quantize_fp8_rows(x, rows);
    Tensor want = poisoned(ScalarType::kBF16, {T, N}), got = poisoned(ScalarType::kBF16, {T, N});
    cuda().matmul(x, wg, want);
    cuda().matmul_fp8(rows, wg, got);
    expect_bf16(r, name, u16(got), u16(want), exact_tol());
  }
}

void check_moe(Reporter& r) {
  if (!sm90_gpu()) {
    r.note("moe: the W8A8 experts are hopper-family kernels, not on this GPU");
    return;
  }
  const WithOptions path(options_with([](CudaOptions& o) {
    o.fp8_experts = Fp8Experts::kW8A8;
    o.family = KernelFamily::kHopper;
  }));
  Data d("fp8 rows moe");
  const int64_t T = 256, H = 2816, I = 704, E = 16;
  MoeArgs a;
  a.router_in = up(d.bf16({T, H}, 3.0f));
  a.expert_in = up(d.bf16({T, H}, 1.0f));
  a.router_scale = up(d.bf16({H}, 0.2f, 1.0f));
  a.router_proj = up(d.bf16({E, H}, 1.0f));
  a.per_expert_scale = up(d.bf16_uniform({E}, 0.5f, 1.5f));
  a.gate_up = cuda().upload_weight(fp8_weight(d, E, 2 * I, H, 1.0f / 80));
  a.down = cuda().upload_weight(fp8_weight(d, E, H, I, 1.0f / 40));
  a.top_k = 4;
  a.eps = 1e-6f;
  if (!takes_fp8_rows(a.gate_up)) {
    r.fail("moe: the CUDA backend did not keep the experts for W8A8");
    return;
  }
  MoeArgs g = a;
  a.out = poisoned(ScalarType::kBF16, {T, H});
  g.out = poisoned(ScalarType::kBF16, {T, H});
  g.expert_in_fp8 = device_rows(T, H);
  cuda().quantize_fp8_rows(g.expert_in, g.expert_in_fp8);
  cuda().moe(a);
  cuda().moe(g);
  expect_bf16(r, "moe T=256 E=16 k=4 from expert_in_fp8", u16(g.out), u16(a.out), exact_tol());
}

}  // namespace

std::vector<Case> fp8_rows_cases() {
  return {
      {"fp8_rows_residual",
       [](Reporter& r) {
         for (const int64_t T : {int64_t{1}, int64_t{37}, int64_t{256}, int64_t{4096}}) {
           check_attn_residual(r, T, 2816);
           check_ffn_residual(r, T, 2816);
         }
         check_attn_residual(r, 19, 5632);  // two words a thread
         check_ffn_residual(r, 19, 5632);
       }},
      {"fp8_rows_gelu",
       [](Reporter& r) {
         for (const int64_t T : {int64_t{1}, int64_t{37}, int64_t{256}, int64_t{1024}, int64_t{4096}})
           check_gelu(r, T, 2112);
         check_gelu(r, 19, 8000);  // two words a thread
       }},
      {"fp8_rows_consumers",
       [](Reporter& r) {
         check_matmul(r);
         check_moe(r);
       }},
  };
}

}  // namespace dgemma::gpu_test
