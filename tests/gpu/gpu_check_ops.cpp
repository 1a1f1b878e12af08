// Op-level checks: every op of backend.h on the CUDA backend against the CPU backend, on fresh random
// inputs, with poisoned outputs. Tolerances are explained next to each comparison (gpu_check_util.h
// for the shared ones).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <numeric>
#include <random>

#include "gpu_check_util.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "util/bf16.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma::gpu_test {
namespace {

// Bit-identical ops that go through one libm function evaluated differently (double on the GPU,
// glibc's fp32 on the CPU): the two agree on the fp32 value except in rare near-midpoint cases, and
// a bf16 rounding hides most of those. One step, in at most 1e-4 of the elements.
Tol libm_tol() { return Tol{1, 0.0, 1e-4, 0.9999, 1e-6}; }

// ---- memory -----------------------------------------------------------------------------------

void check_memory(Reporter& r) {
  Data d("memory");
  Tensor h = d.bf16({3, 1000, 7}, 1.0f);
  Tensor g = up(h);
  if (g.device != Device::kCuda || g.ndim != 3 || g.dim(0) != 3 || g.dim(1) != 1000 || g.dim(2) != 7)
    r.fail("upload: wrong device or shape " + g.shape_str());
  expect_bf16(r, "upload + to_host", u16(g), u16(h), exact_tol());
  Tensor g2 = poisoned(ScalarType::kBF16, {3, 1000, 7});
  cuda().copy(g2, g);  // device to device
  expect_bf16(r, "copy device->device", u16(g2), u16(h), exact_tol());
  Tensor h2 = host_tensor(ScalarType::kBF16, {3, 1000, 7});
  cuda().copy(h2, g2);  // device to host
  expect_bf16(r, "copy device->host", u16(h2), u16(h), exact_tol());
  Tensor rows = g2.rows(1, 2);  // a view: from_host into rows of a device tensor
  Tensor src = d.bf16({1, 1000, 7}, 1.0f);
  cuda().from_host(rows, src.data);
  std::vector<uint16_t> want = u16(h);
  std::copy_n(src.ptr<uint16_t>(), 7000, want.begin() + 7000);
  expect_bf16(r, "from_host into a row view", u16(g2), want, exact_tol());
  std::vector<int32_t> ids = {5, -7, 1 << 30, 0};
  if (i32(up(host_i32(ids))) != ids) r.fail("i32 upload round trip");
  Tensor empty = cuda().alloc(ScalarType::kF32, {0, 16});
  if (empty.empty() || empty.numel() != 0) r.fail("zero-size alloc must give a non-null, empty tensor");
  cuda().synchronize();
}

// ---- element-wise -----------------------------------------------------------------------------

void check_elementwise(Reporter& r) {
  Data d("elementwise");
  const int64_t n = 100003;  // not a multiple of any block size
  Tensor a = d.bf16({n}, 2.0f), b = d.bf16({n}, 2.0f);
  Tensor ga = up(a), gb = up(b);

  Tensor co = host_tensor(ScalarType::kBF16, {n});
  Tensor go = poisoned(ScalarType::kBF16, {n});
  cpu().add(a, b, co);
  cuda().add(ga, gb, go);
  expect_bf16(r, "add", u16(go), u16(co), exact_tol());

  for (float s : {53.0f, 0.7f, -1.5f}) {
    poison(go);
    cpu().scale(a, s, co);
    cuda().scale(ga, s, go);
    expect_bf16(r, "scale x" + fmt_double(s), u16(go), u16(co), exact_tol());
  }

  // mul: same shape, and a row vector broadcast over rows ([rows, 96] * [96]).
  poison(go);
  cpu().mul(a, b, co);
  cuda().mul(ga, gb, go);
  expect_bf16(r, "mul", u16(go), u16(co), exact_tol());
  Tensor m = d.bf16({37, 96}, 1.0f), w = d.bf16({96}, 0.5f, 1.0f);
  Tensor cm = host_tensor(ScalarType::kBF16, {37, 96});
  Tensor gm = poisoned(ScalarType::kBF16, {37, 96});
  cpu().mul(m, w, cm);
  cuda().mul(up(m), up(w), gm);
  expect_bf16(r, "mul broadcast", u16(gm), u16(cm), exact_tol());

  // gelu_mul, out of place and in place (out aliasing gate): gelu's tanh is the libm function.
  Tensor g = d.bf16({n}, 3.0f);
  poison(go);
  cpu().gelu_mul(g, b, co);
  Tensor gg = up(g);
  cuda().gelu_mul(gg, gb, go);
  expect_bf16(r, "gelu_mul", u16(go), u16(co), libm_tol());
  cuda().gelu_mul(gg, gb, gg);
  expect_bf16(r, "gelu_mul in place", u16(gg), u16(co), libm_tol());

  // The vectorised forms (n a multiple of 8, 16-byte aligned buffers): the same per-element maths.
  {
    const int64_t n8 = 100000;
    Tensor a8 = d.bf16({n8}, 2.0f), b8 = d.bf16({n8}, 2.0f), g8 = d.bf16({n8}, 3.0f);
    Tensor ga8 = up(a8), gb8 = up(b8), gg8 = up(g8);
    Tensor c8 = host_tensor(ScalarType::kBF16, {n8});
    Tensor o8 = poisoned(ScalarType::kBF16, {n8});
    cpu().add(a8, b8, c8);
    cuda().add(ga8, gb8, o8);
    expect_bf16(r, "add (vectorised)", u16(o8), u16(c8), exact_tol());
    poison(o8);
    cpu().scale(a8, 0.7f, c8);
    cuda().scale(ga8, 0.7f, o8);
    expect_bf16(r, "scale (vectorised)", u16(o8), u16(c8), exact_tol());
    poison(o8);
    cpu().mul(a8, b8, c8);
    cuda().mul(ga8, gb8, o8);
    expect_bf16(r, "mul (vectorised)", u16(o8), u16(c8), exact_tol());
    Tensor w8 = d.bf16({800}, 0.5f, 1.0f);
    poison(o8);
    cpu().mul(a8.reshape({125, 800}), w8, c8.reshape({125, 800}));
    cuda().mul(ga8.reshape({125, 800}), up(w8), o8.reshape({125, 800}));
    expect_bf16(r, "mul broadcast (vectorised)", u16(o8), u16(c8), exact_tol());
    poison(o8);
    cpu().gelu_mul(g8, b8, c8);
    cuda().gelu_mul(gg8, gb8, o8);
    expect_bf16(r, "gelu_mul (vectorised)", u16(o8), u16(c8), libm_tol());
  }

  // softcap_logits (f32 out): tanh in double vs glibc tanhf, then x 30: a few fp32 ulps at most.
  Tensor x = d.bf16({n}, 20.0f);
  Tensor cf = host_tensor(ScalarType::kF32, {n});
  Tensor gf = poisoned(ScalarType::kF32, {n});
  cpu().softcap_logits(x, 30.0f, cf);
  cuda().softcap_logits(up(x), 30.0f, gf);
  expect_f32(r, "softcap_logits", f32(gf), f32(cf), 0.0, 4.0 * 1.2e-7);
}

void check_embed(Reporter& r) {
  Data d("embed");
  const int64_t V = 1000, H = 96, T = 77;
  Tensor table = d.bf16({V, H}, 1.0f);
  std::vector<int32_t> ids(T);
  for (auto& id : ids) id = static_cast<int32_t>(d.integer(0, V - 1));
  ids[0] = 0;
  ids[1] = static_cast<int32_t>(V - 1);
  const float scale = round_bf16(std::sqrt(2816.0f));  // 53: the model's embed scale
  Tensor co = host_tensor(ScalarType::kBF16, {T, H});
  Tensor go = poisoned(ScalarType::kBF16, {T, H});
  Tensor gtable = up(table);
  cpu().embed(host_i32(ids), table, scale, co);
  cuda().embed(up(host_i32(ids)), gtable, scale, go);
  expect_bf16(r, "embed", u16(go), u16(co), exact_tol());

  // A token id outside the vocabulary is reported at the next synchronisation, and the backend stays
  // usable afterwards.
  ids[5] = static_cast<int32_t>(V);
  bool threw = false;
  try {
    cuda().embed(up(host_i32(ids)), gtable, scale, go);
    cuda().synchronize();
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::kInvalidArgument;
    r.note(std::string("bad id -> ") + e.what());
  }
  if (!threw) r.fail("embed with an out-of-range id did not raise kInvalidArgument at synchronize()");
  ids[5] = 3;
  poison(go);
  cpu().embed(host_i32(ids), table, scale, co);
  cuda().embed(up(host_i32(ids)), gtable, scale, go);
  expect_bf16(r, "embed after the error", u16(go), u16(co), exact_tol());
}

// ---- the residual junctions: the fused CUDA kernels against the CPU's composed ops ---------------

void check_residual(Reporter& r) {
  Data d("residual");
  // The norms' 1/sqrt (double on the GPU, glibc powf on the CPU) is the only libm difference; every
  // later rounding follows from it (libm_tol).
  for (const int64_t T : {1, 37, 256}) {
    const int64_t H = 2816;
    const std::string sz = std::to_string(T) + "x" + std::to_string(H);
    Tensor x = d.bf16({T, H}, 3.0f), o = d.bf16({T, H}, 0.5f);
    Tensor wp = d.bf16({H}, 0.3f, 1.0f), wa = d.bf16({H}, 0.3f, 1.0f), wb = d.bf16({H}, 0.3f, 1.0f);
    auto host = [&] { return host_tensor(ScalarType::kBF16, {T, H}); };
    auto dev = [&] { return poisoned(ScalarType::kBF16, {T, H}); };
    AttnResidualArgs c{x, o, wp, host(), wa, host(), wb, host(), 1e-6f, host()};
    AttnResidualArgs g{up(x), up(o), up(wp), dev(), up(wa), dev(), up(wb), dev(), 1e-6f, dev()};
    cpu().attn_residual(c);
    cuda().attn_residual(g);
    expect_bf16(r, "attn_residual h1 " + sz, u16(g.h1), u16(c.h1), libm_tol());
    expect_bf16(r, "attn_residual out_a " + sz, u16(g.out_a), u16(c.out_a), libm_tol());
    expect_bf16(r, "attn_residual out_b " + sz, u16(g.out_b), u16(c.out_b), libm_tol());
    expect_bf16(r, "attn_residual o_normed " + sz, u16(g.o_normed), u16(c.o_normed), libm_tol());
    g.o_normed = Tensor{};  // without the optional output
    poison(g.h1);
    cuda().attn_residual(g);
    expect_bf16(r, "attn_residual h1 (no dump) " + sz, u16(g.h1), u16(c.h1), libm_tol());

    Tensor m1 = d.bf16({T, H}, 2.0f), m2 = d.bf16({T, H}, 0.2f);
    Tensor w1 = d.bf16({H}, 0.3f, 1.0f), w2 = d.bf16({H}, 0.3f, 1.0f), wf = d.bf16({H}, 0.3f, 1.0f);
    FfnResidualArgs cf{x, m1, m2, w1, w2, wf, 1e-6f, 0.37f, host(), host(), host(), host()};
    FfnResidualArgs gf{up(x), up(m1), up(m2), up(w1), up(w2), up(wf), 1e-6f, 0.37f, dev(), dev(), dev(), dev()};
    cpu().ffn_residual(cf);
    cuda().ffn_residual(gf);
    expect_bf16(r, "ffn_residual out " + sz, u16(gf.out), u16(cf.out), libm_tol());
    expect_bf16(r, "ffn_residual m1n " + sz, u16(gf.m1n), u16(cf.m1n), libm_tol());
    expect_bf16(r, "ffn_residual m2n " + sz, u16(gf.m2n), u16(cf.m2n), libm_tol());
    expect_bf16(r, "ffn_residual f " + sz, u16(gf.f), u16(cf.f), libm_tol());
    gf.m1n = gf.m2n = gf.f = Tensor{};
    poison(gf.out);
    cuda().ffn_residual(gf);
    expect_bf16(r, "ffn_residual out (no dump) " + sz, u16(gf.out), u16(cf.out), libm_tol());

    // The MoE input as eight slot rows a token (FfnResidualArgs::m2_slots): the junction sums them in the
    // order given, bit for bit the junction on their sum (the combine's output), and against the CPU.
    constexpr int64_t K = 8;
    const Tensor slots = d.bf16({T * K, H}, 0.1f);
    Tensor order = host_tensor(ScalarType::kI32, {T, K});
    std::mt19937 rng(static_cast<uint32_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      int32_t* o = order.ptr<int32_t>() + t * K;
      std::iota(o, o + K, 0);
      std::shuffle(o, o + K, rng);
    }
    Tensor summed = host();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) {
        float acc = 0.f;
        for (int64_t j = 0; j < K; ++j)
          acc = round_bf16(acc + bf16_to_f32(slots.ptr<uint16_t>()[(t * K + order.ptr<int32_t>()[t * K + j]) * H + i]));
        summed.ptr<uint16_t>()[t * H + i] = f32_to_bf16(acc);
      }
    FfnResidualArgs cs{x, m1, summed, w1, w2, wf, 1e-6f, 0.37f, host(), host(), host(), host()};
    cpu().ffn_residual(cs);
    FfnResidualArgs gm{up(x), up(m1), up(summed), up(w1), up(w2), up(wf), 1e-6f, 0.37f, dev(), dev(), dev(), dev()};
    cuda().ffn_residual(gm);
    FfnResidualArgs gs{up(x), up(m1), Tensor{}, up(w1), up(w2), up(wf), 1e-6f, 0.37f, dev(), dev(), dev(), dev()};
    gs.m2_slots = up(slots);
    gs.m2_order = up(order);
    cuda().ffn_residual(gs);
    expect_bf16(r, "ffn_residual out from slots " + sz, u16(gs.out), u16(cs.out), libm_tol());
    expect_bf16(r, "ffn_residual m2n from slots " + sz, u16(gs.m2n), u16(cs.m2n), libm_tol());
    expect_bf16(r, "ffn_residual out from slots vs from their sum " + sz, u16(gs.out), u16(gm.out), exact_tol());
    expect_bf16(r, "ffn_residual m2n from slots vs from their sum " + sz, u16(gs.m2n), u16(gm.m2n), exact_tol());
    expect_bf16(r, "ffn_residual f from slots vs from their sum " + sz, u16(gs.f), u16(gm.f), exact_tol());
  }
}

