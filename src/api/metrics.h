#pragma once
// Prometheus text exposition (format 0.0.4), hand-written. Metric names, types and buckets follow vLLM
// (vllm/v1/metrics/loggers.py) under a "dgemma:" prefix, with labels model_name and engine, plus
// block-diffusion metrics: denoising steps per canvas, tokens per denoising step, canvases committed.
// vLLM's families are also exported under their own "vllm:" names, for the gateways, autoscalers and
// dashboards that read those.
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"

namespace dgemma {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts per bound, then the +Inf bucket (== count()).
  std::vector<uint64_t> cumulative() const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last = +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

// vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value.
std::vector<double> buckets_1_2_5(int64_t max_value);

// Formats a sample value / bucket bound the way Python's prometheus_client does (1 -> "1.0").
std::string prom_number(double v);
// Escapes a label value (backslash, double quote, newline).
std::string prom_label_value(std::string_view v);

// Per-request facts the API layer reports when a request ends.
struct RequestRecord {
  std::string finished_reason;  // stop | length | abort | error
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t max_tokens_param = 0;  // 0 if the client did not set it
  int n = 1;
  double e2e_s = 0;
  double ttft_s = -1;            // < 0: no token was produced
  double queue_s = 0, prefill_s = 0, decode_s = 0;
};

class ServerMetrics {
 public:
  ServerMetrics(std::string model_name, int64_t max_model_len);

  void on_canvas(int steps, size_t tokens, double gap_s);  // a committed canvas reached the client
  void on_request_params(int n, int64_t max_tokens_param);
  void on_request_done(const RequestRecord& r);
  void on_http_error();  // a request rejected before it reached the engine

  // Cumulative counts for the periodic stats log line.
  struct Totals {
    uint64_t prompt_tokens = 0, generation_tokens = 0, canvases = 0;
    double denoising_steps = 0;
  };
  Totals totals() const;

  // The full /metrics body; engine gauges come from `stats`.
  std::string render(const EngineStats& stats) const;

 private:
  class Writer;
  void render_vllm_families(Writer& w, const std::string& prefix, const EngineStats& stats) const;

  std::string labels_;  // model_name="...",engine="0"
  double created_s_;    // when the server started (Unix seconds): the LoRA info gauge's value
  mutable std::mutex mu_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0, canvases_ = 0, rejected_ = 0;
  uint64_t success_stop_ = 0, success_length_ = 0, success_abort_ = 0, success_error_ = 0;
  Histogram ttft_, itl_, tpot_, e2e_, queue_, prefill_, decode_, inference_;
  Histogram prompt_len_, gen_len_, n_, max_tokens_;
  Histogram steps_per_canvas_, tokens_per_step_;
};

}  // namespace dgemma
