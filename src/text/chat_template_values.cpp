// Python/Jinja value semantics for the chat-template renderer: what jinja2 (sandboxed, default
// Undefined) does with the JSON-derived dicts, lists and strings the template is given, and the
// exact text Python produces for str(), repr(), upper(), lower() and strip().
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "text/chat_template_internal.h"
#include "text/utf8.h"
#include "util/error.h"

namespace dgemma::chat_detail {

namespace {

// Decodes one code point at s[i]; returns its byte length. Invalid bytes decode to 0xDC00 + byte
// (never produced by valid UTF-8), which utf8_append writes back unchanged, so nothing is lost.
size_t decode_one(std::string_view s, size_t i, uint32_t* cp) {
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

bool is_py_space(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// Applies one of Python's case mappings (runs of one-to-one mappings plus multi-character specials).
std::string map_case(std::string_view s, const CaseRun* runs, size_t nruns, const CaseSpecial* specials,
                     size_t nspecials) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += decode_one(s, i, &cp);
    const CaseSpecial* sp = std::find_if(specials, specials + nspecials, [&](const CaseSpecial& x) { return x.cp == cp; });
    if (sp != specials + nspecials) {
      out += sp->utf8;
      continue;
    }
    // Last run starting at or before cp.
    const CaseRun* r = std::upper_bound(runs, runs + nruns, cp, [](uint32_t v, const CaseRun& x) { return v < x.first; });
    uint32_t mapped = cp;
    if (r != runs) {
      --r;
      const uint32_t off = cp - r->first;
      if (off % static_cast<uint32_t>(r->stride) == 0 && off / static_cast<uint32_t>(r->stride) < static_cast<uint32_t>(r->count))
        mapped = static_cast<uint32_t>(static_cast<int64_t>(cp) + r->delta);
    }
    utf8_append(out, mapped);
  }
  return out;
}

void append_hex(std::string& out, uint32_t v, int digits) {
  static const char kHex[] = "0123456789abcdef";
  for (int k = digits - 1; k >= 0; --k) out.push_back(kHex[(v >> (4 * k)) & 0xF]);
}

const Json& null_json() {
  static const Json kNull;
  return kNull;
}

double as_double(const Json& j) {
  if (j.is_boolean()) return j.get<bool>() ? 1.0 : 0.0;
  return j.get<double>();
}

}  // namespace

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += decode_one(s, i, &cp);
    cps.push_back(cp);
  }
  return cps;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an undecodable byte, see decode_one
    out.push_back(static_cast<char>(cp - 0xDC00));
  } else {
    utf8::append(out, static_cast<char32_t>(cp));
  }
}

void template_error(std::string message) { throw Error(ErrorKind::kInvalidArgument, std::move(message)); }

std::string py_upper(std::string_view s) {
  const auto& t = kUnicodeTables;
  return map_case(s, t.upper_runs, t.upper_runs_size, t.upper_specials, t.upper_specials_size);
}

std::string py_lower(std::string_view s) {
  const auto& t = kUnicodeTables;
  std::string out;
  out.reserve(s.size());
  bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (ascii) {
    for (char c : s) out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    return out;
  }
  return map_case(s, t.lower_runs, t.lower_runs_size, t.lower_specials, t.lower_specials_size);
}

std::string py_strip(std::string_view s) {
  size_t begin = s.size(), end = 0;  // first and one-past-last non-space byte
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = decode_one(s, i, &cp);
    if (!is_py_space(cp)) {
      begin = std::min(begin, i);
      end = i + n;
    }
    i += n;
  }
  return begin >= end ? std::string() : std::string(s.substr(begin, end - begin));
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

std::string py_repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : utf8_decode(s)) {
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
      utf8_append(out, cp);
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

// repr(float) with CPython's rules: shortest round-trip digits, fixed notation when the decimal
// exponent is in [-4, 16), else d.ddde+XX with at least two exponent digits.
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

std::string py_str(const Json& j) {
  switch (j.type()) {
    case Json::value_t::string:
      return j.get_ref<const std::string&>();
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer:
      return std::to_string(j.get<int64_t>());
    case Json::value_t::number_unsigned:
      return std::to_string(j.get<uint64_t>());
    case Json::value_t::number_float:
      return py_float_repr(j.get<double>());
    default:
      return py_repr(j);
  }
}

// Note: JSON objects are key-sorted in nlohmann::json while Python dicts keep the request's order,
// so repr of a dict can differ in order from jinja2's; the template only prints a dict this way for
// nonsensical schemas (a description or type that is itself an object).
std::string py_repr(const Json& j) {
  switch (j.type()) {
    case Json::value_t::string:
      return py_repr_string(j.get_ref<const std::string&>());
    case Json::value_t::array: {
      std::string out = "[";
      bool first = true;
      for (const Json& e : j) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(e);
      }
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_string(it.key());
        out += ": ";
        out += py_repr(it.value());
      }
      return out + "}";
    }
    case Json::value_t::binary:
    case Json::value_t::discarded:
      template_error("chat template: unsupported JSON value");
    default:
      return py_str(j);
  }
}

bool py_truthy(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return j.get<bool>();
    case Json::value_t::number_integer:
      return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return j.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return j.get<double>() != 0.0;
    case Json::value_t::string:
      return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !j.empty();
    default:
      return false;
  }
}

