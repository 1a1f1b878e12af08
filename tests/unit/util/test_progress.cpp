// ProgressReporter with a fake clock: formatting, throttling, the trailing-window rate and the ETA.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/progress.h"

namespace dgemma {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

struct Fake {
  double t = 100;
  std::vector<std::string> logs;
  std::string screen;
  ProgressOptions options(bool terminal) {
    ProgressOptions o;
    o.label = "weights";
    o.terminal = terminal;
    o.bar_width = 10;
    o.clock = [this] { return t; };
    o.log = [this](std::string_view s) { logs.emplace_back(s); };
    o.write = [this](std::string_view s) { screen += s; };
    return o;
  }
};

TEST(Progress, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(12.25 * (1 << 20)), "12.2 MiB");
  EXPECT_EQ(format_bytes(49.87 * kGiB), "49.9 GiB");
  EXPECT_EQ(format_bytes(512.0 * kGiB), "512 GiB");
  EXPECT_EQ(format_bytes(2048.0 * kGiB), "2.00 TiB");
  EXPECT_EQ(format_bytes(-1), "?");
}

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0.42), "0.4 s");
  EXPECT_EQ(format_duration(12.4), "12 s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(7440), "2h04m");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, StatusLine) {
  Fake f;
  ProgressReporter p(f.options(false));
  EXPECT_EQ(p.status_line(kGiB, 4 * kGiB, 0.5 * kGiB),
            "weights [##........]  25.0%  1.00 GiB / 4.00 GiB  512 MiB/s  ETA 6.0 s");
  EXPECT_EQ(p.status_line(0, 4 * kGiB, 0), "weights [..........]   0.0%  0 B / 4.00 GiB  0 B/s  ETA ?");
  EXPECT_EQ(p.status_line(4 * kGiB, 4 * kGiB, kGiB), "weights [##########] 100.0%  4.00 GiB / 4.00 GiB  1.00 GiB/s  ETA 0.0 s");
}

TEST(Progress, LogLinesAreThrottledAndTheLastAlwaysComes) {
  Fake f;
  ProgressReporter p(f.options(false));
  p.update(0, 10 * kGiB);  // the first report always logs
  ASSERT_EQ(f.logs.size(), 1u);
  EXPECT_EQ(f.logs[0], "weights: 0 B / 10.0 GiB (0.0%), 0 B/s, ETA ?");
  f.t += 1;
  p.update(kGiB, 10 * kGiB);  // within the 5 s interval: silent
  EXPECT_EQ(f.logs.size(), 1u);
  f.t += 4;
  p.update(2 * kGiB, 10 * kGiB);  // 5 s later: 2 GiB in 5 s
  ASSERT_EQ(f.logs.size(), 2u);
  EXPECT_EQ(f.logs[1], "weights: 2.00 GiB / 10.0 GiB (20.0%), 410 MiB/s, ETA 20 s");
  f.t += 1;
  p.update(10 * kGiB, 10 * kGiB);  // the end, 6 s after the start
  ASSERT_EQ(f.logs.size(), 3u);
  EXPECT_EQ(f.logs[2], "weights: done, 10.0 GiB in 6.0 s (1.67 GiB/s)");
  p.update(10 * kGiB, 10 * kGiB);  // ignored after the end
  EXPECT_EQ(f.logs.size(), 3u);
  EXPECT_TRUE(f.screen.empty());
}

TEST(Progress, RateUsesTheTrailingWindow) {
  Fake f;
  ProgressOptions o = f.options(false);
  o.rate_window_s = 2;
  ProgressReporter p(o);
  // 1 GiB/s for 4 s, then 4 GiB/s: after the window fills, only the recent rate counts.
  for (int i = 1; i <= 4; ++i) {
    f.t += 1;
    p.update(static_cast<uint64_t>(i) * kGiB, 100 * kGiB);
  }
  EXPECT_DOUBLE_EQ(p.rate(), 1.0 * kGiB);
  for (int i = 1; i <= 3; ++i) {
    f.t += 1;
    p.update((4 + 4 * static_cast<uint64_t>(i)) * kGiB, 100 * kGiB);
  }
  EXPECT_DOUBLE_EQ(p.rate(), 4.0 * kGiB);
  EXPECT_DOUBLE_EQ(p.eta(16 * kGiB, 100 * kGiB), 21.0);
  EXPECT_DOUBLE_EQ(p.eta(100 * kGiB, 100 * kGiB), 0.0);
}

TEST(Progress, TerminalRedrawsInPlaceThenEndsTheLine) {
  Fake f;
  ProgressReporter p(f.options(true));
  p.update(0, 4 * kGiB);
  f.t += 0.05;
  p.update(kGiB / 2, 4 * kGiB);  // within 0.1 s of the last redraw: skipped
  f.t += 0.95;
  p.update(kGiB, 4 * kGiB);
  f.t += 1;
  p.update(4 * kGiB, 4 * kGiB);
  EXPECT_EQ(f.screen,
            "\rweights [..........]   0.0%  0 B / 4.00 GiB  0 B/s  ETA ?\x1b[K"
            "\rweights [##........]  25.0%  1.00 GiB / 4.00 GiB  1.00 GiB/s  ETA 3.0 s\x1b[K"
            "\rweights [##########] 100.0%  4.00 GiB / 4.00 GiB  2.00 GiB/s  ETA 0.0 s\x1b[K\n");
  ASSERT_EQ(f.logs.size(), 1u);  // only the summary goes to the log
  EXPECT_EQ(f.logs[0], "weights: done, 4.00 GiB in 2.0 s (2.00 GiB/s)");
}

TEST(Progress, AnUnfinishedBarIsEndedWhenTheJobFails) {
  Fake f;
  {
    ProgressReporter p(f.options(true));
    p.update(0, kGiB);
  }
  EXPECT_EQ(f.screen.back(), '\n');
  Fake g;
  { ProgressReporter p(g.options(true)); }  // nothing drawn: nothing to end
  EXPECT_TRUE(g.screen.empty());
}

}  // namespace
}  // namespace dgemma
