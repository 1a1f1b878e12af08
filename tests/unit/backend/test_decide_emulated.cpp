// The decide kernel's block (src/backend/cuda/sampler/decide_kernel.cuh) run on the host through
// cuda_emulator.h against the CPU backend's decide, bit for bit (both apply the same fp32 operations
// in the same order and the same guided walk): several canvases a launch, some with a guided gap (random
// automata from regexes, a JSON schema and choices over a random vocabulary, gaps at any place, any
// state and room, chosen tokens that follow the automaton for a while and then stray), some without;
// pinned positions inside and outside the gaps; greedy and sampling canvases; canvases wider than the
// block.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/decide_rules.h"
#include "engine/guided_tables.h"
#include "guided/guided.h"
#include "guided/token_constraint.h"
#include "util/counter_rng.h"

// The emulator first: it provides the device operations that the kernel header uses.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/sampler/decide_kernel.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

using guided::TokenKind;

constexpr int kBlockThreads = 256;  // sampler/decide.cu's block
constexpr int32_t kVocab = 120;

// Ids 0 and 1 filler (pad, end-of-sequence), 2 never allowed, the rest random pieces of one to three
// bytes over the characters the constraints below use (and a few they do not).
std::shared_ptr<const guided::TokenVocabulary> vocabulary() {
  std::mt19937_64 rng(41);
  const std::string chars = "ab{}\":, 0123x";
  std::vector<std::string> pieces = {"", "", ""};
  std::vector<TokenKind> kinds = {TokenKind::kFiller, TokenKind::kFiller, TokenKind::kNever};
  for (char c : chars) {  // every byte has a piece
    pieces.push_back(std::string(1, c));
    kinds.push_back(TokenKind::kText);
  }
  while (static_cast<int32_t>(pieces.size()) < kVocab) {
    std::string p;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) p += chars[rng() % chars.size()];
    pieces.push_back(p);
    kinds.push_back(TokenKind::kText);
  }
  return guided::TokenVocabulary::from_pieces(pieces, kinds);
}

std::vector<std::shared_ptr<const guided::TokenConstraint>> constraints() {
  static const auto vocab = vocabulary();
  using guided::ConstraintSpec;
  const std::vector<ConstraintSpec> specs = {
      ConstraintSpec::regex("(ab|a)+b?"),
      ConstraintSpec::regex("[ab]{3,9}x"),
      ConstraintSpec::regex("\\{\"a\": [0-3]+\\}"),
      ConstraintSpec::json_schema(R"({"type": "object", "properties": {"a": {"type": "integer"},
                                      "b": {"type": "string"}}, "required": ["a"]})"),
      ConstraintSpec::choice({"ab", "ba", "aab", "0x1"}),
  };
  std::vector<std::shared_ptr<const guided::TokenConstraint>> out;
  for (const ConstraintSpec& s : specs) out.push_back(guided::compile_for_vocabulary(s, vocab));
  return out;
}

// One canvas of a launch: its inputs, and each side's outputs.
struct Canvas {
  int64_t C = 0;
  bool greedy = false, have_prev = true;
  float bound = 0.1f;
  uint64_t key = 0;
  std::vector<float> entropy;
  std::vector<int32_t> argmax, sample, prev, pin_tokens;
  std::vector<uint8_t> pin_mask;  // empty: no pins
  const GuidedTables* tables = nullptr;
  std::shared_ptr<const guided::TokenConstraint> constraint;
  GuidedGap gap;
};
struct Outputs {
  std::vector<int32_t> canvas, prev, flags;
  std::vector<uint8_t> accept;
  explicit Outputs(const Canvas& c)
      : canvas(static_cast<size_t>(c.C), -1),
        prev(c.prev),
        flags{-1, -1},
        accept(static_cast<size_t>(c.C), 9) {}
};

Outputs run_cpu(Backend& be, const Canvas& c) {
  Outputs o(c);
  std::vector<float> entropy = c.entropy;
  std::vector<int32_t> argmax = c.argmax, sample = c.sample, pin_tokens = c.pin_tokens;
  std::vector<uint8_t> pin_mask = c.pin_mask;
  DecideArgs a;
  a.entropy = borrow_tensor(entropy.data(), ScalarType::kF32, {c.C});
  a.argmax = borrow_tensor(argmax.data(), ScalarType::kI32, {c.C});
  a.sample = borrow_tensor(sample.data(), ScalarType::kI32, {c.C});
  a.prev_argmax = borrow_tensor(o.prev.data(), ScalarType::kI32, {c.C});
  a.canvas = borrow_tensor(o.canvas.data(), ScalarType::kI32, {c.C});
  a.flags = borrow_tensor(o.flags.data(), ScalarType::kI32, {2});
  a.accept = borrow_tensor(o.accept.data(), ScalarType::kU8, {c.C});
  if (!pin_mask.empty()) {
    a.pin_mask = borrow_tensor(pin_mask.data(), ScalarType::kU8, {c.C});
    a.pin_tokens = borrow_tensor(pin_tokens.data(), ScalarType::kI32, {c.C});
  }
  a.greedy = c.greedy;
  a.have_prev = c.have_prev;
  a.entropy_bound = c.bound;
  a.confidence_threshold = 0.3f;
  a.renoise_key = c.key;
  a.vocab = kVocab;
  a.guided = c.gap;
  be.decide(a);
  return o;
}

