// Checks of the MoE block (the routing fused with the grouping by expert, moe/route.cu, and the
// grouped expert GEMMs, moe/grouped.cu) against the CPU backend and against the small-rows kernel, on
// random, completely skewed and sparse routings, at the small test shapes (including N and K tails of
// the tiles) and the real one (E128 k8 H2816 I704) at T = 1 .. 2048. The kernels of the automatic
// choice run: the small-rows one (up to 24 rows per expert on average) and the family's tile-list
// one (experts with more rows than a tile get several); the grouped_moe_kernels_* cases run every
// kernel (CudaOptions::moe; the hopper family's where the GPU has them). Outputs are poisoned, so
// unwritten elements show.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/moe/grouped.cuh"
#include "gpu_check_util.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma::gpu_test {
namespace {

enum class Routing {
  kRandom,  // router input and weights random: experts get ~T*K/E rows each
  kSkewed,  // one expert has a large positive router row: it is in every token's top-k (T rows)
  kSparse,  // all but kSparseExperts experts have large negative router rows: they get no rows
};
constexpr int64_t kSparseExperts = 12;

struct Shape {
  std::string name;
  int64_t T, H, I, E;
  int K;
  Routing routing = Routing::kRandom;
};

MoeArgs make_inputs(Data& d, const Shape& s) {
  const int64_t T = s.T, H = s.H, I = s.I, E = s.E;
  MoeArgs a;
  a.expert_in = d.bf16({T, H}, 1.0f);
  a.router_scale = d.bf16({H}, 0.2f, 1.0f);
  a.per_expert_scale = d.bf16_uniform({E}, 0.5f, 1.5f);
  a.gate_up = d.bf16({E, 2 * I, H}, 1.0f / std::sqrt(static_cast<float>(H)));
  a.down = d.bf16({E, H, I}, 1.0f / std::sqrt(static_cast<float>(I)));
  a.top_k = s.K;
  a.eps = 1e-6f;
  if (s.routing == Routing::kRandom) {
    a.router_in = d.bf16({T, H}, 3.0f);
    a.router_proj = d.bf16({E, H}, 1.0f);
    return a;
  }
  // A router input with a common positive direction: after the RMSNorm every z_i is about
  // 0.95 * scale_i / sqrt(H), so sum_i z_i ~ 0.95 sqrt(H) while a random N(0,1) router row gives
  // logits ~ N(0, 1). A constant row c gives the logit ~ c * 0.95 sqrt(H).
  a.router_in = d.bf16({T, H}, 1.0f, 3.0f);
  a.router_proj = d.bf16({E, H}, 1.0f);
  uint16_t* w = a.router_proj.ptr<uint16_t>();
  const float unit = 1.0f / (0.95f * std::sqrt(static_cast<float>(H)));  // a row of `unit`: logit ~ 1
  if (s.routing == Routing::kSkewed) {
    // Logit ~ +8 for one expert: its probability ~0.9, always in the top-k, the others' weights
    // still non-zero (so every expert's output matters in the comparison).
    const int64_t winner = E / 2 + 1;
    std::fill_n(w + winner * H, H, f32_to_bf16(8.0f * unit));
  } else {
    // Logit ~ -30 for every expert outside the first kSparseExperts: never in the top-k (K <= 12).
    for (int64_t e = kSparseExperts; e < E; ++e) std::fill_n(w + e * H, H, f32_to_bf16(-30.0f * unit));
  }
  return a;
}

// A GPU copy of the host inputs, with poisoned outputs and fresh debug outputs.
MoeArgs to_gpu(const MoeArgs& c, const Shape& s) {
  MoeArgs g = c;
  g.router_in = up(c.router_in);
  g.expert_in = up(c.expert_in);
  g.router_scale = up(c.router_scale);
  g.router_proj = up(c.router_proj);
  g.per_expert_scale = up(c.per_expert_scale);
  g.gate_up = up(c.gate_up.data);
  g.down = up(c.down.data);
  g.out = poisoned(ScalarType::kBF16, {s.T, s.H});
  g.dbg_probs = host_tensor(ScalarType::kF32, {s.T, s.E});
  g.dbg_weights = host_tensor(ScalarType::kF32, {s.T, s.K});
  g.dbg_index = host_tensor(ScalarType::kI32, {s.T, s.K});
  std::fill_n(g.dbg_index.ptr<int32_t>(), s.T * s.K, -1);
  std::fill_n(g.dbg_probs.ptr<float>(), s.T * s.E, NAN);
  std::fill_n(g.dbg_weights.ptr<float>(), s.T * s.K, NAN);
  return g;
}

// The MoE of g on cuda() with the bf16 expert kernel `kernel` (kAuto: the automatic choice).
void run_cuda(const MoeArgs& g, MoeKernel kernel = MoeKernel::kAuto) {
  if (kernel == MoeKernel::kAuto) return cuda().moe(g);
  const WithOptions scope(options_with([&](CudaOptions& o) { o.moe = kernel; }));
  cuda().moe(g);
}

// The outputs of two MoE runs on the tokens routed identically by both. Both compute every expert
// output element as one fp32 dot product rounded to bf16, in different summation orders (CPU loop,
// cuBLAS, the grouped kernel): a bf16 flip in gate / up can grow to a few steps after the activation
// and the down projection (704 terms of both signs: small outputs move by several of their own ulps;
// measured CPU vs cuBLAS at H=2816: 1.0% of elements beyond 4 ulps, NMSE 4e-7), then a bf16 sum over
// k experts. Hence the bound of run_moe (gpu_check_ops.cpp): 4 steps or the near-zero floor per
// element, 2% of the elements further off, 80% bit-identical, NMSE 1e-5 (the strict test: ~40x a
// single bf16 rounding).
void compare_out(Reporter& r, const std::string& what, const Shape& s, const MoeArgs& want, const MoeArgs& got,
                 const std::vector<char>& same) {
  std::vector<uint16_t> ow = u16(want.out), og = u16(got.out), sw, sg;
  for (int64_t t = 0; t < s.T; ++t) {
    if (!same[static_cast<size_t>(t)]) continue;
    sw.insert(sw.end(), ow.begin() + t * s.H, ow.begin() + (t + 1) * s.H);
    sg.insert(sg.end(), og.begin() + t * s.H, og.begin() + (t + 1) * s.H);
  }
  expect_bf16(r, what, sg, sw, Tol{4, 2e-3, 2e-2, 0.8, 1e-5});
  for (size_t i = 0; i < og.size(); ++i)
    if (og[i] == 0xFFFF) {
      r.fail(what + ": output element " + std::to_string(i) + " was not written");
      break;
    }
}

// The routing that the inputs were built for really happened (on the CPU's routing): otherwise the
// check would not exercise what it claims.
void check_routing_shape(Reporter& r, const Shape& s, const std::vector<int32_t>& idx) {
  std::vector<int64_t> count(static_cast<size_t>(s.E), 0);
  for (int32_t e : idx) {
    if (e < 0 || e >= s.E) {
      r.fail(s.name + ": CPU routed to expert " + std::to_string(e));
      return;
    }
    ++count[static_cast<size_t>(e)];
  }
  const int64_t empty = std::count(count.begin(), count.end(), 0);
  const int64_t most = *std::max_element(count.begin(), count.end());
  r.note(s.name + ": rows per expert max " + std::to_string(most) + ", experts without rows " + std::to_string(empty) +
         "/" + std::to_string(s.E));
  if (s.routing == Routing::kSkewed && most != s.T) r.fail(s.name + ": no expert got every token");
  if (s.routing == Routing::kSparse && empty < s.E - kSparseExperts)
    r.fail(s.name + ": more than " + std::to_string(kSparseExperts) + " experts got rows");
}

void run_grouped(Reporter& r, const Shape& s) {
  Data d("grouped moe " + s.name);
  const int64_t T = s.T, E = s.E, K = s.K;
  MoeArgs ca = make_inputs(d, s);
  ca.out = host_tensor(ScalarType::kBF16, {T, s.H});
  ca.dbg_probs = host_tensor(ScalarType::kF32, {T, E});
  ca.dbg_weights = host_tensor(ScalarType::kF32, {T, K});
  ca.dbg_index = host_tensor(ScalarType::kI32, {T, K});
  MoeArgs dev = to_gpu(ca, s);
  MoeArgs small = to_gpu(ca, s);
  cpu().moe(ca);
  run_cuda(dev);
  run_cuda(small, MoeKernel::kSmallRows);
  check_routing_shape(r, s, i32(ca.dbg_index));

  // 1. The automatic choice vs the small-rows kernel: the routing comes from the same kernels on the
  // same inputs, so it must be bit-identical; the expert outputs differ only in summation order.
  {
    const auto pd = f32(dev.dbg_probs), ph = f32(small.dbg_probs);
    const auto wd = f32(dev.dbg_weights), wh = f32(small.dbg_weights);
    const auto id = i32(dev.dbg_index), ih = i32(small.dbg_index);
    if (pd != ph || id != ih || wd != wh) r.fail(s.name + ": routing differs between two runs");
    compare_out(r, s.name + " automatic vs small-rows kernel", s, small, dev, std::vector<char>(static_cast<size_t>(T), 1));
  }

  // 2. The automatic choice vs the CPU: routing by compare_routing (not required below 4 tokens, where
  // one flipped logit already moves a quarter of them); outputs on the identically routed tokens.
  const std::vector<char> same = compare_routing(r, s.name, ca, dev, 4);
  compare_out(r, s.name + " vs CPU (identically routed tokens)", s, ca, dev, same);
}

// A shape off the kernels' rule (I not a multiple of 8) is refused with a clear error, not computed
// wrongly or crashed on: the engine refuses such a model at load (cuda_limits.h).
void run_refused(Reporter& r, const Shape& s) {
  Data d("grouped moe refused " + s.name);
  MoeArgs ca = make_inputs(d, s);
  ca.out = host_tensor(ScalarType::kBF16, {s.T, s.H});
  MoeArgs g = to_gpu(ca, s);
  try {
    cuda().moe(g);
    r.fail(s.name + ": the CUDA MoE ran a shape off its kernels' rule");
  } catch (const Error& e) {
    r.note(s.name + ": refused (" + e.what() + ")");
    if (e.kind() != ErrorKind::kUnsupported) r.fail(s.name + ": refused with another error kind");
  }
}

Case make_case(const std::string& id, Shape s) {
  return {id, [s](Reporter& r) { run_grouped(r, s); }};
}

constexpr MoeKernel kKernels[] = {MoeKernel::kSmallRows, MoeKernel::kMmaSync128x128, MoeKernel::kWgmma64x128,
                                  MoeKernel::kTma128x256};
bool hopper_kernel(MoeKernel k) { return k == MoeKernel::kWgmma64x128 || k == MoeKernel::kTma128x256; }

// The MoE's slot rows (MoeArgs::out_slots / out_order, which the FFN junction sums): their bf16 running
// sum in the given order, per token, is `out` of the same inputs bit for bit, and every token's order is
// a permutation of its slots.
void check_slot_rows(Reporter& r, const Shape& s, const MoeArgs& host_inputs, const std::vector<uint16_t>& out) {
  const int64_t T = s.T, H = s.H, K = s.K;
  MoeArgs g = to_gpu(host_inputs, s);
  g.out = Tensor{};
  g.out_slots = poisoned(ScalarType::kBF16, {T * K, H});
  g.out_order = poisoned(ScalarType::kI32, {T, K});
  run_cuda(g);
  const std::vector<uint16_t> y = u16(g.out_slots);
  const std::vector<int32_t> order = i32(g.out_order);
  std::vector<uint16_t> sum(static_cast<size_t>(T * H));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> seen(order.begin() + t * K, order.begin() + (t + 1) * K);
    std::sort(seen.begin(), seen.end());
    for (int64_t k = 0; k < K; ++k)
      if (seen[static_cast<size_t>(k)] != k) {
        r.fail(s.name + " slot rows: token " + std::to_string(t) + "'s order is not a permutation of its slots");
        return;
      }
    for (int64_t i = 0; i < H; ++i) {
      float acc = 0.f;
      for (int64_t j = 0; j < K; ++j)
        acc = round_bf16(acc + bf16_to_f32(y[static_cast<size_t>((t * K + order[t * K + j]) * H + i)]));
      sum[static_cast<size_t>(t * H + i)] = f32_to_bf16(acc);
    }
  }
  expect_bf16(r, s.name + " slot rows summed vs out", sum, out, exact_tol());
}

