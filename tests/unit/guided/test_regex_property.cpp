// Regex semantics as properties over random patterns and random texts: the compiled DFA agrees with
//  - std::regex (ECMAScript, full match) on ASCII patterns and texts: parser and automaton together;
//  - a brute-force matcher over the parsed tree, by code point, on patterns and texts with multi-byte
//    UTF-8: the UTF-8 compilation, NFA, subset construction and minimisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "guided/nfa.h"
#include "guided/regex_parser.h"
#include "guided_test_util.h"
#include "text/tokenizer/utf8.h"

namespace dgemma::guided {
namespace {

class PatternGen {
 public:
  PatternGen(std::mt19937_64& rng, bool unicode) : rng_(rng), unicode_(unicode) {}

  std::string alternation(int depth) {
    std::string s = concat(depth);
    while (pick(6) == 0) s += "|" + concat(depth);
    return s;
  }

 private:
  int pick(int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng_)); }

  std::string concat(int depth) {
    std::string s;
    const int n = pick(4);
    for (int i = 0; i < n; ++i) s += quantified(depth);
    return s;
  }

  std::string quantified(int depth) {
    std::string a = atom(depth);
    switch (pick(9)) {
      case 0:
        a += "*";
        break;
      case 1:
        a += "+";
        break;
      case 2:
        a += "?";
        break;
      case 3:
        a += "{" + std::to_string(pick(3)) + "}";
        break;
      case 4:
        a += "{" + std::to_string(pick(2)) + ",}";
        break;
      case 5: {
        const int lo = pick(3);
        a += "{" + std::to_string(lo) + "," + std::to_string(lo + pick(3)) + "}";
        break;
      }
      default:
        return a;
    }
    if (pick(5) == 0) a += "?";  // lazy
    return a;
  }

  std::string literal() {
    static const std::vector<std::string> ascii = {"a",   "b",    "c",     "0",       "1",   " ",   "\\.",
                                                   "\\*", "\\(",  "\\)",   "\\[",     "\\]", "\\{", "\\}",
                                                   "\\|", "\\\\", "\\?",   "\\^",     "\\$", "\\/", "\\-",
                                                   "\\n", "\\t",  "\\x41", "\\u0062", "-",   ",",   "_"};
    static const std::vector<std::string> wide = {"é", "漢", "😀", "\\u00e9", "\\u{1F600}", "\\uD83D\\uDE00"};
    if (unicode_ && pick(3) == 0) return wide[static_cast<size_t>(pick(static_cast<int>(wide.size())))];
    return ascii[static_cast<size_t>(pick(static_cast<int>(ascii.size())))];
  }

  std::string cls() {
    static const std::vector<std::string> items = {"a",   "b",   "a-c",  "0-9", "\\d", "\\w", "\\s",
                                                   "\\-", "\\]", "\\\\", ".",   "_",   " ",   "\\n"};
    static const std::vector<std::string> wide = {"é", "à-ÿ", "一-龥", "😀-😂", "\\u00e9-\\u00ff"};
    std::string s = "[";
    if (pick(3) == 0) s += "^";
    const int n = 1 + pick(3);
    for (int i = 0; i < n; ++i) {
      if (unicode_ && pick(3) == 0)
        s += wide[static_cast<size_t>(pick(static_cast<int>(wide.size())))];
      else
        s += items[static_cast<size_t>(pick(static_cast<int>(items.size())))];
    }
    return s + "]";
  }

  std::string atom(int depth) {
    switch (pick(depth > 0 ? 8 : 6)) {
      case 0:
      case 1:
        return literal();
      case 2:
        return ".";
      case 3:
        return cls();
      case 4: {
        static const std::vector<std::string> esc = {"\\d", "\\D", "\\w", "\\W", "\\s", "\\S"};
        return esc[static_cast<size_t>(pick(6))];
      }
      case 5:
        return literal() + literal();
      case 6:
        return "(" + alternation(depth - 1) + ")";
      default:
        return "(?:" + alternation(depth - 1) + ")";
    }
  }

  std::mt19937_64& rng_;
  bool unicode_;
};

std::string random_text(std::mt19937_64& rng, const std::vector<std::string>& alphabet, int max_len) {
  std::string s;
  const int n = std::uniform_int_distribution<int>(0, max_len)(rng);
  for (int i = 0; i < n; ++i)
    s += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
  return s;
}

