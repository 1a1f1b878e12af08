// jinja2's builtin filters and tests (jinja2/filters.py, jinja2/tests.py) with transformers' tojson.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include <fmt/format.h>

#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

namespace dgemma::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);
}  // namespace
Value f_format(Interpreter& in, const Value& v, CallArgs& a);
namespace {
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

const Value kNone = Value::none();
const std::string kComma = ",";
const Value kFalse = Value::boolean(false);

// Argument `i` (after the operand) by position or keyword, else `dflt`.
const Value& arg(const CallArgs& a, size_t i, std::string_view name, const Value& dflt = kNone) {
  if (i < a.positional.size()) return a.positional[i];
  if (const Value* v = a.kwarg(name)) return *v;
  return dflt;
}

std::string soft_str(const Value& v) { return v.str(); }

// jinja2's make_attrgetter: "a.b.0" walks attributes / items.
Value get_attribute_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_int()) return in.getitem(item, attribute);
  Value v = item;
  const std::string path = attribute.str();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = in.getitem(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value lower_if_string(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

void require_hashable(const Value& v) {
  if (v.is_list() || v.is_dict() || v.is_object()) runtime_error("TypeError: unhashable type: '" + v.type_name() + "'");
  if (v.is_tuple())
    for (const Value& x : v.items()) require_hashable(x);
}

// ---- filters ----

Value f_abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) runtime_error("OverflowError: integer result out of the 64-bit range");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  runtime_error("TypeError: bad operand type for abs(): '" + v.type_name() + "'");
}

// Python getattr only (no item fallback): methods of str/dict/list, attributes of namespace objects.
Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string name = arg(a, 0, "name").str();
  if (v.is_object() || is_method(v, name)) return in.getattr(v, name);
  if (v.is_undefined()) in.getattr(v, name);  // raises
  return Value::undefined(v.type_name() + " object has no attribute '" + name + "'");
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& a) {
  const int64_t n = to_index(arg(a, 0, "linecount"), "batch size");
  if (n <= 0) runtime_error("ValueError: batch size must be positive");
  const Value& fill = arg(a, 1, "fill_with");
  ValueList out, cur;
  for (const Value& item : in.iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs&) { return Value::string(py_capitalize(soft_str(v))); }

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  CallArgs m;
  m.positional.push_back(arg(a, 0, "width", Value::integer(80)));
  return *call_method(in, Value::string(soft_str(v)), "center", m);
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  static const Value empty = Value::string("");
  const bool boolean = arg(a, 1, "boolean", kFalse).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", empty);
  return v;
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
  if (!v.is_dict()) runtime_error("TypeError: dictsort expects a mapping, got " + v.type_name());
  const bool case_sensitive = arg(a, 0, "case_sensitive", kFalse).truthy();
  const Value by = arg(a, 1, "by", Value::string("key"));
  const bool reverse = arg(a, 2, "reverse", kFalse).truthy();
  int pos = 0;
  if (by.is_string() && by.as_string() == "value") {
    pos = 1;
  } else if (!(by.is_string() && by.as_string() == "key")) {
    runtime_error("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  }
  std::vector<std::pair<Value, Value>> items = v.entries().items;
  std::vector<Value> keys;
  for (const auto& kv : items) keys.push_back(lower_if_string(pos == 0 ? kv.first : kv.second, case_sensitive));
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? py_less(keys[y], keys[x]) : py_less(keys[x], keys[y]);
  });
  ValueList out;
  for (size_t k : order) out.push_back(Value::tuple({items[k].first, items[k].second}));
  return Value::list(std::move(out));
}

