// Evaluation of expressions with jinja2's runtime semantics: Undefined, the sandbox's attribute and
// item lookup, calls, slices and Python operators.
#include "text/jinja/interpreter.h"

#include <cmath>

#include <fmt/format.h>

#include "util/error.h"

namespace dgemma::jinja {

namespace {

[[noreturn]] void undefined_error(const Value& u) {
  runtime_error("UndefinedError: " + (u.undefined_hint().empty() ? std::string("value is undefined") : u.undefined_hint()));
}

std::string describe_obj(const Value& v) {
  if (v.is_none()) return "None";
  return "'" + v.type_name() + " object'";
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(describe_obj(obj) + " has no attribute '" + name + "'");
}

// Python floor division and modulo.
int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

// ---- expressions ----

std::vector<Value> Interpreter::iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kList:
    case Value::Type::kTuple:
      return v.items();
    case Value::Type::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.entries().items.size());
      for (const auto& [k, val] : v.entries().items) keys.push_back(k);
      return keys;
    }
    case Value::Type::kString: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      for (size_t i = 0; i < s.size();) {
        size_t n = 1;
        while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
        chars.push_back(Value::string(s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    default:
      runtime_error("TypeError: '" + v.type_name() + "' object is not iterable");
  }
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      undefined_error(obj);
    case Value::Type::kDict: {
      if (is_method(obj, name)) break;
      if (const Value* v = obj.entries().find(std::string_view(name))) return *v;
      return no_attribute(obj, name);
    }
    case Value::Type::kObject: {
      if (const Value* v = obj.entries().find(std::string_view(name))) return *v;
      return no_attribute(obj, name);
    }
    default:
      break;
  }
  if (is_method(obj, name)) {
    if (is_unsafe_method(name))  // the sandbox's unsafe_undefined: printing is empty, calling fails
      return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
    Value self = obj;
    std::string method = name;
    return Value::callable(
        [self, method](Interpreter& in, CallArgs& args) {
          auto r = call_method(in, self, method, args);
          if (!r) runtime_error("SecurityError: access to attribute '" + method + "' of '" + self.type_name() + "' object is unsafe.");
          return *r;
        },
        name);
  }
  return no_attribute(obj, name);
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      undefined_error(obj);
    case Value::Type::kDict:
      if (const Value* v = obj.entries().find(key)) return *v;
      break;
    case Value::Type::kList:
    case Value::Type::kTuple:
    case Value::Type::kString:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_string()) {
          const std::vector<Value> chars = iterate(obj);
          const auto n = static_cast<int64_t>(chars.size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value::undefined(describe_obj(obj) + " has no element " + std::to_string(key.as_int()));
          return chars[static_cast<size_t>(i)];
        }
        const auto n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(describe_obj(obj) + " has no element " + std::to_string(key.as_int()));
        return obj.items()[static_cast<size_t>(i)];
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {  // jinja2 falls back to the attribute
    if (obj.is_dict()) {
      if (is_method(obj, key.as_string())) return getattr(obj, key.as_string());
      return no_attribute(obj, key.as_string());
    }
    return getattr(obj, key.as_string());
  }
  return Value::undefined(describe_obj(obj) + " has no element " + key.repr());
}

