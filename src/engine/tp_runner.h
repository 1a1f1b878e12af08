#pragma once
// The model runner of a tensor-parallel model: every rank's DiffusionModelRunner runs the same step plan
// on its own thread (forward, vocabulary-sharded sampler, self-conditioning GEMM, decide); the ranks'
// canvases, flags and outputs are identical by construction, so rank 0's result is the step's.
#include <memory>
#include <vector>

#include "engine/diffusion_runner.h"
#include "model/tensor_parallel.h"

namespace dgemma {

class TensorParallelRunner final : public ModelRunner {
 public:
  // Each rank's runner has a pool of its own laid out by `pool` (the rank's KV heads, the same pages).
  // Ownership is shared as DiffusionModelRunner's.
  TensorParallelRunner(std::shared_ptr<TensorParallelModel> tp, const KvPoolPlan& pool,
                       RunnerOptions options = {});
  int canvas_length() const override { return ranks_.front()->canvas_length(); }
  int vocab_size() const override { return ranks_.front()->vocab_size(); }
  // The options' CUDA graphs: every rank records the same denoising steps at once, its collectives
  // inside (Collective::capture); a failed recording fails the start-up (--enforce-eager runs the
  // steps op by op).
  void prepare(WarmUpSteps& steps) override;
  StepResult run(const StepPlan& plan) override;
  void release(const Sequence& seq) override {
    for (auto& r : ranks_) r->release(seq);
  }
  // The batch sizes recorded as CUDA graphs (every rank's alike; empty: none).
  std::vector<int> graph_batches() const { return ranks_.front()->graph_batches(); }

 private:
  std::shared_ptr<TensorParallelModel> tp_;
  std::vector<std::unique_ptr<DiffusionModelRunner>> ranks_;
  bool cuda_graphs_ = false;
};

}  // namespace dgemma