// Every bf16 grouped GEMM kernel (CudaOptions::moe) on one shape: the CPU runs once, each kernel's
// output against it on the identically routed tokens, and bit-identical to the mma.sync 128 x 128
// tiles' (both mma.sync kernels accumulate each element in the same order; the hopper family's wgmma
// and TMA kernels only report how many elements differ). The automatic choice runs first (the routing).
void run_kernels(Reporter& r, const Shape& s) {
  Data d("grouped moe variants " + s.name);
  const int64_t T = s.T, E = s.E, K = s.K;
  MoeArgs ca = make_inputs(d, s);
  ca.out = host_tensor(ScalarType::kBF16, {T, s.H});
  ca.dbg_probs = host_tensor(ScalarType::kF32, {T, E});
  ca.dbg_weights = host_tensor(ScalarType::kF32, {T, K});
  ca.dbg_index = host_tensor(ScalarType::kI32, {T, K});
  cpu().moe(ca);
  check_routing_shape(r, s, i32(ca.dbg_index));
  MoeArgs first = to_gpu(ca, s);
  run_cuda(first);
  const std::vector<char> same = compare_routing(r, s.name, ca, first, 4);
  check_slot_rows(r, s, ca, u16(first.out));
  MoeArgs ref = to_gpu(ca, s);  // the reference of the bit-for-bit comparisons
  run_cuda(ref, MoeKernel::kMmaSync128x128);
  const std::vector<uint16_t> ref_out = u16(ref.out);
  const bool hopper = sm90_gpu();
  for (const MoeKernel k : kKernels) {
    const std::string what = s.name + " " + moe_kernel_word(k);
    if (hopper_kernel(k) && !hopper) {
      r.note(what + ": a hopper-family kernel, not on this GPU");
      continue;
    }
    MoeArgs dev = to_gpu(ca, s);
    {
      const WithOptions scope(options_with([&](CudaOptions& o) {
        o.moe = k;
        if (hopper_kernel(k)) o.family = KernelFamily::kHopper;
      }));
      cuda().moe(dev);
    }
    compare_out(r, what + " vs CPU (identically routed tokens)", s, ca, dev, same);
    const std::vector<uint16_t> out = u16(dev.out);
    size_t diff = 0;
    for (size_t i = 0; i < out.size(); ++i) diff += out[i] != ref_out[i];
    // The hopper kernels sum in the tensor cores' order: a note, the CPU comparison above decides.
    if (hopper_kernel(k))
      r.note(what + ": " + std::to_string(diff) + " of " + std::to_string(out.size()) +
             " elements differ from the mma.sync kernel's output");
    else if (diff != 0)
      r.fail(what + ": " + std::to_string(diff) + " elements differ from the mma.sync kernel's output");
  }
}

