#include "api/metrics.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace dgemma {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  if (!std::isfinite(v)) return;
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // first bound >= v (le)
  ++counts_[static_cast<size_t>(it - bounds_.begin())];
  ++count_;
  sum_ += v;
}

std::vector<uint64_t> Histogram::cumulative() const {
  std::vector<uint64_t> out(counts_.size());
  uint64_t acc = 0;
  for (size_t i = 0; i < counts_.size(); ++i) out[i] = acc += counts_[i];
  return out;
}

std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1; scale <= max_value && scale > 0; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(static_cast<double>(m * scale));
    }
    if (scale > INT64_MAX / 10) break;
  }
  return out;
}

std::string prom_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string prom_label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

namespace {

const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0, 20.0,
                                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kNBuckets = {1, 2, 5, 10, 20};
const std::vector<double> kStepsBuckets = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 256};
const std::vector<double> kTokensPerStepBuckets = {0.5, 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 256};

}  // namespace

class ServerMetrics::Writer {
 public:
  explicit Writer(const std::string& labels) : labels_(labels) {}

  void header(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(std::string_view name, double v, std::string_view extra_labels = {}) {
    out_ += fmt::format("{}{{{}{}{}}} {}\n", name, labels_, extra_labels.empty() ? "" : ",", extra_labels,
                        prom_number(v));
  }
  void gauge(std::string_view name, std::string_view help, double v) {
    header(name, "gauge", help);
    sample(name, v);
  }
  void counter(std::string_view name, std::string_view help, double v) {
    header(name, "counter", help);
    sample(name, v);
  }
  void histogram(std::string_view name, std::string_view help, const Histogram& h) {
    header(name, "histogram", help);
    const auto cum = h.cumulative();
    const std::string bucket = fmt::format("{}_bucket", name);
    for (size_t i = 0; i < h.bounds().size(); ++i)
      sample(bucket, static_cast<double>(cum[i]), fmt::format("le=\"{}\"", prom_number(h.bounds()[i])));
    sample(bucket, static_cast<double>(cum.back()), "le=\"+Inf\"");
    sample(fmt::format("{}_count", name), static_cast<double>(h.count()));
    sample(fmt::format("{}_sum", name), h.sum());
  }
  std::string take() { return std::move(out_); }

 private:
  const std::string& labels_;
  std::string out_;
};

ServerMetrics::ServerMetrics(std::string model_name, int64_t max_model_len)
    : labels_(fmt::format("model_name=\"{}\",engine=\"0\"", prom_label_value(model_name))),
      created_s_(static_cast<double>(std::time(nullptr))),
      ttft_(kTtftBuckets),
      itl_(kTokenLatencyBuckets),
      tpot_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets),
      queue_(kRequestLatencyBuckets),
      prefill_(kRequestLatencyBuckets),
      decode_(kRequestLatencyBuckets),
      inference_(kRequestLatencyBuckets),
      prompt_len_(buckets_1_2_5(std::max<int64_t>(1, max_model_len))),
      gen_len_(buckets_1_2_5(std::max<int64_t>(1, max_model_len))),
      n_(kNBuckets),
      max_tokens_(buckets_1_2_5(std::max<int64_t>(1, max_model_len))),
      steps_per_canvas_(kStepsBuckets),
      tokens_per_step_(kTokensPerStepBuckets) {}

void ServerMetrics::on_canvas(int steps, size_t tokens, double gap_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++canvases_;
  if (steps > 0) {
    steps_per_canvas_.observe(steps);
    tokens_per_step_.observe(static_cast<double>(tokens) / steps);
  }
  if (gap_s >= 0) itl_.observe(gap_s);
}

void ServerMetrics::on_request_params(int n, int64_t max_tokens_param) {
  std::lock_guard<std::mutex> lock(mu_);
  n_.observe(n);
  if (max_tokens_param > 0) max_tokens_.observe(static_cast<double>(max_tokens_param));
}

void ServerMetrics::on_request_done(const RequestRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (r.finished_reason == "stop") ++success_stop_;
  else if (r.finished_reason == "length") ++success_length_;
  else if (r.finished_reason == "abort") ++success_abort_;
  else ++success_error_;
  prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, r.prompt_tokens));
  generation_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, r.generation_tokens));
  e2e_.observe(r.e2e_s);
  if (r.ttft_s >= 0) ttft_.observe(r.ttft_s);
  if (r.ttft_s >= 0 && r.generation_tokens > 1)
    tpot_.observe((r.e2e_s - r.ttft_s) / static_cast<double>(r.generation_tokens - 1));
  queue_.observe(r.queue_s);
  prefill_.observe(r.prefill_s);
  decode_.observe(r.decode_s);
  inference_.observe(r.prefill_s + r.decode_s);
  prompt_len_.observe(static_cast<double>(r.prompt_tokens));
  gen_len_.observe(static_cast<double>(r.generation_tokens));
}

void ServerMetrics::on_http_error() {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_;
}

