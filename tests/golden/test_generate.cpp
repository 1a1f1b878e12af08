// Whole generate() trajectories against transformers with the same counter-based noise injected:
// every step of every canvas (input canvas, temperature, entropies, accept mask, argmax, sample,
// renoised canvas, stop flag) and the final sequences must match.
#include <fmt/format.h>

#include <cstdio>

#include "golden_util.h"
#include "support/model_core.h"

namespace dgemma::golden {
namespace {

template <typename T>
std::vector<T> row(const NpyArray& a, int64_t r) {
  const int64_t w = a.shape.size() > 1 ? a.shape[1] : 1;
  std::vector<T> out;
  if (a.dtype == "f4") {
    const auto f = a.as_float();
    for (int64_t i = 0; i < w; ++i) out.push_back(static_cast<T>(f[r * w + i]));
  } else {
    const auto v = a.as_int();
    for (int64_t i = 0; i < w; ++i) out.push_back(static_cast<T>(v[r * w + i]));
  }
  return out;
}

struct RunCase {
  std::string fixture;
  std::string run;
};

void PrintTo(const RunCase& r, std::ostream* os) { *os << r.fixture << "/" << r.run; }

class GenerateGolden : public ::testing::TestWithParam<RunCase> {};

TEST_P(GenerateGolden, TrajectoryMatchesTokenForToken) {
  const RunCase rc = GetParam();
  Fixture fx(rc.fixture);
  Json meta;
  for (const auto& r : fx.manifest["runs"])
    if (r["name"] == rc.run) meta = r;
  ASSERT_FALSE(meta.is_null()) << "run " << rc.run << " not in the manifest";
  const int C = fx.config.canvas_length;

  SequenceParams p;
  p.diffusion.max_denoising_steps = meta["max_denoising_steps"].get<int>();
  p.diffusion.entropy_bound = meta["entropy_bound"].get<double>();
  p.diffusion.t_min = meta["t_min"].get<double>();
  p.diffusion.t_max = meta["t_max"].get<double>();
  p.diffusion.stability_threshold = meta["stability_threshold"].get<int>();
  p.diffusion.confidence_threshold = meta["confidence_threshold"].get<double>();
  p.seed = meta["seed"].get<uint64_t>();
  p.max_tokens = meta["max_new_tokens"].get<int64_t>();
  p.eos_ids = {1, 106, 50};
  p.trace = true;
  const std::string pre = "run." + rc.run + ".";
  if (meta["initial_canvas"].get<bool>()) p.initial_canvas = fx.ids(pre + "initial_canvas");

  ModelCore core(*fx.backend, *fx.model);
  std::unique_ptr<Sequence> owned = core.make_sequence(1, fx.ids("prompt_ids"), p);
  Sequence& seq = *owned;
  core.run({&seq}, 10000);
  ASSERT_EQ(seq.state, Sequence::State::kFinished);
  const std::vector<CanvasRecord> canvases = core.traces().canvases(seq.id());

  // Step by step, until the first step where a discrete decision differs. Our GEMMs sum in another
  // order than cuBLAS, so logits differ by bf16 rounding noise (forward test: NMSE <= 1e-4, i.e. a few
  // hundredths in z units). A decision may legitimately differ only where it was a near-tie at that
  // noise level: an argmax or Gumbel-max whose top-2 gap is < kTieZ, an acceptance whose prefix entropy
  // sum is within kTieH of the bound, or a confidence test within kTieH of its threshold. Anything else
  // fails. After a legitimate divergence the two trajectories are unrelated, so comparison stops there.
  constexpr double kTieZ = 0.25, kTieH = 0.1;
  const auto& steps_per_canvas = meta["steps_per_canvas"];
  int matched_steps = 0, total_steps = 0;
  for (const auto& n : steps_per_canvas) total_steps += n.get<int>();
  bool diverged = false;
  std::string divergence;
  for (size_t k = 0; k < steps_per_canvas.size() && !diverged; ++k) {
    ASSERT_LT(k, canvases.size()) << "canvas " << k << " missing before any divergence";
    const CanvasRecord& cr = canvases[k];
    const std::string ck = pre + "c" + std::to_string(k) + ".";
    const NpyArray canvas_in = fx.array(ck + "canvas_in"), temperature = fx.array(ck + "temperature"),
                   entropy = fx.array(ck + "entropy"), accept = fx.array(ck + "accept"), argmax = fx.array(ck + "argmax"),
                   sample = fx.array(ck + "sample"), canvas_out = fx.array(ck + "canvas_out"), stop = fx.array(ck + "stop");
    const auto temps = temperature.as_float();
    const auto stops = stop.as_int();
    const int ref_steps = steps_per_canvas[k].get<int>();
    for (int s = 0; s < ref_steps && !diverged; ++s) {
      SCOPED_TRACE("canvas " + std::to_string(k) + " step " + std::to_string(s));
      ASSERT_LT(s, cr.steps) << "we stopped earlier without a recorded divergence";
      const StepRecord& r = cr.trace[s];
      ASSERT_EQ(r.canvas_in, row<int32_t>(canvas_in, s)) << "input canvas";
      EXPECT_EQ(r.temperature, temps[s]) << "temperature (fp32, exact)";
      const auto we = row<float>(entropy, s);
      // Entropies inherit the logits' rounding noise: |dH| <= 0.1 + 5% (sum p log p is smooth in z).
      for (int i = 0; i < C; ++i)
        EXPECT_LE(std::fabs(static_cast<double>(r.entropy[i]) - we[i]), 0.1 + 0.05 * std::fabs(we[i])) << "entropy at " << i;
      const auto wa = row<int32_t>(argmax, s), ws = row<int32_t>(sample, s);
      const auto wacc = row<uint8_t>(accept, s);
      for (int i = 0; i < C; ++i) {
        if (r.argmax[i] != wa[i]) {
          EXPECT_LT(r.argmax_gap[i], kTieZ) << "argmax differs at " << i << " without a near-tie";
          diverged = true;
        }
        if (r.sample[i] != ws[i]) {
          EXPECT_LT(r.sample_gap[i], kTieZ) << "Gumbel-max sample differs at " << i << " without a near-tie";
          diverged = true;
        }
        if (r.accept[i] != wacc[i]) {
          EXPECT_LT(r.accept_margin[i], kTieH) << "accept decision differs at " << i << " without a near-tie";
          diverged = true;
        }
      }
      if (r.stop != (stops[s] != 0)) {
        float sum = 0;
        for (float h : r.entropy) sum += h;
        const double mean = sum / C;
        const bool argmax_same = r.argmax == wa;
        EXPECT_TRUE(!argmax_same || std::fabs(mean - p.diffusion.confidence_threshold) < kTieH)
            << "stop decision differs without a near-tie (mean entropy " << mean << ")";
        diverged = true;
      }
      if (diverged) {
        divergence = "canvas " + std::to_string(k) + " step " + std::to_string(s);
        break;
      }
      EXPECT_EQ(r.canvas_out, row<int32_t>(canvas_out, s)) << "renoised canvas";
      ++matched_steps;
    }
    if (!diverged) {
      EXPECT_EQ(cr.steps, ref_steps) << "canvas " << k << ": steps used";
    }
  }
  std::printf("%s/%s: %d of %d reference steps identical%s%s\n", rc.fixture.c_str(), rc.run.c_str(), matched_steps,
              total_steps, diverged ? "; near-tie divergence at " : "", divergence.c_str());

  // `dgemma generate` with the same settings prints exactly what the engine produced here.
  {
    auto join = [](const std::vector<int32_t>& v) {
      std::string out;
      for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
      return out;
    };
    std::string cmd = std::string(DGEMMA_BINARY_DIR) + "/dgemma generate " + fixture_dir(rc.fixture) + "/model --device cpu" +
                      " --prompt-ids " + join(fx.ids("prompt_ids")) + " --seed " + std::to_string(p.seed) +
                      " --max-tokens " + std::to_string(p.max_tokens) +
                      " --max-denoising-steps " + std::to_string(p.diffusion.max_denoising_steps) +
                      fmt::format(" --entropy-bound {} --t-min {} --t-max {} --stability-threshold {} --confidence-threshold {}",
                                  p.diffusion.entropy_bound, p.diffusion.t_min, p.diffusion.t_max,
                                  p.diffusion.stability_threshold, p.diffusion.confidence_threshold);
    if (!p.initial_canvas.empty()) cmd += " --canvas-ids " + join(p.initial_canvas);
    FILE* pipe = popen((cmd + " 2>/dev/null").c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    char buf[1 << 16];
    std::string line = fgets(buf, sizeof(buf), pipe) ? buf : "";
    EXPECT_EQ(pclose(pipe), 0) << cmd;
    std::string want;
    for (size_t i = 0; i < seq.output().size(); ++i) want += (i ? " " : "") + std::to_string(seq.output()[i]);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    EXPECT_EQ(line, want) << "dgemma generate output differs: " << cmd;
  }
  if (diverged) return;
  EXPECT_EQ(canvases.size(), steps_per_canvas.size()) << "number of canvases";

  // Final sequence in the reference's format: whole canvases, tokens after the first EOS set to pad.
  std::vector<int32_t> full;
  for (const auto& cr : canvases) full.insert(full.end(), cr.committed.begin(), cr.committed.end());
  bool seen = false;
  for (auto& t : full) {
    if (seen) t = 0;
    else if (std::find(p.eos_ids.begin(), p.eos_ids.end(), t) != p.eos_ids.end()) seen = true;
  }
  EXPECT_EQ(full, fx.ids(pre + "tokens")) << "final sequence";
  // What a client receives: up to the first EOS, at most max_tokens.
  std::vector<int32_t> expected_output;
  for (int32_t t : fx.ids(pre + "tokens")) {
    if (std::find(p.eos_ids.begin(), p.eos_ids.end(), t) != p.eos_ids.end()) break;
    expected_output.push_back(t);
  }
  EXPECT_EQ(seq.output(), expected_output);
  EXPECT_EQ(seq.finish_reason(), meta["eos_canvas"].is_null() ? FinishReason::kLength : FinishReason::kStop);
}

std::vector<RunCase> all_runs() {
  std::vector<RunCase> out;
  for (const char* f : {"tiny_a", "tiny_b"}) {
    const Json m = parse_json(read_text_file(fixture_dir(f) + "/golden/manifest.json"), "manifest", true);
    for (const auto& r : m["runs"]) out.push_back({f, r["name"].get<std::string>()});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Runs, GenerateGolden, ::testing::ValuesIn(all_runs()),
                         [](const ::testing::TestParamInfo<RunCase>& i) { return i.param.fixture + "_" + i.param.run; });

}  // namespace
}  // namespace dgemma::golden
