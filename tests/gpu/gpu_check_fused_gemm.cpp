// Checks of the fused projections' op forms (model/fused_weights.h) on the GPU: the attention prologue
// reading the fused q | k | v projection output against the prologue on the separate q, k, v tensors
// (bit-identical, fused kernel and composed ops alike) and the CPU; gelu_mul_halves of a [T, 2I]
// tensor against gelu_mul of its two halves (bit-identical) and the CPU; copy_columns against the
// CPU (exact); and one GEMM of a concatenated weight (bf16, FP8, NVFP4) against the GEMMs of its parts
// (the same dot products: bit-identical where the same kernel tiles them alike, else within the
// GEMM tolerance; the count of identical elements is printed).
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpu_check_util.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/fused_weights.h"
#include "util/bf16.h"

namespace dgemma::gpu_test {
namespace {

struct QkvShape {
  int64_t T, Hq, Hkv, D;
  bool k_eq_v;
};

void check_fused_qkv_input(Reporter& r) {
  Data d("fused_qkv_input");
  const Tol rope_tol{4, 0.0, 1e-4, 0.999, 1e-5};
  const RopeParams rope{RopeType::kDefault, 10000.0, 1.0};
  for (const QkvShape& s : {QkvShape{37, 16, 8, 256, false}, QkvShape{29, 16, 2, 512, true}, QkvShape{20, 4, 2, 16, false},
                            QkvShape{7, 3, 1, 20, true} /* D % 16 != 0: the composed ops */}) {
    const std::string name = "fused qkv T=" + std::to_string(s.T) + " Hq=" + std::to_string(s.Hq) +
                             " Hkv=" + std::to_string(s.Hkv) + " D=" + std::to_string(s.D) + (s.k_eq_v ? " K=V" : "");
    const int64_t nq = s.Hq * s.D, nk = s.Hkv * s.D, n = nq + (s.k_eq_v ? 1 : 2) * nk;
    std::vector<int32_t> pos(static_cast<size_t>(s.T));
    for (auto& p : pos) p = static_cast<int32_t>(d.integer(0, 9000));
    const Tensor qkv = d.bf16({s.T, n}, 2.0f);
    const Tensor wq = d.bf16({s.D}, 0.3f, 1.0f), wk = d.bf16({s.D}, 0.3f, 1.0f);
    const Tensor positions = host_i32(pos), inv = host_f32(rope_inv_freq(rope, static_cast<int>(s.D)));
    auto args = [&](Backend& be, bool fused_input) {
      auto put = [&](const Tensor& h) { return &be == &cpu() ? clone(h) : up(h); };
      QkvPrologueArgs a;
      a.q = be.alloc(ScalarType::kBF16, {s.T, s.Hq, s.D});
      a.k = be.alloc(ScalarType::kBF16, {s.T, s.Hkv, s.D});
      a.v = be.alloc(ScalarType::kBF16, {s.T, s.Hkv, s.D});
      if (&be == &cuda())
        for (const Tensor* t : {&a.q, &a.k, &a.v}) poison(*t);
      const Tensor in = put(qkv);
      if (fused_input) {
        a.qkv = in;
      } else {  // the separate-tensor form on the same values
        be.copy_columns(a.q, in, 0);
        be.copy_columns(a.k, in, nq);
        if (!s.k_eq_v) be.copy_columns(a.v, in, nq + nk);
      }
      a.k_eq_v = s.k_eq_v;
      a.q_norm = put(wq);
      a.k_norm = put(wk);
      a.positions = put(positions);
      a.inv_freq = put(inv);
      return a;
    };
    QkvPrologueArgs c = args(cpu(), true), c_sep = args(cpu(), false);
    cpu().qkv_prologue(c);
    cpu().qkv_prologue(c_sep);
    expect_bf16(r, name + " CPU q fused input vs separate", u16(c.q), u16(c_sep.q), exact_tol());
    expect_bf16(r, name + " CPU k fused input vs separate", u16(c.k), u16(c_sep.k), exact_tol());
    expect_bf16(r, name + " CPU v fused input vs separate", u16(c.v), u16(c_sep.v), exact_tol());
    for (const bool kernel : {true, false}) {  // the fused kernel, the op sequence it replaces
      QkvPrologueArgs g = args(cuda(), true), g_sep = args(cuda(), false);
      if (kernel) {
        cuda().qkv_prologue(g);
        cuda().qkv_prologue(g_sep);
      } else {
        cuda().Backend::qkv_prologue(g);
        cuda().Backend::qkv_prologue(g_sep);
      }
      const std::string what = name + (kernel ? " (kernel)" : " (ops)");
      expect_bf16(r, what + " q fused input vs separate", u16(g.q), u16(g_sep.q), exact_tol());
      expect_bf16(r, what + " k fused input vs separate", u16(g.k), u16(g_sep.k), exact_tol());
      expect_bf16(r, what + " v fused input vs separate", u16(g.v), u16(g_sep.v), exact_tol());
      expect_bf16(r, what + " q vs CPU", u16(g.q), u16(c.q), rope_tol);
      expect_bf16(r, what + " k vs CPU", u16(g.k), u16(c.k), rope_tol);
      expect_bf16(r, what + " v vs CPU", u16(g.v), u16(c.v), Tol{1, 0.0, 1e-4, 0.9999, 1e-6});
    }
  }
}

void check_gelu_mul_halves(Reporter& r) {
  Data d("gelu_mul_halves");
  const Tol libm_tol{1, 0.0, 1e-4, 0.9999, 1e-6};
  // T = 1,024 at I = 2,112: the table kernel (layer/gelu_kernel.cuh), with every bf16 gate value among the
  // gates (the table's, and those outside it: zeros, subnormals, huge, infinite, NaN).
  for (int64_t I : {int64_t{2112}, int64_t{64}, int64_t{13} /* I % 8 != 0: the scalar kernel */, int64_t{-2112}}) {
    const int64_t T = I < 0 ? 1024 : 33;
    I = I < 0 ? -I : I;
    const std::string name = "gelu_mul_halves T=" + std::to_string(T) + " I=" + std::to_string(I);
    Tensor gu = d.bf16({T, 2 * I}, 2.0f);
    if (T == 1024)
      for (int64_t e = 0; e < 65536; ++e) gu.ptr<uint16_t>()[(e / I) * 2 * I + e % I] = static_cast<uint16_t>(e);
    Tensor c = host_tensor(ScalarType::kBF16, {T, I});
    cpu().gelu_mul_halves(gu, c, {});
    const Tensor g_gu = up(gu);
    Tensor g = poisoned(ScalarType::kBF16, {T, I});
    cuda().gelu_mul_halves(g_gu, g, {});
    Tensor ga = poisoned(ScalarType::kBF16, {T, I}), gb = poisoned(ScalarType::kBF16, {T, I});
    Tensor g_ops = poisoned(ScalarType::kBF16, {T, I});
    cuda().copy_columns(ga, g_gu, 0);
    cuda().copy_columns(gb, g_gu, I);
    cuda().gelu_mul(ga, gb, g_ops);
    expect_bf16(r, name + " vs gelu_mul of the halves", u16(g), u16(g_ops), exact_tol());
    // (Not with every gate value: the CPU's NaNs keep their payloads, the GPU's are canonical.)
    if (T != 1024) expect_bf16(r, name + " vs CPU", u16(g), u16(c), libm_tol);
    // copy_columns against the CPU's (a plain copy: exact).
    Tensor ca = host_tensor(ScalarType::kBF16, {T, I});
    cpu().copy_columns(ca, gu, I);
    expect_bf16(r, name + " copy_columns vs CPU", u16(gb), u16(ca), exact_tol());
  }
}

// The GEMM of a weight concatenated from parts against the GEMMs of the parts, at the 26B-A4B
// shapes the model fuses (sliding q | k | v 4096 + 2048 + 2048, full q | k 8192 + 512, MLP gate | up
// 2 x 2112) and a small one, T = 256 and 17.
void check_fused_gemm(Reporter& r) {
  Data d("fused_gemm");
  struct Shape {
    int64_t T, K;
    std::vector<int64_t> parts;
  };
  const std::vector<Shape> shapes = {{256, 2816, {4096, 2048, 2048}}, {256, 2816, {8192, 1024}}, {256, 2816, {2112, 2112}},
                                     {17, 2816, {2112, 2112}},         {9, 64, {48, 16, 16}}};
  for (const Shape& s : shapes) {
    std::string name = "fused gemm T=" + std::to_string(s.T) + " K=" + std::to_string(s.K) + " N=";
    std::vector<Weight> host_parts;
    for (int64_t n : s.parts) {
      host_parts.push_back(Weight(d.bf16({n, s.K}, 1.0f / 53.0f)));
      name += std::to_string(n) + (n == s.parts.back() ? "" : "+");
    }
    const std::optional<Weight> joined = concat_rows(host_parts);
    if (!joined) {
      r.fail(name + ": concat_rows refused bf16 parts");
      continue;
    }
    const Weight fused = cuda().upload_weight(*joined);
    const Tensor x = up(d.bf16({s.T, s.K}, 1.0f));
    Tensor out = poisoned(ScalarType::kBF16, {s.T, fused.rows()});
    cuda().matmul(x, fused, out);
    Tensor sep = poisoned(ScalarType::kBF16, {s.T, fused.rows()});
    int64_t first = 0;
    for (const Weight& p : host_parts) {
      Tensor o = poisoned(ScalarType::kBF16, {s.T, p.rows()});
      cuda().matmul(x, cuda().upload_weight(p), o);
      // Into the columns of the fused layout (the host, row by row).
      const std::vector<uint16_t> part = u16(o);
      std::vector<uint16_t> all = u16(sep);
      for (int64_t t = 0; t < s.T; ++t)
        std::copy_n(part.begin() + t * p.rows(), p.rows(), all.begin() + t * fused.rows() + first);
      cuda().from_host(sep, all.data());
      first += p.rows();
    }
    const std::vector<uint16_t> a = u16(out), b = u16(sep);
    int64_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    r.note(name + ": " + std::to_string(same) + " of " + std::to_string(a.size()) + " elements bit-identical to the parts' GEMMs");
    expect_bf16(r, name + " vs the parts' GEMMs", a, b, gemm_tol());
  }
}

// A random quantised [N, K] host weight: FP8 codes of magnitude 2^-2 .. 2^2, or NVFP4 nibbles with
// block scales 0.5 .. 1.9; every row scale `row` (a part's own global scale).
Weight random_quant(Data& d, bool fp8, int64_t N, int64_t K, float row) {
  Weight w;
  w.format = fp8 ? WeightFormat::kFp8Channel : WeightFormat::kNvfp4;
  w.data = host_tensor(fp8 ? ScalarType::kF8E4M3 : ScalarType::kU8, {N, fp8 ? K : K / 2});
  for (int64_t i = 0; i < w.data.numel(); ++i) {
    const uint8_t v = static_cast<uint8_t>(d.integer(0, 255));
    w.data.ptr<uint8_t>()[i] = fp8 ? static_cast<uint8_t>((v & 0x87) | ((5 + (v >> 3) % 5) << 3)) : v;
  }
  w.row_scale = host_tensor(ScalarType::kF32, {N});
  for (int64_t n = 0; n < N; ++n) w.row_scale.ptr<float>()[n] = row;
  if (!fp8) {
    w.block = host_tensor(ScalarType::kF8E4M3, {N, K / kNvfp4Group});
    for (int64_t i = 0; i < w.block.numel(); ++i) w.block.ptr<uint8_t>()[i] = static_cast<uint8_t>(d.integer(0x30, 0x3f));
  }
  return w;
}

// The same for the quantised dense kernels (W8A16 / W4A16): a weight concatenated from parts with
// different row scales against the parts, at the dense MLP's gate | up shape.
void check_fused_quant_gemm(Reporter& r) {
  Data d("fused_quant_gemm");
  // The W8A16 / W4A16 kernel (random_quant's weights prescribe no FP8 activations either way).
  const WithOptions dense(options_with([](CudaOptions& o) { o.dense_quant = DenseQuant::kKernel; }));
  for (bool fp8 : {false, true}) {
    const int64_t T = 256, K = 2816, I = 2112;
    const std::string name = std::string("fused ") + (fp8 ? "fp8" : "nvfp4") + " gemm T=256 N=2112+2112 K=2816";
    const float typical = 1.0f / std::sqrt(static_cast<float>(K));
    const std::vector<Weight> parts = {random_quant(d, fp8, I, K, 0.5f * typical), random_quant(d, fp8, I, K, 0.75f * typical)};
    const std::optional<Weight> joined = concat_rows(parts);
    if (!joined) {
      r.fail(name + ": concat_rows refused the parts");
      continue;
    }
    const Weight fused = cuda().upload_weight(*joined);
    if (!fused.quantized()) {
      r.fail(name + ": upload_weight did not keep the fused weight quantised");
      continue;
    }
    const Tensor x = up(d.bf16({T, K}, 1.0f));
    Tensor out = poisoned(ScalarType::kBF16, {T, 2 * I});
    cuda().matmul(x, fused, out);
    std::vector<uint16_t> sep(static_cast<size_t>(T * 2 * I));
    for (int64_t p = 0; p < 2; ++p) {
      Tensor o = poisoned(ScalarType::kBF16, {T, I});
      cuda().matmul(x, cuda().upload_weight(parts[static_cast<size_t>(p)]), o);
      const std::vector<uint16_t> part = u16(o);
      for (int64_t t = 0; t < T; ++t) std::copy_n(part.begin() + t * I, I, sep.begin() + t * 2 * I + p * I);
    }
    const std::vector<uint16_t> a = u16(out);
    int64_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == sep[i];
    r.note(name + ": " + std::to_string(same) + " of " + std::to_string(a.size()) + " elements bit-identical to the parts' GEMMs");
    expect_bf16(r, name + " vs the parts' GEMMs", a, sep, gemm_tol());
  }
}

}  // namespace

std::vector<Case> fused_gemm_cases() {
  return {
      {"fused_qkv_input", check_fused_qkv_input},
      {"gelu_mul_halves", check_gelu_mul_halves},
      {"fused_gemm", check_fused_gemm},
      {"fused_quant_gemm", check_fused_quant_gemm},
  };
}

void fused_gemm_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                      const std::function<void(const char*, double)>& row) {
  Backend& be = cuda();
  auto bf = [&](std::initializer_list<int64_t> dims, uint64_t seed, float std) {
    Tensor t = be.alloc(ScalarType::kBF16, dims);
    be.fill_normal(t, seed, 0.0f, std);
    return t;
  };
  struct Group {
    const char* name;
    std::vector<int64_t> parts;
  };
  const int64_t H = 2816;
  const Group groups[] = {{"sliding q|k|v 4096+2048+2048", {4096, 2048, 2048}},
                          {"full q|k 8192+1024", {8192, 1024}},
                          {"mlp gate|up 2112+2112", {2112, 2112}}};
  for (int64_t T : {256, 1024, 4096}) {  // batch 1, 4 and 16 of canvas 256
    const Tensor x = bf({T, H}, 70, 1.0f);
    for (const Group& g : groups) {
      int64_t N = 0;
      std::vector<Tensor> w, out;
      for (int64_t n : g.parts) {
        w.push_back(bf({n, H}, 71 + static_cast<uint64_t>(w.size()), 0.02f));
        out.push_back(be.alloc(ScalarType::kBF16, {T, n}));
        N += n;
      }
      const Tensor wf = bf({N, H}, 75, 0.02f), of = be.alloc(ScalarType::kBF16, {T, N});
      const std::string base = "T=" + std::to_string(T) + " " + g.name;
      row((base + ": the parts' GEMMs").c_str(), time_ms([&] {
            for (size_t i = 0; i < w.size(); ++i) be.matmul(x, Weight(w[i]), out[i]);
          }));
      row((base + ": one fused GEMM").c_str(), time_ms([&] { be.matmul(x, Weight(wf), of); }));
    }
    const Tensor gu = bf({T, 2 * 2112}, 76, 1.0f), g = be.alloc(ScalarType::kBF16, {T, 2112});
    const Tensor a = bf({T, 2112}, 77, 1.0f), b = bf({T, 2112}, 78, 1.0f);
    row(("T=" + std::to_string(T) + " gelu_mul [T,2112] of two tensors").c_str(), time_ms([&] { be.gelu_mul(a, b, g); }));
    row(("T=" + std::to_string(T) + " gelu_mul_halves [T,4224]").c_str(),
        time_ms([&] { be.gelu_mul_halves(gu, g, {}); }));
  }
}

}  // namespace dgemma::gpu_test
