// The compiled-constraint cache (src/guided/constraint_cache.h): hits by canonical key and
// vocabulary, the entry and byte bounds, failures not cached, concurrent use.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "guided/constraint_cache.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

std::shared_ptr<const TokenVocabulary> vocabulary() {
  std::vector<std::string> pieces = {""};
  std::vector<TokenKind> kinds = {TokenKind::kFiller};
  for (int b = 0x20; b < 0x7F; ++b) {
    pieces.emplace_back(1, static_cast<char>(b));
    kinds.push_back(TokenKind::kText);
  }
  return TokenVocabulary::from_pieces(pieces, kinds);
}

TEST(GuidedCache, HitsByCanonicalKeyAndVocabulary) {
  ConstraintCache cache(8, size_t{1} << 30);
  const auto v1 = vocabulary(), v2 = vocabulary();
  const auto a =
      cache.get(ConstraintSpec::json_schema(R"({"type": "object", "properties": {"b": {}, "a": {}}})"), v1);
  // The same schema written differently: one entry. Member order matters (it is the text order).
  const auto b =
      cache.get(ConstraintSpec::json_schema(R"({"type":"object","properties":{"b":{},"a":{}}})"), v1);
  EXPECT_EQ(a, b);
  const auto c =
      cache.get(ConstraintSpec::json_schema(R"({"type":"object","properties":{"a":{},"b":{}}})"), v1);
  EXPECT_NE(a, c);
  EXPECT_NE(a,
            cache.get(ConstraintSpec::json_schema(R"({"type":"object","properties":{"b":{},"a":{}}})"), v2));
  EXPECT_NE(cache.get(ConstraintSpec::regex("ab"), v1), cache.get(ConstraintSpec::choice({"ab"}), v1));
  EXPECT_EQ(cache.get(ConstraintSpec::choice({"a", "bc"}), v1),
            cache.get(ConstraintSpec::choice({"a", "bc"}), v1));
  EXPECT_NE(cache.get(ConstraintSpec::choice({"a", "bc"}), v1),
            cache.get(ConstraintSpec::choice({"ab", "c"}), v1));
  const auto s = cache.stats();
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 7u);
  EXPECT_EQ(s.entries, 7u);
}

TEST(GuidedCache, BoundsEvictTheLeastRecentlyUsed) {
  const auto v = vocabulary();
  ConstraintCache cache(3, size_t{1} << 30);
  const auto first = cache.get(ConstraintSpec::regex("a"), v);
  cache.get(ConstraintSpec::regex("b"), v);
  cache.get(ConstraintSpec::regex("c"), v);
  EXPECT_EQ(cache.get(ConstraintSpec::regex("a"), v), first);  // refreshes "a"
  cache.get(ConstraintSpec::regex("d"), v);                    // evicts "b"
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(cache.get(ConstraintSpec::regex("a"), v), first);
  const uint64_t misses = cache.stats().misses;
  cache.get(ConstraintSpec::regex("b"), v);
  EXPECT_EQ(cache.stats().misses, misses + 1);

  ConstraintCache tiny(100, 1);  // every entry is over the byte bound: returned, not kept
  EXPECT_NE(tiny.get(ConstraintSpec::regex("a"), v), nullptr);
  EXPECT_EQ(tiny.stats().entries, 0u);
  EXPECT_EQ(tiny.stats().bytes, 0u);
}

TEST(GuidedCache, FailuresAreThrownEveryTime) {
  ConstraintCache cache(8, size_t{1} << 30);
  const auto v = vocabulary();
  for (int i = 0; i < 2; ++i) EXPECT_THROW(cache.get(ConstraintSpec::regex("(a"), v), Error);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(GuidedCache, ConcurrentUseReturnsOneConstraintPerKey) {
  ConstraintCache cache(64, size_t{1} << 30);
  const auto v = vocabulary();
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const TokenConstraint>> got(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i)
        cache.get(ConstraintSpec::regex("[a-z]{" + std::to_string(i % 5 + 1) + "}"), v);
      got[static_cast<size_t>(t)] = cache.get(ConstraintSpec::regex("x+"), v);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, got[0]);
  EXPECT_EQ(cache.stats().entries, 6u);
}

}  // namespace
}  // namespace dgemma::guided
