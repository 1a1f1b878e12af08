#include "engine/data_parallel.h"

#include <algorithm>

#include "util/error.h"

namespace dgemma {

DataParallelEngine::DataParallelEngine(std::vector<std::unique_ptr<EngineInterface>> replicas,
                                       int canvas_length)
    : replicas_(std::move(replicas)),
      canvas_(canvas_length),
      in_flight_(replicas_.size()),
      load_(replicas_.size(), 0) {
  DG_CHECK(!replicas_.empty() && canvas_ >= 1);
}

void DataParallelEngine::prune() const {
  for (size_t r = 0; r < in_flight_.size(); ++r) {
    auto& v = in_flight_[r];
    for (size_t i = 0; i < v.size();) {
      if (v[i].stream->ended()) {
        load_[r] -= v[i].tokens;
        v[i] = std::move(v.back());
        v.pop_back();
      } else {
        ++i;
      }
    }
  }
}

std::vector<uint64_t> DataParallelEngine::page_prefixes(const std::vector<int32_t>& prompt) const {
  std::vector<uint64_t> out;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids' bytes, chained page to page
  const size_t C = static_cast<size_t>(canvas_);
  for (size_t end = C; end <= prompt.size(); end += C) {
    for (size_t i = end - C; i < end; ++i) {
      auto v = static_cast<uint32_t>(prompt[i]);
      for (int b = 0; b < 4; ++b, v >>= 8) h = (h ^ (v & 0xFFu)) * 1099511628211ull;
    }
    out.push_back(h);
  }
  return out;
}

int DataParallelEngine::route_locked(const std::vector<uint64_t>& prefixes, int64_t) const {
  int least = 0;
  for (int r = 1; r < size(); ++r)
    if (load_[static_cast<size_t>(r)] < load_[static_cast<size_t>(least)]) least = r;
  for (size_t k = prefixes.size(); k-- > 0;) {
    const auto it = prefix_owner_.find(prefixes[k]);
    if (it == prefix_owner_.end()) continue;
    const int64_t saved = static_cast<int64_t>(k + 1) * canvas_;
    if (load_[static_cast<size_t>(it->second)] - load_[static_cast<size_t>(least)] <= saved)
      return it->second;
    break;  // the longest match is too busy: balance instead
  }
  return least;
}

int DataParallelEngine::route(const std::vector<int32_t>& prompt, int64_t tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  prune();
  return route_locked(page_prefixes(prompt), tokens);
}

std::vector<int64_t> DataParallelEngine::tokens_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  prune();
  return load_;
}

std::shared_ptr<RequestStream> DataParallelEngine::submit(GenerationRequest request) {
  const int64_t tokens =
      static_cast<int64_t>(request.prompt.size()) + std::max<int64_t>(0, request.params.max_tokens);
  const std::vector<uint64_t> prefixes = page_prefixes(request.prompt);
  std::lock_guard<std::mutex> lock(mu_);
  prune();
  const int r = route_locked(prefixes, tokens);
  // A refusal (bad request, full queue) throws here and changes no count.
  std::shared_ptr<RequestStream> stream = replicas_[static_cast<size_t>(r)]->submit(std::move(request));
  in_flight_[static_cast<size_t>(r)].push_back({stream, tokens});
  load_[static_cast<size_t>(r)] += tokens;
  for (uint64_t h : prefixes) {
    auto [it, added] = prefix_owner_.insert_or_assign(h, r);
    if (added) prefix_order_.push_back(h);
  }
  while (prefix_order_.size() > kMaxPrefixes) {
    prefix_owner_.erase(prefix_order_.front());
    prefix_order_.pop_front();
  }
  return stream;
}

EngineStats DataParallelEngine::stats() const {
  EngineStats s;
  double kv = 0;
  for (const auto& e : replicas_) {
    const EngineStats x = e->stats();
    s.running += x.running;
    s.waiting += x.waiting;
    kv += x.kv_usage;
    s.max_num_seqs += x.max_num_seqs;
    s.max_queue += x.max_queue;
    s.requests_cancelled += x.requests_cancelled;
    s.num_preemptions += x.num_preemptions;
    s.prefix_cache_queries += x.prefix_cache_queries;
    s.prefix_cache_hits += x.prefix_cache_hits;
    s.engine_steps += x.engine_steps;
    s.canvas_length = x.canvas_length;
  }
  s.kv_usage = kv / static_cast<double>(replicas_.size());
  return s;
}

}  // namespace dgemma