// ---- rmsnorm, rope ----------------------------------------------------------------------------

void check_rmsnorm(Reporter& r) {
  Data d("rmsnorm");
  struct Shape {
    int64_t rows, n;
    bool weight;
  };
  // 1/sqrt of the fp32 mean square: double on the GPU vs glibc powf on the CPU (libm_tol).
  for (const Shape s : {Shape{5, 20, true}, Shape{3, 1030, false}, Shape{7, 16, true}, Shape{33, 64, false}, Shape{300, 256, true}, Shape{64, 512, true},
                        Shape{19, 2816, true}, Shape{19, 2816, false}}) {
    Tensor x = d.bf16({s.rows, s.n}, 5.0f);
    // A few rows of tiny values, where eps matters.
    for (int64_t i = 0; i < s.n; ++i) x.ptr<uint16_t>()[i] = f32_to_bf16(1e-4f * bf16_to_f32(x.ptr<uint16_t>()[i]));
    Tensor w = d.bf16({s.n}, 0.3f, 1.0f);
    Tensor co = host_tensor(ScalarType::kBF16, {s.rows, s.n});
    Tensor go = poisoned(ScalarType::kBF16, {s.rows, s.n});
    Tensor gw = up(w);
    cpu().rmsnorm(x, s.weight ? &w : nullptr, 1e-6f, co);
    Tensor gx = up(x);
    cuda().rmsnorm(gx, s.weight ? &gw : nullptr, 1e-6f, go);
    const std::string name = "rmsnorm " + std::to_string(s.rows) + "x" + std::to_string(s.n) + (s.weight ? " w" : "");
    expect_bf16(r, name, u16(go), u16(co), libm_tol());
    cuda().rmsnorm(gx, s.weight ? &gw : nullptr, 1e-6f, gx);  // in place
    expect_bf16(r, name + " in place", u16(gx), u16(co), libm_tol());
  }
}

