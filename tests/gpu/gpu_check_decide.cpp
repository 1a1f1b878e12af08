// The decide op (accept / renoise / stop flags of one denoising step) on CUDA against the CPU
// backend. Both apply the same rules with the same fp32 operations in the same order (a stable rank,
// a sequential prefix sum, a sequential mean, integer RNG), so everything must be bit-identical: no
// tolerance.
#include <algorithm>
#include <vector>

#include "backend/decide_rules.h"
#include "gpu_check_util.h"
#include "util/counter_rng.h"

namespace dgemma::gpu_test {
namespace {

struct DecideCase {
  std::string name;
  int64_t C;
  int levels;          // > 0: entropies drawn from this many distinct values (ties); 0: continuous
  float bound;
  bool greedy, have_prev;
  double prev_differs;  // fraction of positions where prev_argmax differs from argmax
  bool want_accept;
  double pinned = 0;           // fraction of pinned positions (pin mask given when > 0)
  bool differs_at_pins = false;  // prev_argmax differs from argmax at the pinned positions only
};

void run_decide(Reporter& r, const DecideCase& c) {
  Data d("decide " + c.name);
  const int64_t C = c.C;
  const int32_t vocab = 262144;
  std::vector<float> h(static_cast<size_t>(C));
  std::vector<int32_t> am(static_cast<size_t>(C)), sm(static_cast<size_t>(C)), prev(static_cast<size_t>(C));
  for (int64_t p = 0; p < C; ++p) {
    // Entropies like a denoising step: most positions near 0, a tail of uncertain ones.
    const float u = d.uniform(0.0f, 1.0f);
    h[p] = c.levels > 0 ? static_cast<float>(d.integer(0, c.levels - 1)) * 0.01f : u * u * u * 2.0f;
    am[p] = static_cast<int32_t>(d.integer(0, vocab - 1));
    sm[p] = static_cast<int32_t>(d.integer(0, vocab - 1));
    prev[p] = d.uniform(0.0f, 1.0f) < c.prev_differs ? am[p] ^ 1 : am[p];
  }
  std::vector<uint8_t> mask;
  std::vector<int32_t> pin_tok(static_cast<size_t>(C), 0);
  if (c.pinned > 0) {
    mask.assign(static_cast<size_t>(C), 0);
    for (int64_t p = 0; p < C; ++p) {
      mask[p] = d.uniform(0.0f, 1.0f) < c.pinned ? 1 : 0;
      pin_tok[p] = mask[p] ? static_cast<int32_t>(d.integer(0, vocab - 1)) : 0;
      if (c.differs_at_pins) prev[p] = mask[p] ? am[p] ^ 1 : am[p];
    }
  }
  if (c.levels == 0 && C > 4) h[3] = h[1];  // at least one exact tie
  const uint64_t key = rng::stream_key(d.integer(0, 1 << 30), 2, 5, rng::kRenoise);

  auto make = [&](Backend& be, std::vector<Tensor>& keep) {
    auto put_f32 = [&](const std::vector<float>& v) {
      Tensor t = be.alloc(ScalarType::kF32, {C});
      be.from_host(t, v.data());
      keep.push_back(t);
      return t;
    };
    auto put_i32 = [&](const std::vector<int32_t>& v) {
      Tensor t = be.alloc(ScalarType::kI32, {C});
      be.from_host(t, v.data());
      keep.push_back(t);
      return t;
    };
    DecideArgs a;
    a.entropy = put_f32(h);
    a.argmax = put_i32(am);
    a.sample = put_i32(sm);
    a.prev_argmax = put_i32(prev);
    a.canvas = put_i32(std::vector<int32_t>(static_cast<size_t>(C), -1));
    a.flags = be.alloc(ScalarType::kI32, {2});
    const int32_t minus[2] = {-1, -1};
    be.from_host(a.flags, minus);
    if (c.want_accept) {
      a.accept = be.alloc(ScalarType::kU8, {C});
      const std::vector<uint8_t> nine(static_cast<size_t>(C), 9);
      be.from_host(a.accept, nine.data());
    }
    if (!mask.empty()) {
      a.pin_mask = be.alloc(ScalarType::kU8, {C});
      be.from_host(a.pin_mask, mask.data());
      a.pin_tokens = put_i32(pin_tok);
    }
    a.greedy = c.greedy;
    a.have_prev = c.have_prev;
    a.entropy_bound = c.bound;
    a.confidence_threshold = 0.3f;
    a.renoise_key = key;
    a.vocab = vocab;
    return a;
  };
  std::vector<Tensor> keep_c, keep_g;
  const DecideArgs ca = make(cpu(), keep_c);
  const DecideArgs ga = make(cuda(), keep_g);
  cpu().decide(ca);
  cuda().decide(ga);

  const std::vector<int32_t> canvas_c = i32(ca.canvas), canvas_g = i32(ga.canvas);
  const std::vector<int32_t> flags_c = i32(ca.flags), flags_g = i32(ga.flags);
  const std::vector<int32_t> prev_c = i32(ca.prev_argmax), prev_g = i32(ga.prev_argmax);
  int64_t accepted = 0, mismatches = 0;
  const std::vector<uint8_t> acc_ref = entropy_bound_accept(h, c.bound, mask);
  for (int64_t p = 0; p < C; ++p) {
    accepted += acc_ref[p];
    mismatches += canvas_c[p] != canvas_g[p];
  }
  r.note(c.name + ": C " + std::to_string(C) + ", accepted " + std::to_string(accepted) + ", flags cpu {" +
         std::to_string(flags_c[0]) + "," + std::to_string(flags_c[1]) + "}");
  if (mismatches) r.fail(c.name + ": " + std::to_string(mismatches) + " canvas positions differ");
  if (flags_c != flags_g)
    r.fail(c.name + ": flags cuda {" + std::to_string(flags_g[0]) + "," + std::to_string(flags_g[1]) + "}");
  if (prev_c != prev_g || prev_g != am) r.fail(c.name + ": prev_argmax was not replaced by the argmax");
  if (c.want_accept) {
    std::vector<uint8_t> acc_g(static_cast<size_t>(C));
    cuda().to_host(ga.accept, acc_g.data());
    if (acc_g != acc_ref) r.fail(c.name + ": accept mask differs from entropy_bound_accept");
  }
  // The op's semantics, not just agreement: accepted positions hold the chosen token, the others the
  // renoise token of their position.
  for (int64_t p = 0; p < C; ++p) {
    const bool pinned = !mask.empty() && mask[p];
    const int32_t want = pinned       ? pin_tok[p]
                         : acc_ref[p] ? (c.greedy ? am[p] : sm[p])
                                      : static_cast<int32_t>(rng::uniform_token(key, static_cast<uint32_t>(p), vocab));
    if (canvas_g[p] != want) {
      r.fail(c.name + ": position " + std::to_string(p) + " holds the wrong token");
      break;
    }
  }
  const bool same_want = c.have_prev && (c.prev_differs == 0.0 || c.differs_at_pins);
  if ((flags_g[0] != 0) != same_want) r.fail(c.name + ": same-argmax flag wrong");
  if ((flags_g[1] != 0) != is_confident(h, 0.3f, mask)) r.fail(c.name + ": confidence flag wrong");
}

void check_decide(Reporter& r) {
  run_decide(r, {"c256 continuous", 256, 0, 0.1f, false, true, 0.0, true});
  run_decide(r, {"c256 ties", 256, 5, 0.3f, false, true, 0.01, true});
  run_decide(r, {"c256 greedy first step", 256, 0, 1.0f, true, false, 0.0, false});
  run_decide(r, {"c256 large bound", 256, 0, 1e6f, false, true, 0.5, true});
  run_decide(r, {"c1", 1, 0, 0.0f, false, true, 0.0, true});
  run_decide(r, {"c17 ties", 17, 2, 0.02f, true, true, 0.0, true});
  run_decide(r, {"c3000 (shared memory > 48 KB)", 3000, 0, 5.0f, false, true, 0.001, true});
  run_decide(r, {"c8192 max", kMaxDecideCanvas, 50, 2.0f, false, true, 0.0, true});
  // Pinned positions (docs/MODEL.md §6.6): the free-positions rule, bit-identical to the CPU op.
  run_decide(r, {"c256 pinned 30%", 256, 0, 0.1f, false, true, 0.0, true, 0.3});
  run_decide(r, {"c256 pinned ties", 256, 5, 0.3f, false, true, 0.01, true, 0.5});
  run_decide(r, {"c256 pinned, argmax changes at pins only", 256, 0, 1.0f, true, true, 0.0, true, 0.2, true});
  run_decide(r, {"c256 all pinned", 256, 0, 0.1f, false, true, 0.0, true, 1.01});
  run_decide(r, {"c256 all-zero mask", 256, 0, 0.1f, false, true, 0.0, true, 1e-9});
  run_decide(r, {"c3000 pinned", 3000, 0, 5.0f, false, true, 0.001, true, 0.1});
  run_decide(r, {"c8192 pinned", kMaxDecideCanvas, 50, 2.0f, false, true, 0.0, true, 0.4});
}

}  // namespace

std::vector<Case> decide_cases() { return {{"decide", check_decide}}; }

}  // namespace dgemma::gpu_test
