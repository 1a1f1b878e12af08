#pragma once
// Reading a request's JSON fields with the OpenAI errors every endpoint gives: a 400 naming the parameter
// for a wrong type or range, and the keys a parser looked at, so the others can be reported as unknown.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "api/api_error.h"
#include "util/json.h"

namespace dgemma {

// "a string", "an integer", ... for messages.
std::string type_name(const Json& v);
// An integer in [lo, hi] (integral floats accepted, as pydantic's lax mode); a 400 naming `param` else.
int64_t as_int64(const Json& v, const std::string& param, int64_t lo, int64_t hi);
// A finite number; a 400 naming `param` else.
double as_number(const Json& v, const std::string& param);
// A non-empty array of strings; a 400 naming `param` else.
std::vector<std::string> string_list(const Json& v, const std::string& param);

// Reads the fields of one JSON object, remembering which keys were looked at.
class RequestFields {
 public:
  RequestFields(const Json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  std::string name(std::string_view key) const { return prefix_ + std::string(key); }

  // nullptr when absent or null.
  const Json* get(std::string_view key) {
    seen_.insert(std::string(key));
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::optional<bool> boolean(std::string_view key) {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) fail_param(name(key), "'{}' must be a boolean, not {}", name(key), type_name(*v));
    return v->get<bool>();
  }
  std::optional<int64_t> integer(std::string_view key, int64_t lo, int64_t hi) {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    return as_int64(*v, name(key), lo, hi);
  }
  std::optional<double> number(std::string_view key, double lo, double hi) {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    const double d = as_number(*v, name(key));
    if (d < lo || d > hi) fail_param(name(key), "'{}' must be between {} and {} (got {})", name(key), lo, hi, d);
    return d;
  }
  std::optional<std::string> string(std::string_view key, size_t max_bytes = 1u << 20) {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail_param(name(key), "'{}' must be a string, not {}", name(key), type_name(*v));
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max_bytes) fail_param(name(key), "'{}' is longer than {} bytes", name(key), max_bytes);
    return s;
  }
  // A parameter we cannot honour: any non-null value other than the allowed no-op is rejected.
  void unsupported(std::string_view key, std::string_view why) {
    if (get(key)) fail_unsupported(name(key), "'{}' is not supported: {}", name(key), why);
  }
  std::vector<std::string> unknown() const {
    std::vector<std::string> out;
    for (auto it = obj_.begin(); it != obj_.end(); ++it)
      if (!seen_.count(it.key())) out.push_back(it.key());
    return out;
  }

 private:
  const Json& obj_;
  std::string prefix_;
  std::set<std::string, std::less<>> seen_;
};

}  // namespace dgemma