void check_rope(Reporter& r) {
  Data d("rope");
  struct Shape {
    int64_t T, heads, D;
    RopeParams rope;
  };
  // cos/sin in double vs glibc cosf/sinf, rounded to bf16: a cos/sin that rounds differently moves
  // the bf16 products by a step, so up to a few steps after the bf16 add, in rare elements.
  const Tol tol{4, 0.0, 1e-4, 0.999, 1e-5};
  for (const Shape s : {Shape{37, 16, 256, RopeParams{RopeType::kDefault, 10000.0, 1.0}},
                        Shape{29, 16, 512, RopeParams{RopeType::kProportional, 1e6, 0.25}},
                        Shape{20, 4, 16, RopeParams{RopeType::kDefault, 10000.0, 1.0}}}) {
    std::vector<float> inv = rope_inv_freq(s.rope, static_cast<int>(s.D));
    std::vector<int32_t> pos(static_cast<size_t>(s.T));
    for (auto& p : pos) p = static_cast<int32_t>(d.integer(0, 9000));
    pos[0] = 0;
    Tensor x = d.bf16({s.T, s.heads, s.D}, 1.0f);
    Tensor cx = clone(x);
    Tensor gx = up(x);
    cpu().rope(cx, host_i32(pos), host_f32(inv));
    cuda().rope(gx, up(host_i32(pos)), up(host_f32(inv)));
    expect_bf16(r, "rope D=" + std::to_string(s.D), u16(gx), u16(cx), tol);
  }
}

