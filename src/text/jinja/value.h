#pragma once
// The values a Jinja template computes with, modelled on the Python objects jinja2 gives a chat
// template: None, bool, int, float, str, list, tuple, dict (insertion-ordered, as Python's), jinja2's
// Undefined, namespace()/loop objects (attribute bags) and callables (macros, methods, globals).
// Containers are shared (Python reference semantics); the sandbox makes them immutable to the template,
// except namespace attributes.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/json.h"

namespace dgemma::jinja {

class Value;
using ValueList = std::vector<Value>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, or nullptr.
  const Value* kwarg(std::string_view name) const;
};

class Interpreter;
using NativeFunction = std::function<Value(Interpreter&, CallArgs&)>;

struct ValueDict;

class Value {
 public:
  enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kObject, kCallable };

  Value() = default;  // Undefined
  static Value undefined(std::string hint);  // hint: what was looked up, for the error message
  static Value none() { return Value(Type::kNone); }
  static Value boolean(bool b) {
    Value v(Type::kBool);
    v.i_ = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v(Type::kInt);
    v.i_ = i;
    return v;
  }
  static Value floating(double d) {
    Value v(Type::kFloat);
    v.f_ = d;
    return v;
  }
  static Value string(std::string s);
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(std::shared_ptr<ValueDict> d);
  static Value dict();
  // An attribute bag: namespace() (assignable by `set ns.x`) or a read-only object such as `loop`.
  static Value object(std::shared_ptr<ValueDict> attrs, bool is_namespace);
  static Value callable(NativeFunction fn, std::string name);

  template <typename J>  // Json or nlohmann::ordered_json
  static Value from_json(const J& j, int depth = 0);

  Type type() const { return type_; }
  // Container nesting (0 for scalars). Bounded (kMaxDepth) so that comparing, printing and freeing a
  // value never recurses without limit.
  int depth() const { return depth_; }
  static constexpr int kMaxDepth = 512;
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_tuple() const { return type_ == Type::kTuple; }
  bool is_sequence_like() const { return type_ == Type::kList || type_ == Type::kTuple; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_namespace() const { return type_ == Type::kObject && is_namespace_; }
  bool is_callable() const { return type_ == Type::kCallable; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // kInt or kBool
  double as_double() const;              // any number
  const std::string& as_string() const { return *static_cast<const std::string*>(p_.get()); }
  const ValueList& items() const { return *static_cast<const ValueList*>(p_.get()); }  // list / tuple
  const ValueDict& entries() const { return *static_cast<const ValueDict*>(p_.get()); }  // dict / object
  ValueDict& mutable_entries() const { return *static_cast<ValueDict*>(p_.get()); }
  const NativeFunction& function() const { return static_cast<const Callable*>(p_.get())->fn; }
  const std::string& undefined_hint() const;
  const std::string& callable_name() const { return static_cast<const Callable*>(p_.get())->name; }

  bool truthy() const;
  std::string str() const;   // Python str()
  std::string repr() const;  // Python repr()
  std::string type_name() const;  // Python type name for messages ('dict object', 'str')
  size_t length() const;  // len(); throws for types without one

 private:
  explicit Value(Type t) : type_(t) {}
  void repr_into(std::string& out, int depth) const;

  struct Callable {
    NativeFunction fn;
    std::string name;
  };

  void set_depth_from(const ValueList& items);
  void set_depth_from(const ValueDict& d);

  Type type_ = Type::kUndefined;
  bool is_namespace_ = false;
  uint16_t depth_ = 0;
  union {
    int64_t i_ = 0;
    double f_;
  };
  // One payload whose type follows type_: std::string (string; an Undefined's hint), ValueList,
  // ValueDict or Callable. A single pointer keeps copies cheap.
  std::shared_ptr<void> p_;
};

// Insertion-ordered mapping (Python dict). Keys are Values (str mostly; int/bool/None are hashable
// too); lookups compare with Python equality.
struct ValueDict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces an existing key in place (dict order kept)
};

// Python ==, <, and the comparison used by sort filters (case-insensitive strings when asked).
bool py_equal(const Value& a, const Value& b);
// a < b; throws a template error for unorderable types (TypeError in Python).
bool py_less(const Value& a, const Value& b);

// json.dumps(x, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter calls it.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the indent unit when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonDumpOptions& opts);

// A runtime failure of the template (Python TypeError, jinja2 UndefinedError, raise_exception...).
[[noreturn]] void runtime_error(std::string message);

// ---- template implementation ----
template <typename J>
Value Value::from_json(const J& j, int depth) {
  if (depth > kMaxDepth - 2) runtime_error("value nested too deeply");
  switch (j.type()) {
    case J::value_t::null:
      return none();
    case J::value_t::boolean:
      return boolean(j.template get<bool>());
    case J::value_t::number_integer:
      return integer(j.template get<int64_t>());
    case J::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return floating(static_cast<double>(u));
      return integer(static_cast<int64_t>(u));
    }
    case J::value_t::number_float:
      return floating(j.template get<double>());
    case J::value_t::string:
      return string(j.template get<std::string>());
    case J::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case J::value_t::object: {
      auto d = std::make_shared<ValueDict>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(string(it.key()), from_json(it.value(), depth + 1));
      return dict(std::move(d));
    }
    default:
      return none();  // binary / discarded: not produced by the JSON parser
  }
}

}  // namespace dgemma::jinja