TEST(GuidedRegexProperty, AgreesWithStdRegexOnAsciiPatterns) {
  std::mt19937_64 rng(1234);
  const std::vector<std::string> alphabet = {"a", "b", "c", "0", "1", "9", " ", "\n", "\t", "\r", ".",
                                             "*", "(", ")", "[", "]", "{", "}", "|",  "\\", "?",  "^",
                                             "$", "/", "-", ",", "_", "A", "B", "Z",  "\v", "\f", "x"};
  int patterns = 0, matches = 0, checks = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    PatternGen gen(rng, false);
    const std::string pattern = gen.alternation(2);
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      continue;  // a form std::regex rejects (its dialect differs at the edges)
    }
    const Dfa dfa = test::regex_dfa(pattern);
    ++patterns;
    std::vector<std::string> texts;
    for (int i = 0; i < 40; ++i) texts.push_back(random_text(rng, alphabet, 6));
    for (int i = 0; i < 10; ++i) texts.push_back(test::sample(dfa, rng, 0.3, 12));
    for (const std::string& t : texts) {
      if (!std::all_of(t.begin(), t.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
        continue;
      const bool want = std::regex_match(t, re);
      ASSERT_EQ(accepts(dfa, t), want) << "pattern /" << pattern << "/ on \"" << t << "\"";
      matches += want;
      ++checks;
    }
  }
  EXPECT_GT(patterns, 1200);
  EXPECT_GT(matches, checks / 5);  // the texts exercise both answers
}

// Brute force over the tree: the set of end positions reachable from a set of start positions.
class TreeMatcher {
 public:
  TreeMatcher(const Ast& ast, const std::u32string& text) : ast_(ast), text_(text) {}

  std::set<size_t> run(NodeId id, const std::set<size_t>& from) const {
    const Node& n = ast_[id];
    std::set<size_t> out;
    switch (n.kind) {
      case NodeKind::kNothing:
        return out;
      case NodeKind::kEmpty:
        return from;
      case NodeKind::kChars:
        for (size_t p : from)
          if (p < text_.size() && n.chars.contains(text_[p])) out.insert(p + 1);
        return out;
      case NodeKind::kConcat: {
        std::set<size_t> cur = from;
        for (NodeId item : n.items) cur = run(item, cur);
        return cur;
      }
      case NodeKind::kAlt:
        for (NodeId item : n.items)
          for (size_t p : run(item, from)) out.insert(p);
        return out;
      case NodeKind::kRepeat: {
        std::set<size_t> cur = from;
        if (n.min == 0) out = from;
        for (int count = 1; n.max == kUnbounded || count <= n.max; ++count) {
          cur = run(n.items[0], cur);
          if (count >= n.min) {
            const size_t before = out.size();
            out.insert(cur.begin(), cur.end());
            if (n.max == kUnbounded && out.size() == before && count > n.min) break;
          }
          if (cur.empty()) break;
        }
        return out;
      }
      default:
        ADD_FAILURE() << "unexpected node kind";
        return out;
    }
  }

 private:
  const Ast& ast_;
  const std::u32string& text_;
};

std::u32string code_points(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const utf8::Decoded d = utf8::decode(s, i);
    out.push_back(d.cp);
    i += static_cast<size_t>(d.len);
  }
  return out;
}

TEST(GuidedRegexProperty, AgreesWithATreeMatcherOnUnicode) {
  std::mt19937_64 rng(99);
  const std::vector<std::string> alphabet = {
      "a",  "b",  "0", " ", "\n", "\r",           "é", "ê", "ÿ",  "Ā", "漢",
      "一", "龥", "😀", "😁", "😃",  "\xE2\x80\xA8", "-", "]", "\\", "A"};
  int checks = 0, matches = 0;
  for (int iter = 0; iter < 700; ++iter) {
    PatternGen gen(rng, true);
    const std::string pattern = gen.alternation(2);
    Ast ast(CompileLimits{});
    const NodeId root = parse_regex(ast, pattern);
    const Dfa dfa = determinize(build_nfa(ast, root), CompileLimits{});
    std::vector<std::string> texts;
    for (int i = 0; i < 30; ++i) texts.push_back(random_text(rng, alphabet, 6));
    if (!dfa.empty_language())
      for (int i = 0; i < 10; ++i) texts.push_back(test::sample(dfa, rng, 0.3, 16));
    for (const std::string& t : texts) {
      const std::u32string cps = code_points(t);
      const std::set<size_t> ends = TreeMatcher(ast, cps).run(root, {0});
      const bool want = ends.count(cps.size()) > 0;
      ASSERT_EQ(accepts(dfa, t), want) << "pattern /" << pattern << "/ on \"" << t << "\"";
      matches += want;
      ++checks;
    }
  }
  EXPECT_GT(matches, checks / 10);
}

}  // namespace
}  // namespace dgemma::guided
