// Python str methods over UTF-8 (see pystr.h).
#include "text/jinja/pystr.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "text/jinja/interpreter.h"
#include "text/jinja/unicode_tables.h"

namespace dgemma::jinja {

size_t decode_code_point(std::string_view s, size_t i, uint32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) {
    return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
  };
  auto bits = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  if (b0 >= 0xC2 && b0 < 0xE0 && cont(1)) {
    *cp = ((b0 & 0x1Fu) << 6) | bits(1);
    return 2;
  }
  if (b0 >= 0xE0 && b0 < 0xF0 && cont(1) && cont(2)) {
    const uint32_t v = ((b0 & 0x0Fu) << 12) | (bits(1) << 6) | bits(2);
    if (v >= 0x800 && !(v >= 0xD800 && v < 0xE000)) {
      *cp = v;
      return 3;
    }
  }
  if (b0 >= 0xF0 && b0 < 0xF5 && cont(1) && cont(2) && cont(3)) {
    const uint32_t v = ((b0 & 0x07u) << 18) | (bits(1) << 12) | (bits(2) << 6) | bits(3);
    if (v >= 0x10000 && v < 0x110000) {
      *cp = v;
      return 4;
    }
  }
  *cp = 0xDC00 + b0;
  return 1;
}

namespace {

// Applies one of Python's case mappings (runs of one-to-one mappings plus multi-character specials).
std::string map_case(std::string_view s, const CaseRun* runs, size_t nruns, const CaseSpecial* specials,
                     size_t nspecials) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += decode_code_point(s, i, &cp);
    const CaseSpecial* sp =
        std::find_if(specials, specials + nspecials, [&](const CaseSpecial& x) { return x.cp == cp; });
    if (sp != specials + nspecials) {
      out += sp->utf8;
      continue;
    }
    // Last run starting at or before cp.
    const CaseRun* r =
        std::upper_bound(runs, runs + nruns, cp, [](uint32_t v, const CaseRun& x) { return v < x.first; });
    uint32_t mapped = cp;
    if (r != runs) {
      --r;
      const uint32_t off = cp - r->first;
      if (off % static_cast<uint32_t>(r->stride) == 0 &&
          off / static_cast<uint32_t>(r->stride) < static_cast<uint32_t>(r->count))
        mapped = static_cast<uint32_t>(static_cast<int64_t>(cp) + r->delta);
    }
    append_code_point(out, mapped);
  }
  return out;
}

bool py_isprintable(uint32_t cp) {
  const auto& t = kUnicodeTables;
  const PrintableRange* end = t.printable + t.printable_size;
  const PrintableRange* r =
      std::upper_bound(t.printable, end, cp, [](uint32_t v, const PrintableRange& x) { return v < x.begin; });
  if (r == t.printable) return false;
  --r;
  return cp < r->end;
}

void append_hex(std::string& out, uint32_t v, int digits) {
  static const char kHex[] = "0123456789abcdef";
  for (int k = digits - 1; k >= 0; --k) out.push_back(kHex[(v >> (4 * k)) & 0xF]);
}

}  // namespace

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

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += decode_code_point(s, i, &cp);
    cps.push_back(cp);
  }
  return cps;
}

void append_code_point(std::string& out, uint32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an undecodable byte, see decode_code_point
    out.push_back(static_cast<char>(cp - 0xDC00));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) append_code_point(out, cps[k]);
  return out;
}

std::string py_upper(std::string_view s) {
  const auto& t = kUnicodeTables;
  return map_case(s, t.upper_runs, t.upper_runs_size, t.upper_specials, t.upper_specials_size);
}

std::string py_lower(std::string_view s) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    return out;
  }
  const auto& t = kUnicodeTables;
  return map_case(s, t.lower_runs, t.lower_runs_size, t.lower_specials, t.lower_specials_size);
}

std::string py_repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : code_points(s)) {
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      out += "\\x";
      append_hex(out, cp, 2);
    } else if (cp < 0x7F) {
      out.push_back(static_cast<char>(cp));
    } else if (cp >= 0xDC80 && cp <= 0xDCFF) {  // undecodable byte; Python strings cannot hold one
      out += "\\udc";
      append_hex(out, cp & 0xFF, 2);
    } else if (py_isprintable(cp)) {
      append_code_point(out, cp);
    } else if (cp <= 0xFF) {
      out += "\\x";
      append_hex(out, cp, 2);
    } else if (cp <= 0xFFFF) {
      out += "\\u";
      append_hex(out, cp, 4);
    } else {
      out += "\\U";
      append_hex(out, cp, 8);
    }
  }
  out.push_back(quote);
  return out;
}

// CPython's rules: shortest round-trip digits, fixed notation when the decimal exponent is in [-4, 16),
// else d.ddde+XX with at least two exponent digits.
std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits.push_back(c);
  int exp10 = 0;
  std::from_chars(sci.data() + epos + 1 + (sci[epos + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int ndigits = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (ndigits > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    out.push_back('e');
    out.push_back(exp10 < 0 ? '-' : '+');
    const int a = std::abs(exp10);
    if (a < 10) out.push_back('0');
    out += std::to_string(a);
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= ndigits) {
    out += digits;
    out.append(static_cast<size_t>(decpt - ndigits), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt));
  }
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
  append_code_point(s, cp);
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
      if (k < cps.size()) append_code_point(out, cps[k]);
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
