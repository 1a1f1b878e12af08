// dgemma bench: the subcommand. Builds a seeded set of requests, sends one cold request, then runs each
// sweep point (concurrency x request rate) and writes the table, the JSON report and the SVG plot.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "util/error.h"
#include "util/timing.h"

namespace dgemma::cli {
namespace {

// Common short English words: each is one token (with its leading space) in most LLM vocabularies, so
// the prompt length in words is close to its length in tokens. The server's usage gives the exact count.
constexpr const char* kWords[] = {
    "time",  "year",  "people", "way",    "day",   "man",   "thing", "woman", "life",  "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company",
    "system", "program", "question", "work", "number", "night", "point", "home", "water", "room", "mother", "area",
    "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue",
    "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game", "line", "end", "member",
    "law", "car", "city", "name", "team", "minute", "idea", "kid", "body", "back", "parent", "face", "others",
    "level", "office", "door", "health", "person", "art", "war", "history", "party", "result", "change", "morning",
    "reason", "research", "girl", "guy", "moment", "air", "teacher", "force", "education", "good", "new", "first",
    "last", "long", "great", "little", "own", "other", "old", "big", "high", "different", "small", "large", "next",
    "early", "young", "important", "few", "public", "bad", "same", "able", "go", "make", "know", "take", "see",
    "come", "think", "look", "want", "give", "use", "find", "tell", "ask", "seem", "feel", "try", "leave", "call",
    "keep", "let", "begin", "help", "talk", "turn", "start", "show", "hear", "play", "run", "move", "like", "live",
    "believe", "hold", "bring", "happen", "write", "provide", "sit", "stand", "lose", "pay", "meet", "include",
    "continue", "set", "learn", "lead", "understand", "watch", "follow", "stop", "create", "speak", "read", "spend",
    "grow", "open", "walk", "win", "offer", "remember", "love", "consider", "appear", "buy", "wait", "serve", "die",
    "send", "expect", "build", "stay", "fall", "cut", "reach", "kill", "remain", "river", "stone", "light", "tree"};

std::vector<int> parse_int_list(const std::string& s, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    long v = -1;
    try {
      v = std::stol(item, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos == 0 || pos != item.size() || v < 0 || v > 100000) fail_arg("{}: '{}' is not a count in [0, 100000]", flag, item);
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) fail_arg("{}: empty list", flag);
  return out;
}

std::vector<double> parse_rate_list(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "inf") {
      out.push_back(0);
      continue;
    }
    size_t pos = 0;
    double v = -1;
    try {
      v = std::stod(item, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos == 0 || pos != item.size() || !(v > 0) || !std::isfinite(v))
      fail_arg("--request-rate: '{}' is not a rate > 0 (requests/s) or 'inf'", item);
    out.push_back(v);
  }
  if (out.empty()) fail_arg("--request-rate: empty list");
  return out;
}

int draw_len(std::mt19937_64& rng, int len, double ratio) {
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1 + ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::vector<BenchRequest> make_requests(const BenchOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::vector<BenchRequest> out;
  for (int i = 0; i < o.num_prompts; ++i) {
    BenchRequest r;
    const int words = draw_len(rng, o.input_len, o.range_ratio);
    r.max_tokens = draw_len(rng, o.output_len, o.range_ratio);
    for (int w = 0; w < words; ++w) {
      if (w) r.prompt += ' ';
      r.prompt += kWords[std::uniform_int_distribution<size_t>(0, std::size(kWords) - 1)(rng)];
    }
    out.push_back(std::move(r));
  }
  return out;
}

// Arrival offsets in seconds: all 0 for rate inf, else a Poisson process (exponential gaps).
std::vector<double> arrivals(const BenchOptions& o, double rate, size_t n) {
  std::vector<double> t(n, 0);
  if (rate <= 0) return t;
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  std::exponential_distribution<double> gap(rate);
  double at = 0;
  for (size_t i = 0; i < n; ++i) {
    t[i] = at;
    at += gap(rng);
  }
  return t;
}

std::string first_model(const BenchOptions& o) {
  const size_t scheme = o.base_url.find("://");
  const size_t slash = scheme == std::string::npos ? std::string::npos : o.base_url.find('/', scheme + 3);
  const std::string origin = o.base_url.substr(0, slash);
  const std::string prefix = slash == std::string::npos ? "" : o.base_url.substr(slash);
  httplib::Client cli(origin);
  cli.set_connection_timeout(10);
  cli.set_read_timeout(30);
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  // vLLM serves /v1/models; the endpoint's own prefix (before /chat or /completions) is used.
  std::string models_path = o.endpoint.substr(0, o.endpoint.rfind("/chat/completions"));
  if (models_path == o.endpoint) models_path = o.endpoint.substr(0, o.endpoint.rfind("/completions"));
  auto res = cli.Get((prefix + models_path + "/models").c_str(), h);
  if (!res) fail_arg("cannot reach {}: {} (is the server running?)", o.base_url, httplib::to_string(res.error()));
  if (res->status != 200) fail_arg("GET {}/models answered HTTP {}; give --model", models_path, res->status);
  const Json j = parse_json(res->body, "/v1/models", false);
  if (!j.contains("data") || !j["data"].is_array() || j["data"].empty() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string())
    fail_arg("/v1/models lists no model; give --model");
  return j["data"][0]["id"].get<std::string>();
}

RunResult run_point(const BenchOptions& o, const std::string& model, const std::vector<BenchRequest>& reqs, int conc,
                    double rate) {
  RunResult run;
  run.concurrency = conc;
  run.request_rate = rate;
  run.requests.resize(reqs.size());
  const std::vector<double> at = arrivals(o, rate, reqs.size());
  // One thread per request in flight; "unlimited" means up to kMaxInFlight.
  constexpr size_t kMaxInFlight = 1024;
  const size_t cap = conc == 0 ? kMaxInFlight : static_cast<size_t>(conc);
  const size_t workers = std::min(cap, reqs.size());
  std::atomic<size_t> next{0};
  const double t0 = now_seconds();
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < reqs.size();) {
        const double wait = at[i] - (now_seconds() - t0);
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        const double start = now_seconds() - t0;
        try {
          run.requests[i] = send_bench_request(o, model, reqs[i]);
        } catch (const std::exception& e) {
          run.requests[i].error = e.what();
        }
        run.requests[i].start_s = start;
      }
    });
  }
  for (auto& t : pool) t.join();
  run.duration_s = now_seconds() - t0;
  return run;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail_arg("cannot write {}", path);
  f << text;
  if (!f.flush()) fail_arg("cannot write {}", path);
}