// ---- GEMMs ------------------------------------------------------------------------------------

void check_matmul(Reporter& r) {
  Data d("matmul");
  struct Shape {
    int64_t T, K, N;
  };
  for (const Shape s : {Shape{1, 2816, 4096}, Shape{37, 64, 512}, Shape{3, 100, 33}, Shape{256, 2816, 704},
                        Shape{17, 2112, 2816}}) {
    Tensor x = d.bf16({s.T, s.K}, 1.0f);
    Tensor w = d.bf16({s.N, s.K}, 1.0f / std::sqrt(static_cast<float>(s.K)));
    Tensor co = host_tensor(ScalarType::kBF16, {s.T, s.N});
    Tensor go = poisoned(ScalarType::kBF16, {s.T, s.N});
    cpu().matmul(x, w, co);
    cuda().matmul(up(x), up(w), go);
    expect_bf16(r, "matmul T=" + std::to_string(s.T) + " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N),
                u16(go), u16(co), gemm_tol());
  }
  // matmul_kn: probabilities (positive, rows summing to ~1) times an embedding table, including the
  // self-conditioning shape's huge K (cuBLAS may split K; reductions stay fp32).
  for (const Shape s : {Shape{16, 4096, 320}, Shape{3, 262144, 64}}) {
    Tensor x = d.bf16_uniform({s.T, s.K}, 0.0f, 2.0f / static_cast<float>(s.K));
    Tensor w = d.bf16({s.K, s.N}, 1.0f);
    Tensor co = host_tensor(ScalarType::kBF16, {s.T, s.N});
    Tensor go = poisoned(ScalarType::kBF16, {s.T, s.N});
    cpu().matmul_kn(x, w, co);
    cuda().matmul_kn(up(x), up(w), go);
    expect_bf16(r, "matmul_kn T=" + std::to_string(s.T) + " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N),
                u16(go), u16(co), gemm_tol());
  }
}

