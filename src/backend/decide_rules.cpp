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
  const std::vector<int> order = ascending_order(entropy);
  std::vector<uint8_t> accept(entropy.size(), 0);
  float cum = 0.0f;  // fp32 prefix sum, as torch.cumsum
  for (int p : order) {
    const float h = entropy[p];
    const float before = (cum + h) - h;  // the reference computes cumsum[k] - sorted[k]
    cum += h;
    accept[p] = before <= bound ? 1 : 0;
  }
  return accept;
}

bool is_confident(std::span<const float> entropy, float threshold) {
  float sum = 0.0f;
  for (float h : entropy) sum += h;
  const float mean = entropy.empty() ? 0.0f : sum / static_cast<float>(entropy.size());
  return mean < threshold;
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
  if (a.vocab < 1) throw Error(ErrorKind::kInvalidArgument, "decide: vocab must be positive");
  return C;
}

}  // namespace dgemma
