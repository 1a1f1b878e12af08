// dgemma bench --plot FILE.svg: latency CDFs (E2E solid, TTFT dashed) of every sweep point, output
// throughput vs concurrency (one line per request rate), and effective tok/s by output length per
// request. Plain SVG 1.1, written by hand: no dependency.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "cli/bench.h"

namespace dgemma::cli {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
// The throughput lines get their own colours: they mean request rates, not sweep points.
constexpr const char* kRateColors[] = {"#222222", "#8c564b", "#7f7f7f", "#bcbd22", "#e377c2", "#17becf"};
constexpr int kPanelW = 440, kPanelH = 300, kLeft = 60, kTop = 40, kGap = 90;

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A "nice" axis maximum and tick step (1, 2 or 5 times a power of ten) covering [0, v].
std::pair<double, double> nice_axis(double v) {
  if (!(v > 0)) return {1, 0.25};
  const double raw = v / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  return {std::ceil(v / step) * step, step};
}

std::string fmt_tick(double v) {
  if (v >= 10000) return fmt::format("{:.0f}k", v / 1000);
  if (v >= 10 || v == 0) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

struct Panel {
  double x0, y0;  // top-left of the plot area
  double xmax, ymax;
  double px(double x) const { return x0 + kPanelW * (xmax > 0 ? x / xmax : 0); }
  double py(double y) const { return y0 + kPanelH * (1 - (ymax > 0 ? y / ymax : 0)); }
};

void axes(std::string& s, const Panel& p, double xstep, double ystep, const std::string& xlabel, const std::string& ylabel,
          const std::string& title, bool numeric_x) {
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", p.x0, p.y0, kPanelW, kPanelH);
  for (double y = 0; y <= p.ymax + 1e-9 && ystep > 0; y += ystep) {
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", p.x0, p.py(y), p.x0 + kPanelW, p.py(y));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", p.x0 - 6, p.py(y) + 4, fmt_tick(y));
  }
  if (numeric_x)
    for (double x = 0; x <= p.xmax + 1e-9 && xstep > 0; x += xstep) {
      s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", p.px(x), p.y0, p.px(x), p.y0 + kPanelH);
      s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", p.px(x), p.y0 + kPanelH + 16, fmt_tick(x));
    }
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", p.x0 + kPanelW / 2.0, p.y0 + kPanelH + 36, esc(xlabel));
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.1f} {:.1f})\">{}</text>\n",
                   p.x0 - 44, p.y0 + kPanelH / 2.0, p.x0 - 44, p.y0 + kPanelH / 2.0, esc(ylabel));
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\n", p.x0 + kPanelW / 2.0, p.y0 - 12, esc(title));
}

std::string run_label(const Json& r) {
  const int c = r["concurrency"].get<int>();
  const std::string rate = r["request_rate"].is_string() ? "inf" : fmt::format("{:g}", r["request_rate"].get<double>());
  return fmt::format("c={} rate={}", c == 0 ? std::string("unl.") : std::to_string(c), rate);
}

