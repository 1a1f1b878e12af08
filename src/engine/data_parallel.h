#pragma once
// Data parallelism (--data-parallel-size N): N engine replicas (one per GPU on CUDA, each a whole
// model; CPU: N engines of the CPU backend) behind one API server. Each request goes to one replica:
//   - the replica that last took a request with the longest common prefix of whole canvas-sized pages
//     (the prefix cache works in such pages, so that replica likely still holds them), unless its
//     tokens in flight exceed the least loaded replica's by more than the prefix tokens it would save;
//   - else the replica with the fewest tokens in flight (prompt + max_tokens of its unfinished
//     requests; ties: the lowest index).
// Results do not depend on the replica: a seeded request gives the same answer on any of them.
// stats() adds the replicas' counters (kv_usage: their mean).
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"

namespace dgemma {

class DataParallelEngine final : public EngineInterface {
 public:
  // replicas: at least one, all of the same model; canvas_length: the model's (the page of routing).
  DataParallelEngine(std::vector<std::unique_ptr<EngineInterface>> replicas, int canvas_length);
  std::shared_ptr<RequestStream> submit(GenerationRequest request) override;
  EngineStats stats() const override;
  int64_t max_model_len() const override { return replicas_.front()->max_model_len(); }
  int vocab_size() const override { return replicas_.front()->vocab_size(); }
  // A replica that stopped for good stops the whole server (the first one's reason).
  std::string failure() const override {
    for (const auto& r : replicas_)
      if (std::string why = r->failure(); !why.empty()) return why;
    return {};
  }

  int size() const { return static_cast<int>(replicas_.size()); }
  // The replica submit would pick for this prompt now, and the tokens in flight of each (tests, logs).
  int route(const std::vector<int32_t>& prompt, int64_t tokens) const;
  std::vector<int64_t> tokens_in_flight() const;
  EngineStats replica_stats(int r) const { return replicas_[static_cast<size_t>(r)]->stats(); }

 private:
  struct InFlight {
    std::shared_ptr<RequestStream> stream;
    int64_t tokens;
  };
  void prune() const;  // mu_ held: drops finished requests from the counts
  // Hashes of the prompt's whole-page prefixes: [0, C), [0, 2C), ... (chained).
  std::vector<uint64_t> page_prefixes(const std::vector<int32_t>& prompt) const;
  int route_locked(const std::vector<uint64_t>& prefixes, int64_t tokens) const;

  std::vector<std::unique_ptr<EngineInterface>> replicas_;
  const int canvas_;
  mutable std::mutex mu_;
  mutable std::vector<std::vector<InFlight>> in_flight_;
  mutable std::vector<int64_t> load_;
  std::unordered_map<uint64_t, int> prefix_owner_;  // page-prefix hash -> replica that last took it
  std::deque<uint64_t> prefix_order_;               // insertion order, for the bound below
  static constexpr size_t kMaxPrefixes = 1 << 16;
};

}  // namespace dgemma
