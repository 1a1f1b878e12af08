#include "util/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace dgemma {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_write(LogLevel level, std::string_view component, std::string_view message) {
  static const char* kNames[] = {"D", "I", "W", "E", "-"};
  using namespace std::chrono;
  const auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  // ISO-8601 in UTC with milliseconds, as log collectors parse it.
  const std::time_t secs = static_cast<std::time_t>(now / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s %s.%03lldZ %-8.*s %.*s\n", kNames[static_cast<int>(level)], stamp,
               static_cast<long long>(now % 1000),
               static_cast<int>(component.size()), component.data(), static_cast<int>(message.size()),
               message.data());
}

}  // namespace dgemma
