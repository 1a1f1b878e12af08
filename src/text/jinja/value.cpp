// Python semantics of the template's values: truth, str(), repr(), ==, <, len() and json.dumps().
#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/pystr.h"
#include "util/error.h"

namespace dgemma::jinja {

void runtime_error(std::string message) { throw Error(ErrorKind::kInvalidArgument, std::move(message)); }

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.p_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

const std::string& Value::undefined_hint() const {
  static const std::string none;
  return p_ ? *static_cast<const std::string*>(p_.get()) : none;
}

Value Value::string(std::string s) {
  Value v(Type::kString);
  v.p_ = std::make_shared<std::string>(std::move(s));
  return v;
}

void Value::set_depth_from(const ValueList& items) {
  int d = 0;
  for (const Value& x : items) d = std::max(d, x.depth());
  if (d + 1 > kMaxDepth) runtime_error("value nested too deeply");
  depth_ = static_cast<uint16_t>(d + 1);
}

void Value::set_depth_from(const ValueDict& dict) {
  int d = 0;
  for (const auto& [k, x] : dict.items) d = std::max({d, k.depth(), x.depth()});
  if (d + 1 > kMaxDepth) runtime_error("value nested too deeply");
  depth_ = static_cast<uint16_t>(d + 1);
}

Value Value::list(ValueList items) {
  Value v(Type::kList);
  v.set_depth_from(items);
  v.p_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v(Type::kTuple);
  v.set_depth_from(items);
  v.p_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::dict(std::shared_ptr<ValueDict> d) {
  Value v(Type::kDict);
  v.set_depth_from(*d);
  v.p_ = std::move(d);
  return v;
}

Value Value::dict() { return dict(std::make_shared<ValueDict>()); }

Value Value::object(std::shared_ptr<ValueDict> attrs, bool is_namespace) {
  Value v(Type::kObject);
  v.set_depth_from(*attrs);
  v.p_ = std::move(attrs);
  v.is_namespace_ = is_namespace;
  return v;
}

Value Value::callable(NativeFunction fn, std::string name) {
  Value v(Type::kCallable);
  v.p_ = std::make_shared<Callable>(Callable{std::move(fn), std::move(name)});
  return v;
}

double Value::as_double() const { return type_ == Type::kFloat ? f_ : static_cast<double>(i_); }

bool Value::truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
    case Type::kInt:
      return i_ != 0;
    case Type::kFloat:
      return f_ != 0;
    case Type::kString:
      return !as_string().empty();
    case Type::kList:
    case Type::kTuple:
      return !items().empty();
    case Type::kDict:
      return !entries().items.empty();
    case Type::kObject:
    case Type::kCallable:
      return true;
  }
  return false;
}

std::string Value::str() const {
  switch (type_) {
    case Type::kUndefined:
      return {};
    case Type::kString:
      return as_string();
    case Type::kNone:
      return "None";
    case Type::kBool:
      return i_ ? "True" : "False";
    case Type::kInt:
      return std::to_string(i_);
    case Type::kFloat:
      return py_float_repr(f_);
    default:
      return repr();
  }
}

std::string Value::repr() const {
  std::string out;
  repr_into(out, 0);
  return out;
}

void Value::repr_into(std::string& out, int depth) const {
  if (depth > 512) runtime_error("value nested too deeply to print");
  switch (type_) {
    case Type::kUndefined:
      out += "Undefined";
      return;
    case Type::kString:
      out += py_repr_string(as_string());
      return;
    case Type::kList:
    case Type::kTuple: {
      out += type_ == Type::kList ? '[' : '(';
      for (size_t k = 0; k < items().size(); ++k) {
        if (k) out += ", ";
        items()[k].repr_into(out, depth + 1);
      }
      if (type_ == Type::kTuple && items().size() == 1) out += ',';
      out += type_ == Type::kList ? ']' : ')';
      return;
    }
    case Type::kDict:
    case Type::kObject: {
      if (type_ == Type::kObject) out += is_namespace_ ? "<Namespace " : "<object ";
      out += '{';
      bool first = true;
      for (const auto& [k, v] : entries().items) {
        if (!first) out += ", ";
        first = false;
        k.repr_into(out, depth + 1);
        out += ": ";
        v.repr_into(out, depth + 1);
      }
      out += '}';
      if (type_ == Type::kObject) out += '>';
      return;
    }
    case Type::kCallable:
      out += "<function " + callable_name() + ">";
      return;
    default:
      out += str();
  }
}

