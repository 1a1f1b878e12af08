#pragma once
// An independent JSON Schema validator for the guided subset (2020-12 semantics: "pattern" searches,
// formats checked by their definitions, oneOf exact), and an independent writer of the JSON text form
// (Python's json.dumps(value, ensure_ascii=False)). The property tests hold the compiled automata to
// these.
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "text/tokenizer/utf8.h"

namespace dgemma::guided::test {

using OJ = nlohmann::ordered_json;

inline std::string dumps(const OJ& v) {
  switch (v.type()) {
    case OJ::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        s += (first ? "" : ", ") + dumps(OJ(it.key())) + ": " + dumps(it.value());
        first = false;
      }
      return s + "}";
    }
    case OJ::value_t::array: {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + dumps(v[i]);
      return s + "]";
    }
    case OJ::value_t::string: {
      std::string s = "\"";
      for (unsigned char c : v.get<std::string>()) {
        if (c == '"')
          s += "\\\"";
        else if (c == '\\')
          s += "\\\\";
        else if (c == '\n')
          s += "\\n";
        else if (c == '\r')
          s += "\\r";
        else if (c == '\t')
          s += "\\t";
        else if (c == '\b')
          s += "\\b";
        else if (c == '\f')
          s += "\\f";
        else if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          s += buf;
        } else {
          s += static_cast<char>(c);
        }
      }
      return s + "\"";
    }
    default:
      return v.dump();
  }
}

inline std::u32string to_code_points(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const utf8::Decoded d = utf8::decode(s, i);
    out.push_back(d.cp);
    i += static_cast<size_t>(d.len);
  }
  return out;
}

