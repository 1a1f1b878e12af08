#pragma once
// The N ranks of one tensor-parallel model in one process, one thread per rank (docs/ARCHITECTURE.md
// "Tensor parallelism"): each rank has its backend, its shard of the weights (model/shard_plan.h) and its
// endpoint of the group's collective, and runs the same DiffusionGemma calls as the others. Threads
// rather than processes: the engine (scheduler, page tables, requests) exists once and hands every rank
// the same step; the weights are read once from the checkpoint's mmap; nothing is serialised between
// ranks but the activations the collectives move.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/collective.h"
#include "model/diffusion_gemma.h"

namespace dgemma {

// Seconds the other ranks get to return from a step once one rank has returned or failed (they run the
// same work, meeting in every collective, so they end within moments of each other).
constexpr double kRankReturnSeconds = 30;

class TensorParallelModel {
 public:
  // The CPU simulation: `size` CPU backends over views of one set of host weights, exchanging through
  // an in-process collective (`group`, of `size` ranks; null: a ThreadCollectiveGroup with the default
  // timeout). `full` is the unsharded model's weights (CPU tensors).
  static std::unique_ptr<TensorParallelModel> cpu(const ModelConfig& config, ModelWeights full, int size,
                                                  std::unique_ptr<CollectiveGroup> group = nullptr,
                                                  double return_seconds = kRankReturnSeconds);
  // Ranks on the given backends joined by `group` (CUDA: one GPU each with NCCL, backend/nccl.h, or
  // several backends of one GPU with the one-device collective, backend/device_collective.h): each rank
  // takes its shard of the host weights `full` (CPU tensors), uploaded to its backend.
  static std::unique_ptr<TensorParallelModel> upload(const ModelConfig& config, const ModelWeights& full,
                                                     std::vector<std::unique_ptr<Backend>> backends,
                                                     std::unique_ptr<CollectiveGroup> group);
  // Any backends and group (one backend per rank, weights already sharded and on the rank's device).
  // return_seconds: run()'s bound on the wait for the other ranks once one has returned or failed.
  TensorParallelModel(std::vector<std::unique_ptr<Backend>> backends, std::unique_ptr<CollectiveGroup> group,
                      const ModelConfig& config, std::vector<ModelWeights> rank_weights,
                      double return_seconds = kRankReturnSeconds);
  ~TensorParallelModel();

  int size() const { return static_cast<int>(ranks_.size()); }
  DiffusionGemma& rank(int r) { return *ranks_[static_cast<size_t>(r)]; }
  Backend& backend(int r) { return *backends_[static_cast<size_t>(r)]; }
  const ModelConfig& config() const { return ranks_.front()->config(); }

  // Runs fn(r) for every rank at once, rank r on its own thread, and waits for them. A rank that dies
  // is fatal, and this is the one place that rules so for every collective (threads, one device, NCCL):
  // when a rank throws (its own error, a collective's timeout, an NCCL error or abort) the group is
  // aborted, so no rank waits on in a collective, and run() throws FatalError naming the first rank
  // that failed and why. Once one rank has returned or failed, the others get return_seconds to
  // return; one that does not is named in the error and left running (the process is about to exit),
  // so run() never hangs. After a failure the model is dead: every later run() throws the same error.
  void run(const std::function<void(int rank)>& fn);
  // Why the model died (empty while healthy).
  const std::string& failure() const { return failure_; }

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::unique_ptr<CollectiveGroup> group_;
  ModelWeights full_;  // keeps the host weights the CPU ranks' views point into alive
  std::vector<std::unique_ptr<DiffusionGemma>> ranks_;
  double return_seconds_;
  std::string failure_;
};

}  // namespace dgemma