// All canvases in one emulated launch (sampler/decide.cu launch_decide: a block per canvas, 16 bytes of
// dynamic shared memory per position of the widest).
std::vector<Outputs> run_emulated(const std::vector<Canvas>& cs) {
  std::vector<Outputs> out;
  for (const Canvas& c : cs) out.emplace_back(c);
  DecideBatch b;
  b.n = static_cast<int>(cs.size());
  int64_t max_c = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    const Canvas& c = cs[i];
    Outputs& o = out[i];
    DecideLaunch& d = b.c[i];
    d.entropy = c.entropy.data();
    d.argmax = c.argmax.data();
    d.sample = c.greedy ? nullptr : c.sample.data();
    d.C = c.C;
    d.entropy_bound = c.bound;
    d.confidence_threshold = 0.3f;
    d.renoise_key = c.key;
    d.vocab = kVocab;
    d.prev_argmax = o.prev.data();
    d.have_prev = c.have_prev;
    d.canvas = o.canvas.data();
    d.flags = o.flags.data();
    d.accept = o.accept.data();
    if (!c.pin_mask.empty()) {
      d.pin_mask = c.pin_mask.data();
      d.pin_tokens = c.pin_tokens.data();
    }
    if (c.gap.active()) {  // as sampler/ops.cpp decide_launch
      d.gap.view = guided_view(*c.tables);
      d.gap.distance = c.tables->distance.ptr<int32_t>();
      d.gap.first = c.gap.first, d.gap.last = c.gap.last, d.gap.state = c.gap.state, d.gap.room = c.gap.room;
    }
    max_c = std::max(max_c, c.C);
  }
  const DecideBatch* bp = &b;
  emu::launch_3d([&] { decide_block(bp->c[blockIdx.x]); }, b.n, 1, 1,
                 static_cast<int>(max_c) * kDecideSmemPerPosition, kBlockThreads);
  return out;
}

// Tokens from `state` that follow the automaton (each a random allowed step) with probability
// `follow`, else any id (fillers among them).
std::vector<int32_t> tokens_from(std::mt19937_64& rng, const guided::TokenConstraint& c, int32_t state, int n,
                                 double follow) {
  std::vector<int32_t> out;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < n; ++i) {
    int32_t t = static_cast<int32_t>(rng() % kVocab);
    if (u(rng) < follow && state >= 0) {
      std::vector<int32_t> ok;
      for (int32_t id = 0; id < kVocab; ++id)
        if (c.step(state, id) >= 0) ok.push_back(id);
      if (!ok.empty()) t = ok[rng() % ok.size()];
    }
    if (state >= 0) state = c.step(state, t);
    out.push_back(t);
  }
  return out;
}