Value f_escape(Interpreter& in, const Value& v, CallArgs&) {
  std::string out;
  for (char c : soft_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return make_string(in, std::move(out));
}

Value f_first(Interpreter& in, const Value& v, CallArgs&) {
  const auto items = in.iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter& in, const Value& v, CallArgs&) {
  const auto items = in.iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// float(str) in Python: optional whitespace, sign, digits with '_', inf/nan.
bool parse_float(std::string s, double* out) {
  s = py_strip_ws(s, 0);
  std::string clean;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_') {
      if (k == 0 || k + 1 == s.size() || !isdigit(static_cast<unsigned char>(s[k - 1])) ||
          !isdigit(static_cast<unsigned char>(s[k + 1])))
        return false;
      continue;
    }
    clean += s[k];
  }
  if (clean.empty()) return false;
  std::string lowered = py_lower(clean);
  const std::string body = lowered[0] == '+' || lowered[0] == '-' ? lowered.substr(1) : lowered;
  if (body == "inf" || body == "infinity" || body == "nan") {
    *out = body == "nan" ? NAN : (lowered[0] == '-' ? -INFINITY : INFINITY);
    return true;
  }
  for (char c : body)
    if (!(isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) return false;
  char* end = nullptr;
  *out = std::strtod(clean.c_str(), &end);
  return end && *end == '\0';
}

bool parse_int(const std::string& text, int64_t base, int64_t* out) {
  std::string s = py_strip_ws(text, 0);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s = s.substr(1);
  }
  if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s = s.substr(2);
  if (s.empty() || s.front() == '_' || s.back() == '_') return false;
  int64_t v = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    const char c = s[k];
    if (c == '_') {
      if (s[k - 1] == '_') return false;
      continue;
    }
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : c >= 'A' && c <= 'Z' ? c - 'A' + 10 : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
  }
  *out = neg ? -v : v;
  return true;
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  static const Value zero = Value::floating(0.0);
  if (v.is_undefined()) runtime_error("UndefinedError: " + v.undefined_hint());
  if (v.is_number()) return Value::floating(v.as_double());
  double d;
  if (v.is_string() && parse_float(v.as_string(), &d)) return Value::floating(d);
  return arg(a, 0, "default", zero);
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  static const Value zero = Value::integer(0);
  const Value& dflt = arg(a, 0, "default", zero);
  const int64_t base = to_index(arg(a, 1, "base", Value::integer(10)), "base");
  if (v.is_undefined()) runtime_error("UndefinedError: " + v.undefined_hint());
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    int64_t i;
    if (parse_int(v.as_string(), base, &i)) return Value::integer(i);
    double d;
    if (parse_float(v.as_string(), &d) && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
  }
  return dflt;
}


Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  if (v.is_undefined()) runtime_error("UndefinedError: " + v.undefined_hint());
  // jinja2 3.1.2 appends "\n" to the value itself: only strings can be indented.
  if (!v.is_string()) runtime_error("TypeError: unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  const Value width = arg(a, 0, "width", Value::integer(4));
  const bool first = arg(a, 1, "first", kFalse).truthy();
  const bool blank = arg(a, 2, "blank", kFalse).truthy();
  std::string ind;
  if (width.is_string()) {
    ind = width.as_string();
  } else {
    const int64_t w = to_index(width, "indent width");
    ind.assign(static_cast<size_t>(std::clamp<int64_t>(w, 0, 4096)), ' ');
  }
  const std::string s = soft_str(v) + "\n";
  const auto lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv += "\n" + ind;
      rv += lines[k];
    }
  } else {
    rv = lines.empty() ? std::string() : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n";
      if (!lines[k].empty()) rv += ind;
      rv += lines[k];
    }
  }
  if (first) rv = ind + rv;
  return make_string(in, std::move(rv));
}

Value f_items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) runtime_error("TypeError: Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.entries().items) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  static const Value empty = Value::string("");
  const std::string sep = arg(a, 0, "d", empty).str();
  const Value& attribute = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attribute.is_none() ? item : get_attribute_path(in, item, attribute)).str();
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value f_length(Interpreter&, const Value& v, CallArgs&) { return Value::integer(static_cast<int64_t>(v.length())); }

Value f_list(Interpreter& in, const Value& v, CallArgs&) { return Value::list(in.iterate(v)); }

