#pragma once
// In-process collective for N ranks running on N threads over host memory (the CPU simulation of
// tensor parallelism). A group is created once; each rank takes its endpoint. If a rank fails, the group
// is aborted: every rank waiting in (or later entering) a collective throws instead of hanging; a rank
// that waits longer than the timeout for the others throws and aborts the group likewise.
#include <memory>
#include <vector>

#include "backend/collective.h"

namespace dgemma {

class ThreadCollectiveGroup final : public CollectiveGroup {
 public:
  // timeout_seconds <= 0: wait forever.
  explicit ThreadCollectiveGroup(int size, double timeout_seconds = kDefaultCollectiveTimeoutSeconds);
  ~ThreadCollectiveGroup() override;
  int size() const override;
  Collective& rank(int r) override;
  void abort() override;
  void reset() override;

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::vector<std::unique_ptr<Collective>> ranks_;
};

}  // namespace dgemma
