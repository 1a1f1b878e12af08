#pragma once
// dgemma bench: an HTTP load generator for OpenAI-compatible servers (dgemma or vLLM). It reports what
// `vllm bench serve` reports (TTFT, TPOT, ITL, E2E latency; request and token throughput) and what a
// block-diffusion model needs on top: cold vs warm, full-canvas vs short-answer tok/s, effective tok/s by
// output length, denoising steps per canvas and canvases per request (from dgemma's usage extension).
#include <cstdint>
#include <string>
#include <vector>

#include "util/json.h"

namespace dgemma::cli {

struct BenchOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "/v1/chat/completions";
  std::string model;      // empty: the first name of /v1/models
  std::string api_key;    // empty: $OPENAI_API_KEY, else none
  std::vector<int> concurrency{1};        // 0 = unlimited
  std::vector<double> request_rate{0};    // requests/s, Poisson arrivals; 0 = all at once ("inf")
  int num_prompts = 32;                   // per sweep point
  int input_len = 64;                     // prompt words (about one token each)
  int output_len = 64;                    // max_tokens
  double range_ratio = 0;                 // lengths uniform in [len*(1-r), len*(1+r)]
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool previews = false;                  // ask for preview comments (dgemma) and count them
  bool skip_cold = false;                 // no single cold request before the sweep
  int canvas_length = 0;                  // 0: from the server's usage extension when present
  double timeout_s = 600;
  std::string output_json, plot_svg;
};

struct RequestResult {
  bool ok = false;
  std::string error;
  int64_t max_tokens = 0;       // what was asked for
  int64_t input_tokens = 0;     // usage.prompt_tokens
  int64_t output_tokens = 0;    // usage.completion_tokens
  double start_s = 0;           // since the start of the sweep point
  double ttft_s = 0;            // to the first chunk carrying output
  double e2el_s = 0;
  std::vector<double> itl_s;    // gaps between output chunks
  int64_t canvases = -1;        // dgemma usage extension; -1 when absent
  int64_t denoising_steps = -1;
  int64_t canvas_length = 0;
  int64_t previews = 0;         // preview comment lines seen
  int output_chunks = 0;
};

// One request described by the load generator.
struct BenchRequest {
  std::string prompt;
  int max_tokens = 0;
};

// Sends one streaming request and measures it. Never throws for server-side failures (they land in
// RequestResult::error); throws Error only for a malformed --base-url.
RequestResult send_bench_request(const BenchOptions& o, const std::string& model, const BenchRequest& r);

// Summary statistics of a sample (milliseconds or counts).
struct Summary {
  int64_t count = 0;
  double mean = 0, median = 0, stddev = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
Summary summarize(std::vector<double> v);
// The p-th percentile (0..100) of sorted values, linear interpolation (numpy's default).
double percentile_sorted(const std::vector<double>& sorted, double p);

struct RunResult {
  int concurrency = 0;      // 0: unlimited
  double request_rate = 0;  // 0: inf
  double duration_s = 0;
  std::vector<RequestResult> requests;
};

// Builds the report of the whole benchmark (the JSON written by --output-json).
Json bench_report_json(const BenchOptions& o, const std::string& model, const RequestResult* cold,
                       const std::vector<RunResult>& runs);
// The readable table of a report.
std::string bench_report_table(const Json& report);
// An SVG: the latency CDF of every run, output throughput vs concurrency, effective tok/s by output length.
std::string bench_plot_svg(const Json& report);

}  // namespace dgemma::cli