// ---- KV cache, fill ---------------------------------------------------------------------------

void check_kv(Reporter& r) {
  Data d("kv");
  const int64_t Hkv = 4, P = 16, D = 32, npages = 6;
  Tensor pages = d.bf16({npages, Hkv, P, D}, 1.0f);
  Tensor gpages = up(pages);
  Tensor table = host_tensor(ScalarType::kI32, {npages});
  for (int64_t i = 0; i < npages; ++i) table.ptr<int32_t>()[i] = static_cast<int32_t>((i * 5 + 2) % npages);
  Tensor gtable = up(table);
  // Writes that start mid-page and cross page boundaries, one after the other (as prefill chunks do).
  for (const auto [first, n] : {std::pair<int64_t, int64_t>{3, 7}, {10, 30}, {40, 1}, {41, 55}}) {
    Tensor src = d.bf16({n, Hkv, D}, 1.0f);
    cpu().kv_write(pages, table, first, src);
    cuda().kv_write(gpages, gtable, first, up(src));
    expect_bf16(r, "kv_write first=" + std::to_string(first) + " n=" + std::to_string(n), u16(gpages), u16(pages),
                exact_tol());
    // And by rule: row j of the source is at position first + j of its page.
    const uint16_t* pc = pages.ptr<uint16_t>();
    const uint16_t* sc = src.ptr<uint16_t>();
    bool ok = true;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t h = 0; h < Hkv; ++h) {
        const int64_t pos = first + j, page = table.ptr<int32_t>()[pos / P];
        ok &= std::memcmp(pc + ((page * Hkv + h) * P + pos % P) * D, sc + (j * Hkv + h) * D, D * 2) == 0;
      }
    if (!ok) r.fail("kv_write: the CPU pool does not hold the rows where the page table says");
  }
}

void check_fill_normal(Reporter& r) {
  const int64_t n = (int64_t{1} << 20) + 3;
  Tensor c = host_tensor(ScalarType::kBF16, {n});
  Tensor g = poisoned(ScalarType::kBF16, {n});
  const uint64_t seed = run_seed() & 0xFFFF;
  cpu().fill_normal(c, seed, 0.01f, 0.02f);
  cuda().fill_normal(g, seed, 0.01f, 0.02f);
  // Box-Muller in double on both sides; CUDA's and glibc's double log/cos differ by an ulp at most,
  // which survives the fp32 and bf16 roundings about never: 1 step in at most 1e-5 of the elements.
  expect_bf16(r, "fill_normal", u16(g), u16(c), Tol{1, 0.0, 1e-5, 1.0 - 1e-5, 1e-7});
}

// ---- attention --------------------------------------------------------------------------------

