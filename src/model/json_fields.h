#pragma once
// Typed access to the fields of a JSON object read from a model file, with errors (kInvalidFile) that
// name the file and the key, and the reference's defaults for absent (or null) keys.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/json.h"

namespace dgemma {

class Fields {
 public:
  Fields(const Json& obj, std::string what) : obj_(obj), what_(std::move(what)) {
    if (!obj_.is_object()) fail_file("{}: expected a JSON object", what_);
  }
  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const Json& at(const char* key) const { return obj_.at(key); }

  int64_t get_int(const char* key, int64_t def, int64_t lo, int64_t hi) const {
    if (!has(key)) return def;
    const Json& v = obj_.at(key);
    if (!v.is_number_integer()) fail_file("{}: '{}' must be an integer", what_, key);
    int64_t x;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail_file("{}: '{}' = {} is out of range [{}, {}]", what_, key, u, lo, hi);
      x = static_cast<int64_t>(u);
    } else {
      x = v.get<int64_t>();
    }
    if (x < lo || x > hi) fail_file("{}: '{}' = {} is out of range [{}, {}]", what_, key, x, lo, hi);
    return x;
  }
  int get_int32(const char* key, int def, int lo, int hi) const {
    return static_cast<int>(get_int(key, def, lo, hi));
  }
  double get_double(const char* key, double def, double lo, double hi) const {
    if (!has(key)) return def;
    const Json& v = obj_.at(key);
    if (!v.is_number()) fail_file("{}: '{}' must be a number", what_, key);
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      fail_file("{}: '{}' = {} is out of range [{}, {}]", what_, key, x, lo, hi);
    return x;
  }
  std::string get_string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    const Json& v = obj_.at(key);
    if (!v.is_string()) fail_file("{}: '{}' must be a string", what_, key);
    return v.get<std::string>();
  }
  bool get_bool(const char* key, bool def) const {
    if (!has(key)) return def;
    const Json& v = obj_.at(key);
    if (!v.is_boolean()) fail_file("{}: '{}' must be a boolean", what_, key);
    return v.get<bool>();
  }
  // An int or a list of ints (eos_token_id style).
  std::vector<int32_t> get_id_list(const char* key, std::vector<int32_t> def) const {
    if (!has(key)) return def;
    const Json& v = obj_.at(key);
    std::vector<int32_t> out;
    auto one = [&](const Json& e) {
      if (!e.is_number_integer()) fail_file("{}: '{}' must be an integer or a list of integers", what_, key);
      const int64_t x = e.get<int64_t>();
      if (x < 0 || x > std::numeric_limits<int32_t>::max())
        fail_file("{}: '{}' contains an invalid token id {}", what_, key, x);
      out.push_back(static_cast<int32_t>(x));
    };
    if (v.is_array()) {
      if (v.size() > 64) fail_file("{}: '{}' has too many entries ({})", what_, key, v.size());
      for (const auto& e : v) one(e);
    } else {
      one(v);
    }
    return out;
  }
  const std::string& what() const { return what_; }

 private:
  const Json& obj_;
  std::string what_;
};

}  // namespace dgemma