int run_bench(BenchOptions o, const std::string& conc_list, const std::string& rate_list) {
  o.concurrency = parse_int_list(conc_list, "--concurrency");
  o.request_rate = parse_rate_list(rate_list);
  if (o.num_prompts < 1 || o.num_prompts > 100000) fail_arg("--num-prompts must be in [1, 100000]");
  if (o.input_len < 1 || o.output_len < 1) fail_arg("--input-len and --output-len must be at least 1");
  if (!(o.range_ratio >= 0 && o.range_ratio < 1)) fail_arg("--range-ratio must be in [0, 1)");
  if (!(o.timeout_s > 0)) fail_arg("--timeout must be > 0");
  if (o.endpoint.empty() || o.endpoint[0] != '/') fail_arg("--endpoint must start with '/' (got '{}')", o.endpoint);
  if (o.endpoint.find("completions") == std::string::npos)
    fail_arg("--endpoint must be a chat/completions or completions path (got '{}')", o.endpoint);
  if (o.base_url.rfind("http://", 0) != 0 && o.base_url.rfind("https://", 0) != 0)
    fail_arg("--base-url must start with http:// or https:// (got '{}')", o.base_url);
  if (o.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) o.api_key = k;
  const std::string model = o.model.empty() ? first_model(o) : o.model;
  const std::vector<BenchRequest> reqs = make_requests(o);

  std::optional<RequestResult> cold;
  if (!o.skip_cold) {
    std::fprintf(stderr, "bench: cold request (one, alone) to %s%s, model %s\n", o.base_url.c_str(), o.endpoint.c_str(),
                 model.c_str());
    cold = send_bench_request(o, model, reqs[0]);
    if (!cold->ok) std::fprintf(stderr, "bench: the cold request failed: %s\n", cold->error.c_str());
  }
  std::vector<RunResult> runs;
  for (int c : o.concurrency)
    for (double r : o.request_rate) {
      std::fprintf(stderr, "bench: %d requests, concurrency %s, request rate %s\n", o.num_prompts,
                   c == 0 ? "unlimited" : std::to_string(c).c_str(), r > 0 ? fmt::format("{:g}/s", r).c_str() : "inf");
      runs.push_back(run_point(o, model, reqs, c, r));
    }
  const Json report = bench_report_json(o, model, cold ? &*cold : nullptr, runs);
  std::fputs(bench_report_table(report).c_str(), stdout);
  std::fflush(stdout);
  if (!o.output_json.empty()) write_file(o.output_json, report.dump(2) + "\n");
  if (!o.plot_svg.empty()) write_file(o.plot_svg, bench_plot_svg(report));
  int64_t ok = 0;
  for (const Json& r : report["runs"]) ok += r["completed"].get<int64_t>();
  if (ok == 0) {
    std::fprintf(stderr, "bench: no request succeeded\n");
    return 1;
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, CommandList& out) {
  auto o = std::make_shared<BenchOptions>();
  auto conc = std::make_shared<std::string>("1");
  auto rate = std::make_shared<std::string>("inf");
  auto* sub = app.add_subcommand("bench", "Load-test an OpenAI-compatible server (dgemma or vLLM): latency, throughput, diffusion stats");
  sub->add_option("--base-url", o->base_url, "server origin, e.g. http://127.0.0.1:8000 (default)");
  sub->add_option("--endpoint", o->endpoint, "/v1/chat/completions (default) or /v1/completions");
  sub->add_option("--model", o->model, "model name (default: the first of /v1/models)");
  sub->add_option("--api-key", o->api_key, "sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)");
  sub->add_option("--concurrency,--max-concurrency", *conc, "comma-separated sweep of requests in flight; 0 = unlimited (at most 1024; default 1)");
  sub->add_option("--request-rate", *rate, "comma-separated sweep of Poisson arrival rates in requests/s, or inf (default)");
  sub->add_option("--num-prompts", o->num_prompts, "requests per sweep point (default 32)");
  sub->add_option("--input-len", o->input_len, "prompt length in words, about one token each (default 64)");
  sub->add_option("--output-len", o->output_len, "max_tokens of each request (default 64)");
  sub->add_option("--range-ratio", o->range_ratio, "lengths drawn uniformly from [len*(1-r), len*(1+r)] (default 0: fixed)");
  sub->add_option("--seed", o->seed, "seed of the prompts, lengths and arrival times (default 0)");
  sub->add_flag("--ignore-eos", o->ignore_eos, "send ignore_eos so every answer runs to max_tokens");
  sub->add_flag("--previews", o->previews, "ask for per-step previews (dgemma) and count them (adds load)");
  sub->add_flag("--skip-cold", o->skip_cold, "no cold single request before the sweep");
  sub->add_option("--canvas-length", o->canvas_length, "canvas length for full-canvas vs short-answer stats (default: from the server)");
  sub->add_option("--timeout", o->timeout_s, "per-request timeout in seconds (default 600)");
  sub->add_option("--output-json", o->output_json, "write the full report (every request) as JSON");
  sub->add_option("--plot", o->plot_svg, "write an SVG: latency CDFs and throughput vs concurrency");
  out.push_back({sub, [o, conc, rate] { return run_bench(*o, *conc, *rate); }});
}

}  // namespace dgemma::cli