std::vector<double> sorted_field(const Json& run, const char* field) {
  std::vector<double> v;
  for (const Json& q : run["requests"])
    if (q["ok"].get<bool>()) v.push_back(q[field].get<double>());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

std::string bench_plot_svg(const Json& rep) {
  const Json& runs = rep["runs"];
  const int width = kLeft + 2 * kPanelW + kGap + 180, height = 2 * (kTop + kPanelH + 70);
  std::string s = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);

  // Left: latency CDFs.
  double lmax = 0;
  for (const Json& r : runs)
    for (const Json& q : r["requests"])
      if (q["ok"].get<bool>()) lmax = std::max(lmax, q["e2el_ms"].get<double>());
  auto [xmax, xstep] = nice_axis(lmax);
  Panel left{kLeft, kTop, xmax, 1.0};
  axes(s, left, xstep, 0.2, "latency (ms)", "fraction of requests", "Latency CDF (E2E solid, TTFT dashed)", true);
  for (size_t i = 0; i < runs.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    for (const char* field : {"e2el_ms", "ttft_ms"}) {
      const std::vector<double> v = sorted_field(runs[i], field);
      if (v.empty()) continue;
      std::string pts = fmt::format("{:.1f},{:.1f}", left.px(0), left.py(0));
      for (size_t k = 0; k < v.size(); ++k) {
        const double f0 = static_cast<double>(k) / v.size(), f1 = static_cast<double>(k + 1) / v.size();
        pts += fmt::format(" {:.1f},{:.1f} {:.1f},{:.1f}", left.px(v[k]), left.py(f0), left.px(v[k]), left.py(f1));
      }
      s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{} points=\"{}\"/>\n", color,
                       field[0] == 't' ? " stroke-dasharray=\"5,3\"" : "", pts);
    }
  }

  // Right: output throughput vs concurrency, one line per request rate. Concurrency levels are spaced
  // evenly (they are usually powers of two); "unlimited" goes last.
  std::vector<int> levels;
  std::map<std::string, std::vector<std::pair<int, double>>> by_rate;
  double tmax = 0;
  for (const Json& r : runs) {
    const int c = r["concurrency"].get<int>();
    if (std::find(levels.begin(), levels.end(), c) == levels.end()) levels.push_back(c);
    const std::string rate = r["request_rate"].is_string() ? "inf" : fmt::format("{:g}", r["request_rate"].get<double>());
    by_rate[rate].push_back({c, r["output_throughput"].get<double>()});
    tmax = std::max(tmax, r["output_throughput"].get<double>());
  }
  auto order = [](int c) { return c == 0 ? 1 << 30 : c; };
  std::sort(levels.begin(), levels.end(), [&](int a, int b) { return order(a) < order(b); });
  auto [ymax, ystep] = nice_axis(tmax);
  Panel right{kLeft + kPanelW + kGap, kTop, static_cast<double>(levels.size() + 1), ymax};
  axes(s, right, 0, ystep, "concurrency", "output tokens/s", "Output throughput vs concurrency", false);
  auto level_x = [&](int c) {
    return static_cast<double>(std::find(levels.begin(), levels.end(), c) - levels.begin() + 1);
  };
  for (int c : levels)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", right.px(level_x(c)),
                     right.y0 + kPanelH + 16, c == 0 ? std::string("unl.") : std::to_string(c));
  size_t ci = 0;
  const double legend_x = right.x0 + kPanelW + 16;
  double legend_y = kTop + 4;
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-weight=\"bold\">throughput</text>\n", legend_x, legend_y);
  legend_y += 16;
  for (auto& [rate, pts] : by_rate) {
    const char* color = kRateColors[ci++ % std::size(kRateColors)];
    std::sort(pts.begin(), pts.end(), [&](auto& a, auto& b) { return order(a.first) < order(b.first); });
    std::string line;
    for (auto& [c, t] : pts) {
      line += fmt::format("{:.1f},{:.1f} ", right.px(level_x(c)), right.py(t));
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>\n", right.px(level_x(c)), right.py(t), color);
    }
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>\n", color, line);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"{}\">rate {}</text>\n", legend_x, legend_y, color, esc(rate));
    legend_y += 16;
  }
  // Below: effective tok/s of every request against its output length, the figure that a single
  // tok/s number hides for a diffusion model (a short answer still pays for whole canvases).
  double omax = 0, emax = 0;
  for (const Json& r : runs)
    for (const Json& q : r["requests"])
      if (q["ok"].get<bool>()) {
        omax = std::max(omax, static_cast<double>(q["output_tokens"].get<int64_t>()));
        emax = std::max(emax, q["effective_tok_s"].get<double>());
      }
  auto [oxmax, oxstep] = nice_axis(omax);
  auto [eymax, eystep] = nice_axis(emax);
  Panel below{kLeft, kTop + kPanelH + 70 + kTop, oxmax, eymax};
  axes(s, below, oxstep, eystep, "output tokens", "tokens/s of the request (tokens / E2E)",
       "Effective tok/s by output length, per request (dotted: canvas multiples)", true);
  for (size_t i = 0; i < runs.size(); ++i)
    for (const Json& q : runs[i]["requests"])
      if (q["ok"].get<bool>())
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\" fill-opacity=\"0.7\"/>\n",
                         below.px(static_cast<double>(q["output_tokens"].get<int64_t>())),
                         below.py(q["effective_tok_s"].get<double>()), kColors[i % std::size(kColors)]);
  const Json& first = runs.empty() ? Json() : runs[0]["diffusion"]["canvas_length"];
  if (first.is_number_integer() && first.get<double>() <= oxmax)
    for (double x = first.get<double>(); x <= oxmax; x += first.get<double>())
      s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#999\" "
                       "stroke-dasharray=\"2,3\"/>\n", below.px(x), below.y0, below.y0 + kPanelH);

  // Legend of the sweep-point colours (CDFs and the per-request points).
  legend_y += 10;
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-weight=\"bold\">sweep points</text>\n", legend_x, legend_y);
  legend_y += 16;
  for (size_t i = 0; i < runs.size() && i < 16; ++i) {
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"{}\">{}</text>\n", legend_x, legend_y,
                     kColors[i % std::size(kColors)], esc(run_label(runs[i])));
    legend_y += 16;
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#666\">{}</text>\n", kLeft, height - 8,
                   esc(fmt::format("dgemma bench — {} {} — model {}", rep["base_url"].get<std::string>(),
                                   rep["endpoint"].get<std::string>(), rep["model"].get<std::string>())));
  s += "</svg>\n";
  return s;
}

}  // namespace dgemma::cli