std::string Value::type_name() const {
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return "list";
    case Type::kTuple:
      return "tuple";
    case Type::kDict:
      return "dict";
    case Type::kObject:
      return is_namespace_ ? "Namespace" : "object";
    case Type::kCallable:
      return "function";
  }
  return "object";
}

size_t Value::length() const {
  switch (type_) {
    case Type::kUndefined:
      return 0;
    case Type::kString: {
      size_t n = 0;  // code points
      for (char c : as_string()) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      return n;
    }
    case Type::kList:
    case Type::kTuple:
      return items().size();
    case Type::kDict:
      return entries().items.size();
    default:
      runtime_error("TypeError: object of type '" + type_name() + "' has no len()");
  }
}

const Value* ValueDict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void ValueDict::set(Value key, Value value) {
  for (auto& [k, v] : items)
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

bool py_equal(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) {
    if (a.is_sequence_like() || b.is_sequence_like()) return false;
    return false;
  }
  switch (a.type()) {
    case T::kUndefined:
    case T::kNone:
      return true;
    case T::kString:
      return a.as_string() == b.as_string();
    case T::kList:
    case T::kTuple: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t k = 0; k < a.items().size(); ++k)
        if (!py_equal(a.items()[k], b.items()[k])) return false;
      return true;
    }
    case T::kDict: {
      if (a.entries().items.size() != b.entries().items.size()) return false;
      for (const auto& [k, v] : a.entries().items) {
        const Value* other = b.entries().find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    case T::kObject:
      return &a.entries() == &b.entries();
    case T::kCallable:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

bool py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order = code point order
  if (a.type() == b.type() && a.is_sequence_like()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (py_equal(x[k], y[k])) continue;
      return py_less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) runtime_error("UndefinedError: an undefined value cannot be compared");
  runtime_error("TypeError: '<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

namespace {

void append_hex4(std::string& out, uint32_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(v >> shift) & 0xF];
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (uint32_t cp : code_points(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20) {
      append_hex4(out, cp);
    } else if (ensure_ascii && cp > 0x7E) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        append_hex4(out, 0xD800 + (v >> 10));
        append_hex4(out, 0xDC00 + (v & 0x3FF));
      } else {
        append_hex4(out, cp);
      }
    } else {
      append_code_point(out, cp);
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(d);
}

// json.dumps turns keys into strings: str as is, bool as true/false, None as null, numbers via repr.
std::string json_key(const Value& k) {
  if (k.is_string()) return k.as_string();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_none()) return "null";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return json_float(k.as_double());
  runtime_error("TypeError: keys must be str, int, float, bool or None, not " + k.type_name());
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  if (depth > 512) runtime_error("ValueError: value nested too deeply for tojson");
  auto newline = [&](int level) {
    out += '\n';
    for (int k = 0; k < level; ++k) out += o.indent;
  };
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::kFloat:
      out += json_float(v.as_double());
      return;
    case Value::Type::kString:
      json_string(out, v.as_string(), o.ensure_ascii);
      return;
    case Value::Type::kList:
    case Value::Type::kTuple: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.items().size(); ++k) {
        if (k) out += o.item_separator;
        if (o.has_indent) newline(depth + 1);
        dump(out, v.items()[k], o, depth + 1);
      }
      if (o.has_indent) newline(depth);
      out += ']';
      return;
    }
    case Value::Type::kDict: {
      if (v.entries().items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, val] : v.entries().items) entries.emplace_back(json_key(k), &val);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      bool first = true;
      for (const auto& [k, val] : entries) {
        if (!first) out += o.item_separator;
        first = false;
        if (o.has_indent) newline(depth + 1);
        json_string(out, k, o.ensure_ascii);
        out += o.key_separator;
        dump(out, *val, o, depth + 1);
      }
      if (o.has_indent) newline(depth);
      out += '}';
      return;
    }
    default:
      runtime_error("TypeError: Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& opts) {
  std::string out;
  dump(out, v, opts, 0);
  return out;
}

}  // namespace dgemma::jinja