inline bool all_digits(const std::string& s, size_t from, size_t n) {
  if (from + n > s.size()) return false;
  for (size_t i = from; i < from + n; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

inline bool valid_date(const std::string& s) {
  if (s.size() != 10 || !all_digits(s, 0, 4) || s[4] != '-' || !all_digits(s, 5, 2) || s[7] != '-' ||
      !all_digits(s, 8, 2))
    return false;
  const int y = std::stoi(s.substr(0, 4)), m = std::stoi(s.substr(5, 2)), d = std::stoi(s.substr(8, 2));
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (y < 1 || m < 1 || m > 12 || d < 1) return false;
  return d <= kDays[m - 1] + (m == 2 && leap ? 1 : 0);
}

inline bool valid_time(const std::string& s) {
  if (s.size() < 9 || !all_digits(s, 0, 2) || s[2] != ':' || !all_digits(s, 3, 2) || s[5] != ':' ||
      !all_digits(s, 6, 2))
    return false;
  if (std::stoi(s.substr(0, 2)) > 23 || std::stoi(s.substr(3, 2)) > 59 || std::stoi(s.substr(6, 2)) > 59)
    return false;
  size_t i = 8;
  if (s[i] == '.') {
    const size_t begin = ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == begin) return false;
  }
  const std::string zone = s.substr(i);
  if (zone == "Z" || zone == "z") return true;
  return zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && all_digits(zone, 1, 2) && zone[3] == ':' &&
         all_digits(zone, 4, 2) && std::stoi(zone.substr(1, 2)) <= 23 && std::stoi(zone.substr(4, 2)) <= 59;
}

inline bool valid_format(const std::string& format, const std::string& s) {
  if (format == "date") return valid_date(s);
  if (format == "date-time") {
    const size_t t = s.find_first_of("Tt");
    return t == 10 && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
  }
  if (format == "uuid") {
    if (s.size() != 36) return false;
    for (size_t i = 0; i < 36; ++i) {
      if (i == 8 || i == 13 || i == 18 || i == 23) {
        if (s[i] != '-') return false;
      } else if (!std::isxdigit(static_cast<unsigned char>(s[i]))) {
        return false;
      }
    }
    return true;
  }
  if (format == "email") {
    const size_t at = s.find('@');
    if (at == std::string::npos || at == 0) return false;
    const std::string local = s.substr(0, at), domain = s.substr(at + 1);
    const std::string atext = "!#$%&'*+/=?^_`{|}~-";
    bool dot_ok = false;  // a dot may follow an atext character only
    for (char c : local) {
      if (c == '.') {
        if (!dot_ok) return false;
        dot_ok = false;
      } else if (std::isalnum(static_cast<unsigned char>(c)) || atext.find(c) != std::string::npos) {
        dot_ok = true;
      } else {
        return false;
      }
    }
    if (!dot_ok) return false;
    int labels = 0;
    size_t begin = 0;
    while (true) {
      const size_t dot = domain.find('.', begin);
      const std::string label =
          domain.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
      if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
      for (char c : label)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
      ++labels;
      if (dot == std::string::npos) break;
      begin = dot + 1;
    }
    return labels >= 2;
  }
  return false;
}

class SchemaOracle {
 public:
  explicit SchemaOracle(const OJ& root) : root_(root) {}
  bool valid(const OJ& v) const { return check(v, root_); }

 private:
  const OJ& resolve(const std::string& ref) const {
    const OJ* node = &root_;
    size_t pos = 2;
    while (pos <= ref.size() && ref.size() > 1) {
      const size_t slash = ref.find('/', pos);
      const std::string token = ref.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
      node = &node->at(token);
      if (slash == std::string::npos) break;
      pos = slash + 1;
    }
    return *node;
  }

  static bool is_integer(const OJ& v) {
    if (v.is_number_integer()) return true;
    return v.is_number_float() && std::isfinite(v.get<double>()) &&
           v.get<double>() == std::floor(v.get<double>());
  }

  static bool has_type(const OJ& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "integer") return is_integer(v);
    if (t == "number") return v.is_number();
    if (t == "string") return v.is_string();
    if (t == "array") return v.is_array();
    return v.is_object();
  }

  bool check(const OJ& v, const OJ& s) const {
    if (s.is_boolean()) return s.get<bool>();
    if (auto r = s.find("$ref"); r != s.end() && !check(v, resolve(r->get<std::string>()))) return false;
    if (auto a = s.find("allOf"); a != s.end())
      for (const auto& sub : *a)
        if (!check(v, sub)) return false;
    if (auto a = s.find("anyOf"); a != s.end()) {
      bool any = false;
      for (const auto& sub : *a) any = any || check(v, sub);
      if (!any) return false;
    }
    if (auto a = s.find("oneOf"); a != s.end()) {
      int count = 0;
      for (const auto& sub : *a) count += check(v, sub);
      if (count != 1) return false;
    }
    if (auto c = s.find("const"); c != s.end() && !(v == *c)) return false;
    if (auto e = s.find("enum"); e != s.end()) {
      bool any = false;
      for (const auto& x : *e) any = any || v == x;
      if (!any) return false;
    }
    if (auto t = s.find("type"); t != s.end()) {
      bool any = false;
      if (t->is_array()) {
        for (const auto& x : *t) any = any || has_type(v, x.get<std::string>());
      } else {
        any = has_type(v, t->get<std::string>());
      }
      if (!any) return false;
    }
    if (v.is_string()) {
      const std::string& str = v.get_ref<const std::string&>();
      const std::u32string cps = to_code_points(str);
      if (s.contains("minLength") && cps.size() < s["minLength"].get<size_t>()) return false;
      if (s.contains("maxLength") && cps.size() > s["maxLength"].get<size_t>()) return false;
      if (auto p = s.find("pattern"); p != s.end()) {
        const std::u32string pat = to_code_points(p->get<std::string>());
        const std::wregex re(std::wstring(pat.begin(), pat.end()), std::regex::ECMAScript);
        if (!std::regex_search(std::wstring(cps.begin(), cps.end()), re)) return false;
      }
      if (auto f = s.find("format"); f != s.end() && !valid_format(f->get<std::string>(), str)) return false;
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
      size_t n = 0;
      if (auto p = s.find("prefixItems"); p != s.end()) {
        n = p->size();
        for (size_t i = 0; i < n && i < v.size(); ++i)
          if (!check(v[i], (*p)[i])) return false;
      }
      if (auto items = s.find("items"); items != s.end())
        for (size_t i = n; i < v.size(); ++i)
          if (!check(v[i], *items)) return false;
    }
    if (v.is_object()) {
      const OJ empty = OJ::object();
      const OJ& props = s.contains("properties") ? s["properties"] : empty;
      if (auto r = s.find("required"); r != s.end())
        for (const auto& k : *r)
          if (!v.contains(k.get<std::string>())) return false;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (props.contains(it.key())) {
          if (!check(it.value(), props[it.key()])) return false;
        } else if (auto a = s.find("additionalProperties"); a != s.end() && !check(it.value(), *a)) {
          return false;
        }
      }
    }
    return true;
  }

  const OJ& root_;
};

}  // namespace dgemma::guided::test
