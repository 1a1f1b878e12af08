#include "util/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "util/log.h"
#include "util/timing.h"

namespace dgemma {

std::string format_bytes(double b) {
  if (!(b >= 0) || !std::isfinite(b)) return "?";
  if (b < 1024) return fmt::format("{:.0f} B", b);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  int u = -1;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  const int decimals = b < 10 ? 2 : b < 100 ? 1 : 0;
  return fmt::format("{:.{}f} {}", b, decimals, units[u]);
}

std::string format_duration(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  if (s < 10) return fmt::format("{:.1f} s", s);
  if (s < 60) return fmt::format("{:.0f} s", s);
  const auto total = static_cast<int64_t>(std::llround(s));
  if (total < 3600) return fmt::format("{}m{:02d}s", total / 60, static_cast<int>(total % 60));
  return fmt::format("{}h{:02d}m", total / 3600, static_cast<int>(total / 60 % 60));
}

ProgressReporter::ProgressReporter(ProgressOptions options) : o_(std::move(options)) {
  if (!o_.clock) o_.clock = now_seconds;
  if (!o_.write) o_.write = [](std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stderr);
    std::fflush(stderr);
  };
  if (!o_.log) o_.log = [](std::string_view s) { DG_LOG_INFO("load", "{}", s); };
  start_s_ = o_.clock();
  samples_.push_back({start_s_, 0});
}

ProgressReporter::~ProgressReporter() {
  if (o_.terminal && !finished_ && last_out_s_ >= 0) o_.write("\n");
}

ProgressOptions ProgressReporter::for_stderr(std::string label) {
  ProgressOptions o;
  o.label = std::move(label);
  const char* term = std::getenv("TERM");
  o.terminal = isatty(fileno(stderr)) && !(term && std::strcmp(term, "dumb") == 0);
  return o;
}

double ProgressReporter::rate() const {
  const auto& [t0, b0] = samples_.front();
  const auto& [t1, b1] = samples_.back();
  return t1 > t0 ? static_cast<double>(b1 - b0) / (t1 - t0) : 0;
}

double ProgressReporter::eta(uint64_t done, uint64_t total) const {
  const double r = rate();
  if (done >= total) return 0;
  return r > 0 ? static_cast<double>(total - done) / r : -1;
}

std::string ProgressReporter::status_line(uint64_t done, uint64_t total, double rate) const {
  const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  const int filled = static_cast<int>(frac * o_.bar_width);
  std::string line = o_.label;
  if (o_.bar_width > 0) line += " [" + std::string(filled, '#') + std::string(o_.bar_width - filled, '.') + "]";
  line += fmt::format(" {:5.1f}%  {} / {}  {}/s", frac * 100, format_bytes(static_cast<double>(done)),
                      format_bytes(static_cast<double>(total)), format_bytes(rate));
  const double left = rate > 0 ? static_cast<double>(total > done ? total - done : 0) / rate : -1;
  line += "  ETA " + format_duration(left);
  return line;
}

void ProgressReporter::update(uint64_t done, uint64_t total) {
  if (finished_) return;
  const double now = o_.clock();
  samples_.push_back({now, done});
  while (samples_.size() > 2 && samples_[1].first <= now - o_.rate_window_s) samples_.pop_front();
  const bool last = done >= total;
  const double since = now - last_out_s_;
  if (last) {
    finished_ = true;
    const double elapsed = now - start_s_;
    const double avg = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
    if (o_.terminal) o_.write("\r" + status_line(done, total, avg) + "\x1b[K\n");
    o_.log(fmt::format("{}: done, {} in {} ({}/s)", o_.label, format_bytes(static_cast<double>(done)),
                       format_duration(elapsed), format_bytes(avg)));
    return;
  }
  if (o_.terminal) {
    if (last_out_s_ >= 0 && since < o_.redraw_interval_s) return;
    last_out_s_ = now;
    o_.write("\r" + status_line(done, total, rate()) + "\x1b[K");
    return;
  }
  if (last_out_s_ >= 0 && since < o_.log_interval_s) return;
  last_out_s_ = now;
  const double r = rate();
  o_.log(fmt::format("{}: {} / {} ({:.1f}%), {}/s, ETA {}", o_.label, format_bytes(static_cast<double>(done)),
                     format_bytes(static_cast<double>(total)),
                     total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                     format_bytes(r), r > 0 ? format_duration(static_cast<double>(total - done) / r) : std::string("?")));
}

}  // namespace dgemma