bool Interpreter::contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!item.is_string())
        runtime_error("TypeError: 'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::kList:
    case Value::Type::kTuple:
      for (const Value& v : container.items())
        if (py_equal(v, item)) return true;
      return false;
    case Value::Type::kDict:
      return container.entries().find(item) != nullptr;
    default:
      runtime_error("TypeError: argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) undefined_error(fn);
  if (!fn.is_callable()) runtime_error("TypeError: '" + fn.type_name() + "' object is not callable");
  if (++call_depth_ > limits_.max_call_depth) {
    call_depth_ = 0;
    runtime_error(fmt::format("chat template exceeds the limit of {} nested macro calls", limits_.max_call_depth));
  }
  const int saved_line = line_;
  Value r = fn.function()(*this, args);
  line_ = saved_line;
  --call_depth_;
  return r;
}

CallArgs Interpreter::eval_args(const Expr& e, const FramePtr& frame, size_t first) {
  CallArgs args;
  args.positional.reserve(e.children.size() - first);
  for (size_t k = first; k < e.children.size(); ++k) args.positional.push_back(eval(*e.children[k], frame));
  for (const auto& [name, ex] : e.kwargs) args.keyword.emplace_back(name, eval(*ex, frame));
  return args;
}

Value Interpreter::eval_call(const Expr& e, const FramePtr& frame) {
  const Expr& callee = *e.children[0];
  if (callee.kind == ExprKind::kGetAttr) {  // obj.method(...): dispatch directly, no bound-method object
    const Value obj = eval(*callee.children[0], frame);
    if (!obj.is_undefined() && !obj.is_object() && is_method(obj, callee.name)) {
      CallArgs args = eval_args(e, frame, 1);
      auto r = call_method(*this, obj, callee.name, args);
      if (!r)
        runtime_error("SecurityError: access to attribute '" + callee.name + "' of '" + obj.type_name() + "' object is unsafe.");
      return *r;
    }
    const Value fn = getattr(obj, callee.name);
    CallArgs args = eval_args(e, frame, 1);
    return call(fn, args);
  }
  const Value fn = eval(callee, frame);
  CallArgs args = eval_args(e, frame, 1);
  return call(fn, args);
}

Value Interpreter::eval_slice(const Expr& e, const FramePtr& frame) {
  const Value obj = eval(*e.children[0], frame);
  auto part = [&](int k) -> std::optional<int64_t> {
    if (!e.children[k]) return std::nullopt;
    const Value v = eval(*e.children[k], frame);
    if (v.is_none()) return std::nullopt;
    return to_index(v, "slice indices");
  };
  const auto start = part(1), stop = part(2), step_opt = part(3);
  const int64_t step = step_opt.value_or(1);
  if (step == 0) runtime_error("ValueError: slice step cannot be zero");
  if (obj.is_undefined()) undefined_error(obj);
  std::vector<Value> src;
  if (obj.is_string()) {
    src = iterate(obj);
  } else if (obj.is_sequence_like()) {
    src = obj.items();
  } else if (obj.is_dict()) {
    runtime_error("TypeError: unhashable type: 'slice'");
  } else {
    return Value::undefined(describe_obj(obj) + " cannot be sliced");
  }
  const auto n = static_cast<int64_t>(src.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt, bool is_stop) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    (void)is_stop;
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t lo = clamp(start, step > 0 ? 0 : n - 1, false);
  const int64_t hi = clamp(stop, step > 0 ? n : -1, true);
  std::vector<Value> picked;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) picked.push_back(src[static_cast<size_t>(i)]);
  if (obj.is_string()) {
    std::string s;
    for (const Value& c : picked) s += c.as_string();
    return Value::string(std::move(s));
  }
  return obj.is_tuple() ? Value::tuple(std::move(picked)) : Value::list(std::move(picked));
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op[0] == '~') return make_string(*this, a.str() + b.str());
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  auto type_error = [&]() -> Value {
    runtime_error(fmt::format("TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
  };
  auto overflow = [&]() -> Value { runtime_error("OverflowError: integer result out of the 64-bit range"); };
  if (op[0] == '+') {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return make_string(*this, a.as_string() + b.as_string());
    if (a.type() == b.type() && a.is_sequence_like()) {
      check_size((a.items().size() + b.items().size()) * sizeof(Value));
      ValueList r = a.items();
      r.insert(r.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(r)) : Value::list(std::move(r));
    }
    return type_error();
  }
  if (op[0] == '-') {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() - b.as_double());
    return type_error();
  }
  if (op[0] == '*' && op.size() == 1) {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() * b.as_double());
    const Value* seq = (a.is_string() || a.is_sequence_like()) ? &a : (b.is_string() || b.is_sequence_like()) ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq && (count->is_int() || count->is_bool())) {
      const int64_t times = std::max<int64_t>(0, count->as_int());
      if (seq->is_string()) {
        check_size(static_cast<size_t>(times) * seq->as_string().size());
        std::string r;
        for (int64_t k = 0; k < times; ++k) r += seq->as_string();
        return Value::string(std::move(r));
      }
      check_size(static_cast<size_t>(times) * seq->items().size() * sizeof(Value));
      ValueList r;
      for (int64_t k = 0; k < times; ++k) r.insert(r.end(), seq->items().begin(), seq->items().end());
      return seq->is_tuple() ? Value::tuple(std::move(r)) : Value::list(std::move(r));
    }
    return type_error();
  }
  if ((op[0] == '/' && op.size() == 1)) {
    if (!nums) return type_error();
    if (b.as_double() == 0) runtime_error("ZeroDivisionError: division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op[0] == '%') {
    if (op[0] == '%' && a.is_string()) {
      return make_string(*this, printf_format(a.as_string(), b));
    }
    if (!nums) return type_error();
    if (b.as_double() == 0) runtime_error(op == "//" ? "ZeroDivisionError: integer division or modulo by zero"
                                                      : "ZeroDivisionError: integer modulo by zero");
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) return overflow();
      const int64_t q = floordiv(x, y);
      return Value::integer(op == "//" ? q : x - q * y);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "//") return Value::floating(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::floating(m);
  }
  if ((op[0] == '*' && op.size() == 2)) {
    if (!nums) return type_error();
    if (a.as_double() == 0 && b.as_double() < 0) runtime_error("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    if (ints && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        if (__builtin_mul_overflow(r, base, &r)) return overflow();
        if (r == 0 || r == 1) break;
      }
      return Value::integer(r);
    }
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  return type_error();
}

