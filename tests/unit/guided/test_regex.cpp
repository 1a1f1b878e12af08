// The regex dialect (src/guided/regex_parser.h): what each construct matches, by code point over UTF-8,
// and the errors for constructs outside the subset.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "guided/code_set.h"
#include "guided_test_util.h"
#include "text/tokenizer/utf8.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

using test::regex_dfa;

struct Case {
  std::string pattern;
  std::vector<std::string> yes, no;
};

TEST(GuidedRegex, ConstructsMatchWhatTheySay) {
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd", "Abc"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"(ab)+", {"ab", "abab"}, {"", "a", "aba"}},
      {"(?:ab)*c?", {"", "c", "ababc"}, {"abca"}},
      {"(?P<x>a)(?<y>b)", {"ab"}, {"a"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaaa"}, {"a"}},
      {"a{1,3}", {"a", "aaa"}, {"", "aaaa"}},
      {"a{0,0}b", {"b"}, {"ab"}},
      {"a*?b+?c??", {"b", "aabbc"}, {"c"}},
      {"x{", {"x{"}, {"x"}},
      {"x{a}", {"x{a}"}, {}},
      {"x}", {"x}"}, {}},
      {"]", {"]"}, {}},
      {"[abc]", {"a", "c"}, {"d", "", "ab"}},
      {"[a-cx-z]", {"b", "y"}, {"d", "w"}},
      {"[^a-c]", {"d", "\n", "é", "😀"}, {"a", "", "de"}},
      {"[]a]", {"]", "a"}, {"b"}},
      {"[a-]", {"a", "-"}, {"b"}},
      {"[-a]", {"a", "-"}, {"b"}},
      {"[\\]\\\\\\-]", {"]", "\\", "-"}, {"a"}},
      {"[\\d_]", {"5", "_"}, {"a"}},
      {"[\\b]", {"\b"}, {"b"}},
      {"[.]", {"."}, {"a"}},
      {"\\d+", {"0123456789"}, {"a", "٣"}},
      {"\\D", {"a", "é"}, {"1"}},
      {"\\w+", {"az_AZ09"}, {"-", "é"}},
      {"\\W", {"-", "é", " "}, {"a"}},
      {"\\s", {" ", "\t", "\n", "\v", "\f", "\r", "\xC2\xA0", "\xE3\x80\x80", "\xEF\xBB\xBF"}, {"a", "\x1C"}},
      {"\\S", {"a"}, {" "}},
      {".", {"a", "é", "漢", "😀", "\t"}, {"\n", "\r", "\xE2\x80\xA8", "\xE2\x80\xA9", "", "ab"}},
      {"\\t\\n\\r\\f\\v\\0", {std::string("\t\n\r\f\v\0", 6)}, {}},
      {"\\x41\\u00e9\\u{1F600}\\U0001F600", {"Aé😀😀"}, {}},
      {"\\uD83D\\uDE00", {"😀"}, {}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\^\\$\\/\\-", {".*+?()[]{}|\\^$/-"}, {}},
      {"é+", {"é", "éé"}, {"e"}},
      {"[é-ë]", {"é", "ê", "ë"}, {"è", "ì"}},
      {"[^é]", {"e", "😀"}, {"é"}},
      {"^abc$", {"abc"}, {"xabc"}},
      {"^a$|^b$", {"a", "b"}, {"ab"}},
      {"\\Aab\\z", {"ab"}, {}},
      {"()", {""}, {"a"}},
      {"(a|)(b|)", {"", "a", "b", "ab"}, {"ba"}},
  };
  for (const Case& c : cases) {
    const Dfa dfa = regex_dfa(c.pattern);
    for (const std::string& s : c.yes)
      EXPECT_TRUE(accepts(dfa, s)) << c.pattern << " should match \"" << s << "\"";
    for (const std::string& s : c.no)
      EXPECT_FALSE(accepts(dfa, s)) << c.pattern << " should not match \"" << s << "\"";
  }
}

TEST(GuidedRegex, OnlyWellFormedUtf8IsAccepted) {
  const Dfa any = regex_dfa("(.|\\n|\\r)*");
  EXPECT_TRUE(accepts(any, "a\xC3\xA9\xE6\xBC\xA2\xF0\x9F\x98\x80\n"));
  EXPECT_TRUE(accepts(any, "\xED\x9F\xBF\xEE\x80\x80\xF4\x8F\xBF\xBF"));  // U+D7FF, U+E000, U+10FFFF
  for (const char* bad : {"\xC3", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xED\xBF\xBF",
                          "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\x80", "\xFF"})
    EXPECT_FALSE(accepts(any, bad)) << "ill-formed UTF-8 accepted";
}

TEST(GuidedRegex, Utf8SequencesCoverExactlyTheSet) {
  // Every boundary of the UTF-8 length classes, inside and around random ranges.
  const std::vector<char32_t> probes = {0,       0x7F,     0x80,     0x7FF,  0x800,   0xFFF,   0x1000,
                                        0xD7FF,  0xE000,   0xFFFD,   0xFFFF, 0x10000, 0x3FFFF, 0x40000,
                                        0xFFFFF, 0x100000, 0x10FFFF, 0x41,   0xE9,    0x6F22,  0x1F600};
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0, 0x10FFFF},    {0x41, 0x5A},      {0x7F, 0x80},       {0x7FF, 0x801},     {0xFFF, 0x1001},
      {0xD000, 0xE100}, {0xFFFE, 0x10001}, {0x3FFFE, 0x40001}, {0x1F600, 0x1F64F}, {0xE9, 0x6F22}};
  for (const auto& [lo, hi] : ranges) {
    const CodeSet set = CodeSet::range(lo, hi);
    const auto seqs = utf8_sequences(set);
    for (char32_t c : probes) {
      std::string enc;
      utf8::append(enc, c);
      bool hit = false;
      for (const ByteSequence& s : seqs) {
        if (static_cast<size_t>(s.length) != enc.size()) continue;
        bool all = true;
        for (int i = 0; i < s.length; ++i) {
          const uint8_t b = static_cast<uint8_t>(enc[static_cast<size_t>(i)]);
          all = all && b >= s.lo[static_cast<size_t>(i)] && b <= s.hi[static_cast<size_t>(i)];
        }
        hit = hit || all;
      }
      EXPECT_EQ(hit, set.contains(c))
          << std::hex << "U+" << static_cast<uint32_t>(c) << " in [" << static_cast<uint32_t>(lo) << ", "
          << static_cast<uint32_t>(hi) << "]";
    }
  }
}

