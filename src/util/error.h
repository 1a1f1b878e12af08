#pragma once
// Error types. Every failure that is the caller's fault (a bad file, a bad request, a bad flag) is an
// dgemma::Error with a kind; the API layer maps kinds to HTTP status codes in one place.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace dgemma {

enum class ErrorKind {
  kInvalidArgument,  // bad user input: request, flag, token id -> HTTP 400
  kInvalidFile,      // malformed model file / config / tokenizer
  kNotFound,         // missing file or tensor -> HTTP 404 for API lookups
  kUnsupported,      // valid but not implemented -> HTTP 400/501
  kResourceExhausted,// queue full, out of KV memory -> HTTP 503
  kInternal,         // a bug -> HTTP 500
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, std::string param = {})
      : std::runtime_error(std::move(message)), kind_(kind), param_(std::move(param)) {}
  ErrorKind kind() const { return kind_; }
  // The request parameter the error is about (OpenAI error objects carry it), or empty.
  const std::string& param() const { return param_; }

 private:
  ErrorKind kind_;
  std::string param_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_file(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::kInvalidFile, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_arg(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}

// Internal invariant check: a failure is a bug in dgemma, never the user's input.
#define DG_CHECK(cond)                                                                          \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::dgemma::Error(::dgemma::ErrorKind::kInternal,                                     \
                            ::fmt::format("internal check failed: {} ({}:{})", #cond, __FILE__, \
                                          __LINE__));                                           \
  } while (0)

}  // namespace dgemma