void run_attention(Reporter& r, const AttnCase& c) {
  Data d("attention " + c.name);
  const AttnInputs in = make_attention_inputs(d, c);
  const AttentionArgs& ca = in.host;
  const AttentionArgs& ga = in.gpu;
  cpu().attention(ca);
  cuda().attention(ga);
  // Scores come from GEMMs (a score rounds to the other bf16 neighbour in ~1e-4 of the cases, which
  // moves that key's probability by ~exp(ulp)), softmax sums run in another order (a probability
  // moves by one bf16 step now and then), and P.V is a GEMM: GEMM bounds per element, with up to
  // 1e-3 of the outputs allowed further off (rows whose dominant score flipped), and the NMSE bound.
  Tol tol = gemm_tol();
  tol.max_bad_fraction = 1e-3;
  tol.min_exact = 0.8;
  expect_bf16(r, "attention " + c.name, u16(ga.out), u16(ca.out), tol);
}

void check_attention_small(Reporter& r) {
  // tiny_a / tiny_b geometries: prefill with a window, denoise over a short cache, K=V-like heads.
  run_attention(r, {"d16 causal w8 prefill", 20, 4, 2, 16, 0, 0, true, 8});
  run_attention(r, {"d32 bidir cache7", 16, 4, 1, 32, 7, 30, false, 0});
  run_attention(r, {"d16 causal w8 cache7", 9, 4, 2, 16, 7, 24, true, 8});
  run_attention(r, {"d16 single query", 1, 2, 1, 16, 5, 8, false, 0});
  run_attention(r, {"d64 scaling", 12, 8, 4, 64, 33, 40, true, 0, 0.125f, 6.0f});
}

void check_attention_d256_long(Reporter& r) {
  run_attention(r, {"d256 bidir cache3000", 64, 16, 8, 256, 3000, 3100, false, 0});
  run_attention(r, {"d256 causal w128 cache300", 200, 16, 8, 256, 300, 600, true, 128});
}

void check_attention_d512_long(Reporter& r) {
  run_attention(r, {"d512 bidir cache3000", 128, 16, 2, 512, 3000, 3000, false, 0});
  run_attention(r, {"d512 causal cache500", 100, 16, 2, 512, 500, 700, true, 0});
}

// Query chunking of the per-item path (used when the score buffer would exceed its budget) on a
// small budget (CudaOptions::attention_score_budget).
void check_attention_chunked(Reporter& r) {
  const int64_t ld = 1056;  // round_up(round_up(1000, 8) + 50, 8)
  const WithOptions small(options_with([&](CudaOptions& o) { o.attention_score_budget = 16 * ld * 2 * 7; }));
  run_attention(r, {"d256 causal w300 chunks of 7", 50, 16, 8, 256, 1000, 1000, true, 300});
  run_attention(r, {"d128 bidir chunks of 7", 50, 16, 8, 128, 1000, 1000, false, 0});
}

// ---- MoE --------------------------------------------------------------------------------------

void run_moe(Reporter& r, const std::string& name, int64_t T, int64_t H, int64_t I, int64_t E, int K) {
  Data d("moe " + name);
  MoeArgs ca;
  ca.router_in = d.bf16({T, H}, 3.0f);
  ca.expert_in = d.bf16({T, H}, 1.0f);
  ca.router_scale = d.bf16({H}, 0.2f, 1.0f);
  ca.router_proj = d.bf16({E, H}, 1.0f);
  ca.per_expert_scale = d.bf16_uniform({E}, 0.5f, 1.5f);
  ca.gate_up = d.bf16({E, 2 * I, H}, 1.0f / std::sqrt(static_cast<float>(H)));
  ca.down = d.bf16({E, H, I}, 1.0f / std::sqrt(static_cast<float>(I)));
  ca.top_k = K;
  ca.eps = 1e-6f;
  ca.out = host_tensor(ScalarType::kBF16, {T, H});
  ca.dbg_probs = host_tensor(ScalarType::kF32, {T, E});
  ca.dbg_weights = host_tensor(ScalarType::kF32, {T, K});
  ca.dbg_index = host_tensor(ScalarType::kI32, {T, K});
  MoeArgs ga = ca;
  ga.router_in = up(ca.router_in);
  ga.expert_in = up(ca.expert_in);
  ga.router_scale = up(ca.router_scale);
  ga.router_proj = up(ca.router_proj);
  ga.per_expert_scale = up(ca.per_expert_scale);
  ga.gate_up = up(ca.gate_up.data);
  ga.down = up(ca.down.data);
  ga.out = poisoned(ScalarType::kBF16, {T, H});
  ga.dbg_probs = host_tensor(ScalarType::kF32, {T, E});
  ga.dbg_weights = host_tensor(ScalarType::kF32, {T, K});
  ga.dbg_index = host_tensor(ScalarType::kI32, {T, K});
  std::fill_n(ga.dbg_index.ptr<int32_t>(), T * K, -1);
  std::fill_n(ga.dbg_probs.ptr<float>(), T * E, NAN);
  std::fill_n(ga.dbg_weights.ptr<float>(), T * K, NAN);
  cpu().moe(ca);
  cuda().moe(ga);

  const std::vector<char> same = compare_routing(r, name, ca, ga);

  // Outputs of the identically routed tokens: two chained GEMMs (gate_up, down) with bf16 roundings
  // between them and a bf16 sum over k experts: a GEMM flip can grow to a few steps after the next
  // rounding, so 4 steps per element (or the near-zero floor), 1e-3 of the elements further off, and
  // NMSE below 1e-4.
  std::vector<uint16_t> oc = u16(ca.out), og = u16(ga.out), sc, sg;
  for (int64_t t = 0; t < T; ++t) {
    if (!same[static_cast<size_t>(t)]) continue;
    sc.insert(sc.end(), oc.begin() + t * H, oc.begin() + (t + 1) * H);
    sg.insert(sg.end(), og.begin() + t * H, og.begin() + (t + 1) * H);
  }
  // The down projection sums 704 terms of both signs: when its output is small, a 1-ulp flip of an
  // input moves it by several of its own ulps (measured at H=2816: 1.0% of elements beyond 4 ulps,
  // NMSE 4e-7). So 2% of elements may exceed the per-element bound; NMSE stays the strict test.
  expect_bf16(r, name + " out (identically routed tokens)", sg, sc, Tol{4, 2e-3, 2e-2, 0.8, 1e-5});
  // Every output element was written (no poison left), whatever the routing.
  for (size_t i = 0; i < og.size(); ++i)
    if (og[i] == 0xFFFF) {
      r.fail(name + ": output element " + std::to_string(i) + " was not written");
      break;
    }
}

