#include "cli/stats_log.h"

#include "util/log.h"

namespace dgemma {

StatsLogger::StatsLogger(const EngineInterface& engine, const ServerMetrics& metrics)
    : engine_(engine), metrics_(metrics), last_(metrics.totals()), last_engine_steps_(engine.stats().engine_steps),
      last_time_(std::chrono::steady_clock::now()) {}

void StatsLogger::tick() {
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_time_).count();
  if (dt <= 0) return;
  const ServerMetrics::Totals t = metrics_.totals();
  const EngineStats s = engine_.stats();
  const bool idle = s.running == 0 && s.waiting == 0 && t.generation_tokens == last_.generation_tokens &&
                    t.prompt_tokens == last_.prompt_tokens;
  // One line when the server goes idle, then silence until there is work again.
  if (!(idle && last_idle_)) {
    DG_LOG_INFO("stats",
                "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, "
                "Running: {} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%, engine steps: {:.1f}/s, "
                "canvases: {:.1f}/s, denoising steps per canvas: {:.1f}",
                (t.prompt_tokens - last_.prompt_tokens) / dt, (t.generation_tokens - last_.generation_tokens) / dt,
                s.running, s.waiting, s.kv_usage * 100, (s.engine_steps - last_engine_steps_) / dt,
                (t.canvases - last_.canvases) / dt,
                t.canvases > last_.canvases ? (t.denoising_steps - last_.denoising_steps) / (t.canvases - last_.canvases)
                                            : 0.0);
  }
  last_idle_ = idle;
  last_ = t;
  last_engine_steps_ = s.engine_steps;
  last_time_ = now;
}

}  // namespace dgemma