Value f_lower(Interpreter&, const Value& v, CallArgs&) { return Value::string(py_lower(soft_str(v))); }
Value f_upper(Interpreter&, const Value& v, CallArgs&) { return Value::string(py_upper(soft_str(v))); }
Value f_title(Interpreter&, const Value& v, CallArgs&) { return Value::string(jinja_title(soft_str(v))); }

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  ValueList out;
  const auto items = v.truthy() ? in.iterate(v) : std::vector<Value>{};  // jinja2: `if value:` first
  if (const Value* attribute = a.kwarg("attribute")) {
    const Value* dflt = a.kwarg("default");
    for (const Value& item : items) {
      Value r = get_attribute_path(in, item, *attribute);
      if (r.is_undefined() && dflt) r = *dflt;
      out.push_back(std::move(r));
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) runtime_error("FilterArgumentError: map requires a filter argument");
  const std::string name = a.positional[0].str();
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : items) {
    CallArgs copy = rest;
    out.push_back(apply_filter(in, name, item, copy));
  }
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  const bool case_sensitive = arg(a, 0, "case_sensitive", kFalse).truthy();
  const Value& attribute = arg(a, 1, "attribute");
  const auto items = in.iterate(v);
  if (items.empty()) return Value::undefined(want_max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t k) {
    return lower_if_string(attribute.is_none() ? items[k] : get_attribute_path(in, items[k], attribute), case_sensitive);
  };
  Value best_key = key(0);
  for (size_t k = 1; k < items.size(); ++k) {
    Value kk = key(k);
    if (want_max ? py_less(best_key, kk) : py_less(kk, best_key)) {
      best = k;
      best_key = std::move(kk);
    }
  }
  return items[best];
}
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }

// select / reject / selectattr / rejectattr
Value select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep_if) {
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (a.positional.empty()) runtime_error("TypeError: missing attribute argument");
    attribute = a.positional[next++];
  }
  std::string test;
  bool has_test = next < a.positional.size();
  if (has_test) test = a.positional[next++].str();
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, a.positional.size())), a.positional.end());
  test_args.keyword = a.keyword;
  ValueList out;
  if (!v.truthy()) return Value::list({});  // jinja2: `if value:` first
  for (const Value& item : in.iterate(v)) {
    const Value subject = by_attr ? get_attribute_path(in, item, attribute) : item;
    bool r;
    if (has_test) {
      CallArgs copy = test_args;
      r = apply_test(in, test, subject, copy);
    } else {
      r = subject.truthy();
    }
    if (r == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string old_s = arg(a, 0, "old").str();
  const std::string new_s = arg(a, 1, "new").str();
  const Value& count = arg(a, 2, "count");
  return make_string(in, py_replace(soft_str(v), old_s, new_s, count.is_none() ? -1 : to_index(count, "count"), in));
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_string()) {
    auto cps = code_points(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(from_code_points(cps, 0, cps.size()));
  }
  auto items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  const int64_t precision = to_index(arg(a, 0, "precision", Value::integer(0)), "precision");
  const std::string method = arg(a, 1, "method", Value::string("common")).str();
  if (method != "common" && method != "ceil" && method != "floor")
    runtime_error("FilterArgumentError: method must be common, ceil or floor");
  if (!v.is_number()) runtime_error("TypeError: type " + v.type_name() + " doesn't define __round__ method");
  const double d = v.as_double();
  if (method == "common") {
    if (v.is_int() || v.is_bool()) return precision >= 0 ? Value::integer(v.as_int()) : Value::floating(std::round(d));
    if (!std::isfinite(d)) return Value::floating(d);
    // Python's round(x, n): the correctly rounded decimal (half to even on the exact binary value).
    char buf[512];
    if (precision < 0) {  // round to tens, hundreds...: half to even on the scaled value
      const double scale = std::pow(10.0, static_cast<double>(std::min<int64_t>(-precision, 308)));
      std::snprintf(buf, sizeof(buf), "%.0f", d / scale);
      return Value::floating(std::strtod(buf, nullptr) * scale);
    }
    const int p = static_cast<int>(std::min<int64_t>(precision, 300));
    std::snprintf(buf, sizeof(buf), "%.*f", p, d);
    return Value::floating(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  return Value::floating((method == "ceil" ? std::ceil(d * scale) : std::floor(d * scale)) / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs&) { return Value::string(soft_str(v)); }

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  const bool reverse = arg(a, 0, "reverse", kFalse).truthy();
  const bool case_sensitive = arg(a, 1, "case_sensitive", kFalse).truthy();
  const Value& attribute = arg(a, 2, "attribute");
  auto items = in.iterate(v);
  std::vector<Value> keys;
  std::vector<Value> attrs;  // sort(attribute='age,name'): a tuple key
  if (attribute.is_string() && attribute.as_string().find(',') != std::string::npos) {
    for (auto& part : py_split(attribute.as_string(), &kComma, -1, false)) attrs.push_back(Value::string(part));
  }
  for (const Value& item : items) {
    if (!attrs.empty()) {
      ValueList parts;
      for (const Value& at : attrs) parts.push_back(lower_if_string(get_attribute_path(in, item, at), case_sensitive));
      keys.push_back(Value::tuple(std::move(parts)));
      continue;
    }
    keys.push_back(lower_if_string(attribute.is_none() ? item : get_attribute_path(in, item, attribute), case_sensitive));
  }
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? py_less(keys[y], keys[x]) : py_less(keys[x], keys[y]);
  });
  ValueList out;
  for (size_t k : order) out.push_back(items[k]);
  return Value::list(std::move(out));
}

Value f_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string() ? v : Value::string(soft_str(v)); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  const Value& attribute = arg(a, 0, "attribute");
  Value total = arg(a, 1, "start", Value::integer(0));
  for (const Value& item : in.iterate(v)) {
    const Value x = attribute.is_none() ? item : get_attribute_path(in, item, attribute);
    if (!total.is_number() || !x.is_number())
      runtime_error("TypeError: unsupported operand type(s) for +: '" + total.type_name() + "' and '" + x.type_name() + "'");
    if ((total.is_int() || total.is_bool()) && (x.is_int() || x.is_bool())) {
      int64_t r;
      if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) runtime_error("OverflowError: integer result out of the 64-bit range");
      total = Value::integer(r);
    } else {
      total = Value::floating(total.as_double() + x.as_double());
    }
  }
  return total;
}

// transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  o.ensure_ascii = arg(a, 0, "ensure_ascii", kFalse).truthy();
  const Value& indent = arg(a, 1, "indent");
  const Value& separators = arg(a, 2, "separators");
  o.sort_keys = arg(a, 3, "sort_keys", kFalse).truthy();
  if (!indent.is_none()) {
    o.has_indent = true;
    if (indent.is_string()) {
      o.indent = indent.as_string();
    } else {
      const int64_t n = to_index(indent, "indent");
      o.indent.assign(static_cast<size_t>(std::clamp<int64_t>(n, 0, 4096)), ' ');
    }
    o.item_separator = ",";
  }
  if (!separators.is_none()) {
    if (!separators.is_sequence_like() || separators.items().size() != 2 || !separators.items()[0].is_string() ||
        !separators.items()[1].is_string())
      runtime_error("TypeError: tojson separators must be a pair of strings");
    o.item_separator = separators.items()[0].as_string();
    o.key_separator = separators.items()[1].as_string();
  }
  std::string s = json_dumps(v, o);
  return make_string(in, std::move(s));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  const Value& chars = arg(a, 0, "chars");
  if (chars.is_none()) return Value::string(py_strip_ws(soft_str(v), 0));
  return Value::string(py_strip_chars(soft_str(v), chars.str(), 0));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  const bool case_sensitive = arg(a, 0, "case_sensitive", kFalse).truthy();
  const Value& attribute = arg(a, 1, "attribute");
  ValueList out, seen;
  for (const Value& item : in.iterate(v)) {
    Value key = lower_if_string(attribute.is_none() ? item : get_attribute_path(in, item, attribute), case_sensitive);
    require_hashable(key);
    bool dup = false;
    for (const Value& s : seen) dup = dup || py_equal(s, key);
    if (dup) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  // len(re.findall(r"\w+", s)): runs of letters, digits and '_' (non-ASCII letters count as word chars).
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t cp : code_points(soft_str(v))) {
    const bool w = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_' ||
                   (cp >= 0x80 && !py_is_space(cp) && !(cp >= 0x2000 && cp <= 0x206F) && !(cp >= 0x3000 && cp <= 0x303F));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"abs", f_abs},         {"attr", f_attr},       {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},   {"count", f_length},    {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},      {"escape", f_escape},     {"first", f_first},
      {"float", f_float},     {"format", f_format},   {"indent", f_indent},     {"int", f_int},
      {"items", f_items},     {"join", f_join},       {"last", f_last},         {"length", f_length},
      {"list", f_list},       {"lower", f_lower},     {"map", f_map},           {"max", f_max},
      {"min", f_min},         {"reject", f_reject},   {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse}, {"round", f_round},     {"safe", f_safe},         {"select", f_select},
      {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},     {"sum", f_sum},
      {"title", f_title},     {"tojson", f_tojson},   {"trim", f_trim},         {"unique", f_unique},
      {"upper", f_upper},     {"wordcount", f_wordcount}, {"forceescape", f_escape},
  };
  return table;
}