void check_moe_small(Reporter& r) { run_moe(r, "moe E8 k2", 37, 64, 32, 8, 2); }
void check_moe_large(Reporter& r) { run_moe(r, "moe E128 k8", 64, 2816, 704, 128, 8); }

// ---- sampler ----------------------------------------------------------------------------------

void run_sampler(Reporter& r, const std::string& name, int64_t C, int64_t V, float temperature, bool want_probs,
                 bool gaps) {
  Data d("sampler " + name);
  // Logits like a confident LM head: broad noise plus a few strong candidates per position; the last
  // row has an exact tie for the maximum (the lower index must win on both backends).
  Tensor logits = d.bf16({C, V}, 2.0f);
  uint16_t* lp = logits.ptr<uint16_t>();
  for (int64_t p = 0; p < C; ++p)
    for (int j = 0; j < 5; ++j) lp[p * V + d.integer(0, V - 1)] = f32_to_bf16(d.uniform(8.0f, 25.0f));
  if (V >= 4) {
    const int64_t a = d.integer(0, V / 2 - 1), b = d.integer(V / 2, V - 1);
    lp[(C - 1) * V + a] = lp[(C - 1) * V + b] = f32_to_bf16(40.0f);
  }
  const uint64_t key = rng::stream_key(run_seed(), 0, 3, rng::kSample);
  SamplerArgs ca;
  ca.logits = clone(logits);
  ca.softcap = 30.0f;
  ca.temperature = temperature;
  ca.sample_key = key;
  ca.want_probs = want_probs;
  ca.entropy = host_tensor(ScalarType::kF32, {C});
  ca.argmax = host_tensor(ScalarType::kI32, {C});
  ca.sample = host_tensor(ScalarType::kI32, {C});
  ca.argmax_logprob = host_tensor(ScalarType::kF32, {C});
  ca.argmax_gap = host_tensor(ScalarType::kF32, {C});
  ca.sample_gap = host_tensor(ScalarType::kF32, {C});
  SamplerArgs ga = ca;
  ga.logits = up(logits);
  ga.entropy = poisoned(ScalarType::kF32, {C});
  ga.argmax = poisoned(ScalarType::kI32, {C});
  ga.sample = poisoned(ScalarType::kI32, {C});
  ga.argmax_logprob = poisoned(ScalarType::kF32, {C});
  if (gaps) {
    ga.argmax_gap = poisoned(ScalarType::kF32, {C});
    ga.sample_gap = poisoned(ScalarType::kF32, {C});
  } else {
    ga.argmax_gap = Tensor{};
    ga.sample_gap = Tensor{};
  }
  cpu().sampler(ca);
  cuda().sampler(ga);

  const auto am_c = i32(ca.argmax), am_g = i32(ga.argmax), sm_c = i32(ca.sample), sm_g = i32(ga.sample);
  const auto agap = f32(ca.argmax_gap), sgap = f32(ca.sample_gap);
  // Decisions: z agrees to a few fp32 ulps (CUDA's tanhf vs glibc's: |z| <= 75, ulp 8e-6) and the
  // Gumbel noise to double rounding, so a decision may differ only where the CPU's margin is below
  // 1e-4; exact ties (margin 0, equal inputs) are broken identically (lowest index).
  int64_t near = 0;
  for (int64_t p = 0; p < C; ++p) {
    if (agap[p] == 0.0f || agap[p] > 1e-4f) {
      if (am_c[p] != am_g[p])
        r.fail(name + ": argmax of row " + std::to_string(p) + " is " + std::to_string(am_g[p]) + ", CPU " +
               std::to_string(am_c[p]) + " (margin " + fmt_double(agap[p]) + ")");
    } else {
      ++near;
    }
    if (sgap[p] > 1e-4f) {
      if (sm_c[p] != sm_g[p])
        r.fail(name + ": sample of row " + std::to_string(p) + " is " + std::to_string(sm_g[p]) + ", CPU " +
               std::to_string(sm_c[p]) + " (margin " + fmt_double(sgap[p]) + ")");
    } else {
      ++near;
    }
  }
  if (V >= 4 && am_g[C - 1] != am_c[C - 1]) r.fail(name + ": exact tie broken differently");
  r.note(name + ": near-tie decisions exempted: " + std::to_string(near));
  // Entropy: double sums on both sides (different order and formula; fp32 exps here, within 2 ulps),
  // rounded to fp32: far below the 1e-4 the engine's acceptance needs; fp32 z differences of a few
  // ulps bound it at ~1e-5.
  expect_f32(r, name + " entropy", f32(ga.entropy), f32(ca.entropy), 1e-5, 1e-5);
  expect_f32(r, name + " argmax_logprob", f32(ga.argmax_logprob), f32(ca.argmax_logprob), 1e-5, 1e-6);
  if (gaps) {
    // Differences of two z values, each within ~2 fp32 ulps (4e-6 at |z| ~ 37).
    expect_f32(r, name + " argmax_gap", f32(ga.argmax_gap), agap, 4e-5, 0.0);
    expect_f32(r, name + " sample_gap", f32(ga.sample_gap), sgap, 4e-5, 0.0);
  }
  if (want_probs) {
    // bf16(exp(bf16(z) - max) / sum): both sides sum the denominator in double (in another order)
    // and round it to fp32, so the sums agree but for rare last-bit cases; the terms are glibc expf
    // on the CPU and CUDA's expf here (within 2 ulps), so a probability lands on the other bf16
    // neighbour in a small fraction of the elements; never further than one step.
    expect_bf16(r, name + " probs", u16(ga.logits), u16(ca.logits), Tol{1, 0.0, 0.0, 0.95, 1e-4});
  } else {
    expect_bf16(r, name + " logits untouched", u16(ga.logits), u16(logits), exact_tol());
  }
}

