// The data-parallel router (engine/data_parallel.h) over scripted replicas: a request goes to the
// replica with the fewest tokens in flight, or to the one that took its longest whole-page prefix
// unless that one is busier than the least loaded by more than the prefix it would save; finished
// requests leave the counts; a refused request changes nothing; stats add the replicas'.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/data_parallel.h"
#include "util/error.h"

namespace dgemma {
namespace {

class ScriptedReplica final : public EngineInterface {
 public:
  std::shared_ptr<RequestStream> submit(GenerationRequest request) override {
    if (refuse) throw Error(ErrorKind::kResourceExhausted, "queue full");
    auto s = std::make_shared<RequestStream>(++next_id);
    streams.push_back(s);
    prompts.push_back(request.prompt);
    return s;
  }
  EngineStats stats() const override {
    EngineStats s;
    s.running = static_cast<int64_t>(streams.size());
    s.kv_usage = kv;
    s.max_num_seqs = 4;
    s.prefix_cache_hits = 10;
    s.canvas_length = 4;
    return s;
  }
  int64_t max_model_len() const override { return 1000; }
  int vocab_size() const override { return 100; }

  bool refuse = false;
  double kv = 0;
  uint64_t next_id = 0;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
};

struct Router {
  explicit Router(int n) {
    std::vector<std::unique_ptr<EngineInterface>> r;
    for (int i = 0; i < n; ++i) {
      auto e = std::make_unique<ScriptedReplica>();
      replicas.push_back(e.get());
      r.push_back(std::move(e));
    }
    engine = std::make_unique<DataParallelEngine>(std::move(r), /*canvas_length=*/4);
  }
  std::vector<ScriptedReplica*> replicas;
  std::unique_ptr<DataParallelEngine> engine;
};

GenerationRequest req(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest g;
  g.prompt = std::move(prompt);
  g.params.max_tokens = max_tokens;
  return g;
}

void finish(const std::shared_ptr<RequestStream>& s) {
  RequestEvent ev;
  ev.kind = RequestEvent::Kind::kFinished;
  s->push(ev);
}

TEST(DataParallel, RequestsGoToTheReplicaWithTheFewestTokensInFlight) {
  Router r(3);
  auto a = r.engine->submit(req({1, 2, 3}, 10));  // 13 tokens -> replica 0 (all empty: the lowest)
  auto b = r.engine->submit(req({4, 5}, 3));      // 5 -> replica 1
  auto c = r.engine->submit(req({6}, 1));         // 2 -> replica 2
  auto d = r.engine->submit(req({7}, 1));         // 2 -> replica 2 (least: 2 < 5 < 13)
  EXPECT_EQ(r.replicas[0]->streams.size(), 1u);
  EXPECT_EQ(r.replicas[1]->streams.size(), 1u);
  EXPECT_EQ(r.replicas[2]->streams.size(), 2u);
  EXPECT_EQ(r.engine->tokens_in_flight(), (std::vector<int64_t>{13, 5, 4}));
  finish(a);  // finished requests leave the count, popped or not
  EXPECT_EQ(r.engine->tokens_in_flight(), (std::vector<int64_t>{0, 5, 4}));
  EXPECT_EQ(r.engine->route({9, 9}, 2), 0);
}

TEST(DataParallel, ARequestFollowsItsLongestWholePagePrefix) {
  Router r(2);
  const std::vector<int32_t> doc = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // two whole pages of 4, then one id
  auto a = r.engine->submit(req(doc, 4));                        // replica 0
  auto b = r.engine->submit(req({50, 51}, 4));                   // replica 1 (least loaded)
  EXPECT_EQ(r.replicas[1]->streams.size(), 1u);
  // Same first two pages, another tail: replica 0 although it holds more tokens (13 vs 6), since the
  // difference (7) is within the 8 prefix tokens it would not prefill again.
  EXPECT_EQ(r.engine->route({1, 2, 3, 4, 5, 6, 7, 8, 77}, 4), 0);
  finish(b);  // now 13 vs 0: more than 8 apart, balance wins
  EXPECT_EQ(r.engine->route({1, 2, 3, 4, 5, 6, 7, 8, 77}, 4), 1);
  Router q(2);
  auto c = q.engine->submit(req(doc, 0));   // 9 tokens on replica 0
  auto d = q.engine->submit(req({60}, 2));  // 3 tokens on replica 1
  // 9 - 3 = 6 <= 8 (two pages): the prefix wins; with one page in common (4 tokens) it does not.
  EXPECT_EQ(q.engine->route({1, 2, 3, 4, 5, 6, 7, 8, 77}, 4), 0);
  EXPECT_EQ(q.engine->route({1, 2, 3, 4, 0, 0, 0, 0}, 4), 1);
  // A prompt shorter than a page has no prefix to follow: least loaded.
  EXPECT_EQ(q.engine->route({1, 2, 3}, 4), 1);
  q.engine->submit(req({1, 2, 3, 4, 5, 6, 7, 8, 77}, 4));
  EXPECT_EQ(q.replicas[0]->streams.size(), 2u);
}

TEST(DataParallel, ARefusedRequestChangesNoCount) {
  Router r(2);
  r.replicas[0]->refuse = true;
  EXPECT_THROW(r.engine->submit(req({1, 2, 3, 4}, 5)), Error);
  EXPECT_EQ(r.engine->tokens_in_flight(), (std::vector<int64_t>{0, 0}));
  // Its prefix was not recorded either: the next request with it goes by load alone.
  r.replicas[0]->refuse = false;
  r.engine->submit(req({9}, 5));  // replica 0
  EXPECT_EQ(r.engine->route({1, 2, 3, 4}, 5), 1);
}

TEST(DataParallel, StatsAddTheReplicas) {
  Router r(2);
  r.replicas[0]->kv = 0.2;
  r.replicas[1]->kv = 0.6;
  r.engine->submit(req({1}, 1));
  r.engine->submit(req({2}, 1));
  r.engine->submit(req({3}, 1));
  const EngineStats s = r.engine->stats();
  EXPECT_EQ(s.running, 3);
  EXPECT_EQ(s.max_num_seqs, 8);
  EXPECT_EQ(s.prefix_cache_hits, 20);
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.4);
  EXPECT_EQ(s.canvas_length, 4);
  EXPECT_EQ(r.engine->max_model_len(), 1000);
  EXPECT_EQ(r.engine->size(), 2);
}

}  // namespace
}  // namespace dgemma
