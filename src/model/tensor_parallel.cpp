#include "model/tensor_parallel.h"

#include <exception>
#include <mutex>
#include <thread>

#include "backend/thread_collective.h"
#include "model/weight_upload.h"
#include "util/error.h"

namespace dgemma {

std::unique_ptr<TensorParallelModel> TensorParallelModel::cpu(const ModelConfig& config, ModelWeights full, int size) {
  validate_tensor_parallel(config, size);
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<ModelWeights> weights;
  for (int r = 0; r < size; ++r) {
    backends.push_back(make_cpu_backend());
    weights.push_back(shard_weights(full, config, ShardPlan{r, size}));
  }
  auto tp = std::make_unique<TensorParallelModel>(std::move(backends), std::make_unique<ThreadCollectiveGroup>(size), config,
                                                  std::move(weights));
  // The ranks' fused projections are copies of their slices (shard_weights): the full ones are not
  // needed any more (a rank's views keep alive whatever they point into).
  for (LayerWeights& l : full.layers) l.qkv_proj = l.mlp_gate_up = Weight();
  full.sc_gate_up = Tensor();
  tp->full_ = std::move(full);
  return tp;
}

std::unique_ptr<TensorParallelModel> TensorParallelModel::upload(
    const ModelConfig& config, const ModelWeights& full, std::vector<std::unique_ptr<Backend>> backends,
    std::unique_ptr<CollectiveGroup> group) {
  const int size = static_cast<int>(backends.size());
  validate_tensor_parallel(config, size);
  std::vector<ModelWeights> weights;
  for (int r = 0; r < size; ++r)
    weights.push_back(upload_model_weights(shard_weights(full, config, ShardPlan{r, size}),
                                           *backends[static_cast<size_t>(r)]));
  return std::make_unique<TensorParallelModel>(std::move(backends), std::move(group), config,
                                               std::move(weights));
}

TensorParallelModel::TensorParallelModel(std::vector<std::unique_ptr<Backend>> backends, std::unique_ptr<CollectiveGroup> group,
                                         const ModelConfig& config, std::vector<ModelWeights> rank_weights)
    : backends_(std::move(backends)), group_(std::move(group)) {
  const int n = static_cast<int>(backends_.size());
  DG_CHECK(n >= 1 && group_ && group_->size() == n && static_cast<int>(rank_weights.size()) == n);
  validate_tensor_parallel(config, n);
  for (int r = 0; r < n; ++r) {
    TensorParallelRank tp{ShardPlan{r, n}, n > 1 ? &group_->rank(r) : nullptr};
    ranks_.push_back(std::make_unique<DiffusionGemma>(config, std::move(rank_weights[static_cast<size_t>(r)]),
                                                      *backends_[static_cast<size_t>(r)], tp));
  }
}

TensorParallelModel::~TensorParallelModel() = default;

void TensorParallelModel::run(const std::function<void(int)>& fn) {
  std::mutex mu;
  std::exception_ptr first;
  auto body = [&](int r) {
    try {
      fn(r);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
      group_->abort();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < size(); ++r) threads.emplace_back(body, r);
  body(0);
  for (auto& t : threads) t.join();
  if (first) {
    group_->reset();
    std::rethrow_exception(first);
  }
}

}  // namespace dgemma
