// dgemma bench results: statistics, the JSON report (--output-json) and the readable table.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "cli/bench.h"

namespace dgemma::cli {
namespace {

Json summary_json(const Summary& s) {
  return Json{{"count", s.count}, {"mean", s.mean}, {"median", s.median}, {"std", s.stddev},
              {"p90", s.p90},     {"p99", s.p99},   {"min", s.min},       {"max", s.max}};
}

double tok_s(const RequestResult& r) { return r.e2el_s > 0 ? static_cast<double>(r.output_tokens) / r.e2el_s : 0; }

Json request_json(const RequestResult& r) {
  Json itl = Json::array();
  for (double g : r.itl_s) itl.push_back(g * 1e3);
  Json j{{"ok", r.ok},
         {"max_tokens", r.max_tokens},
         {"input_tokens", r.input_tokens},
         {"output_tokens", r.output_tokens},
         {"start_s", r.start_s},
         {"ttft_ms", r.ttft_s * 1e3},
         {"e2el_ms", r.e2el_s * 1e3},
         {"tpot_ms", r.output_tokens > 1 ? Json((r.e2el_s - r.ttft_s) * 1e3 / static_cast<double>(r.output_tokens - 1))
                                         : Json(nullptr)},
         {"itl_ms", std::move(itl)},
         {"effective_tok_s", tok_s(r)},
         {"output_chunks", r.output_chunks},
         {"canvases", r.canvases >= 0 ? Json(r.canvases) : Json(nullptr)},
         {"denoising_steps", r.denoising_steps >= 0 ? Json(r.denoising_steps) : Json(nullptr)},
         {"previews", r.previews}};
  if (!r.ok) j["error"] = r.error;
  return j;
}

// Power-of-two output-length bins: [1,2), [2,4), ... (0 tokens is its own bin).
Json by_output_len(const std::vector<const RequestResult*>& ok) {
  std::vector<std::pair<int64_t, std::vector<double>>> bins;
  for (const auto* r : ok) {
    int64_t lo = 0;
    if (r->output_tokens > 0) {
      lo = 1;
      while (lo * 2 <= r->output_tokens) lo *= 2;
    }
    auto it = std::find_if(bins.begin(), bins.end(), [&](const auto& b) { return b.first == lo; });
    if (it == bins.end()) {
      bins.push_back({lo, {}});
      it = bins.end() - 1;
    }
    it->second.push_back(tok_s(*r));
  }
  std::sort(bins.begin(), bins.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Json out = Json::array();
  for (auto& [lo, v] : bins) {
    const Summary s = summarize(v);
    out.push_back(Json{{"min_tokens", lo}, {"max_tokens", lo == 0 ? 0 : lo * 2 - 1}, {"requests", s.count},
                       {"mean_tok_s", s.mean}, {"median_tok_s", s.median}});
  }
  return out;
}

Json run_json(const BenchOptions& o, const RunResult& run) {
  std::vector<const RequestResult*> ok;
  Json errors = Json::array();
  for (const auto& r : run.requests) {
    if (r.ok) ok.push_back(&r);
    else if (errors.size() < 5) errors.push_back(r.error);
  }
  int64_t in = 0, out = 0;
  std::vector<double> ttft, tpot, itl, e2el, eff, full, shrt, canvases, steps_per_canvas;
  int64_t canvas_length = o.canvas_length;
  for (const auto* r : ok)
    if (canvas_length == 0 && r->canvas_length > 0) canvas_length = r->canvas_length;
  for (const auto* r : ok) {
    in += r->input_tokens;
    out += r->output_tokens;
    ttft.push_back(r->ttft_s * 1e3);
    e2el.push_back(r->e2el_s * 1e3);
    if (r->output_tokens > 1) tpot.push_back((r->e2el_s - r->ttft_s) * 1e3 / static_cast<double>(r->output_tokens - 1));
    for (double g : r->itl_s) itl.push_back(g * 1e3);
    eff.push_back(tok_s(*r));
    if (canvas_length > 0) (r->output_tokens >= canvas_length ? full : shrt).push_back(tok_s(*r));
    if (r->canvases >= 0) canvases.push_back(static_cast<double>(r->canvases));
    if (r->canvases > 0 && r->denoising_steps >= 0)
      steps_per_canvas.push_back(static_cast<double>(r->denoising_steps) / static_cast<double>(r->canvases));
  }
  const double d = run.duration_s > 0 ? run.duration_s : 1e-9;
  Json requests = Json::array();
  for (const auto& r : run.requests) requests.push_back(request_json(r));
  Json diffusion{{"canvas_length", canvas_length > 0 ? Json(canvas_length) : Json(nullptr)},
                 {"effective_tok_s", summary_json(summarize(eff))},
                 {"full_canvas_tok_s", summary_json(summarize(full))},
                 {"short_answer_tok_s", summary_json(summarize(shrt))},
                 {"by_output_len", by_output_len(ok)},
                 {"canvases_per_request", summary_json(summarize(canvases))},
                 {"steps_per_canvas", summary_json(summarize(steps_per_canvas))}};
  return Json{{"concurrency", run.concurrency},
              {"request_rate", run.request_rate > 0 ? Json(run.request_rate) : Json("inf")},
              {"num_prompts", run.requests.size()},
              {"completed", ok.size()},
              {"failed", run.requests.size() - ok.size()},
              {"errors", std::move(errors)},
              {"duration_s", run.duration_s},
              {"total_input_tokens", in},
              {"total_output_tokens", out},
              {"request_throughput", static_cast<double>(ok.size()) / d},
              {"output_throughput", static_cast<double>(out) / d},
              {"total_token_throughput", static_cast<double>(in + out) / d},
              {"ttft_ms", summary_json(summarize(ttft))},
              {"tpot_ms", summary_json(summarize(tpot))},
              {"itl_ms", summary_json(summarize(itl))},
              {"e2el_ms", summary_json(summarize(e2el))},
              {"diffusion", std::move(diffusion)},
              {"requests", std::move(requests)}};
}

std::string rate_text(const Json& rate) { return rate.is_string() ? "inf" : fmt::format("{:g}", rate.get<double>()); }
std::string conc_text(const Json& c) { return c.get<int>() == 0 ? "unlimited" : std::to_string(c.get<int>()); }

void line(std::string& out, const std::string& label, const std::string& value) {
  out += fmt::format("{:<44}{:>14}\n", label, value);
}
void num(std::string& out, const std::string& label, double v) { line(out, label, fmt::format("{:.2f}", v)); }
void title(std::string& out, const std::string& t) {
  const size_t w = 58, n = t.size() + 2;
  const size_t left = n < w ? (w - n) / 2 : 0, right = n < w ? w - n - left : 0;
  out += std::string(left, '-') + " " + t + " " + std::string(right, '-') + "\n";
}
void latency_block(std::string& out, const Json& s, const std::string& name, const std::string& longname) {
  title(out, longname);
  num(out, "Mean " + name + " (ms):", s["mean"].get<double>());
  num(out, "Median " + name + " (ms):", s["median"].get<double>());
  num(out, "P90 " + name + " (ms):", s["p90"].get<double>());
  num(out, "P99 " + name + " (ms):", s["p99"].get<double>());
}

}  // namespace

double percentile_sorted(const std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const double pos = (p / 100.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Summary summarize(std::vector<double> v) {
  Summary s;
  s.count = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.stddev = std::sqrt(var / static_cast<double>(v.size()));
  s.median = percentile_sorted(v, 50);
  s.p90 = percentile_sorted(v, 90);
  s.p99 = percentile_sorted(v, 99);
  s.min = v.front();
  s.max = v.back();
  return s;
}

Json bench_report_json(const BenchOptions& o, const std::string& model, const RequestResult* cold,
                       const std::vector<RunResult>& runs) {
  Json j{{"tool", "dgemma bench"},
         {"base_url", o.base_url},
         {"endpoint", o.endpoint},
         {"model", model},
         {"num_prompts", o.num_prompts},
         {"input_len", o.input_len},
         {"output_len", o.output_len},
         {"range_ratio", o.range_ratio},
         {"seed", o.seed},
         {"ignore_eos", o.ignore_eos},
         {"cold", cold ? request_json(*cold) : Json(nullptr)}};
  Json rs = Json::array();
  for (const auto& r : runs) rs.push_back(run_json(o, r));
  // Warm: the medians of the first sweep point, to set against the single cold request.
  if (!rs.empty() && rs[0]["completed"].get<int64_t>() > 0) {
    const Json& r0 = rs[0];
    j["warm"] = Json{{"ttft_ms", r0["ttft_ms"]["median"]},
                     {"e2el_ms", r0["e2el_ms"]["median"]},
                     {"effective_tok_s", r0["diffusion"]["effective_tok_s"]["median"]}};
  } else {
    j["warm"] = nullptr;
  }
  j["runs"] = std::move(rs);
  return j;
}

std::string bench_report_table(const Json& rep) {
  std::string out;
  for (const Json& r : rep["runs"]) {
    out += "\n";
    title(out, fmt::format("dgemma bench: concurrency {}, request rate {}", conc_text(r["concurrency"]),
                           rate_text(r["request_rate"])));
    line(out, "Successful requests:", std::to_string(r["completed"].get<int64_t>()));
    line(out, "Failed requests:", std::to_string(r["failed"].get<int64_t>()));
    for (const Json& e : r["errors"]) out += "  error: " + e.get<std::string>() + "\n";
    num(out, "Benchmark duration (s):", r["duration_s"].get<double>());
    line(out, "Total input tokens:", std::to_string(r["total_input_tokens"].get<int64_t>()));
    line(out, "Total generated tokens:", std::to_string(r["total_output_tokens"].get<int64_t>()));
    num(out, "Request throughput (req/s):", r["request_throughput"].get<double>());
    num(out, "Output token throughput (tok/s):", r["output_throughput"].get<double>());
    num(out, "Total token throughput (tok/s):", r["total_token_throughput"].get<double>());
    latency_block(out, r["ttft_ms"], "TTFT", "Time to First Token");
    latency_block(out, r["tpot_ms"], "TPOT", "Time per Output Token (excl. 1st token)");
    latency_block(out, r["itl_ms"], "ITL", "Inter-token Latency (per chunk = canvas)");
    latency_block(out, r["e2el_ms"], "E2EL", "End-to-end Latency");
    const Json& d = r["diffusion"];
    title(out, "Diffusion");
    num(out, "Effective tok/s per request, mean:", d["effective_tok_s"]["mean"].get<double>());
    num(out, "Effective tok/s per request, median:", d["effective_tok_s"]["median"].get<double>());
    if (!d["canvas_length"].is_null()) {
      const int64_t L = d["canvas_length"].get<int64_t>();
      line(out, "Canvas length (tokens):", std::to_string(L));
      line(out, fmt::format("Full-canvas answers (>= {} tokens):", L),
           fmt::format("{} @ {:.2f}", d["full_canvas_tok_s"]["count"].get<int64_t>(), d["full_canvas_tok_s"]["mean"].get<double>()));
      line(out, fmt::format("Short answers (< {} tokens):", L),
           fmt::format("{} @ {:.2f}", d["short_answer_tok_s"]["count"].get<int64_t>(), d["short_answer_tok_s"]["mean"].get<double>()));
    }
    if (d["canvases_per_request"]["count"].get<int64_t>() > 0) {
      num(out, "Canvases per request, mean:", d["canvases_per_request"]["mean"].get<double>());
      num(out, "Denoising steps per canvas, mean:", d["steps_per_canvas"]["mean"].get<double>());
      num(out, "Denoising steps per canvas, P90:", d["steps_per_canvas"]["p90"].get<double>());
    } else {
      line(out, "Steps per canvas:", "n/a (no dgemma usage extension)");
    }
    out += "Effective tok/s by output length:\n";
    for (const Json& b : d["by_output_len"])
      out += fmt::format("  {:>13} tokens: {:>5} requests, mean {:>9.2f} tok/s\n",
                         fmt::format("{}-{}", b["min_tokens"].get<int64_t>(), b["max_tokens"].get<int64_t>()),
                         b["requests"].get<int64_t>(), b["mean_tok_s"].get<double>());
  }
  out += "\n";
  title(out, "Summary");
  if (!rep["cold"].is_null()) {
    const Json& c = rep["cold"];
    out += fmt::format("cold (first request): TTFT {:.1f} ms, E2E {:.1f} ms, {} tokens, {:.2f} tok/s{}\n",
                       c["ttft_ms"].get<double>(), c["e2el_ms"].get<double>(), c["output_tokens"].get<int64_t>(),
                       c["effective_tok_s"].get<double>(), c["ok"].get<bool>() ? "" : " (failed)");
  }
  if (!rep["warm"].is_null()) {
    const Json& w = rep["warm"];
    out += fmt::format("warm (median, first sweep point): TTFT {:.1f} ms, E2E {:.1f} ms, {:.2f} tok/s\n",
                       w["ttft_ms"].get<double>(), w["e2el_ms"].get<double>(), w["effective_tok_s"].get<double>());
  }
  out += fmt::format("{:>10} {:>6} {:>7} {:>10} {:>10} {:>10} {:>10} {:>9}\n", "concurr.", "rate", "req/s", "out tok/s",
                     "TTFT p50", "E2E p50", "E2E p99", "steps/cv");
  for (const Json& r : rep["runs"]) {
    const Json& spc = r["diffusion"]["steps_per_canvas"];
    out += fmt::format("{:>10} {:>6} {:>7.2f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>9}\n", conc_text(r["concurrency"]),
                       rate_text(r["request_rate"]), r["request_throughput"].get<double>(),
                       r["output_throughput"].get<double>(), r["ttft_ms"]["median"].get<double>(),
                       r["e2el_ms"]["median"].get<double>(), r["e2el_ms"]["p99"].get<double>(),
                       spc["count"].get<int64_t>() > 0 ? fmt::format("{:.1f}", spc["mean"].get<double>()) : std::string("n/a"));
  }
  return out;
}

}  // namespace dgemma::cli
