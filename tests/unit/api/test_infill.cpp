// Infilling on /v1/completions (api/openai/infill.h): the answer layouts of `suffix` and `infill_template`
// as pinned spans, their bounds (each a 400 naming the field), and the output view (the inserted text
// only; each hole's tokens).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/openai/infill.h"
#include "util/error.h"

namespace dgemma {
namespace {

// One token per character: 'a' -> 97, ...
std::vector<int32_t> chars(std::string_view s) { return std::vector<int32_t>(s.begin(), s.end()); }

std::string refused(const InfillRequest& r, int C, int64_t max_tokens, int64_t room, bool client) {
  try {
    (void)layout_infill(r, chars, C, max_tokens, room, client);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.param();
  }
  return "accepted";
}

TEST(Infill, SuffixIsPinnedRightAfterTheGapInTheFirstCanvas) {
  InfillRequest r;
  r.suffix = "xyz";
  // Room for the gap: max_tokens, capped so that gap + suffix fit in the canvas (16) and the context.
  InfillLayout l = layout_infill(r, chars, 16, 100, 1000, false);
  ASSERT_EQ(l.pins.size(), 1u);
  EXPECT_EQ(l.pins[0].offset, 13);
  EXPECT_EQ(l.pins[0].tokens, chars("xyz"));
  EXPECT_EQ(l.max_tokens, 16);
  EXPECT_TRUE(l.hide_pinned);
  EXPECT_TRUE(l.hole_pins_before.empty());
  l = layout_infill(r, chars, 16, 5, 1000, true);
  EXPECT_EQ(l.pins[0].offset, 5) << "a smaller max_tokens is the gap's room";
  EXPECT_EQ(l.max_tokens, 8);
  l = layout_infill(r, chars, 16, 100, 7, false);
  EXPECT_EQ(l.pins[0].offset, 4) << "the context's room bounds gap + suffix";
  EXPECT_EQ(l.max_tokens, 7);

  r.suffix = std::string(16, 's');
  EXPECT_EQ(refused(r, 16, 100, 1000, false), "suffix") << "a suffix as long as the canvas leaves no gap";
  r.suffix = std::string(40, 's');
  EXPECT_EQ(refused(r, 16, 100, 1000, false), "suffix");
  r.suffix = "xyz";
  EXPECT_EQ(refused(r, 16, 100, 3, false), "suffix") << "no room in the context";
}

TEST(Infill, TemplateLaysOutFixedPiecesAndHoles) {
  InfillRequest r;
  r.pieces = {{false, "ab", 0}, {true, "", 5}, {false, "c", 0}, {true, "", 20}, {false, "de", 0}};
  const InfillLayout l = layout_infill(r, chars, 16, 1000, 1000, false);
  ASSERT_EQ(l.pins.size(), 3u);
  EXPECT_EQ(l.pins[0].offset, 0);
  EXPECT_EQ(l.pins[1].offset, 7);
  EXPECT_EQ(l.pins[1].tokens, chars("c"));
  EXPECT_EQ(l.pins[2].offset, 28) << "a hole may span canvases";
  EXPECT_EQ(l.max_tokens, 30);
  EXPECT_FALSE(l.hide_pinned);
  EXPECT_EQ(l.hole_pins_before, (std::vector<int64_t>{2, 3}));

  EXPECT_EQ(refused(r, 16, 29, 1000, true), "max_tokens") << "a client max_tokens below the template's length";
  EXPECT_EQ(layout_infill(r, chars, 16, 29, 1000, false).max_tokens, 30) << "a default max_tokens does not cut it";
  EXPECT_EQ(refused(r, 16, 1000, 29, false), "infill_template") << "beyond the context";
  r.pieces = {{true, "", 3}, {false, "z", 0}};
  const InfillLayout lead = layout_infill(r, chars, 16, 1000, 1000, false);
  EXPECT_EQ(lead.pins[0].offset, 3);
  EXPECT_EQ(lead.hole_pins_before, (std::vector<int64_t>{0}));
}

TEST(Infill, OutputDropsOrSortsThePinnedTokens) {
  InfillLayout suffix;
  suffix.pins = {{3, {50, 51}}};
  suffix.hide_pinned = true;
  PinnedOutput s(suffix);
  std::vector<int32_t> t = {10, 11, 50, 51};
  std::vector<float> lp = {-1, -2, 0, 0};
  s.feed(t, lp, {0, 0, 1, 1});
  EXPECT_EQ(t, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(lp, (std::vector<float>{-1, -2}));
  EXPECT_FALSE(s.has_holes());

  // Template [A A][hole 0][B][hole 1][C]: hole 0 came out empty (all filler), hole 1 spans two canvases.
  InfillLayout tmpl;
  tmpl.hole_pins_before = {2, 3};
  PinnedOutput h(tmpl);
  std::vector<int32_t> c0 = {1, 2, 3, 20, 21};
  std::vector<float> none;
  h.feed(c0, none, {1, 1, 1, 0, 0});
  EXPECT_EQ(c0, (std::vector<int32_t>{1, 2, 3, 20, 21})) << "the template's text keeps everything";
  std::vector<int32_t> c1 = {22, 4};
  h.feed(c1, none, {0, 1});
  ASSERT_EQ(h.holes().size(), 2u);
  EXPECT_TRUE(h.holes()[0].empty());
  EXPECT_EQ(h.holes()[1], (std::vector<int32_t>{20, 21, 22}));
}

}  // namespace
}  // namespace dgemma