// The families vLLM exports, under `prefix` ("dgemma:" or "vllm:"), with vLLM's names, types, help and
// buckets, so that dashboards, autoscalers and routers written for vLLM read them unchanged.
void ServerMetrics::render_vllm_families(Writer& w, const std::string& prefix,
                                         const EngineStats& stats) const {
  auto n = [&](std::string_view name) { return prefix + std::string(name); };
  w.gauge(n("num_requests_running"), "Number of requests in model execution batches.",
          static_cast<double>(stats.running));
  w.gauge(n("num_requests_waiting"), "Number of requests waiting to be processed.",
          static_cast<double>(stats.waiting));
  w.gauge(n("kv_cache_usage_perc"), "KV-cache usage. 1 means 100 percent usage.", stats.kv_usage);
  w.counter(n("prefix_cache_queries_total"), "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<double>(stats.prefix_cache_queries));
  w.counter(n("prefix_cache_hits_total"), "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<double>(stats.prefix_cache_hits));
  w.counter(n("num_preemptions_total"), "Cumulative number of preemption from the engine.",
            static_cast<double>(stats.num_preemptions));
  w.counter(n("prompt_tokens_total"), "Number of prefill tokens processed.",
            static_cast<double>(prompt_tokens_));
  w.counter(n("generation_tokens_total"), "Number of generation tokens processed.",
            static_cast<double>(generation_tokens_));
  w.header(n("request_success_total"), "counter", "Count of successfully processed requests.");
  w.sample(n("request_success_total"), static_cast<double>(success_stop_), "finished_reason=\"stop\"");
  w.sample(n("request_success_total"), static_cast<double>(success_length_), "finished_reason=\"length\"");
  w.sample(n("request_success_total"), static_cast<double>(success_abort_), "finished_reason=\"abort\"");
  w.sample(n("request_success_total"), static_cast<double>(success_error_), "finished_reason=\"error\"");
  w.histogram(n("request_prompt_tokens"), "Number of prefill tokens processed.", prompt_len_);
  w.histogram(n("request_generation_tokens"), "Number of generation tokens processed.", gen_len_);
  w.histogram(n("request_params_n"), "Histogram of the n request parameter.", n_);
  w.histogram(n("request_params_max_tokens"), "Histogram of the max_tokens request parameter.", max_tokens_);
  w.histogram(n("time_to_first_token_seconds"), "Histogram of time to first token in seconds.", ttft_);
  w.histogram(n("inter_token_latency_seconds"),
              "Histogram of inter-token latency in seconds (one observation per committed canvas).", itl_);
  w.histogram(n("request_time_per_output_token_seconds"),
              "Histogram of time_per_output_token_seconds per request.", tpot_);
  w.histogram(n("e2e_request_latency_seconds"), "Histogram of e2e request latency in seconds.", e2e_);
  w.histogram(n("request_queue_time_seconds"), "Histogram of time spent in WAITING phase for request.",
              queue_);
  w.histogram(n("request_inference_time_seconds"), "Histogram of time spent in RUNNING phase for request.",
              inference_);
  w.histogram(n("request_prefill_time_seconds"), "Histogram of time spent in PREFILL phase for request.",
              prefill_);
  w.histogram(n("request_decode_time_seconds"), "Histogram of time spent in DECODE phase for request.",
              decode_);
}

std::string ServerMetrics::render(const EngineStats& stats) const {
  std::lock_guard<std::mutex> lock(mu_);
  Writer w(labels_);
  render_vllm_families(w, "dgemma:", stats);
  // Block-diffusion specifics.
  w.histogram("dgemma:denoising_steps_per_canvas", "Denoising steps used by each committed canvas.",
              steps_per_canvas_);
  w.histogram("dgemma:tokens_per_denoising_step",
              "Tokens committed per denoising step (canvas tokens / steps), per committed canvas.", tokens_per_step_);
  w.counter("dgemma:canvases_committed_total", "Committed canvases delivered to clients.",
            static_cast<double>(canvases_));
  w.counter("dgemma:requests_cancelled_total", "Requests dropped by the engine after a cancel (queued or running).",
            static_cast<double>(stats.requests_cancelled));
  w.counter("dgemma:requests_rejected_total", "Requests rejected before reaching the engine (4xx/5xx).",
            static_cast<double>(rejected_));
  w.counter("dgemma:engine_steps_total", "Forward passes of the engine loop.", static_cast<double>(stats.engine_steps));
  w.gauge("dgemma:max_num_seqs", "Configured maximum number of running requests.",
          static_cast<double>(stats.max_num_seqs));
  w.gauge("dgemma:canvas_length", "Tokens per diffusion canvas.", static_cast<double>(stats.canvas_length));
  // The same under vLLM's own prefix, for what reads vLLM's names (Kubernetes gateways, autoscalers,
  // routers, dashboards), plus the two names older readers use: the KV usage under its former name
  // and the LoRA info gauge (no adapters here) that LoRA-aware routers expect.
  render_vllm_families(w, "vllm:", stats);
  w.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage (former name).",
          stats.kv_usage);
  w.header("vllm:lora_requests_info", "gauge", "Running stats on LoRA requests.");
  w.sample("vllm:lora_requests_info", created_s_,
           "max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"");
  return w.take();
}

ServerMetrics::Totals ServerMetrics::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  Totals t;
  t.prompt_tokens = prompt_tokens_;
  t.generation_tokens = generation_tokens_;
  t.canvases = canvases_;
  t.denoising_steps = steps_per_canvas_.sum();
  return t;
}

}  // namespace dgemma
