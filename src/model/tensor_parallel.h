#pragma once
// The N ranks of one tensor-parallel model in one process, one thread per rank (docs/ARCHITECTURE.md
// "Tensor parallelism"): each rank has its backend, its shard of the weights (model/shard_plan.h) and its
// endpoint of the group's collective, and runs the same DiffusionGemma calls as the others. Threads
// rather than processes: the engine (scheduler, page tables, requests) exists once and hands every rank
// the same step; the weights are read once from the checkpoint's mmap; nothing is serialised between
// ranks but the activations the collectives move.
#include <functional>
#include <memory>
#include <vector>

#include "backend/collective.h"
#include "model/diffusion_gemma.h"

namespace dgemma {

class TensorParallelModel {
 public:
  // The CPU simulation: `size` CPU backends over views of one set of host weights, exchanging through
  // an in-process collective. `full` is the unsharded model's weights (CPU tensors).
  static std::unique_ptr<TensorParallelModel> cpu(const ModelConfig& config, ModelWeights full, int size);
  // Ranks on the given backends joined by `group` (CUDA: one GPU each with NCCL, backend/nccl.h, or
  // several backends of one GPU with the one-device collective, backend/device_collective.h): each rank
  // takes its shard of the host weights `full` (CPU tensors), uploaded to its backend.
  static std::unique_ptr<TensorParallelModel> upload(const ModelConfig& config, const ModelWeights& full,
                                                     std::vector<std::unique_ptr<Backend>> backends,
                                                     std::unique_ptr<CollectiveGroup> group);
  // Any backends and group (one backend per rank, weights already sharded and on the rank's device).
  TensorParallelModel(std::vector<std::unique_ptr<Backend>> backends, std::unique_ptr<CollectiveGroup> group,
                      const ModelConfig& config, std::vector<ModelWeights> rank_weights);
  ~TensorParallelModel();

  int size() const { return static_cast<int>(ranks_.size()); }
  DiffusionGemma& rank(int r) { return *ranks_[static_cast<size_t>(r)]; }
  Backend& backend(int r) { return *backends_[static_cast<size_t>(r)]; }
  const ModelConfig& config() const { return ranks_.front()->config(); }

  // Runs fn(r) for every rank at once, rank r on its own thread (rank 0 on the caller's). When a rank
  // throws, the group is aborted (no rank waits forever in a collective) and the first error rethrown.
  void run(const std::function<void(int rank)>& fn);

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::unique_ptr<CollectiveGroup> group_;
  ModelWeights full_;  // keeps the host weights the CPU ranks' views point into alive
  std::vector<std::unique_ptr<DiffusionGemma>> ranks_;
};

}  // namespace dgemma