// A random canvas; `guided` gives it a gap of constraint `k` somewhere in it.
Canvas make_canvas(std::mt19937_64& rng, int64_t C, bool guided,
                   const std::shared_ptr<const guided::TokenConstraint>& k, const GuidedTables* tables,
                   bool pins, bool greedy) {
  Canvas c;
  c.C = C;
  c.greedy = greedy;
  c.have_prev = rng() % 4 != 0;
  c.bound = (rng() % 3 == 0) ? 1e6f : 0.05f * static_cast<float>(1 + rng() % 40);
  c.key = rng::stream_key(rng() % 1000, 2, 5, rng::kRenoise);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int levels = rng() % 2 == 0 ? 5 : 0;  // ties, or continuous
  for (int64_t p = 0; p < C; ++p) {
    const float x = u(rng);
    c.entropy.push_back(levels > 0 ? static_cast<float>(rng() % levels) * 0.01f : x * x * x * 2.0f);
    c.argmax.push_back(static_cast<int32_t>(rng() % kVocab));
    c.sample.push_back(static_cast<int32_t>(rng() % kVocab));
    c.prev.push_back(rng() % 8 == 0 ? c.argmax.back() ^ 1 : c.argmax.back());
  }
  if (pins) {
    c.pin_mask.assign(static_cast<size_t>(C), 0);
    c.pin_tokens.assign(static_cast<size_t>(C), 0);
    for (int64_t p = 0; p < C; ++p)
      if (rng() % 10 == 0) c.pin_mask[p] = 1, c.pin_tokens[p] = static_cast<int32_t>(rng() % kVocab);
  }
  if (!guided) return c;
  c.constraint = k;
  c.tables = tables;
  const int32_t first = static_cast<int32_t>(rng() % static_cast<uint64_t>(C));
  const int32_t last = first + 1 + static_cast<int32_t>(rng() % static_cast<uint64_t>(C - first));
  // Any state: the start, or one a random walk reached.
  int32_t state = k->start();
  for (int32_t t : tokens_from(rng, *k, state, static_cast<int>(rng() % 4), 1.0))
    if (k->step(state, t) >= 0) state = k->step(state, t);
  const int64_t room = (last - first) + static_cast<int64_t>(rng() % 3 == 0 ? 0 : rng() % 12);
  c.gap = GuidedGap{tables, first, last, state, room};
  // The chosen tokens of the gap (the sample, or the argmax when greedy) follow the automaton mostly;
  // pinned positions there hold a token that follows it too, sometimes.
  const double follow = 0.75 + 0.25 * u(rng);
  const std::vector<int32_t> walk = tokens_from(rng, *k, state, last - first, follow);
  std::vector<int32_t>& chosen = greedy ? c.argmax : c.sample;
  for (int32_t p = first; p < last; ++p) {
    chosen[p] = walk[static_cast<size_t>(p - first)];
    if (pins && c.pin_mask[p] && rng() % 2 == 0) c.pin_tokens[p] = chosen[p];
  }
  return c;
}

// Positions that the gap's walk renoised (accepted by the entropy rule alone, not by the op).
int64_t cut_positions(const Canvas& c, const Outputs& o) {
  if (!c.gap.active()) return 0;
  const std::vector<uint8_t> plain = entropy_bound_accept(c.entropy, c.bound, c.pin_mask);
  int64_t n = 0;
  for (int64_t p = c.gap.first; p < c.gap.last; ++p) n += plain[p] && !o.accept[p];
  return n;
}

void run_launches(uint64_t seed, const std::vector<int64_t>& widths, int launches) {
  std::mt19937_64 rng(seed);
  auto be = make_cpu_backend();
  const auto ks = constraints();
  GuidedTableCache cache;
  std::vector<const GuidedTables*> tables;
  for (const auto& k : ks) tables.push_back(&cache.get(*be, k));
  int64_t cut = 0, guided_canvases = 0;
  for (int l = 0; l < launches; ++l) {
    std::vector<Canvas> cs;
    const size_t n = 1 + rng() % 5;
    for (size_t i = 0; i < n; ++i) {
      const size_t k = rng() % ks.size();
      const bool guided = i != 0 || rng() % 2 == 0;  // the first canvas unguided half the time
      cs.push_back(make_canvas(rng, widths[rng() % widths.size()], guided, ks[k], tables[k], rng() % 2 == 0,
                               rng() % 3 == 0));
    }
    const std::vector<Outputs> got = run_emulated(cs);
    for (size_t i = 0; i < cs.size(); ++i) {
      const std::string at = "seed " + std::to_string(seed) + " launch " + std::to_string(l) + " canvas " +
                             std::to_string(i) + (cs[i].gap.active() ? " (guided)" : "");
      const Outputs want = run_cpu(*be, cs[i]);
      EXPECT_EQ(got[i].canvas, want.canvas) << at;
      EXPECT_EQ(got[i].accept, want.accept) << at;
      EXPECT_EQ(got[i].flags, want.flags) << at;
      EXPECT_EQ(got[i].prev, want.prev) << at;
      cut += cut_positions(cs[i], want);
      guided_canvases += cs[i].gap.active();
    }
  }
  // The cases exercise the walk: it renoised positions the entropy rule had accepted.
  EXPECT_GT(guided_canvases, launches / 2);
  EXPECT_GT(cut, 0);
}

TEST(DecideEmulated, GuidedAndPlainCanvasesMatchTheCpu) {
  run_launches(1, {1, 7, 40, 64}, 40);
}

// Canvases wider than the block (threads take several positions) and the engine's width.
TEST(DecideEmulated, WideCanvasesMatchTheCpu) {
  run_launches(2, {256, 300}, 8);
}

}  // namespace
}  // namespace dgemma::cuda