Value Interpreter::eval(const Expr& e, const FramePtr& frame) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName: {
      if (const Value* v = frame->find(e.sym)) return *v;
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kCaptured:
      return *frame->find(sym_.captured);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) items.push_back(eval(*c, frame));
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<ValueDict>();
      for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
        Value key = eval(*e.children[k], frame);
        if (key.is_sequence_like() || key.is_dict() || key.is_undefined() || key.is_object())
          runtime_error("TypeError: unhashable type: '" + key.type_name() + "'");
        d->set(std::move(key), eval(*e.children[k + 1], frame));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr:
      return getattr(eval(*e.children[0], frame), e.name);
    case ExprKind::kGetItem: {
      const Value obj = eval(*e.children[0], frame);
      return getitem(obj, eval(*e.children[1], frame));
    }
    case ExprKind::kSlice:
      return eval_slice(e, frame);
    case ExprKind::kCall:
      return eval_call(e, frame);
    case ExprKind::kFilter: {
      const Value operand = eval(*e.children[0], frame);
      CallArgs args = eval_args(e, frame, 1);
      line_ = e.line;
      return apply_filter(*this, e.name, operand, args);
    }
    case ExprKind::kTest: {
      const Value operand = eval(*e.children[0], frame);
      CallArgs args = eval_args(e, frame, 1);
      line_ = e.line;
      return Value::boolean(apply_test(*this, e.name, operand, args) != e.negated);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      const Value v = eval(*e.children[0], frame);
      if (v.is_undefined()) undefined_error(v);
      if (e.kind == ExprKind::kPos && v.is_number()) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_int() || v.is_bool()) {
        if (v.as_int() == INT64_MIN) runtime_error("OverflowError: integer result out of the 64-bit range");
        return Value::integer(-v.as_int());
      }
      if (v.is_float()) return Value::floating(-v.as_double());
      runtime_error("TypeError: bad operand type for unary -: '" + v.type_name() + "'");
    }
    case ExprKind::kNot:
      return Value::boolean(!eval(*e.children[0], frame).truthy());
    case ExprKind::kAnd: {
      Value a = eval(*e.children[0], frame);
      if (!a.truthy()) return a;
      return eval(*e.children[1], frame);
    }
    case ExprKind::kOr: {
      Value a = eval(*e.children[0], frame);
      if (a.truthy()) return a;
      return eval(*e.children[1], frame);
    }
    case ExprKind::kBinary: {
      const Value a = eval(*e.children[0], frame);
      const Value b = eval(*e.children[1], frame);
      line_ = e.line;
      return eval_binary(e.name, a, b);
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.children[0], frame);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.children[k + 1], frame);
        const std::string& op = e.ops[k];  // == != < <= > >= in notin: dispatch on the characters
        const bool two = op.size() == 2;
        bool r;
        switch (op[0]) {
          case '=': r = py_equal(left, right); break;
          case '!': r = !py_equal(left, right); break;
          case '<': r = two ? !py_less(right, left) : py_less(left, right); break;
          case '>': r = two ? !py_less(left, right) : py_less(right, left); break;
          case 'i': r = contains(right, left); break;
          default: r = !contains(right, left);
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kCondition: {
      if (eval(*e.children[0], frame).truthy()) return eval(*e.children[1], frame);
      if (e.children[2]) return eval(*e.children[2], frame);
      return Value::undefined("the inline if expression had no else branch");
    }
  }
  return Value();
}

}  // namespace dgemma::jinja
