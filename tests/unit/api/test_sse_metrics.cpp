// SSE framing and the Prometheus text format.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>

#include "api/http/sse.h"
#include "api/metrics.h"

namespace dgemma {
namespace {

TEST(Sse, Framing) {
  EXPECT_EQ(sse_data(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("ping"), ": ping\n\n");
  // A newline inside a comment would end it and turn the rest into a field: flattened.
  EXPECT_EQ(sse_comment("a\nb\rc"), ": a b c\n\n");
  // JSON escapes keep data on one line.
  EXPECT_EQ(sse_data(Json{{"t", "x\ny"}}), "data: {\"t\":\"x\\ny\"}\n\n");
  // Invalid UTF-8 (an engine bug or a cut byte sequence) never throws: it becomes U+FFFD.
  EXPECT_EQ(json_text(Json(std::string("a\xff"))), "\"a\xEF\xBF\xBD\"");
}

TEST(Metrics, HistogramBuckets) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 5.0, 7.0}) h.observe(v);
  h.observe(std::numeric_limits<double>::quiet_NaN());  // ignored
  EXPECT_EQ(h.cumulative(), (std::vector<uint64_t>{2, 3, 4, 5}));  // le semantics: 1.0 falls in le="1"
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 15.0);
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(1), (std::vector<double>{1}));
  EXPECT_EQ(buckets_1_2_5(262144).back(), 200000);
  EXPECT_EQ(prom_number(1), "1.0");
  EXPECT_EQ(prom_number(0.001), "0.001");
  EXPECT_EQ(prom_number(2560), "2560.0");
  EXPECT_EQ(prom_number(1e20), "1e+20");
  EXPECT_EQ(prom_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(Metrics, TextFormatParsesAndCounts) {
  ServerMetrics m("my \"model\"", 1000);
  m.on_request_params(2, 100);
  m.on_canvas(8, 16, -1);
  m.on_canvas(4, 16, 0.2);
  RequestRecord r;
  r.finished_reason = "length";
  r.prompt_tokens = 12;
  r.generation_tokens = 32;
  r.e2e_s = 1.2;
  r.ttft_s = 0.4;
  r.queue_s = 0.1;
  r.prefill_s = 0.05;
  r.decode_s = 1.0;
  m.on_request_done(r);
  r.finished_reason = "abort";
  m.on_request_done(r);
  EngineStats s;
  s.running = 3;
  s.waiting = 7;
  s.kv_usage = 0.25;
  s.requests_cancelled = 1;
  const std::string text = m.render(s);

  // Every line is a HELP, a TYPE or a sample; each family's TYPE precedes its samples.
  const std::regex sample_re(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$)");
  std::istringstream in(text);
  std::string line, current_family;
  std::map<std::string, double> samples;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string type;
      t >> current_family >> type;
      EXPECT_TRUE(type == "gauge" || type == "counter" || type == "histogram") << line;
      continue;
    }
    std::smatch mt;
    ASSERT_TRUE(std::regex_match(line, mt, sample_re)) << line;
    EXPECT_EQ(mt[1].str().rfind(current_family, 0), 0u) << line << " outside family " << current_family;
    EXPECT_EQ(mt[2].str().rfind("model_name=\"my \\\"model\\\"\",engine=\"0\"", 0), 0u) << line;
    samples[mt[1].str() + "{" + mt[2].str() + "}"] = std::stod(mt[3].str());
  }
  const std::string L = "model_name=\"my \\\"model\\\"\",engine=\"0\"";
  EXPECT_EQ(samples["dgemma:num_requests_running{" + L + "}"], 3);
  EXPECT_EQ(samples["dgemma:num_requests_waiting{" + L + "}"], 7);
  EXPECT_EQ(samples["dgemma:kv_cache_usage_perc{" + L + "}"], 0.25);
  EXPECT_EQ(samples["dgemma:request_success_total{" + L + ",finished_reason=\"length\"}"], 1);
  EXPECT_EQ(samples["dgemma:request_success_total{" + L + ",finished_reason=\"abort\"}"], 1);
  EXPECT_EQ(samples["dgemma:generation_tokens_total{" + L + "}"], 64);
  EXPECT_EQ(samples["dgemma:prompt_tokens_total{" + L + "}"], 24);
  EXPECT_EQ(samples["dgemma:canvases_committed_total{" + L + "}"], 2);
  EXPECT_EQ(samples["dgemma:requests_cancelled_total{" + L + "}"], 1);
  EXPECT_EQ(samples["dgemma:denoising_steps_per_canvas_sum{" + L + "}"], 12);
  EXPECT_EQ(samples["dgemma:tokens_per_denoising_step_sum{" + L + "}"], 16.0 / 8 + 16.0 / 4);
  EXPECT_EQ(samples["dgemma:inter_token_latency_seconds_count{" + L + "}"], 1);  // the first canvas has no gap
  EXPECT_EQ(samples["dgemma:time_to_first_token_seconds_bucket{" + L + ",le=\"0.25\"}"], 0);
  EXPECT_EQ(samples["dgemma:time_to_first_token_seconds_bucket{" + L + ",le=\"0.5\"}"], 2);
  EXPECT_EQ(samples["dgemma:time_to_first_token_seconds_bucket{" + L + ",le=\"+Inf\"}"], 2);
  EXPECT_EQ(samples["dgemma:request_params_n_bucket{" + L + ",le=\"2.0\"}"], 1);
  EXPECT_EQ(samples["dgemma:request_prompt_tokens_bucket{" + L + ",le=\"1000.0\"}"], 2);
  // TPOT = (e2e - ttft) / (tokens - 1)
  EXPECT_NEAR(samples["dgemma:request_time_per_output_token_seconds_sum{" + L + "}"], 2 * 0.8 / 31, 1e-12);
  EXPECT_NEAR(samples["dgemma:request_inference_time_seconds_sum{" + L + "}"], 2 * 1.05, 1e-12);
}

}  // namespace
}  // namespace dgemma
