// The threaded engine over the scripted runner, as `dgemma serve --load-format scripted:FILE` builds
// it (create_scripted_engine): the script's canvas length is the engine's, FIFO queueing beyond
// max_num_seqs, a bounded queue, cancellation of queued and running requests, a failed canvas as an
// error event with the place freed, context overflow.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "support/scripted_runner.h"
#include "util/error.h"
#include "util/fatal_error.h"

namespace dgemma {
namespace {

using namespace std::chrono_literals;

ScriptTokenizer bytes_tokenizer() {
  ScriptTokenizer t;
  t.encode = [](std::string_view s) {
    std::vector<int32_t> ids;
    for (unsigned char c : s) ids.push_back(256 + c);
    return ids;
  };
  t.decode = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s.push_back(id >= 256 ? static_cast<char>(id - 256) : '?');
    return s;
  };
  return t;
}

std::unique_ptr<EngineInterface> make_engine(int seqs, int queue) {
  EngineConfig c;
  c.model_dir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";  // vocabulary 512
  c.max_num_seqs = seqs;
  c.max_queue = queue;
  c.max_model_len = 512;
  const Json script = Json::parse(R"({
    "canvas_length": 8, "canvas_delay_ms": 1, "steps": 2,
    "replies": [
      {"when": "slow", "canvases": [{"text": "a long and slow answer that takes a while to come", "delay_ms": 200}]},
      {"when": "fail", "canvases": ["12345678", {"error": "device lost"}]},
      {"when": "two", "canvases": ["hello", " world"]}
    ]
  })");
  return create_scripted_engine(c, script, bytes_tokenizer());
}

GenerationRequest req(const std::string& prompt, int64_t max_tokens = 100) {
  GenerationRequest r;
  for (unsigned char c : prompt) r.prompt.push_back(256 + c);
  r.params.max_tokens = max_tokens;
  return r;
}

struct Result {
  std::string text;
  int canvases = 0;
  RequestEvent last;
};

Result collect(RequestStream& s) {
  Result r;
  for (;;) {
    RequestEvent ev;
    if (!s.pop(ev, 20000ms)) {
      ADD_FAILURE() << "engine did not finish";
      return r;
    }
    if (ev.kind == RequestEvent::Kind::kCanvas) {
      for (int32_t id : ev.tokens) r.text.push_back(static_cast<char>(id - 256));
      ++r.canvases;
    }
    if (ev.kind == RequestEvent::Kind::kFinished || ev.kind == RequestEvent::Kind::kError) {
      r.last = ev;
      return r;
    }
  }
}

void wait_until(const std::function<bool()>& cond) {
  for (int i = 0; i < 2000 && !cond(); ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(cond());
}

TEST(ScriptedEngine, RepliesInCanvasesOfTheScriptsLength) {
  auto e = make_engine(2, 4);
  EXPECT_EQ(e->stats().canvas_length, 8);
  auto s = e->submit(req("two words"));
  const Result r = collect(*s);
  EXPECT_EQ(r.text, "hello world");
  EXPECT_EQ(r.canvases, 2);  // 11 tokens and the EOS
  EXPECT_EQ(r.last.reason, FinishReason::kStop);
  EXPECT_EQ(r.last.completion_tokens, 11);
}

TEST(ScriptedEngine, QueueLimitFifoAndCancel) {
  auto e = make_engine(/*seqs=*/1, /*queue=*/2);
  auto a = e->submit(req("slow"));
  wait_until([&] { return e->stats().running == 1; });
  auto b = e->submit(req("slow"));
  auto c = e->submit(req("two"));
  try {
    e->submit(req("two"));
    ADD_FAILURE() << "the queue holds two";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kResourceExhausted);
  }
  b->cancel();
  EXPECT_EQ(collect(*b).last.reason, FinishReason::kAbort);
  a->cancel();
  EXPECT_EQ(collect(*a).last.reason, FinishReason::kAbort);
  const Result rc = collect(*c);
  EXPECT_EQ(rc.text, "hello world");
  EXPECT_EQ(e->stats().requests_cancelled, 2);
  wait_until([&] { return e->stats().running == 0 && e->stats().waiting == 0; });
}

TEST(ScriptedEngine, AFailedCanvasIsAnErrorAndFreesItsPlace) {
  auto e = make_engine(1, 4);
  auto bad = e->submit(req("fail"));
  auto next = e->submit(req("two"));
  const Result r = collect(*bad);
  EXPECT_EQ(r.text, "12345678");  // the canvas before the failing one
  EXPECT_EQ(r.last.kind, RequestEvent::Kind::kError);
  EXPECT_EQ(r.last.message, "device lost");
  EXPECT_EQ(collect(*next).text, "hello world");
  wait_until([&] { return e->stats().running == 0; });
}

TEST(ScriptedEngine, RejectsImpossibleRequests) {
  auto e = make_engine(1, 4);
  for (auto r : {req(""), req("x", 0), req("x", 512), req(std::string(512, 'x'), 1)}) {
    try {
      e->submit(r);
      ADD_FAILURE() << "accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::kInvalidArgument);
    }
  }
}

