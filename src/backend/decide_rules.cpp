#include "backend/decide_rules.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "util/error.h"

namespace dgemma {
namespace {

std::vector<int> ascending_order(std::span<const float> entropy) {
  std::vector<int> order(entropy.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return entropy[a] < entropy[b]; });
  return order;
}

}  // namespace

std::vector<uint8_t> entropy_bound_accept(std::span<const float> entropy, float bound) {
  return entropy_bound_accept(entropy, bound, {});
}

bool is_confident(std::span<const float> entropy, float threshold) { return is_confident(entropy, threshold, {}); }

std::vector<uint8_t> entropy_bound_accept(std::span<const float> entropy, float bound, std::span<const uint8_t> pinned) {
  const bool any_pins = !pinned.empty();
  const std::vector<int> order = ascending_order(entropy);
  std::vector<uint8_t> accept(entropy.size(), 0);
  float cum = 0.0f;  // fp32 prefix sum, as torch.cumsum
  for (int p : order) {
    // The stable order of the free positions is the full stable order with the pinned ones skipped.
    if (any_pins && pinned[p]) {
      accept[p] = 1;
      continue;
    }
    const float h = entropy[p];
    const float before = (cum + h) - h;  // the reference computes cumsum[k] - sorted[k]
    cum += h;
    accept[p] = before <= bound ? 1 : 0;
  }
  return accept;
}

bool is_confident(std::span<const float> entropy, float threshold, std::span<const uint8_t> pinned) {
  const bool any_pins = !pinned.empty();
  float sum = 0.0f;
  int64_t n = 0;
  for (size_t p = 0; p < entropy.size(); ++p) {
    if (any_pins && pinned[p]) continue;
    sum += entropy[p];
    ++n;
  }
  const float mean = n == 0 ? 0.0f : sum / static_cast<float>(n);
  return mean < threshold;
}

guided::TokenConstraintView guided_view(const GuidedTables& t) {
  guided::TokenConstraintView v;
  v.num_states = t.num_states;
  v.num_classes = t.num_classes;
  v.start = 0;
  v.byte_class = t.byte_class.ptr<uint8_t>();
  v.next = t.next.ptr<int32_t>();
  v.accepting = t.accepting.ptr<uint8_t>();
  v.vocab_size = t.vocab_size;
  v.token_offsets = t.token_offsets.ptr<int32_t>();
  v.token_bytes = t.token_bytes.ptr<uint8_t>();
  v.token_kind = t.token_kind.ptr<uint8_t>();
  return v;
}

int32_t guided_decide(const GuidedGap& gap, const int32_t* chosen, uint8_t* accept, const uint8_t* pinned) {
  const guided::TokenConstraintView v = guided_view(*gap.tables);
  const guided::WalkResult r = guided::walk_tokens_within(v, gap.tables->distance.ptr<int32_t>(), gap.state,
                                                          chosen + gap.first, gap.last - gap.first, gap.room,
                                                         pinned == nullptr ? nullptr : pinned + gap.first);
  for (int32_t p = gap.first + r.accepted; p < gap.last; ++p) accept[p] = 0;
  return r.accepted;
}

int64_t check_decide_args(const DecideArgs& a, Device device) {
  auto need = [&](const Tensor& t, ScalarType type, const char* what) {
    if (t.empty() || t.type != type || t.device != device)
      throw Error(ErrorKind::kInvalidArgument,
                  std::string("decide: ") + what + " must be a " + scalar_name(type) + " tensor on the backend's device");
  };
  need(a.entropy, ScalarType::kF32, "entropy");
  const int64_t C = a.entropy.numel();
  if (C < 1 || C > kMaxDecideCanvas)
    throw Error(ErrorKind::kInvalidArgument, "decide: the canvas must have 1.." + std::to_string(kMaxDecideCanvas) + " positions");
  auto need_c = [&](const Tensor& t, ScalarType type, const char* what) {
    need(t, type, what);
    if (t.numel() != C) throw Error(ErrorKind::kInvalidArgument, std::string("decide: ") + what + " must have C elements");
  };
  need_c(a.argmax, ScalarType::kI32, "argmax");
  if (!a.greedy) need_c(a.sample, ScalarType::kI32, "sample");
  need_c(a.prev_argmax, ScalarType::kI32, "prev_argmax");
  need_c(a.canvas, ScalarType::kI32, "canvas");
  need(a.flags, ScalarType::kI32, "flags");
  if (a.flags.numel() != 2) throw Error(ErrorKind::kInvalidArgument, "decide: flags must have 2 elements");
  if (!a.accept.empty()) need_c(a.accept, ScalarType::kU8, "accept");
  if (!a.pin_mask.empty()) {
    need_c(a.pin_mask, ScalarType::kU8, "pin_mask");
    need_c(a.pin_tokens, ScalarType::kI32, "pin_tokens");
  } else if (!a.pin_tokens.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "decide: pin_tokens needs pin_mask");
  }
  if (a.vocab < 1) throw Error(ErrorKind::kInvalidArgument, "decide: vocab must be positive");
  if (a.guided.active()) {
    const GuidedGap& g = a.guided;
    if (g.first < 0 || g.last > C || g.state < 0 || g.state >= g.tables->num_states ||
        g.room < g.last - g.first)
      throw Error(ErrorKind::kInvalidArgument,
                  "decide: the guided gap lies outside the canvas or its automaton");
  }
  return C;
}

}  // namespace dgemma
