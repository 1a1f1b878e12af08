#pragma once
// A small leveled logger with component prefixes (llama.cpp style), writing to stderr.
#include <string_view>

#include <fmt/format.h>

namespace dgemma {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_write(LogLevel level, std::string_view component, std::string_view message);

template <typename... Args>
void log(LogLevel level, std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_level()) return;
  log_write(level, component, fmt::format(f, std::forward<Args>(args)...));
}

#define DG_LOG_DEBUG(comp, ...) ::dgemma::log(::dgemma::LogLevel::kDebug, comp, __VA_ARGS__)
#define DG_LOG_INFO(comp, ...) ::dgemma::log(::dgemma::LogLevel::kInfo, comp, __VA_ARGS__)
#define DG_LOG_WARN(comp, ...) ::dgemma::log(::dgemma::LogLevel::kWarn, comp, __VA_ARGS__)
#define DG_LOG_ERROR(comp, ...) ::dgemma::log(::dgemma::LogLevel::kError, comp, __VA_ARGS__)

}  // namespace dgemma