// Throws from its first run(), as a device error would (or, fatal, as a tensor-parallel model whose rank
// died), then replays the script.
class ThrowOnceRunner final : public ModelRunner {
 public:
  explicit ThrowOnceRunner(std::unique_ptr<ScriptedRunner> inner, bool fatal = false)
      : inner_(std::move(inner)), fatal_(fatal) {}
  int canvas_length() const override { return inner_->canvas_length(); }
  int vocab_size() const override { return inner_->vocab_size(); }
  StepResult run(const StepPlan& plan) override {
    if (!thrown_) {
      thrown_ = true;
      if (fatal_) throw FatalError("tensor-parallel rank 1 failed: NCCL error");
      throw Error(ErrorKind::kInternal, "CUDA error: an illegal memory access");
    }
    return inner_->run(plan);
  }
  void release(const Sequence& s) override { inner_->release(s); }

 private:
  std::unique_ptr<ScriptedRunner> inner_;
  bool fatal_;
  bool thrown_ = false;
};

std::unique_ptr<DiffusionEngine> throw_once_engine(const std::string& reply, bool fatal) {
  EngineConfig c;
  c.max_num_seqs = 2;
  ModelConfig mc = load_model_config(std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model");
  GenerationConfig g = default_generation_config(mc);
  ScriptedRunnerOptions o;
  o.canvas_length = mc.canvas_length;
  o.vocab_size = static_cast<int>(mc.text.vocab_size);
  o.eos_ids = g.eos_token_ids;
  o.tokenizer = bytes_tokenizer();
  auto inner = ScriptedRunner::from_json(
      Json{{"replies", Json::array({Json{{"canvases", Json::array({reply})}}})}}, o);
  EngineSizing sz;
  sz.max_num_seqs = c.max_num_seqs;
  sz.max_model_len = 512;
  sz.max_num_batched_tokens = 128;
  sz.prefill_chunk = 64;
  sz.kv.pages = {32, 32};
  return std::make_unique<DiffusionEngine>(
      c, EngineCore::create(mc, sz, std::make_unique<ThrowOnceRunner>(std::move(inner), fatal)), g);
}

TEST(ScriptedEngine, AFatalRunnerErrorEndsEveryRequestAndStopsTheEngine) {
  auto e = throw_once_engine("fine", /*fatal=*/true);
  EXPECT_EQ(e->failure(), "");
  auto a = e->submit(req("first"));
  auto b = e->submit(req("second"));
  for (RequestStream* s : {a.get(), b.get()}) {
    const Result r = collect(*s);
    EXPECT_EQ(r.last.kind, RequestEvent::Kind::kError);
    EXPECT_EQ(r.last.message, "engine error: tensor-parallel rank 1 failed: NCCL error");
  }
  wait_until([&] { return !e->failure().empty(); });
  EXPECT_EQ(e->failure(), "tensor-parallel rank 1 failed: NCCL error");
  try {
    e->submit(req("third"));
    ADD_FAILURE() << "a stopped engine took a request";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kResourceExhausted);  // 503
    EXPECT_NE(std::string(err.what()).find("the engine has stopped: tensor-parallel rank 1 failed"),
              std::string::npos);
  }
}

TEST(ScriptedEngine, ARunnerExceptionFailsItsStepNotTheServer) {
  EngineConfig c;
  c.max_num_seqs = 2;
  ModelConfig mc = load_model_config(std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model");
  GenerationConfig g = default_generation_config(mc);
  ScriptedRunnerOptions o;
  o.canvas_length = mc.canvas_length;
  o.vocab_size = static_cast<int>(mc.text.vocab_size);
  o.eos_ids = g.eos_token_ids;
  o.tokenizer = bytes_tokenizer();
  auto inner = ScriptedRunner::from_json(Json::parse(R"({"replies": [{"canvases": ["fine"]}]})"), o);
  EngineSizing sz;
  sz.max_num_seqs = c.max_num_seqs;
  sz.max_model_len = 512;
  sz.max_num_batched_tokens = 128;
  sz.prefill_chunk = 64;
  sz.kv.pages = {32, 32};
  DiffusionEngine e(c, EngineCore::create(mc, sz, std::make_unique<ThrowOnceRunner>(std::move(inner))), g);
  auto a = e.submit(req("first"));
  const Result ra = collect(*a);
  EXPECT_EQ(ra.last.kind, RequestEvent::Kind::kError);
  EXPECT_NE(ra.last.message.find("illegal memory access"), std::string::npos) << ra.last.message;
  wait_until([&] { return e.stats().running == 0 && e.stats().waiting == 0; });
  auto b = e.submit(req("second"));
  EXPECT_EQ(collect(*b).text, "fine");
  wait_until([&] { return e.stats().kv_usage == 0.0; });  // no page leaked
}

}  // namespace
}  // namespace dgemma