// ---- tests ----

bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_callable() || v.is_undefined(); }
bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  const Value& n = arg(a, 0, "num");
  if (!v.is_number() || !n.is_number()) runtime_error("TypeError: divisibleby needs numbers");
  if (n.as_double() == 0) runtime_error("ZeroDivisionError: integer modulo by zero");
  if ((v.is_int() || v.is_bool()) && (n.is_int() || n.is_bool())) return v.as_int() % n.as_int() == 0;
  return std::fmod(v.as_double(), n.as_double()) == 0;
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return py_equal(v, arg(a, 0, "other")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !py_equal(v, arg(a, 0, "other")); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return py_less(v, arg(a, 0, "other")); }
bool t_le(Interpreter&, const Value& v, CallArgs& a) { return !py_less(arg(a, 0, "other"), v); }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return py_less(arg(a, 0, "other"), v); }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) { return !py_less(v, arg(a, 0, "other")); }
bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }
// value % 2 == 1 / == 0 with Python's modulo (floats allowed).
double py_mod2(const Value& v) {
  if (!v.is_number()) runtime_error("TypeError: unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
  if (v.is_float()) {
    double m = std::fmod(v.as_double(), 2.0);
    if (m < 0) m += 2.0;
    return m;
  }
  return static_cast<double>(((v.as_int() % 2) + 2) % 2);
}
bool t_even(Interpreter&, const Value& v, CallArgs&) { return py_mod2(v) == 0; }
bool t_odd(Interpreter&, const Value& v, CallArgs&) { return py_mod2(v) == 1; }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_filter(Interpreter&, const Value& v, CallArgs&) {
  require_hashable(v);
  return v.is_string() && filter_exists(v.as_string());
}
bool t_test(Interpreter&, const Value& v, CallArgs&) {
  require_hashable(v);
  return v.is_string() && test_exists(v.as_string());
}
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_sequence_like() || v.is_dict();
}
bool t_sequence(Interpreter& in, const Value& v, CallArgs& a) { return t_iterable(in, v, a); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_in(Interpreter& in, const Value& v, CallArgs& a) { return in.contains(arg(a, 0, "seq"), v); }
bool t_lower(Interpreter&, const Value& v, CallArgs&) { return py_islower(v.str()); }
bool t_upper(Interpreter&, const Value& v, CallArgs&) { return py_isupper(v.str()); }
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = arg(a, 0, "other");
  if (v.type() != o.type()) return false;
  if (v.is_none() || v.is_bool() || v.is_undefined()) return v.is_none() || v.is_undefined() || v.as_bool() == o.as_bool();
  if (v.is_sequence_like()) return &v.items() == &o.items();
  if (v.is_dict() || v.is_object()) return &v.entries() == &o.entries();
  return false;  // Python identity of ints/strings is an implementation detail
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"undefined", t_undefined},
      {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
      {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le}, {"gt", t_gt}, {"greaterthan", t_gt},
      {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"escaped", t_escaped}, {"even", t_even}, {"odd", t_odd},
      {"false", t_false}, {"true", t_true}, {"filter", t_filter}, {"test", t_test}, {"float", t_float},
      {"integer", t_integer}, {"number", t_number}, {"string", t_string}, {"mapping", t_mapping},
      {"iterable", t_iterable}, {"sequence", t_sequence}, {"none", t_none}, {"in", t_in}, {"lower", t_lower},
      {"upper", t_upper}, {"sameas", t_sameas},
  };
  return table;
}

}  // namespace

