// One set of limits (engine/limits.h): a request the API accepts at a boundary is accepted by the engine,
// one past the boundary is refused by both, naming the same parameter; the engine factory refuses a
// --max-num-seqs past the limit the CLI uses.
#include <gtest/gtest.h>

#include <string>

#include "api/openai/openai_request.h"
#include "engine/engine_config.h"
#include "engine/limits.h"
#include "engine/request.h"
#include "util/error.h"

namespace dgemma {
namespace {

RequestPolicy policy() {
  RequestPolicy p;
  p.served_names = {"dg"};
  p.vocab_size = 1000;
  p.is_allowed_template_kwarg = [](std::string_view) { return false; };
  return p;
}

Json chat_body(const Json& extra) {
  Json b = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
  return b;
}

std::unique_ptr<EngineInterface> tiny_engine() {
  EngineConfig c;
  c.model_dir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";
  c.device = "cpu";
  c.max_num_seqs = 1;
  c.max_model_len = 512;
  return create_model_engine(c);
}

// Parses `extra` with the API; on success submits the parsed parameters to the engine (and cancels
// the request at once: only the engine's up-front validation is under test). Returns the parameter the
// first layer to refuse names ("" when both accept), and which layer refused.
struct Verdict {
  std::string api_param;     // "" : the API accepted
  std::string engine_param;  // "" : the engine accepted (only tried when the API accepted)
};

Verdict check(EngineInterface& engine, const Json& extra) {
  Verdict v;
  ParsedRequest parsed;
  try {
    parsed = parse_chat_request(chat_body(extra), policy());
  } catch (const Error& e) {
    v.api_param = e.param().empty() ? "?" : e.param();
    return v;
  }
  GenerationRequest g;
  g.prompt = {2, 105, 7};
  g.params = parsed.sampling;
  g.params.max_tokens = 4;
  try {
    engine.submit(std::move(g))->cancel();
  } catch (const Error& e) {
    v.engine_param = e.param().empty() ? "?" : e.param();
  }
  return v;
}

TEST(Limits, TheApiAndTheEngineAgreeAtEveryBoundary) {
  auto engine = tiny_engine();
  struct Case {
    const char* param;
    Json at_limit, past_limit;
  };
  const Case cases[] = {
      {"max_denoising_steps", limits::kMaxDenoisingSteps, limits::kMaxDenoisingSteps + 1},
      {"temperature", limits::kMaxTemperature, limits::kMaxTemperature + 0.01},
      {"entropy_bound", limits::kMaxEntropyBound, limits::kMaxEntropyBound * 1.01},
      {"t_max", limits::kMaxScheduleTemperature, limits::kMaxScheduleTemperature * 1.01},
      {"stability_threshold", limits::kMaxStabilityThreshold, limits::kMaxStabilityThreshold + 1},
      {"confidence_threshold", limits::kMaxConfidenceThreshold, limits::kMaxConfidenceThreshold * 1.01},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.param);
    const Verdict ok = check(*engine, {{c.param, c.at_limit}});
    EXPECT_EQ(ok.api_param, "");
    EXPECT_EQ(ok.engine_param, "");
    const Verdict bad = check(*engine, {{c.param, c.past_limit}});
    EXPECT_EQ(bad.api_param, c.param);
  }
  // The lower ends: temperature 0 (greedy) and t_min 0 pass both layers.
  for (const Json& extra : {Json{{"temperature", limits::kMinTemperature}}, Json{{"t_min", 0.0}},
                            Json{{"max_denoising_steps", 1}}, Json{{"stability_threshold", 0}}}) {
    SCOPED_TRACE(extra.dump());
    const Verdict ok = check(*engine, extra);
    EXPECT_EQ(ok.api_param, "");
    EXPECT_EQ(ok.engine_param, "");
  }
}

TEST(Limits, TheEngineRefusesWhatTheApiWouldHaveRefused) {
  // Parameters that reach the engine by another road (the CLI's generate, a direct submit) meet the same
  // bounds: one past each limit is refused, naming the parameter.
  auto engine = tiny_engine();
  auto submit = [&](auto set) {
    GenerationRequest g;
    g.prompt = {2, 105, 7};
    g.params.max_tokens = 4;
    set(g.params);
    try {
      engine->submit(std::move(g))->cancel();
    } catch (const Error& e) {
      return e.param();
    }
    return std::string();
  };
  EXPECT_EQ(submit([](SamplingParams& p) { p.max_denoising_steps = limits::kMaxDenoisingSteps + 1; }),
            "max_denoising_steps");
  EXPECT_EQ(submit([](SamplingParams& p) { p.temperature = limits::kMaxTemperature + 0.01; }), "temperature");
  EXPECT_EQ(submit([](SamplingParams& p) { p.temperature = limits::kMinTemperature - 0.01; }), "temperature");
  EXPECT_EQ(submit([](SamplingParams& p) { p.stability_threshold = limits::kMaxStabilityThreshold + 1; }),
            "stability_threshold");
  EXPECT_EQ(submit([](SamplingParams& p) { p.entropy_bound = limits::kMaxEntropyBound * 2; }), "entropy_bound");
  EXPECT_EQ(submit([](SamplingParams& p) {
              p.t_min = 0;
              p.t_max = limits::kMaxScheduleTemperature * 2;
            }),
            "t_max");
  EXPECT_EQ(submit([](SamplingParams& p) { p.confidence_threshold = limits::kMaxConfidenceThreshold * 2; }),
            "confidence_threshold");
  EXPECT_EQ(submit([](SamplingParams& p) { p.max_denoising_steps = limits::kMaxDenoisingSteps; }), "");
}

TEST(Limits, TheFactoryTakesExactlyTheCliRangeOfMaxNumSeqs) {
  EngineConfig c;
  c.model_dir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";
  c.device = "cpu";
  c.max_model_len = 512;
  c.max_num_seqs = limits::kMaxNumSeqs + 1;
  try {
    create_model_engine(c);
    ADD_FAILURE() << "max_num_seqs past the limit was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-num-seqs"), std::string::npos) << e.what();
  }
  c.max_num_seqs = 1;
  c.max_queue = limits::kMaxQueue + 1;
  EXPECT_THROW(create_model_engine(c), Error);
  c.max_queue = limits::kMaxQueue;
  EXPECT_NO_THROW(create_model_engine(c));
}

// The context-length message, in vLLM's wording, is written in one place for the engine and the API.
TEST(Limits, ContextLengthMessage) {
  EXPECT_EQ(limits::context_length_message(4096, 4000, 200),
            "This model's maximum context length is 4096 tokens. However, you requested 4200 tokens (4000 in the "
            "messages, 200 in the completion). Please reduce the length of the messages or completion.");
  EXPECT_NE(limits::context_length_message(10, 8, 4, "prompt").find("(8 in the prompt, 4 in the completion)"),
            std::string::npos);
  EngineConfig c;
  c.model_dir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";
  c.device = "cpu";
  c.load_format = "dummy";
  c.max_model_len = 64;
  auto engine = create_model_engine(c);
  GenerationRequest r;
  r.prompt = {2, 105, 7};
  r.params.max_tokens = 100;
  try {
    engine->submit(r);
    ADD_FAILURE() << "a request past max_model_len was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.what(), limits::context_length_message(64, 3, 100));
    EXPECT_EQ(e.param(), "max_tokens");
  }
}

}  // namespace
}  // namespace dgemma