Case make_kernels_case(const std::string& id, Shape s) {
  return {id, [s](Reporter& r) { run_kernels(r, s); }};
}

// The projections alone, every kernel against the mma.sync 128 x 128 tiles on the same grouped rows
// (random top-K routing at T tokens, E experts, the real H / I): an element is off when it differs by
// more than 2% of the output's RMS and 2% of itself. The mma.sync kernels must match bit for bit; the
// hopper family's within that bound, and when they do not, where the off elements sit (row % 64 in
// 8-row groups, column % 128 in n8 fragments) tells a layout error from a rounding one.
void run_gemm_layouts(Reporter& r, int64_t T, int64_t E) {
  constexpr int64_t H = 2816, I = 704, K = 8;
  const int64_t R = T * K;
  Backend& be = cuda();
  const uint64_t seed = run_seed();
  auto dev = [&](std::initializer_list<int64_t> dims, uint64_t salt, float std) {
    Tensor t = be.alloc(ScalarType::kBF16, dims);
    be.fill_normal(t, seed + salt, 0.0f, std);
    return t;
  };
  const Tensor x = dev({T, H}, 1, 1.0f), gate_up = dev({E, 2 * I, H}, 2, 0.05f), down = dev({E, H, I}, 3, 0.05f),
               act_in = dev({R, I}, 4, 1.0f);
  std::vector<int32_t> idx(static_cast<size_t>(R)), perm(static_cast<size_t>(E));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int64_t t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy_n(perm.begin(), K, idx.begin() + t * K);
  }
  std::vector<float> w(static_cast<size_t>(R));
  for (auto& v : w) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
  Tensor top_w = be.alloc(ScalarType::kF32, {R});
  be.from_host(top_w, w.data());
  be.synchronize();
  const cuda::Context& ctx = cuda::context_of(be);
  auto run = [&](MoeKernel k, std::vector<uint16_t>& act, std::vector<uint16_t>& y) {
    const cuda::GroupedPlan plan = cuda::grouped_moe_plan(R, E, k, true);
    const Grouping g = group_by_expert(idx, E, plan.tile_rows, plan.max_tiles);
    const Tensor offsets = up(host_i32(g.offsets)), pairs = up(host_i32(g.pairs));
    const Tensor tiles = plan.max_tiles > 0 ? up(host_i32(g.tiles)) : Tensor();
    const int32_t* tl = plan.max_tiles > 0 ? tiles.ptr<int32_t>() : nullptr;
    Tensor a = poisoned(ScalarType::kBF16, {R, I}), yy = poisoned(ScalarType::kBF16, {R, H});
    cuda::launch_grouped_gate_up(plan, x.ptr<uint16_t>(), gate_up.ptr<uint16_t>(), offsets.ptr<int32_t>(),
                                 pairs.ptr<int32_t>(), tl, R, E, K, H, I, a.ptr<uint16_t>(), ctx.stream);
    cuda::launch_grouped_down(plan, act_in.ptr<uint16_t>(), down.ptr<uint16_t>(), offsets.ptr<int32_t>(),
                              pairs.ptr<int32_t>(), tl, top_w.ptr<float>(), R, E, H, I, yy.ptr<uint16_t>(), ctx.stream);
    be.synchronize();
    act = u16(a);
    y = u16(yy);
  };
  std::vector<uint16_t> act_ref, y_ref;
  run(MoeKernel::kMmaSync128x128, act_ref, y_ref);
  // The grouped row of each pair (the act rows are grouped rows, y rows pair ids): rows by position in
  // the expert's tile list are what a layout error would follow.
  std::vector<int64_t> count(static_cast<size_t>(E), 0), row_in_expert(static_cast<size_t>(R));
  for (int64_t p = 0; p < R; ++p) row_in_expert[static_cast<size_t>(p)] = count[static_cast<size_t>(idx[p])]++;
  std::vector<int64_t> first(static_cast<size_t>(E) + 1, 0);
  for (int64_t e = 0; e < E; ++e) first[e + 1] = first[e] + count[e];
  std::vector<int64_t> grouped_row_pos(static_cast<size_t>(R));  // grouped row -> row within its expert
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < count[e]; ++j) grouped_row_pos[static_cast<size_t>(first[e] + j)] = j;
  auto compare = [&](const std::string& what, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                     int64_t cols, const std::vector<int64_t>& row_pos, bool exact) {
    double ss = 0;
    for (uint16_t v : want) ss += static_cast<double>(bf16_to_f32(v)) * bf16_to_f32(v);
    const double rms = std::sqrt(ss / static_cast<double>(want.size()));
    size_t off = 0, diff = 0, unwritten = 0;
    int64_t by_row[8] = {}, by_col[16] = {};
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] == 0xFFFF) ++unwritten;
      if (got[i] == want[i]) continue;
      ++diff;
      const double a = bf16_to_f32(got[i]), b = bf16_to_f32(want[i]);
      if (!(std::fabs(a - b) <= 0.02 * rms + 0.02 * std::fabs(b))) {
        ++off;
        const int64_t row = row_pos[i / static_cast<size_t>(cols)], col = static_cast<int64_t>(i % static_cast<size_t>(cols));
        ++by_row[(row % 64) / 8];
        ++by_col[(col % 128) / 8];
      }
    }
    std::string where = " off by row%64/8:";
    for (int64_t v : by_row) where += " " + std::to_string(v);
    where += "; by col%128/8:";
    for (int64_t v : by_col) where += " " + std::to_string(v);
    r.note(what + ": " + std::to_string(diff) + " of " + std::to_string(got.size()) + " differ, " + std::to_string(off) +
           " off, " + std::to_string(unwritten) + " unwritten" + (off ? where : ""));
    if (unwritten) r.fail(what + ": elements not written");
    if (exact ? diff != 0 : off * 1000 > got.size()) r.fail(what + ": differs from the mma.sync 128 x 128 tiles");
  };
  // y rows are pair ids: their row within the expert.
  const bool hopper = sm90_gpu();
  for (const MoeKernel k : kKernels) {
    if (k == MoeKernel::kMmaSync128x128) continue;
    if (hopper_kernel(k) && !hopper) {
      r.note(std::string(moe_kernel_word(k)) + ": a hopper-family kernel, not on this GPU");
      continue;
    }
    std::vector<uint16_t> act, y;
    run(k, act, y);
    const std::string name = "T" + std::to_string(T) + " " + moe_kernel_word(k);
    compare(name + " gate_up", act, act_ref, I, grouped_row_pos, !hopper_kernel(k));
    compare(name + " down", y, y_ref, H, row_in_expert, !hopper_kernel(k));
  }
}

