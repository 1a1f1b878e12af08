#include "api/api_error.h"

#include <new>

#include "engine/limits.h"
#include "util/log.h"

namespace dgemma {

const char* error_type_for_status(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

ApiError api_error_from(const Error& e) {
  ApiError out;
  out.message = e.what();
  out.param = e.param();
  switch (e.kind()) {
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kUnsupported:
      out.status = 400;
      break;
    case ErrorKind::kNotFound:
      out.status = 404;
      break;
    case ErrorKind::kResourceExhausted:
      out.status = 503;
      out.retry_after_s = 1;
      break;
    case ErrorKind::kInvalidFile:
    case ErrorKind::kInternal:
      out.status = 500;
      break;
  }
  out.type = error_type_for_status(out.status);
  return out;
}

ApiError api_error_from_exception(std::exception_ptr ep) {
  try {
    if (ep) std::rethrow_exception(ep);
  } catch (const Error& e) {
    ApiError out = api_error_from(e);
    if (out.status >= 500) DG_LOG_ERROR("api", "request failed: {}", e.what());
    return out;
  } catch (const Json::exception& e) {
    // A JSON access that slipped past validation is still the client's malformed input.
    ApiError out;
    out.status = 400;
    out.type = "invalid_request_error";
    out.message = fmt::format("invalid request: {}", e.what());
    return out;
  } catch (const std::bad_alloc&) {
    ApiError out;
    out.status = 503;
    out.type = "unavailable_error";
    out.message = "out of memory while handling the request";
    return out;
  } catch (const std::exception& e) {
    DG_LOG_ERROR("api", "request failed with an unexpected exception: {}", e.what());
    ApiError out;
    out.message = fmt::format("internal error: {}", e.what());
    return out;
  } catch (...) {
    DG_LOG_ERROR("api", "request failed with an unknown exception");
  }
  ApiError out;
  out.message = "internal error";
  return out;
}

ApiError context_length_error(int64_t max_model_len, int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                              const std::string& param, bool at_least) {
  ApiError e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.code = "context_length_exceeded";
  e.param = param;
  if (max_tokens) {
    e.message = limits::context_length_message(max_model_len, prompt_tokens, *max_tokens, param);
    return e;
  }
  e.message = fmt::format(
      "This model's maximum context length is {} tokens. However, your request has {}{} input tokens. "
      "Please reduce the length of the input {}.",
      max_model_len, at_least ? "at least " : "", prompt_tokens, param == "prompt" ? "prompt" : "messages");
  return e;
}

Json error_json(const ApiError& e) {
  Json err = Json::object();
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  err["code"] = e.code.is_null() ? Json(e.status) : e.code;
  return Json{{"error", std::move(err)}};
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = error_json(e).dump(-1, ' ', false, Json::error_handler_t::replace);
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  return r;
}

}  // namespace dgemma
