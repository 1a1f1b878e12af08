#pragma once
// The periodic engine stats line, like vLLM's "Avg prompt throughput ..." log: throughput since the
// previous line, running and waiting requests, KV cache use. Quiet while nothing happens.
#include <chrono>

#include "api/metrics.h"
#include "engine/request.h"

namespace dgemma {

class StatsLogger {
 public:
  StatsLogger(const EngineInterface& engine, const ServerMetrics& metrics);
  // Logs one line covering the time since the previous call (or construction).
  void tick();

 private:
  const EngineInterface& engine_;
  const ServerMetrics& metrics_;
  ServerMetrics::Totals last_;
  int64_t last_engine_steps_ = 0;
  std::chrono::steady_clock::time_point last_time_;
  bool last_idle_ = false;
};

}  // namespace dgemma
