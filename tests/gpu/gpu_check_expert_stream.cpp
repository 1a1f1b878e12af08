// The weight-streaming expert kernels (quant/expert_stream.cuh) on the GPU against the CPU reference of the
// MoE block's expert maths (cpu/moe.cpp, expert_stream_problem.h) and against the grouped kernels in
// use today, per format: FP8 W8A8 (activations quantised per row inside the kernel), NVFP4 W4A16 and
// FP8 W8A16; at the E8 shapes (H 64 / I 64, H 128 / I 192) and the 26B-A4B one (E128 top-8, H 2816,
// I 704) at T = 1, 256 and 1,024 and a skewed routing with empty experts. gate_up from x; down from
// the reference activation (each projection checked on its own). Outputs are poisoned, so unwritten
// elements show. Then every rows-a-chunk size and blocks-a-CTA choice, and gate_up -> down chained
// on the GPU with programmatic dependent launch against the same chain without it (bit for bit: PDL
// only moves when a kernel starts, never what it reads).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "expert_stream_problem.h"
#include "gpu_check_util.h"
#include "util/bf16.h"

namespace dgemma::gpu_test {
namespace {

double nmse(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = bf16_to_f32(got[i]), b = bf16_to_f32(want[i]);
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den > 0 ? num / den : num;
}

size_t unwritten(const std::vector<uint16_t>& v) {
  return static_cast<size_t>(std::count(v.begin(), v.end(), 0xFFFF));
}

// Passes notes on and turns failures into notes: statistics printed for the record, not checked.
class NotesOnly final : public Reporter {
 public:
  explicit NotesOnly(Reporter& r) : r_(r) {}
  void fail(const std::string& m) override { r_.note("  (for the record, not a failure) " + m); }
  void note(const std::string& m) override { r_.note(m); }