void check_sampler_vocab(Reporter& r) {
  run_sampler(r, "V262144 C4 T0.8", 4, 262144, 0.8f, true, true);
  run_sampler(r, "V262144 C4 T0.408 no probs", 4, 262144, 0.4f + 0.4f / 48.0f, false, true);
  // Without the gap outputs the GPU screens the Gumbel noise with an fp32 estimate and evaluates the
  // double value only for candidates (the engine's path): every sample must still match.
  run_sampler(r, "V262144 C32 T0.6 screened", 32, 262144, 0.6f, true, false);
}

void check_sampler_small(Reporter& r) {
  run_sampler(r, "V512 C16", 16, 512, 0.8f, true, true);
  run_sampler(r, "V100 C3 no gaps", 3, 100, 1.0f, true, false);
}

}  // namespace

std::vector<Case> op_cases() {
  return {
      {"memory", check_memory},
      {"elementwise", check_elementwise},
      {"embed", check_embed},
      {"rmsnorm", check_rmsnorm},
      {"residual", check_residual},
      {"rope", check_rope},
      {"matmul", check_matmul},
      {"kv_cache", check_kv},
      {"fill_normal", check_fill_normal},
      {"attention_small", check_attention_small},
      {"attention_d256_long", check_attention_d256_long},
      {"attention_d512_long", check_attention_d512_long},
      {"attention_chunked", check_attention_chunked},
      {"moe_E8_k2", check_moe_small},
      {"moe_E128_k8", check_moe_large},
      {"sampler_small", check_sampler_small},
      {"sampler_vocab262144", check_sampler_vocab},
  };
}

}  // namespace dgemma::gpu_test
