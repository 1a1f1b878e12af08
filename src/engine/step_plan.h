#pragma once
// What the scheduler asks the model runner to do in one engine step.
#include <cstdint>
#include <vector>

namespace dgemma {

class Sequence;

struct PlannedItem {
  enum class Kind {
    kEncode,   // causal pass over history tokens [begin, end) (a prompt chunk or a committed canvas)
    kDenoise,  // one denoising step of the sequence's current canvas (after its encode item, if any)
  };
  Sequence* seq = nullptr;
  Kind kind = Kind::kEncode;
  int64_t begin = 0, end = 0;  // kEncode: history range
};

struct StepPlan {
  std::vector<PlannedItem> items;
  std::vector<Sequence*> preempted;  // sequences sent back to the waiting queue while planning
  std::vector<Sequence*> admitted;   // sequences admitted while planning
  int64_t tokens = 0;                // tokens of all items
  bool empty() const { return items.empty(); }
};

}  // namespace dgemma