TEST(GuidedRegex, ConstructsOutsideTheSubsetAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {{"(a)\\1", "backreference"},
                                                                  {"(?P<n>a)(?P=n)", "backreference"},
                                                                  {"\\k<n>", "backreference"},
                                                                  {"a(?=b)", "lookahead"},
                                                                  {"a(?!b)", "lookahead"},
                                                                  {"(?<=a)b", "lookbehind"},
                                                                  {"(?<!a)b", "lookbehind"},
                                                                  {"\\bword\\b", "word boundary"},
                                                                  {"\\B", "non-boundary"},
                                                                  {"(?i)abc", "inline flags"},
                                                                  {"a*+", "possessive"},
                                                                  {"(?>a)", "atomic group"},
                                                                  {"\\p{L}", "Unicode property"},
                                                                  {"a^b", "anchor '^'"},
                                                                  {"a$b", "end anchor"},
                                                                  {"(^a)", "anchor '^'"},
                                                                  {"(a$)", "anchor '$'"},
                                                                  {"[[:alpha:]]", "POSIX class"},
                                                                  {"a{,3}", "{,n}"},
                                                                  {"\\012", "octal"},
                                                                  {"\\cA", "control escape"},
                                                                  {"(?#c)", "comment"},
                                                                  {"\\N{DASH}", "named character"}};
  for (const auto& [pattern, word] : cases) {
    try {
      regex_dfa(pattern);
      ADD_FAILURE() << pattern << " compiled";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << pattern << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << pattern << ": " << e.what();
    }
  }
}

TEST(GuidedRegex, MalformedPatternsAreInvalidArguments) {
  for (const std::string pattern :
       {"(",        ")",       "a)",  "[a",   "[z-a]",   "*a",      "a**",         "a{2}{3}",
        "a{3,2}",   "\\",      "\\q", "\\x4", "\\uZZZZ", "\\uD800", "\\u{110000}", "[\\d-z]",
        "(?P<1>a)", "a{1001}", "[",   "\xC3", "+",       "a|*"}) {
    try {
      regex_dfa(pattern);
      ADD_FAILURE() << pattern << " compiled";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << pattern << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("regex"), std::string::npos) << e.what();
    }
  }
  try {
    regex_dfa("[^\\s\\S]");
    ADD_FAILURE() << "an empty language compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matches no text"), std::string::npos) << e.what();
  }
}

TEST(GuidedRegex, MinimalAutomata) {
  // Minimisation: the state counts of the minimal DFAs (dead state excluded).
  EXPECT_EQ(regex_dfa("(a|b)*abb").num_states, 4);
  EXPECT_EQ(regex_dfa("(a|a)*").num_states, 1);
  EXPECT_EQ(regex_dfa("a{5}").num_states, 6);
  EXPECT_EQ(regex_dfa("(ab|ab|ab)c").num_states, 4);
  EXPECT_EQ(regex_dfa("[0-9]{2}|[0-9]{2}").num_states, 3);
  // Classes: "a", "b", everything else.
  EXPECT_EQ(regex_dfa("(a|b)*abb").num_classes, 3);
}

}  // namespace
}  // namespace dgemma::guided
