// Python methods the sandbox lets a template call on str, dict and list values. Methods that would
// mutate a value (list.append, dict.update...) exist but are refused, as in
// ImmutableSandboxedEnvironment.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "text/jinja/interpreter.h"
#include "text/jinja/pystr.h"

namespace dgemma::jinja {

namespace {

constexpr std::array<std::string_view, 36> kStrMethods = {
    "startswith", "endswith", "strip",  "lstrip",  "rstrip",     "split",        "rsplit",  "splitlines", "replace",
    "upper",      "lower",    "title",  "capitalize", "swapcase", "find",        "rfind",   "index",      "rindex",
    "count",      "join",     "format", "isdigit", "isalpha",    "isalnum",      "isspace", "islower",    "isupper",
    "zfill",      "center",   "ljust",  "rjust",   "partition",  "rpartition",   "removeprefix", "removesuffix", "isnumeric"};
constexpr std::array<std::string_view, 11> kDictMethods = {"items", "keys",     "values", "get",    "copy",    "pop",
                                                           "popitem", "setdefault", "update", "clear", "fromkeys"};
constexpr std::array<std::string_view, 11> kListMethods = {"index", "count", "copy",   "append", "extend", "insert",
                                                           "pop",   "remove", "reverse", "sort",  "clear"};
// Mutating methods: they exist (so `x.append` is an attribute) but calling one is a SecurityError.
constexpr std::array<std::string_view, 13> kUnsafe = {"pop",    "popitem", "setdefault", "update", "clear", "append", "extend",
                                                      "insert", "remove",  "reverse",    "sort",   "fromkeys", "__unused__"};

template <size_t N>
bool in(const std::array<std::string_view, N>& list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

const Value& arg(const CallArgs& a, size_t i, std::string_view name, const Value& dflt) {
  if (i < a.positional.size()) return a.positional[i];
  if (const Value* v = a.kwarg(name)) return *v;
  return dflt;
}

const std::string& str_arg(const CallArgs& a, size_t i, std::string_view name, const char* method) {
  static const Value none = Value::none();
  const Value& v = arg(a, i, name, none);
  if (!v.is_string()) runtime_error(fmt::format("TypeError: {}() argument must be str, not {}", method, v.type_name()));
  return v.as_string();
}

// str.startswith / endswith accept a str or a tuple of str.
bool affix_match(const Value& affix, const std::string& s, bool prefix, const char* method) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      runtime_error(fmt::format("TypeError: {} first arg must be str or a tuple of str, not {}", method, a.type_name()));
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

// str.format with plain `{}`, `{0}`, `{name}` fields and `!r` / `!s` conversions.
std::string str_format(const std::string& fmt_str, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    const char c = fmt_str[i];
    if (c == '}') {
      if (i + 1 < fmt_str.size() && fmt_str[i + 1] == '}') ++i;
      else runtime_error("ValueError: Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt_str.size() && fmt_str[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt_str.find('}', i);
    if (close == std::string::npos) runtime_error("ValueError: Single '{' encountered in format string");
    std::string field = fmt_str.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) runtime_error("ValueError: unsupported format field '" + field + "'");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos || field.find('.') != std::string::npos || field.find('[') != std::string::npos)
      runtime_error("unsupported construct: str.format field '{" + field + "}' (only {}, {0}, {name}, !r, !s)");
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= args.positional.size()) runtime_error("IndexError: Replacement index out of range for positional args tuple");
      v = &args.positional[idx];
    } else {
      v = args.kwarg(field);
      if (!v) runtime_error("KeyError: '" + field + "'");
    }
    out += conversion == 'r' ? v->repr() : v->str();
  }
  return out;
}

std::string pad(const std::string& s, const CallArgs& a, int align, const char* method) {
  static const Value none = Value::none();
  const int64_t width = to_index(arg(a, 0, "width", none), method);
  std::string fill = " ";
  if (a.positional.size() > 1) {
    if (!a.positional[1].is_string() || a.positional[1].length() != 1)
      runtime_error("TypeError: The fill character must be exactly one character long");
    fill = a.positional[1].as_string();
  }
  const auto len = static_cast<int64_t>(Value::string(s).length());
  if (width <= len) return s;
  const int64_t total = width - len;
  int64_t left = align < 0 ? 0 : align > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < total - left; ++k) out += fill;
  return out;
}

