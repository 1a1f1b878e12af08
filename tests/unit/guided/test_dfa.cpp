// The automata themselves (src/guided/dfa.h): minimisation leaves no two equivalent states (checked by
// the table-filling algorithm) and no mergeable byte classes; products accept what their rule says.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "guided_test_util.h"

namespace dgemma::guided {
namespace {

// Pairs of states no string tells apart (the dead state counts as a state).
int equivalent_pairs(const Dfa& d) {
  const int n = d.num_states + 1;  // index num_states: dead
  auto next = [&](int s, int c) {
    if (s == d.num_states) return d.num_states;
    const int32_t t =
        d.next[static_cast<size_t>(s) * static_cast<size_t>(d.num_classes) + static_cast<size_t>(c)];
    return t < 0 ? d.num_states : t;
  };
  auto acc = [&](int s) { return s < d.num_states && d.accepting[static_cast<size_t>(s)]; };
  std::vector<uint8_t> apart(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) apart[static_cast<size_t>(a * n + b)] = acc(a) != acc(b);
  for (bool changed = true; changed;) {
    changed = false;
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) {
        if (apart[static_cast<size_t>(a * n + b)]) continue;
        for (int c = 0; c < d.num_classes; ++c)
          if (apart[static_cast<size_t>(next(a, c) * n + next(b, c))]) {
            apart[static_cast<size_t>(a * n + b)] = apart[static_cast<size_t>(b * n + a)] = 1;
            changed = true;
            break;
          }
      }
  }
  int same = 0;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) same += !apart[static_cast<size_t>(a * n + b)];
  return same;
}

bool classes_mergeable(const Dfa& d) {
  for (int c1 = 0; c1 < d.num_classes; ++c1)
    for (int c2 = c1 + 1; c2 < d.num_classes; ++c2) {
      bool equal = true;
      for (int s = 0; s < d.num_states && equal; ++s)
        equal = d.next[static_cast<size_t>(s * d.num_classes + c1)] ==
                d.next[static_cast<size_t>(s * d.num_classes + c2)];
      if (equal) return true;
    }
  return false;
}

const std::vector<std::string> kPatterns = {
    "(a|b)*abb",     "a*b*c*",         "(ab|ba)*",      "[a-c]{2,5}",    "(a|ab)(c|bcd)(d*)",
    ".{0,3}x",       "(0|1(01*0)*1)*", "(a+|b+)*c?",    "[^ab]*a[^ab]*", "(x|y|z){3}|w+",
    "é|e|ê+",        "\\d+(\\.\\d+)?", "((a|b)(c|d))*", "a{3,}|b{0,2}",  "(ab*c|a*bc)*",
    "[a-z]+@[a-z]+", "(.|\\n)*end",    "(😀|漢)*"};

TEST(GuidedDfa, MinimisationLeavesNoEquivalentStatesOrClasses) {
  for (const std::string& p : kPatterns) {
    const Dfa d = test::regex_dfa(p);
    EXPECT_EQ(equivalent_pairs(d), 0) << p;
    EXPECT_FALSE(classes_mergeable(d)) << p;
    const Dfa again = minimize(d);
    EXPECT_EQ(again.num_states, d.num_states) << p;
    EXPECT_EQ(again.next, d.next) << p;
  }
}

TEST(GuidedDfa, ProductsFollowTheirRule) {
  std::mt19937_64 rng(5);
  const std::vector<std::string> alphabet = {"a", "b", "c", "d", "x", "0", "1", "é"};
  for (size_t i = 0; i + 2 < kPatterns.size(); ++i) {
    const Dfa a = test::regex_dfa(kPatterns[i]), b = test::regex_dfa(kPatterns[i + 1]),
              c = test::regex_dfa(kPatterns[i + 2]);
    const Dfa all = product({&a, &b}, ProductRule::kAll, CompileLimits{});
    const Dfa one = product({&a, &b, &c}, ProductRule::kExactlyOne, CompileLimits{});
    if (!all.empty_language()) {
      EXPECT_EQ(equivalent_pairs(all), 0);
    }
    if (!one.empty_language()) {
      EXPECT_EQ(equivalent_pairs(one), 0);
    }
    std::vector<std::string> texts;
    for (int k = 0; k < 300; ++k) {
      std::string t;
      for (int n = std::uniform_int_distribution<int>(0, 6)(rng); n > 0; --n)
        t += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
      texts.push_back(t);
    }
    for (const Dfa* d : {&a, &b, &c})
      for (int k = 0; k < 20; ++k) texts.push_back(test::sample(*d, rng, 0.3, 10));
    for (const std::string& t : texts) {
      EXPECT_EQ(accepts(all, t), accepts(a, t) && accepts(b, t))
          << kPatterns[i] << " & " << kPatterns[i + 1] << ": " << t;
      const int count = accepts(a, t) + accepts(b, t) + accepts(c, t);
      EXPECT_EQ(accepts(one, t), count == 1) << t;
    }
  }
}

}  // namespace
}  // namespace dgemma::guided