 private:
  Reporter& r_;
};

// The bounds against the CPU reference.
// NVFP4 / W8A16: the weights enter the MMAs as exact bf16 values and the row scale multiplies the
// fp32 sum once, as on the CPU, so only the summation order differs: the grouped kernels' MoE bound
// (gpu_check_quant.cpp), whose gelu * up and routing-weight roundings these outputs include.
// W8A8: both sides quantise the activations bit-identically, but Hopper's FP8 MMA adds its products
// with fewer bits than fp32 between the promotions every 128 K (the dense W8A8 GEMM measured NMSE
// ~8e-7, bit-identical ~0.9, w8a8_gemm_tol in gpu_check_w8a8.cpp); act combines two such sums through
// gelu(gate) * up, so twice the NMSE and bad fraction and a lower bit-identical share; y is one sum
// times the routing weight. And the same kernel maths as the grouped W8A8 kernel on the same tensor
// cores: not more than 3x its NMSE (floored at 1e-7) from the same reference.
Tol act_tol(ExpertFormat f) {
  return f == ExpertFormat::kW8a8 ? Tol{2, 1e-3, 2e-3, 0.7, 8e-6} : Tol{4, 2e-3, 2e-2, 0.8, 1e-5};
}
Tol y_tol(ExpertFormat f) {
  return f == ExpertFormat::kW8a8 ? Tol{2, 1e-3, 1e-3, 0.8, 4e-6} : Tol{4, 2e-3, 2e-2, 0.8, 1e-5};
}

struct Shape {
  std::string name;
  int64_t T, H, I, E, K;
  double skew = 0.0;
  int64_t empty = 0;
  bool variants = false;  // also every rows-a-chunk / blocks-a-CTA choice and the PDL chain
};

void compare(Reporter& r, const std::string& what, ExpertFormat f, const std::vector<uint16_t>& got,
             const std::vector<uint16_t>& old, const std::vector<uint16_t>& want, const Tol& tol) {
  if (const size_t n = unwritten(got)) {
    r.fail(what + ": " + std::to_string(n) + " output elements not written");
    return;
  }
  expect_bf16(r, what + " vs CPU", got, want, tol);
  NotesOnly notes(r);
  expect_bf16(notes, what + " (the grouped kernel in use) vs CPU", old, want, tol);
  size_t same = 0;
  for (size_t i = 0; i < got.size(); ++i) same += got[i] == old[i];
  const double n_new = nmse(got, want), n_old = nmse(old, want);
  r.note(what + ": bit-identical to the grouped kernel " +
         fmt_double(static_cast<double>(same) / got.size()) + ", nmse vs CPU " + fmt_double(n_new) +
         " (grouped kernel " + fmt_double(n_old) + ")");
  if (f == ExpertFormat::kW8a8 && n_new > 3 * std::max(n_old, 1e-7))
    r.fail(what + ": nmse " + fmt_double(n_new) + " > 3x the grouped kernel's " + fmt_double(n_old));
}

void run(Reporter& r, ExpertFormat f, const Shape& s) {
  Data d(std::string("expert stream ") + format_name(f) + " " + s.name);
  const ExpertProblem p = make_expert_problem(d, f, s.T, s.H, s.I, s.E, s.K, s.skew, s.empty);
  const std::string base = std::string(format_name(f)) + " " + s.name;
  if (f == ExpertFormat::kW8a8 ? !cuda::expert_stream_w8a8_supported(2 * s.I, s.H, p.d_gu.data)
                               : !cuda::expert_stream_w4a16_supported(f == ExpertFormat::kW8a16, 2 * s.I, s.H,
                                                                      p.d_gu.data, p.d_gu_block.data)) {
    r.fail(base + ": the shape is not supported (no sm_90 device?)");
    return;
  }
  const std::vector<uint16_t> act_ref = reference_gate_up(p), y_ref = reference_down(p, act_ref);
  const cuda::Stream st = cuda_stream();
  const Tensor act_in =
      up(borrow_tensor(const_cast<uint16_t*>(act_ref.data()), ScalarType::kBF16, {p.R, p.I}));
  Tensor act_old = poisoned(ScalarType::kBF16, {p.R, p.I}), y_old = poisoned(ScalarType::kBF16, {p.R, p.H});
  old_gate_up(p, act_old, st);
  old_down(p, act_in, y_old, st);
  const std::vector<uint16_t> a_old = u16(act_old), o_old = u16(y_old);

  auto check = [&](const cuda::ExpertStreamOptions& o, const std::string& label) {
    Tensor act = poisoned(ScalarType::kBF16, {p.R, p.I}), y = poisoned(ScalarType::kBF16, {p.R, p.H});
    const cuda::ExpertStreamLaunch lg = new_gate_up(p, o, act, st), ld = new_down(p, o, act_in, y, st);
    char plan[160];
    std::snprintf(plan, sizeof plan, " [gate_up %d rows x %d stages x %d blocks, down %d x %d x %d]",
                  lg.max_rows, lg.stages, lg.blocks_per_cta, ld.max_rows, ld.stages, ld.blocks_per_cta);
    compare(r, base + label + " gate_up" + plan, f, u16(act), a_old, act_ref, act_tol(f));
    compare(r, base + label + " down", f, u16(y), o_old, y_ref, y_tol(f));
  };
  check({}, "");
  if (!s.variants) return;
  for (int rows : {16, 32, 64})
    for (int bpc : {1, 3, 64}) {
      cuda::ExpertStreamOptions o;
      o.max_rows = rows;
      o.blocks_per_cta = bpc;
      if (f != ExpertFormat::kW8a8 && rows == 64 && s.H > 1024)
        continue;  // 64 bf16 rows of K 2816 do not fit
      check(o, " rows " + std::to_string(rows) + " blocks " + std::to_string(bpc));
    }

  // gate_up -> down on the GPU, with and without PDL (the early weight prefetch, the grid dependency
  // wait), three times: bit-identical.
  std::vector<uint16_t> chained;
  for (int rep = 0; rep < 4; ++rep) {
    cuda::ExpertStreamOptions o;
    o.pdl = rep > 0;
    Tensor act = poisoned(ScalarType::kBF16, {p.R, p.I}), y = poisoned(ScalarType::kBF16, {p.R, p.H});
    new_gate_up(p, o, act, st);
    new_down(p, o, act, y, st);
    const std::vector<uint16_t> got = u16(y);
    if (rep == 0) {
      chained = got;
      NotesOnly notes(r);  // the chain compounds both projections' differences: for the record
      expect_bf16(notes, base + " gate_up -> down chained vs CPU", got, y_ref, y_tol(f));
      continue;
    }
    size_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != chained[i];
    if (diff != 0)
      r.fail(base + ": the PDL chain differs from the plain one in " + std::to_string(diff) + " elements");
  }
}

Case stream_case(const std::string& id, ExpertFormat f, const Shape& s) {
  return {id, [f, s](Reporter& r) { run(r, f, s); }};
}

}  // namespace

// Listed last of all checks (gpu_checks.cpp), as the newest kernels.
std::vector<Case> expert_stream_cases() {
  constexpr int64_t H = 2816, I = 704;
  std::vector<Case> all;
  const struct {
    const char* id;
    ExpertFormat f;
  } formats[] = {
      {"w8a8", ExpertFormat::kW8a8}, {"nvfp4", ExpertFormat::kNvfp4}, {"w8a16", ExpertFormat::kW8a16}};
  for (const auto& fm : formats) {
    const std::string pre = std::string("expert_stream_") + fm.id;
    all.push_back(stream_case(pre + "_E8_k2", fm.f, {"E8 k2 H64 I64 T37", 37, 64, 64, 8, 2, 0.0, 1, true}));
    all.push_back(stream_case(pre + "_E8_k2_H128_I192", fm.f, {"E8 k2 H128 I192 T100", 100, 128, 192, 8, 2}));
    all.push_back(stream_case(pre + "_E128_k8_T1", fm.f, {"E128 k8 T1", 1, H, I, 128, 8}));
    all.push_back(
        stream_case(pre + "_E128_k8_T256", fm.f, {"E128 k8 T256", 256, H, I, 128, 8, 0.0, 0, true}));
    all.push_back(stream_case(pre + "_E128_k8_T1024", fm.f, {"E128 k8 T1024", 1024, H, I, 128, 8}));
    all.push_back(
        stream_case(pre + "_E128_k8_T256_skewed", fm.f, {"E128 k8 T256 skewed", 256, H, I, 128, 8, 1.0, 6}));
  }
  return all;
}

}  // namespace dgemma::gpu_test
