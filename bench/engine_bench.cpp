// Engine-level benchmark through the composition root (create_model_engine, as `dgemma serve` builds
// its engine): dummy weights of any config, requests submitted to the threaded engine.
//   dgemma_engine_bench MODEL_DIR concurrency [--requests N] [--prompt-len P] [--max-tokens T] [--steps S]
//                       [--max-model-len L] [--max-num-seqs M] [--gpu-memory-utilization U] [--no-prefix-caching]
//       N requests of P distinct random tokens submitted at once: all must finish; reports time to first
//       canvas, peak running requests, KV usage and preemptions.
//   dgemma_engine_bench MODEL_DIR prefix [--prefix-len P] [--suffix-len Q] [--steps S] [--no-prefix-caching] ...
//       time to first canvas of a request with a P-token shared prefix (a system prompt) when another
//       request with the same prefix ran before it, and cached tokens / prefix hit rate.
// Built on the GPU machine by scripts/device_build.sh (target dgemma_engine_bench).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_config.h"
#include "engine/request.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timing.h"

using namespace dgemma;

namespace {

struct Outcome {
  double ttfc_ms = -1, total_ms = 0;
  int64_t tokens = 0, cached = 0;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

Outcome drain(RequestStream& s, double t0) {
  Outcome o;
  RequestEvent ev;
  while (s.pop(ev, std::chrono::seconds(600))) {
    if (ev.kind == RequestEvent::Kind::kCanvas) {
      if (o.ttfc_ms < 0) o.ttfc_ms = (now_seconds() - t0) * 1e3;
      o.tokens += static_cast<int64_t>(ev.tokens.size());
    } else if (ev.kind == RequestEvent::Kind::kFinished || ev.kind == RequestEvent::Kind::kError) {
      o.reason = ev.reason;
      o.cached = ev.cached_tokens;
      o.error = ev.message;
      break;
    }
  }
  o.total_ms = (now_seconds() - t0) * 1e3;
  return o;
}

int g_vocab = 262144;

std::vector<int32_t> tokens(int n, uint32_t salt) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint32_t x = 2463534242u ^ (salt * 2654435761u);
  for (auto& t : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    t = static_cast<int32_t>(3 + x % static_cast<uint32_t>(g_vocab - 3));
  }
  v[0] = 2;
  return v;
}

GenerationRequest request(std::vector<int32_t> prompt, int64_t max_tokens, int steps, uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  r.params.max_denoising_steps = steps;
  r.params.confidence_threshold = 1e-30;  // no early stop: every canvas takes the step cap
  r.params.ignore_eos = true;
  r.params.seed = seed;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dgemma_engine_bench MODEL_DIR concurrency|prefix [options] (see the file header)\n");
    return 2;
  }
  EngineConfig c;
  c.model_dir = argv[1];
  c.load_format = "dummy";
  c.device = "auto";
  const std::string scenario = argv[2];
  int requests = 64, prompt_len = 8192, steps = 4, prefix_len = 4000, suffix_len = 64;
  int64_t max_tokens = 256;
  c.max_num_seqs = 64;
  for (int i = 3; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (k == "--requests") requests = std::atoi(next().c_str());
    else if (k == "--prompt-len") prompt_len = std::atoi(next().c_str());
    else if (k == "--max-tokens") max_tokens = std::atoll(next().c_str());
    else if (k == "--steps") steps = std::atoi(next().c_str());
    else if (k == "--prefix-len") prefix_len = std::atoi(next().c_str());
    else if (k == "--suffix-len") suffix_len = std::atoi(next().c_str());
    else if (k == "--max-model-len") c.max_model_len = std::atoll(next().c_str());
    else if (k == "--max-num-seqs") c.max_num_seqs = std::atoi(next().c_str());
    else if (k == "--gpu-memory-utilization") c.gpu_memory_utilization = std::atof(next().c_str());
    else if (k == "--no-prefix-caching") c.enable_prefix_caching = false;
    else if (k == "--device") c.device = next();
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    Stopwatch load;
    auto engine = create_model_engine(c);
    g_vocab = engine->vocab_size();
    std::printf("engine up in %.1f s (prefix caching %s)\n", load.seconds(), c.enable_prefix_caching ? "on" : "off");
    if (scenario == "concurrency") {
      std::vector<std::shared_ptr<RequestStream>> streams;
      const double t0 = now_seconds();
      for (int i = 0; i < requests; ++i) streams.push_back(engine->submit(request(tokens(prompt_len, i + 1), max_tokens, steps, i + 1)));
      std::atomic<bool> done{false};
      int64_t peak_running = 0;
      double peak_kv = 0;
      std::thread watch([&] {
        while (!done) {
          const EngineStats s = engine->stats();
          peak_running = std::max(peak_running, s.running);
          peak_kv = std::max(peak_kv, s.kv_usage);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      });
      std::vector<Outcome> out;
      for (auto& s : streams) out.push_back(drain(*s, t0));
      done = true;
      watch.join();
      int ok = 0;
      double ttfc_max = 0, ttfc_sum = 0;
      for (const auto& o : out) {
        ok += o.reason == FinishReason::kLength && o.tokens == max_tokens;
        ttfc_max = std::max(ttfc_max, o.ttfc_ms);
        ttfc_sum += o.ttfc_ms;
        if (!o.error.empty()) std::printf("error: %s\n", o.error.c_str());
      }
      const EngineStats s = engine->stats();
      std::printf("concurrency: %d requests x %d prompt tokens, %lld max tokens, %d steps: %d finished with all tokens; "
                  "wall %.1f s; time to first canvas mean %.1f s, max %.1f s; peak running %lld, peak KV use %.1f%%, "
                  "preemptions %lld\n",
                  requests, prompt_len, static_cast<long long>(max_tokens), steps, ok, (now_seconds() - t0),
                  ttfc_sum / requests / 1e3, ttfc_max / 1e3, static_cast<long long>(peak_running), 100 * peak_kv,
                  static_cast<long long>(s.num_preemptions));
      return ok == requests ? 0 : 1;
    }
    if (scenario == "prefix") {
      // Warm-up (kernels, allocator) with an unrelated prompt, then the same prefix twice.
      drain(*engine->submit(request(tokens(prefix_len + suffix_len, 999), 256, steps, 1)), now_seconds());
      const std::vector<int32_t> prefix = tokens(prefix_len, 7);
      auto with_suffix = [&](uint32_t salt) {
        std::vector<int32_t> p = prefix;
        const auto s = tokens(suffix_len + 1, salt);
        p.insert(p.end(), s.begin() + 1, s.end());
        return p;
      };
      const EngineStats before = engine->stats();
      double t0 = now_seconds();
      const Outcome a = drain(*engine->submit(request(with_suffix(11), 256, steps, 2)), t0);
      t0 = now_seconds();
      const Outcome b = drain(*engine->submit(request(with_suffix(12), 256, steps, 3)), t0);
      const EngineStats after = engine->stats();
      const double queried = static_cast<double>(after.prefix_cache_queries - before.prefix_cache_queries);
      const double hits = static_cast<double>(after.prefix_cache_hits - before.prefix_cache_hits);
      std::printf("prefix: %d-token shared prefix + %d-token suffix, %d steps: first request TTFC %.1f ms (cached %lld), "
                  "second TTFC %.1f ms (cached %lld); hit rate %.1f%% of %0.f prompt tokens\n",
                  prefix_len, suffix_len, steps, a.ttfc_ms, static_cast<long long>(a.cached), b.ttfc_ms,
                  static_cast<long long>(b.cached), queried > 0 ? 100 * hits / queried : 0.0, queried);
      return 0;
    }
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dgemma_engine_bench: %s\n", e.what());
    return 1;
  }
}
