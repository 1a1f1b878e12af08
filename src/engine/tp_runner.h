#pragma once
// The model runner of a tensor-parallel model: every rank's DiffusionModelRunner runs the same step plan
// on its own thread (forward, vocabulary-sharded sampler, self-conditioning GEMM, decide); the ranks'
// canvases, flags and outputs are identical by construction, so rank 0 answers the reads.
#include <memory>
#include <vector>

#include "engine/model_runner.h"
#include "model/tensor_parallel.h"

namespace dgemma {

class TensorParallelRunner final : public ModelRunner {
 public:
  // kv[r]: rank r's pool (allocate_kv_storage with the group's size), alive as long as the runner.
  TensorParallelRunner(TensorParallelModel& tp, const std::vector<KvStorage>& kv);
  int canvas_length() const override { return ranks_.front()->canvas_length(); }
  int vocab_size() const override { return ranks_.front()->vocab_size(); }
  std::vector<DenoiseFlags> run(const StepPlan& plan) override;
  std::vector<int32_t> read_argmax(const Sequence& seq) override { return ranks_.front()->read_argmax(seq); }
  std::vector<float> read_logprobs(const Sequence& seq) override { return ranks_.front()->read_logprobs(seq); }
  TopAlternatives read_top_logprobs(const Sequence& seq) override { return ranks_.front()->read_top_logprobs(seq); }
  std::vector<float> read_entropy(const Sequence& seq) override { return ranks_.front()->read_entropy(seq); }
  std::vector<uint8_t> read_accepted(const Sequence& seq) override { return ranks_.front()->read_accepted(seq); }
  StepRecord read_trace(const Sequence& seq, bool stop) override { return ranks_.front()->read_trace(seq, stop); }
  void release(const Sequence& seq) override {
    for (auto& r : ranks_) r->release(seq);
  }
  // Rank 0's runner (debug dumps: the hook sees rank 0's tensors).
  DiffusionModelRunner& rank0() { return *ranks_.front(); }

 private:
  TensorParallelModel& tp_;
  std::vector<std::unique_ptr<DiffusionModelRunner>> ranks_;
};

}  // namespace dgemma