// Time per call of fn in ms: the fastest of 7 samples of 5 back-to-back calls after 2 warm-ups, the
// device synchronised around each sample (the minimum: a GPU shared with other work inflates samples).
double device_ms(const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("grouped moe bench: a kernel failed");
  double best = 1e30;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int j = 0; j < 5; ++j) fn();
    if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("grouped moe bench: a kernel failed");
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 5);
  }
  return best;
}

}  // namespace

void grouped_moe_bench() {
  constexpr int64_t H = 2816, I = 704, E = 128, K = 8, kMaxT = 4096;
  Backend& be = cuda();
  auto bf = [&](std::initializer_list<int64_t> dims, uint64_t seed, float std) {
    Tensor t = be.alloc(ScalarType::kBF16, dims);
    be.fill_normal(t, seed, 0.0f, std);
    return t;
  };
  const Tensor x = bf({kMaxT, H}, 91, 1.0f), gate_up = bf({E, 2 * I, H}, 92, 0.02f), down = bf({E, H, I}, 93, 0.04f);
  const Tensor act = bf({kMaxT * K, I}, 94, 1.0f);
  Tensor y = be.alloc(ScalarType::kBF16, {kMaxT * K, H});
  Tensor top_w = be.alloc(ScalarType::kF32, {kMaxT * K});
  std::vector<int32_t> idx(static_cast<size_t>(kMaxT * K));
  {  // top-8 of a random permutation per token: ~T K / E rows per expert
    std::mt19937 rng(5);
    std::vector<int32_t> perm(static_cast<size_t>(E));
    for (int64_t t = 0; t < kMaxT; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::copy_n(perm.begin(), K, idx.begin() + t * K);
    }
    std::vector<float> w(static_cast<size_t>(kMaxT * K), 0.125f);
    be.from_host(top_w, w.data());
    be.synchronize();
  }
  const cuda::Context& ctx = cuda::context_of(be);
  const double gu_bytes = 2.0 * E * 2 * I * H, dn_bytes = 2.0 * E * H * I;
  std::printf("%-34s %9s %7s %7s %9s %7s %7s\n", "grouped bf16 GEMMs (26B-A4B)", "gate_up", "TB/s", "TF/s", "down",
              "TB/s", "TF/s");
  for (const int64_t T : {256, 512, 1024, 2048, 4096}) {
    const int64_t R = T * K;
    const std::vector<int32_t> idx_t(idx.begin(), idx.begin() + R);
    for (const MoeKernel k : {MoeKernel::kAuto, MoeKernel::kSmallRows, MoeKernel::kMmaSync128x128, MoeKernel::kWgmma64x128,
                              MoeKernel::kTma128x256}) {
      if (hopper_kernel(k) && !sm90_gpu()) continue;
      const cuda::GroupedPlan plan = cuda::grouped_moe_plan(R, E, k, ctx.hopper() || hopper_kernel(k));
      const Grouping g = group_by_expert(idx_t, E, plan.tile_rows, plan.max_tiles);
      const Tensor offsets = up(host_i32(g.offsets)), pairs = up(host_i32(g.pairs));
      const Tensor tiles = plan.max_tiles > 0 ? up(host_i32(g.tiles)) : Tensor();
      const int32_t* tl = plan.max_tiles > 0 ? tiles.ptr<int32_t>() : nullptr;
      const double gu = device_ms([&] {
        cuda::launch_grouped_gate_up(plan, x.ptr<uint16_t>(), gate_up.ptr<uint16_t>(), offsets.ptr<int32_t>(),
                                     pairs.ptr<int32_t>(), tl, R, E, K, H, I, act.ptr<uint16_t>(), ctx.stream);
      });
      const double dn = device_ms([&] {
        cuda::launch_grouped_down(plan, act.ptr<uint16_t>(), down.ptr<uint16_t>(), offsets.ptr<int32_t>(),
                                  pairs.ptr<int32_t>(), tl, top_w.ptr<float>(), R, E, H, I, y.ptr<uint16_t>(), ctx.stream);
      });
      char what[64];
      std::snprintf(what, sizeof what, "T=%lld %s%s (rows %d)", static_cast<long long>(T), moe_kernel_word(plan.kernel),
                    k == MoeKernel::kAuto ? " auto" : "", plan.tile_rows);
      const double flop = 2.0 * static_cast<double>(R) * 2 * I * H;  // per projection (down: R H I x 2 as well)
      std::printf("%-34s %9.3f %7.2f %7.0f %9.3f %7.2f %7.0f\n", what, gu, gu_bytes / gu * 1e-9, flop / gu * 1e-9, dn,
                  dn_bytes / dn * 1e-9, flop / 2 / dn * 1e-9);
    }
  }
}

