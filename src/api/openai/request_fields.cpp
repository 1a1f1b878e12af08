#include "api/openai/request_fields.h"

#include <cmath>

namespace dgemma {

std::string type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

int64_t as_int64(const Json& v, const std::string& param, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) fail_param(param, "'{}' is out of range (got {})", param, u);
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // Integral floats (10.0) are accepted like pydantic's lax mode; anything else is not an integer.
    if (!std::isfinite(d) || d != std::floor(d)) fail_param(param, "'{}' must be an integer (got {})", param, v.dump());
    if (d < -9.2e18 || d > 9.2e18) fail_param(param, "'{}' is out of range (got {})", param, v.dump());
    x = static_cast<int64_t>(d);
  } else {
    fail_param(param, "'{}' must be an integer, not {}", param, type_name(v));
  }
  if (x < lo || x > hi) {
    if (hi == INT64_MAX) fail_param(param, "'{}' must be at least {} (got {})", param, lo, x);
    fail_param(param, "'{}' must be between {} and {} (got {})", param, lo, hi, x);
  }
  return x;
}

double as_number(const Json& v, const std::string& param) {
  if (!v.is_number()) fail_param(param, "'{}' must be a number, not {}", param, type_name(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail_param(param, "'{}' must be a finite number", param);
  return d;
}

std::vector<std::string> string_list(const Json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) fail_param(param, "'{}' must be a non-empty array of strings", param);
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) fail_param(param, "'{}' must be a non-empty array of strings", param);
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace dgemma