// Python printf-style formatting: `fmt % args` and the `format` filter.
std::string printf_format(const std::string& f, const Value& args) {
  std::vector<Value> positional;
  const Value* mapping = args.is_dict() ? &args : nullptr;
  if (args.is_tuple()) {
    positional = args.items();
  } else if (!mapping) {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) runtime_error("ValueError: incomplete format");
    if (f[i] == '%') {
      out += '%';
      continue;
    }
    const Value* v = nullptr;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos || !mapping) runtime_error("TypeError: format requires a mapping");
      v = mapping->entries().find(std::string_view(f).substr(i + 1, close - i - 1));
      if (!v) runtime_error("KeyError: '" + f.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    std::string spec = "%";
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) spec += f[i++];
    while (i < f.size() && isdigit(static_cast<unsigned char>(f[i]))) spec += f[i++];
    if (i < f.size() && f[i] == '.') {
      spec += f[i++];
      while (i < f.size() && isdigit(static_cast<unsigned char>(f[i]))) spec += f[i++];
    }
    if (i >= f.size()) runtime_error("ValueError: incomplete format");
    const char conv = f[i];
    if (!v) {
      if (next >= positional.size()) runtime_error("TypeError: not enough arguments for format string");
      v = &positional[next++];
    }
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? v->str() : v->repr();
      if (spec == "%") {
        out += s;
      } else {
        std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), s.c_str());
        out += buf;
      }
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v->is_number()) runtime_error("TypeError: %" + std::string(1, conv) + " format: a number is required, not " + v->type_name());
      const long long n = v->is_float() ? static_cast<long long>(v->as_double()) : v->as_int();
      std::snprintf(buf, sizeof(buf), (spec + "ll" + std::string(1, conv == 'i' ? 'd' : conv)).c_str(), n);
      out += buf;
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G') {
      if (!v->is_number()) runtime_error("TypeError: must be real number, not " + v->type_name());
      std::snprintf(buf, sizeof(buf), (spec + std::string(1, conv)).c_str(), v->as_double());
      out += buf;
    } else {
      runtime_error(std::string("unsupported construct: printf-style conversion %") + conv);
    }
    if (out.size() > (64u << 20)) runtime_error("format output too large");
  }
  if (!mapping && next < positional.size()) runtime_error("TypeError: not all arguments converted during string formatting");
  return out;
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.keyword.empty() && !a.positional.empty())
    runtime_error("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.keyword.empty()) {
    auto d = std::make_shared<ValueDict>();
    for (const auto& [k, val] : a.keyword) d->set(Value::string(k), val);
    args = Value::dict(std::move(d));
  } else {
    args = Value::tuple(a.positional);
  }
  return make_string(in, printf_format(soft_str(v), args));
}

bool filter_exists(const std::string& name) { return filters().count(name) != 0; }
bool test_exists(const std::string& name) { return tests().count(name) != 0; }

Value apply_filter(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args) {
  const auto& table = filters();
  auto it = table.find(name);
  if (it == table.end()) runtime_error("TemplateAssertionError: No filter named '" + name + "'");
  return it->second(in, operand, args);
}

bool apply_test(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args) {
  const auto& table = tests();
  auto it = table.find(name);
  if (it == table.end()) runtime_error("TemplateAssertionError: No test named '" + name + "'");
  return it->second(in, operand, args);
}

}  // namespace dgemma::jinja