bool py_equal(const Json& a, const Json& b) {
  const bool an = a.is_number() || a.is_boolean();
  const bool bn = b.is_number() || b.is_boolean();
  if (an || bn) {
    if (!(an && bn)) return false;
    const bool ai = !a.is_number_float();
    const bool bi = !b.is_number_float();
    if (ai && bi) {  // exact integer comparison (bool counts as 0/1, as in Python)
      auto to_i128 = [](const Json& x) -> __int128 {
        if (x.is_boolean()) return x.get<bool>() ? 1 : 0;
        if (x.is_number_unsigned()) return static_cast<__int128>(x.get<uint64_t>());
        return static_cast<__int128>(x.get<int64_t>());
      };
      return to_i128(a) == to_i128(b);
    }
    return as_double(a) == as_double(b);
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::value_t::null:
      return true;
    case Json::value_t::string:
      return a.get_ref<const std::string&>() == b.get_ref<const std::string&>();
    case Json::value_t::array: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!py_equal(a[i], b[i])) return false;
      return true;
    }
    case Json::value_t::object: {
      if (a.size() != b.size()) return false;
      for (auto it = a.begin(); it != a.end(); ++it) {
        auto other = b.find(it.key());
        if (other == b.end() || !py_equal(it.value(), *other)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

// ---- Value ----

Value Value::none() { return borrow(null_json()); }

const Json& Value::json() const {
  DG_CHECK(kind_ == Kind::kJson && json_ != nullptr);
  return *json_;
}

bool Value::is_sequence() const {
  if (kind_ == Kind::kUndefined) return true;  // jinja2's Undefined has __len__ and __getitem__
  return is_json() && (json_->is_string() || json_->is_array() || json_->is_object());
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
      return false;
    case Kind::kMethod:
      return true;
    default:
      return py_truthy(*json_);
  }
}

Value Value::operator[](std::string_view key) const {
  if (kind_ == Kind::kUndefined) template_error(fmt::format("chat template: cannot read '{}' of an undefined value", key));
  if (kind_ == Kind::kJson && json_->is_object()) {
    auto it = json_->find(key);
    if (it != json_->end()) return borrow(*it);
    // jinja2 falls back to attribute lookup: a dict's read-only methods are reachable this way.
    static constexpr std::string_view kDictMethods[] = {"copy", "fromkeys", "get", "items", "keys", "values"};
    if (std::find(std::begin(kDictMethods), std::end(kDictMethods), key) != std::end(kDictMethods)) return method();
  }
  // No str/list/number attribute has any of the names the template looks up.
  return Value();
}

Value Value::index(size_t i) const {
  if (kind_ == Kind::kUndefined) template_error("chat template: cannot index an undefined value");
  if (kind_ == Kind::kJson && json_->is_array() && i < json_->size()) return borrow((*json_)[i]);
  return Value();
}

Value Value::get(std::string_view key) const {
  if (!is_mapping())
    template_error(fmt::format("chat template: .get('{}') called on a value that is not an object", key));
  auto it = json_->find(key);
  return it == json_->end() ? none() : borrow(*it);
}

std::vector<Value> Value::iterate() const {
  std::vector<Value> items;
  if (kind_ == Kind::kUndefined) return items;
  if (kind_ == Kind::kJson) {
    if (json_->is_array()) {
      items.reserve(json_->size());
      for (const Json& e : *json_) items.push_back(borrow(e));
      return items;
    }
    if (json_->is_object()) {
      for (auto it = json_->begin(); it != json_->end(); ++it) items.push_back(str(it.key()));
      return items;
    }
    if (json_->is_string()) {
      const std::string& s = as_string();
      for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        const size_t n = decode_one(s, i, &cp);
        items.push_back(str(s.substr(i, n)));
        i += n;
      }
      return items;
    }
  }
  template_error("chat template: a value that is not a list, object or string was iterated");
}

std::vector<std::pair<const std::string*, Value>> Value::dictsort() const {
  if (!is_mapping()) template_error("chat template: dictsort applied to a value that is not an object");
  struct Item {
    std::string sort_key;
    const std::string* key;
    const Json* value;
  };
  std::vector<Item> items;
  items.reserve(json_->size());
  for (auto it = json_->begin(); it != json_->end(); ++it) items.push_back({py_lower(it.key()), &it.key(), &it.value()});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.sort_key < b.sort_key; });
  std::vector<std::pair<const std::string*, Value>> out;
  out.reserve(items.size());
  for (const Item& item : items) out.emplace_back(item.key, borrow(*item.value));
  return out;
}

bool Value::equals(const Value& other) const {
  if (kind_ != other.kind_) return false;
  if (kind_ == Kind::kUndefined) return true;  // Undefined.__eq__: same type
  if (kind_ == Kind::kMethod) return false;    // distinct bound methods
  return py_equal(*json_, *other.json_);
}

bool Value::equals(std::string_view s) const { return is_string() && as_string() == s; }

bool Value::contains(std::string_view needle) const {
  if (kind_ == Kind::kUndefined) return false;
  if (kind_ == Kind::kJson) {
    const Json& j = *json_;
    if (j.is_string()) return j.get_ref<const std::string&>().find(needle) != std::string::npos;
    if (j.is_object()) return j.contains(needle);
    if (j.is_array())
      return std::any_of(j.begin(), j.end(), [&](const Json& e) { return e.is_string() && e.get_ref<const std::string&>() == needle; });
  }
  template_error("chat template: 'in' applied to a value that is not a container");
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kMethod:
      // Python would print "<built-in method ... at 0x...>", an address: nothing to reproduce.
      template_error("chat template: a dict method would be printed");
    default:
      return py_str(*json_);
  }
}

std::string concat_str(const Value& v, std::string_view what) {
  if (v.is_string()) return v.as_string();
  if (v.is_undefined()) template_error(fmt::format("chat template: {} is undefined", what));
  template_error(fmt::format("chat template: {} must be a string", what));
}

}  // namespace dgemma::chat_detail
