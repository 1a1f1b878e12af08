#pragma once
// OpenAI-style error objects and the one place where error kinds become HTTP statuses.
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ...}}
#include <exception>
#include <optional>
#include <string>

#include "api/http/http_server.h"
#include "util/error.h"
#include "util/json.h"

namespace dgemma {

struct ApiError {
  int status = 500;
  std::string type = "server_error";  // invalid_request_error, authentication_error, not_found_error, ...
  std::string message;
  std::string param;                  // empty -> null
  Json code = nullptr;                // a string ("context_length_exceeded") or null (-> the status)
  int retry_after_s = 0;              // > 0: add Retry-After (503 overload)
};

// kInvalidArgument -> 400 invalid_request_error; kNotFound -> 404 not_found_error;
// kResourceExhausted -> 503 unavailable_error with Retry-After; kUnsupported -> 400 (the request asks
// for something not implemented); kInvalidFile / kInternal -> 500 server_error.
ApiError api_error_from(const Error& e);
// Any exception (Error, nlohmann exceptions, std::bad_alloc, ...) -> ApiError; never throws.
ApiError api_error_from_exception(std::exception_ptr ep);

// Context overflow in vLLM's wording (clients pattern-match it), code "context_length_exceeded".
// `param`: "messages" (chat) or "prompt" (completions). With max_tokens: the prompt and the completion
// together exceed the context; without: the prompt alone does (at_least: the count is a lower bound,
// the prompt was not tokenised to its end).
ApiError context_length_error(int64_t max_model_len, int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                              const std::string& param = "messages", bool at_least = false);

Json error_json(const ApiError& e);
HttpResponse error_response(const ApiError& e);
inline HttpResponse error_response(int status, std::string type, std::string message, std::string param = {}) {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.param = std::move(param);
  return error_response(e);
}
// The error type name used for a bare HTTP status (404 -> not_found_error, ...).
const char* error_type_for_status(int status);

// An invalid_request_error naming a parameter. Thrown by request parsing; mapped to 400.
template <typename... Args>
[[noreturn]] void fail_param(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...), param);
}
template <typename... Args>
[[noreturn]] void fail_unsupported(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::kUnsupported, fmt::format(f, std::forward<Args>(args)...), param);
}

}  // namespace dgemma
