#pragma once
// Progress of a long byte-counted job (reading and uploading a 50 GB checkpoint): a bar redrawn in place
// when stderr is a terminal (bytes, rate, ETA), periodic log lines otherwise, so that logs collected by
// a service manager show that loading moves. The clock and the output are injectable for tests.
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace dgemma {

// "0 B", "512 B", "1.5 KiB", "12.3 MiB", "49.87 GiB".
std::string format_bytes(double bytes);
// "0.4 s", "12 s", "3m05s", "2h04m"; "?" for a negative or non-finite value.
std::string format_duration(double seconds);

struct ProgressOptions {
  std::string label = "loading";
  bool terminal = false;           // redraw a bar (\r) instead of writing log lines
  double log_interval_s = 5;       // log lines: at most one per interval (plus the first and the last)
  double redraw_interval_s = 0.1;  // terminal: at most one redraw per interval (plus the last)
  double rate_window_s = 5;        // the rate is measured over this trailing window
  int bar_width = 30;
  std::function<double()> clock;                 // seconds; default: the monotonic clock
  std::function<void(std::string_view)> write;   // terminal: raw text to stderr; default: fputs
  std::function<void(std::string_view)> log;     // log lines; default: DG_LOG_INFO("load", ...)
};

class ProgressReporter {
 public:
  explicit ProgressReporter(ProgressOptions options);
  // Ends a bar left unfinished (the job failed) with a newline, so an error message starts clean.
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;
  // Options for stderr: terminal when stderr is a TTY (and TERM is not "dumb").
  static ProgressOptions for_stderr(std::string label);

  // Reports `done` of `total` bytes. Cheap when nothing is due; the last call (done >= total) always
  // prints the final line. Calls after that are ignored.
  void update(uint64_t done, uint64_t total);

  // The text of one status line, e.g.
  // "weights [##########..........]  33.3%  16.62 GiB / 49.87 GiB  1.21 GiB/s  ETA 27 s".
  std::string status_line(uint64_t done, uint64_t total, double rate) const;
  // Bytes per second over the trailing window (the average since the start until the window fills).
  double rate() const;
  // Seconds left at the current rate; negative when unknown.
  double eta(uint64_t done, uint64_t total) const;

 private:
  ProgressOptions o_;
  double start_s_ = 0;
  double last_out_s_ = -1;
  bool finished_ = false;
  std::deque<std::pair<double, uint64_t>> samples_;  // (time, bytes done) in the rate window
};

}  // namespace dgemma