std::vector<Case> grouped_moe_cases() {
  constexpr int64_t H = 2816, I = 704;
  return {
      // Small shapes: one 64-wide K tile, T not a multiple of any tile.
      make_case("grouped_moe_E8_k2", {"grouped moe E8 k2", 37, 64, 32, 8, 2}),
      // N and K tails: gate_up 40 columns (a 32-wide tile + 8), down 72 columns (64 + 8), K = 72 and 40.
      make_case("grouped_moe_E8_k2_tails", {"grouped moe E8 k2 H72 I40", 45, 72, 40, 8, 2}),
      // The large-R kernel (R = 300 > 24 E) on the tails: gate_up 40 of a tile's i, down 72 of its
      // columns, K = 72 (64 + 8) and 40; ~37 rows per expert, one partial tile each.
      make_case("grouped_moe_E8_k2_big_tails", {"grouped moe E8 k2 T150 H72 I40 (large R)", 150, 72, 40, 8, 2}),
      // ~175 rows per expert: two tiles each, the second partial; skewed: one expert with all 700 rows
      // (5 full tiles + 60 rows), the others ~100.
      make_case("grouped_moe_E8_k2_big_multitile", {"grouped moe E8 k2 T700 H72 I40 (large R)", 700, 72, 40, 8, 2}),
      make_case("grouped_moe_E8_k2_big_skewed",
                {"grouped moe E8 k2 T700 H72 I40 skewed (large R)", 700, 72, 40, 8, 2, Routing::kSkewed}),
      // I not a multiple of 8: off the kernels' rule, refused.
      {"grouped_moe_E8_k2_refused",
       [](Reporter& r) { run_refused(r, {"grouped moe E8 k2 H60 I30", 21, 60, 30, 8, 2}); }},
      make_case("grouped_moe_E128_k8_T1", {"grouped moe E128 k8 T1", 1, H, I, 128, 8}),
      make_case("grouped_moe_E128_k8_T64", {"grouped moe E128 k8 T64", 64, H, I, 128, 8}),
      make_case("grouped_moe_E128_k8_T256", {"grouped moe E128 k8 T256", 256, H, I, 128, 8}),
      // 62.5 rows per expert on average: the automatic choice's tile-list kernel (64-row wgmma tiles in
      // the hopper family: about half the experts get a second, short tile).
      make_case("grouped_moe_E128_k8_T1000", {"grouped moe E128 k8 T1000", 1000, H, I, 128, 8}),
      // 128 rows per expert on average: two or three tiles each.
      make_case("grouped_moe_E128_k8_T2048", {"grouped moe E128 k8 T2048", 2048, H, I, 128, 8}),
      // One expert with every token: 8 M tiles of 32 rows in one CTA (T=256, small R); many full tiles
      // and a partial one (T=1000) or only full ones (T=2048) from the tile list (large R).
      make_case("grouped_moe_E128_k8_skewed", {"grouped moe E128 k8 T256 skewed", 256, H, I, 128, 8, Routing::kSkewed}),
      make_case("grouped_moe_E128_k8_skewed_T1000",
                {"grouped moe E128 k8 T1000 skewed", 1000, H, I, 128, 8, Routing::kSkewed}),
      make_case("grouped_moe_E128_k8_skewed_T2048",
                {"grouped moe E128 k8 T2048 skewed", 2048, H, I, 128, 8, Routing::kSkewed}),
      // 116 of 128 experts without rows, ~200 rows for each of the others (small R), or ~670 (large R:
      // 6 tiles each, most of the tile list padding).
      make_case("grouped_moe_E128_k8_sparse", {"grouped moe E128 k8 T300 sparse", 300, H, I, 128, 8, Routing::kSparse}),
      make_case("grouped_moe_E128_k8_sparse_T1000",
                {"grouped moe E128 k8 T1000 sparse", 1000, H, I, 128, 8, Routing::kSparse}),
      // Every kernel. The projections alone (no CPU: every kernel against the mma.sync 128 x 128
      // tiles), with where the off elements sit.
      {"grouped_moe_kernels_gemm_T256", [](Reporter& r) { run_gemm_layouts(r, 256, 128); }},
      {"grouped_moe_kernels_gemm_T2048", [](Reporter& r) { run_gemm_layouts(r, 2048, 128); }},
      // The MoE vs the CPU: tails of every tile shape (gate_up 72 columns, down 136; K = 136 and 72),
      // ~37 rows per expert and a skewed routing (one expert with all 700 rows: several tiles of
      // every height); then the real shape at T = 1000 (~62 rows per expert) and sparse (~670).
      make_kernels_case("grouped_moe_kernels_tails", {"E8 k2 T150 H136 I72", 150, 136, 72, 8, 2}),
      make_kernels_case("grouped_moe_kernels_skewed",
                        {"E8 k2 T700 H136 I72 skewed", 700, 136, 72, 8, 2, Routing::kSkewed}),
      make_kernels_case("grouped_moe_kernels_E128_T1000", {"E128 k8 T1000", 1000, H, I, 128, 8}),
      make_kernels_case("grouped_moe_kernels_E128_sparse",
                        {"E128 k8 T1000 sparse", 1000, H, I, 128, 8, Routing::kSparse}),
  };
}

}  // namespace dgemma::gpu_test
