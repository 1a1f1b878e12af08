// Python str methods over UTF-8 (see pystr.h).
#include "text/jinja/pystr.h"

#include <algorithm>

#include "text/chat_template_internal.h"
#include "text/jinja/interpreter.h"

namespace dgemma::jinja {

using chat_detail::py_lower;
using chat_detail::py_upper;

bool py_is_space(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::vector<uint32_t> code_points(std::string_view s) { return chat_detail::utf8_decode(s); }

std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) chat_detail::utf8_append(out, cps[k]);
  return out;
}

namespace {

template <typename Pred>
std::string strip_if(std::string_view s, int side, Pred strip) {
  const auto cps = code_points(s);
  size_t b = 0, e = cps.size();
  if (side <= 0)
    while (b < e && strip(cps[b])) ++b;
  if (side >= 0)
    while (e > b && strip(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

std::string cp_str(uint32_t cp) {
  std::string s;
  chat_detail::utf8_append(s, cp);
  return s;
}

bool is_cased(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  const std::string c = cp_str(cp);
  return py_upper(c) != c || py_lower(c) != c;
}
bool is_lower_cp(uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  const std::string c = cp_str(cp);
  return py_upper(c) != c && py_lower(c) == c;
}
bool is_upper_cp(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  const std::string c = cp_str(cp);
  return py_lower(c) != c && py_upper(c) == c;
}

bool is_line_break(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
         cp == 0x2028 || cp == 0x2029;
}

}  // namespace

std::string py_strip_ws(std::string_view s, int side) { return strip_if(s, side, py_is_space); }

std::string py_strip_chars(std::string_view s, std::string_view chars, int side) {
  const auto set = code_points(chars);
  return strip_if(s, side, [&](uint32_t cp) { return std::find(set.begin(), set.end(), cp) != set.end(); });
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit-- > 0) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        out.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      out.emplace_back(s.substr(pos));
      return out;
    }
    size_t end = s.size();
    while (maxsplit-- > 0 && end >= sep->size()) {
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  // Whitespace runs; leading/trailing whitespace never yields empty strings.
  const auto cps = code_points(s);
  const size_t n = cps.size();
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && py_is_space(cps[i])) ++i;
      if (i == n) break;
      if (maxsplit-- <= 0) {
        size_t e = n;
        while (e > i && py_is_space(cps[e - 1])) --e;
        out.push_back(from_code_points(cps, i, e));
        break;
      }
      size_t j = i;
      while (j < n && !py_is_space(cps[j])) ++j;
      out.push_back(from_code_points(cps, i, j));
      i = j;
    }
    return out;
  }
  size_t e = n;
  while (true) {
    while (e > 0 && py_is_space(cps[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit-- <= 0) {
      size_t b = 0;
      while (b < e && py_is_space(cps[b])) ++b;
      out.push_back(from_code_points(cps, b, e));
      break;
    }
    size_t b = e;
    while (b > 0 && !py_is_space(cps[b - 1])) --b;
    out.push_back(from_code_points(cps, b, e));
    e = b;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  const auto cps = code_points(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    size_t end = i + 1;
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++end;
    out.push_back(from_code_points(cps, start, keepends ? end : i));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) out.push_back(from_code_points(cps, start, cps.size()));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count, Interpreter& in) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old_s.empty()) {  // inserts new_s before every character and at the end
    const auto cps = code_points(s);
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count-- > 0) out += new_s;
      if (k < cps.size()) chat_detail::utf8_append(out, cps[k]);
      in.check_size(out.size());
    }
    return out;
  }
  size_t pos = 0;
  while (count-- > 0) {
    const size_t hit = s.find(old_s, pos);
    if (hit == std::string_view::npos) break;
    out.append(s, pos, hit - pos);
    out += new_s;
    pos = hit + old_s.size();
    in.check_size(out.size());
  }
  out.append(s, pos);
  return out;
}

std::string py_title_method(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t cp : code_points(s)) {
    const std::string c = cp_str(cp);
    if (is_cased(cp)) {
      out += prev_cased ? py_lower(c) : py_upper(c);
      prev_cased = true;
    } else {
      out += c;
      prev_cased = false;
    }
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  const auto cps = code_points(s);
  if (cps.empty()) return {};
  return py_upper(cp_str(cps[0])) + py_lower(from_code_points(cps, 1, cps.size()));
}

std::string py_swapcase(std::string_view s) {
  std::string out;
  for (uint32_t cp : code_points(s)) {
    const std::string c = cp_str(cp);
    out += is_upper_cp(cp) ? py_lower(c) : is_lower_cp(cp) ? py_upper(c) : c;
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // "".join(item[0].upper() + item[1:].lower() for item in re.split(r"([-\s({\[<]+)", s) if item)
  const auto cps = code_points(s);
  auto is_sep = [](uint32_t cp) { return cp == '-' || py_is_space(cp) || cp == '(' || cp == '{' || cp == '[' || cp == '<'; };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    const bool sep = is_sep(cps[i]);
    size_t j = i;
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    out += py_upper(cp_str(cps[i]));
    out += py_lower(from_code_points(cps, i + 1, j));
    i = j;
  }
  return out;
}

bool py_is_class(std::string_view s, char kind) {
  const auto cps = code_points(s);
  if (cps.empty()) return false;
  for (uint32_t cp : cps) {
    const bool digit = cp >= '0' && cp <= '9';
    const bool alpha = (cp < 0x80 && ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))) || (cp >= 0x80 && is_cased(cp));
    bool ok = false;
    switch (kind) {
      case 'd': ok = digit; break;
      case 'a': ok = alpha; break;
      case 'n': ok = digit || alpha; break;
      default: ok = py_is_space(cp);
    }
    if (!ok) return false;
  }
  return true;
}

bool py_islower(std::string_view s) {
  bool any = false;
  for (uint32_t cp : code_points(s)) {
    if (is_upper_cp(cp)) return false;
    any = any || is_lower_cp(cp);
  }
  return any;
}

bool py_isupper(std::string_view s) {
  bool any = false;
  for (uint32_t cp : code_points(s)) {
    if (is_lower_cp(cp)) return false;
    any = any || is_upper_cp(cp);
  }
  return any;
}

}  // namespace dgemma::jinja