std::optional<Value> str_method(Interpreter& in, const std::string& s, const std::string& name, CallArgs& a) {
  static const Value none = Value::none();
  if (name == "startswith" || name == "endswith")
    return Value::boolean(affix_match(arg(a, 0, "prefix", none), s, name == "startswith", name.c_str()));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value& chars = arg(a, 0, "chars", none);
    if (!chars.is_none() && !chars.is_string()) runtime_error("TypeError: " + name + " arg must be None or str");
    const int side = name == "strip" ? 0 : name == "lstrip" ? -1 : 1;
    return Value::string(chars.is_none() ? py_strip_ws(s, side) : py_strip_chars(s, chars.as_string(), side));
  }
  if (name == "split" || name == "rsplit") {
    const Value& sep = arg(a, 0, "sep", none);
    const Value maxsplit = arg(a, 1, "maxsplit", Value::integer(-1));
    if (!sep.is_none() && !sep.is_string()) runtime_error("TypeError: must be str or None, not " + sep.type_name());
    if (sep.is_string() && sep.as_string().empty()) runtime_error("ValueError: empty separator");
    ValueList parts;
    for (auto& p : py_split(s, sep.is_none() ? nullptr : &sep.as_string(), to_index(maxsplit, "maxsplit"), name == "rsplit"))
      parts.push_back(Value::string(std::move(p)));
    in.count_iterations(parts.size());
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    ValueList parts;
    for (auto& p : py_splitlines(s, arg(a, 0, "keepends", Value::boolean(false)).truthy()))
      parts.push_back(Value::string(std::move(p)));
    return Value::list(std::move(parts));
  }
  if (name == "replace") {
    const std::string& old_s = str_arg(a, 0, "old", "replace");
    const std::string& new_s = str_arg(a, 1, "new", "replace");
    const int64_t count = to_index(arg(a, 2, "count", Value::integer(-1)), "count");
    return make_string(in, py_replace(s, old_s, new_s, count, in));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title_method(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "swapcase") return Value::string(py_swapcase(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const std::string& sub = str_arg(a, 0, "sub", name.c_str());
    const size_t pos = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (pos == std::string::npos) {
      if (name == "index" || name == "rindex") runtime_error("ValueError: substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(Value::string(s.substr(0, pos)).length()));
  }
  if (name == "count") {
    const std::string& sub = str_arg(a, 0, "sub", "count");
    if (sub.empty()) return Value::integer(static_cast<int64_t>(Value::string(s).length()) + 1);
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : in.iterate(arg(a, 0, "iterable", none))) {
      if (!v.is_string()) runtime_error("TypeError: sequence item: expected str instance, " + v.type_name() + " found");
      if (!first) out += s;
      first = false;
      out += v.as_string();
      in.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "format") return make_string(in, str_format(s, a));
  if (name == "isdigit" || name == "isnumeric") return Value::boolean(py_is_class(s, 'd'));
  if (name == "isalpha") return Value::boolean(py_is_class(s, 'a'));
  if (name == "isalnum") return Value::boolean(py_is_class(s, 'n'));
  if (name == "isspace") return Value::boolean(py_is_class(s, 's'));
  if (name == "islower") return Value::boolean(py_islower(s));
  if (name == "isupper") return Value::boolean(py_isupper(s));
  if (name == "zfill") {
    const int64_t width = to_index(arg(a, 0, "width", none), "zfill");
    const auto len = static_cast<int64_t>(Value::string(s).length());
    if (width <= len) return Value::string(s);
    const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    std::string out = sign ? s.substr(0, 1) : std::string();
    out.append(static_cast<size_t>(width - len), '0');
    out += sign ? s.substr(1) : s;
    return make_string(in, std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    const int64_t width = to_index(arg(a, 0, "width", none), name.c_str());
    in.check_size(static_cast<size_t>(std::max<int64_t>(width, 0)) * 4);
    return Value::string(pad(s, a, name == "center" ? 0 : name == "ljust" ? -1 : 1, name.c_str()));
  }
  if (name == "partition" || name == "rpartition") {
    const std::string& sep = str_arg(a, 0, "sep", name.c_str());
    if (sep.empty()) runtime_error("ValueError: empty separator");
    const size_t pos = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (pos == std::string::npos) {
      if (name == "partition") return Value::tuple({Value::string(s), Value::string(""), Value::string("")});
      return Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    }
    return Value::tuple({Value::string(s.substr(0, pos)), Value::string(sep), Value::string(s.substr(pos + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& x = str_arg(a, 0, name == "removeprefix" ? "prefix" : "suffix", name.c_str());
    if (x.size() <= s.size()) {
      if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
      if (name == "removesuffix" && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value::string(s.substr(0, s.size() - x.size()));
    }
    return Value::string(s);
  }
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& d, const std::string& name, CallArgs& a) {
  static const Value none = Value::none();
  if (name == "items") {
    ValueList out;
    for (const auto& [k, v] : d.entries().items) out.push_back(Value::tuple({k, v}));
    return Value::list(std::move(out));
  }
  if (name == "keys" || name == "values") {
    ValueList out;
    for (const auto& [k, v] : d.entries().items) out.push_back(name == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  if (name == "get") {
    if (a.positional.empty()) runtime_error("TypeError: get expected at least 1 argument, got 0");
    if (const Value* v = d.entries().find(a.positional[0])) return *v;
    return a.positional.size() > 1 ? a.positional[1] : none;
  }
  if (name == "copy") {
    auto c = std::make_shared<ValueDict>(d.entries());
    return Value::dict(std::move(c));
  }
  return std::nullopt;
}

std::optional<Value> list_method(const Value& l, const std::string& name, CallArgs& a) {
  if (name == "index" || name == "count") {
    if (a.positional.empty()) runtime_error("TypeError: " + name + "() takes exactly one argument (0 given)");
    int64_t n = 0;
    for (size_t k = 0; k < l.items().size(); ++k) {
      if (!py_equal(l.items()[k], a.positional[0])) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(k));
      ++n;
    }
    if (name == "index") runtime_error("ValueError: " + a.positional[0].repr() + " is not in list");
    return Value::integer(n);
  }
  if (name == "copy") return Value::list(l.items());
  return std::nullopt;
}

}  // namespace

bool is_unsafe_method(const std::string& name) { return in(kUnsafe, name); }

bool is_method(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::kString:
      return in(kStrMethods, name);
    case Value::Type::kDict:
      return in(kDictMethods, name);
    case Value::Type::kList:
      return in(kListMethods, name);
    case Value::Type::kTuple:
      return name == "index" || name == "count";
    default:
      return false;
  }
}

std::optional<Value> call_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs& args) {
  if (kUnsafe.end() != std::find(kUnsafe.begin(), kUnsafe.end(), name) && !obj.is_string()) return std::nullopt;
  switch (obj.type()) {
    case Value::Type::kString:
      return str_method(in, obj.as_string(), name, args);
    case Value::Type::kDict:
      return dict_method(obj, name, args);
    case Value::Type::kList:
    case Value::Type::kTuple:
      return list_method(obj, name, args);
    default:
      return std::nullopt;
  }
}

}  // namespace dgemma::jinja
