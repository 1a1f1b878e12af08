// The accept / renoise / stop decision of one denoising step (backend.h DecideArgs) on the CPU: the
// reference rules of decide_rules.h applied to host tensors (with a guided gap, its walk).
#include <algorithm>
#include <span>

#include "backend/cpu/cpu_ops.h"
#include "backend/decide_rules.h"
#include "util/counter_rng.h"

namespace dgemma::cpu {

void decide(const DecideArgs& a) {
  const int64_t C = check_decide_args(a, Device::kCpu);
  const std::span<const float> entropy(a.entropy.ptr<float>(), static_cast<size_t>(C));
  const int32_t* argmax = a.argmax.ptr<int32_t>();
  const int32_t* chosen = a.greedy ? argmax : a.sample.ptr<int32_t>();
  int32_t* prev = a.prev_argmax.ptr<int32_t>();
  int32_t* canvas = a.canvas.ptr<int32_t>();
  std::span<const uint8_t> pinned;
  const int32_t* pin_tokens = nullptr;
  if (!a.pin_mask.empty()) {
    pinned = std::span<const uint8_t>(a.pin_mask.ptr<uint8_t>(), static_cast<size_t>(C));
    pin_tokens = a.pin_tokens.ptr<int32_t>();
  }

  std::vector<uint8_t> accept = entropy_bound_accept(entropy, a.entropy_bound, pinned);
  if (a.guided.active()) {
    // The gap's chosen tokens, pinned positions holding their pinned token.
    std::vector<int32_t> walked(chosen, chosen + C);
    if (pin_tokens)
      for (int64_t p = 0; p < C; ++p)
        if (pinned[p]) walked[p] = pin_tokens[p];
    guided_decide(a.guided, walked.data(), accept.data(), pin_tokens ? pinned.data() : nullptr);
  }
  bool same = a.have_prev;
  for (int64_t p = 0; p < C; ++p) {
    const uint32_t pos = static_cast<uint32_t>(p);
    if (pin_tokens && pinned[p]) {
      canvas[p] = pin_tokens[p];  // a pinned position keeps its token; its argmax is not compared
      continue;
    }
    canvas[p] = accept[p] ? chosen[p] : static_cast<int32_t>(rng::uniform_token(a.renoise_key, pos, static_cast<uint32_t>(a.vocab)));
    same = same && prev[p] == argmax[p];
  }
  std::copy(argmax, argmax + C, prev);
  a.flags.ptr<int32_t>()[0] = same ? 1 : 0;
  a.flags.ptr<int32_t>()[1] = is_confident(entropy, a.confidence_threshold, pinned) ? 1 : 0;
  if (!a.accept.empty()) std::copy(accept.begin(), accept.end(), a.accept.ptr<uint8_t>());
}

}  // namespace dgemma::cpu
