// Evaluation of statements and expressions with jinja2's runtime semantics: scoping (loops and macros
// open a scope, if does not), Undefined, the sandbox's attribute/item lookup, Python operators.
#include "text/jinja/interpreter.h"

#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "text/jinja/parser.h"
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

bool contains_object(const Value& v) {
  if (v.is_object()) return true;
  if (v.depth() == 0) return false;
  if (v.is_sequence_like()) {
    for (const Value& x : v.items())
      if (contains_object(x)) return true;
  } else if (v.is_dict()) {
    for (const auto& [k, x] : v.entries().items)
      if (contains_object(x)) return true;
  }
  return false;
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

const Value& loop_key(int k) {
  static const Value keys[] = {Value::string("index"),  Value::string("index0"),   Value::string("revindex"),
                               Value::string("revindex0"), Value::string("first"), Value::string("last"),
                               Value::string("length"), Value::string("previtem"), Value::string("nextitem"),
                               Value::string("depth"),  Value::string("depth0"),   Value::string("cycle")};
  return keys[k];
}

}  // namespace

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    runtime_error(fmt::format("chat template output exceeds the limit of {} bytes", limits_.max_output_bytes));
}

void Interpreter::count_iterations(size_t n) {
  iterations_ += static_cast<int64_t>(n);
  if (iterations_ > limits_.max_loop_iterations)
    runtime_error(fmt::format("chat template exceeds the limit of {} loop iterations", limits_.max_loop_iterations));
}

void Interpreter::append(std::string& out, std::string_view s) const {
  check_size(out.size() + s.size());
  out += s;
}

Value make_string(Interpreter& in, std::string s) {
  in.check_size(s.size());
  return Value::string(std::move(s));
}

int64_t to_index(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  runtime_error(fmt::format("TypeError: {} must be an integer, not {}", what, v.type_name()));
}

std::string value_to_str(const Value& v) { return v.str(); }

// ---- statements ----

void Interpreter::exec_body(const Body& body, const FramePtr& frame, std::string& out) { exec_list(body, frame, out); }

Interpreter::Flow Interpreter::exec_list(const Body& body, const FramePtr& frame, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec(*s, frame, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const FramePtr& frame, std::string& out) {
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::kData:
      append(out, s.text);
      return Flow::kNormal;
    case StmtKind::kOutput: {
      const Value v = eval(*s.expr, frame);
      if (v.is_string()) {
        append(out, v.as_string());
      } else {
        append(out, v.str());
      }
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (!cond || eval(*cond, frame).truthy()) return exec_list(body, frame, out);
        line_ = s.line;
      }
      return Flow::kNormal;
    case StmtKind::kFor:
      return exec_for(s, frame, out);
    case StmtKind::kSet:
      if (!s.text.empty()) {  // set ns.attr = value
        const Value* ns = frame->find(s.targets[0]);
        if (!ns || !ns->is_namespace())
          runtime_error(fmt::format("TemplateRuntimeError: cannot assign attribute on non-namespace object '{}'", s.targets[0]));
        Value v = eval(*s.expr, frame);
        // A namespace holding an object could hold itself: a reference cycle. Chat templates never
        // need that; refusing it keeps every value a tree of bounded depth.
        if (contains_object(v))
          runtime_error("unsupported construct: a namespace or loop object stored in a namespace attribute");
        if (v.depth() + 1 > Value::kMaxDepth) runtime_error("value nested too deeply");
        ns->mutable_entries().set(Value::string(s.text), std::move(v));
        return Flow::kNormal;
      }
      assign(s, frame, eval(*s.expr, frame));
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string captured;
      exec_list(s.body, frame, captured);
      Value v = Value::string(std::move(captured));
      if (s.filter) {
        auto child = std::make_shared<Frame>();
        child->parent = frame;
        child->vars.emplace_back(sym_.captured, std::move(v));
        v = eval(*s.filter, child);
      }
      frame->set(s.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string captured;
      exec_list(s.body, frame, captured);
      auto child = std::make_shared<Frame>();
      child->parent = frame;
      child->vars.emplace_back(sym_.captured, Value::string(std::move(captured)));
      append(out, eval(*s.filter, child).str());
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      define_macro(s, frame);
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      // caller() renders the block body in the current scope, with the call block's parameters.
      const Stmt* stmt = &s;
      FramePtr defining = frame;
      NativeFunction fn = [stmt, defining](Interpreter& in, CallArgs& args) {
        auto f = std::make_shared<Frame>();
        f->parent = defining;
        for (size_t k = 0; k < stmt->params.size(); ++k) {
          const Param& p = stmt->params[k];
          const Value* kw = args.kwarg(p.name);
          if (k < args.positional.size()) {
            f->vars.emplace_back(p.name, args.positional[k]);
          } else if (kw) {
            f->vars.emplace_back(p.name, *kw);
          } else if (p.default_value) {
            f->vars.emplace_back(p.name, in.eval(*p.default_value, f));
          } else {
            f->vars.emplace_back(p.name, Value::undefined(fmt::format("'{}' is undefined", p.name)));
          }
        }
        std::string body;
        in.exec_body(stmt->body, f, body);
        return Value::string(std::move(body));
      };
      const Expr& call_expr = *s.expr;
      const Value callee = eval(*call_expr.children[0], frame);
      CallArgs args = eval_args(call_expr, frame, 1);
      args.keyword.emplace_back("caller", Value::callable(std::move(fn), "caller"));
      append(out, call(callee, args).str());
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      for (size_t k = 0; k < s.targets.size(); ++k) f->set(s.targets[k], eval(*s.values[k], frame));
      return exec_list(s.body, f, out);
    }
    case StmtKind::kScope:
      return exec_list(s.body, frame, out);
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Stmt& s, const FramePtr& frame, Value v) {
  if (!s.tuple_target) {
    frame->set(s.targets[0], std::move(v));
    return;
  }
  const std::vector<Value> items = iterate(v);
  if (items.size() != s.targets.size())
    runtime_error(fmt::format("ValueError: cannot unpack {} values into {} names", items.size(), s.targets.size()));
  for (size_t k = 0; k < items.size(); ++k) frame->set(s.targets[k], items[k]);
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const FramePtr& frame, std::string& out) {
  const Value iterable = eval(*s.expr, frame);
  std::vector<Value> items = iterate(iterable);
  // One scope object, emptied per iteration: assignments in the body do not survive an iteration
  // (as in jinja2, where state across iterations needs a namespace).
  auto f = std::make_shared<Frame>();
  f->parent = frame;
  f->vars.reserve(4);
  auto bind = [&](const Value& item) {
    f->vars.clear();
    if (!s.tuple_target) {
      f->set(s.targets[0], item);
      return;
    }
    const std::vector<Value> parts = iterate(item);
    if (parts.size() != s.targets.size())
      runtime_error(fmt::format("ValueError: cannot unpack {} values into {} loop variables", parts.size(), s.targets.size()));
    for (size_t k = 0; k < parts.size(); ++k) f->set(s.targets[k], parts[k]);
  };
  if (s.cond) {  // `for x in xs if cond`: filtered first, so loop.length counts what remains
    std::vector<Value> kept;
    for (const Value& item : items) {
      count_iterations(1);
      bind(item);
      if (eval(*s.cond, f).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  line_ = s.line;
  if (items.empty()) return exec_list(s.else_body, frame, out);
  const size_t n = items.size();
  // jinja2's LoopContext is one object advanced per iteration; so is ours.
  std::shared_ptr<ValueDict> loop_attrs;
  Value loop_value;
  auto index = std::make_shared<size_t>(0);
  if (s.uses_loop) {
    loop_attrs = std::make_shared<ValueDict>();
    loop_attrs->items.resize(12);
    for (int k = 0; k < 12; ++k) loop_attrs->items[k].first = loop_key(k);
    loop_attrs->items[6].second = Value::integer(static_cast<int64_t>(n));
    loop_attrs->items[9].second = Value::integer(1);
    loop_attrs->items[10].second = Value::integer(0);
    loop_attrs->items[11].second = Value::callable(
        [index](Interpreter&, CallArgs& args) {
          if (args.positional.empty()) runtime_error("TypeError: no items for cycling given");
          return args.positional[*index % args.positional.size()];
        },
        "cycle");
    loop_value = Value::object(loop_attrs, false);
  }
  for (size_t i = 0; i < n; ++i) {
    count_iterations(1);
    bind(items[i]);
    if (s.uses_loop) {
      *index = i;
      auto& a = loop_attrs->items;
      const auto ii = static_cast<int64_t>(i);
      const auto nn = static_cast<int64_t>(n);
      a[0].second = Value::integer(ii + 1);
      a[1].second = Value::integer(ii);
      a[2].second = Value::integer(nn - ii);
      a[3].second = Value::integer(nn - ii - 1);
      a[4].second = Value::boolean(i == 0);
      a[5].second = Value::boolean(i + 1 == n);
      a[7].second = i > 0 ? items[i - 1] : Value::undefined("there is no previous item");
      a[8].second = i + 1 < n ? items[i + 1] : Value::undefined("there is no next item");
      f->vars.emplace_back(sym_.loop, loop_value);
    }
    const Flow fl = exec_list(s.body, f, out);
    if (fl == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::define_macro(const Stmt& s, const FramePtr& frame) {
  const Stmt* stmt = &s;
  std::weak_ptr<Frame> weak = frame;  // a macro stored in its own frame must not keep the frame alive
  NativeFunction fn = [stmt, weak](Interpreter& in, CallArgs& args) {
    FramePtr defining = weak.lock();
    auto f = std::make_shared<Frame>();
    f->parent = defining;
    const auto& params = stmt->params;
    if (args.positional.size() > params.size() && !stmt->uses_varargs)
      runtime_error(fmt::format("TypeError: macro '{}' takes not more than {} argument(s)", stmt->text, params.size()));
    Value caller;
    std::vector<std::pair<Value, Value>> extra_kwargs;
    for (const auto& [k, v] : args.keyword) {
      bool known = false;
      for (const Param& p : params) known = known || p.name == k;
      if (known) continue;
      if (k == "caller") {
        caller = v;
      } else if (stmt->uses_kwargs) {
        extra_kwargs.emplace_back(Value::string(k), v);
      } else {
        runtime_error(fmt::format("TypeError: macro '{}' takes no keyword argument '{}'", stmt->text, k));
      }
    }
    for (size_t k = 0; k < params.size(); ++k) {
      const Param& p = params[k];
      const Value* kw = args.kwarg(p.name);
      if (k < args.positional.size()) {
        if (kw) runtime_error(fmt::format("TypeError: macro '{}' got multiple values for argument '{}'", stmt->text, p.name));
        f->vars.emplace_back(p.name, args.positional[k]);
      } else if (kw) {
        f->vars.emplace_back(p.name, *kw);
      } else if (p.default_value) {
        f->vars.emplace_back(p.name, in.eval(*p.default_value, f));
      } else {
        f->vars.emplace_back(p.name, Value::undefined(fmt::format("'{}' is undefined", p.name)));
      }
    }
    if (stmt->uses_varargs) {
      ValueList rest;
      for (size_t k = params.size(); k < args.positional.size(); ++k) rest.push_back(args.positional[k]);
      f->vars.emplace_back(in.symbols().varargs, Value::tuple(std::move(rest)));
    }
    if (stmt->uses_kwargs) {
      auto d = std::make_shared<ValueDict>();
      d->items = std::move(extra_kwargs);
      f->vars.emplace_back(in.symbols().kwargs, Value::dict(std::move(d)));
    }
    if (!caller.is_undefined()) f->vars.emplace_back(in.symbols().caller, caller);
    std::string body;
    in.exec_body(stmt->body, f, body);
    return Value::string(std::move(body));
  };
  frame->set(s.sym, Value::callable(std::move(fn), s.text));
}

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

// ---- Template ----

namespace {

Value global_range(Interpreter& in, CallArgs& args) {
  int64_t start = 0, stop = 0, step = 1;
  const auto& p = args.positional;
  if (p.size() == 1) {
    stop = to_index(p[0], "range() argument");
  } else if (p.size() == 2 || p.size() == 3) {
    start = to_index(p[0], "range() argument");
    stop = to_index(p[1], "range() argument");
    if (p.size() == 3) step = to_index(p[2], "range() argument");
  } else {
    runtime_error("TypeError: range expected 1 to 3 arguments");
  }
  if (step == 0) runtime_error("ValueError: range() arg 3 must not be zero");
  ValueList items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    in.count_iterations(1);
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

Value global_namespace(Interpreter&, CallArgs& args) {
  auto d = std::make_shared<ValueDict>();
  for (const Value& p : args.positional) {
    if (!p.is_dict()) runtime_error("TypeError: namespace() takes a mapping as its positional argument");
    for (const auto& [k, v] : p.entries().items) d->set(k, v);
  }
  for (const auto& [k, v] : args.keyword) d->set(Value::string(k), v);
  return Value::object(std::move(d), /*is_namespace=*/true);
}

Value global_dict(Interpreter&, CallArgs& args) {
  auto d = std::make_shared<ValueDict>();
  for (const Value& p : args.positional) {
    if (!p.is_dict()) runtime_error("TypeError: dict() takes a mapping as its positional argument");
    for (const auto& [k, v] : p.entries().items) d->set(k, v);
  }
  for (const auto& [k, v] : args.keyword) d->set(Value::string(k), v);
  return Value::dict(std::move(d));
}

Value global_raise(Interpreter&, CallArgs& args) {
  throw TemplateRaise{args.positional.empty() ? std::string() : args.positional[0].str()};
}

Value global_strftime_now(Interpreter&, CallArgs& args) {
  if (args.positional.empty() || !args.positional[0].is_string()) runtime_error("TypeError: strftime_now() takes a format string");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), args.positional[0].as_string().c_str(), &tm);
  return Value::string(std::string(buf, n));
}

FramePtr make_globals(Program& prog) {
  auto g = std::make_shared<Frame>();
  auto add = [&](const char* name, Value (*fn)(Interpreter&, CallArgs&)) {
    g->vars.emplace_back(*prog.pool.insert(name).first, Value::callable(fn, name));
  };
  add("range", global_range);
  add("namespace", global_namespace);
  add("dict", global_dict);
  add("raise_exception", global_raise);
  add("strftime_now", global_strftime_now);
  return g;
}

}  // namespace

Template Template::parse(std::string_view source) {
  Template t;
  Program prog = parse_template(source);
  t.globals_ = make_globals(prog);
  t.program_ = std::make_shared<const Program>(std::move(prog));
  return t;
}

const std::vector<std::string>& Template::free_names() const { return program_->free_names; }

std::string Template::render(const std::vector<std::pair<std::string, Value>>& context, const RenderLimits& limits) const {
  auto top = std::make_shared<Frame>();
  top->parent = globals_;
  top->vars.reserve(context.size() + 8);
  for (const auto& [name, value] : context) {
    auto it = program_->pool.find(name);  // a name the template never mentions cannot be read
    if (it != program_->pool.end()) top->set(*it, value);
  }
  Interpreter in(limits, program_->sym);
  std::string out;
  try {
    in.exec_body(program_->body, top, out);
  } catch (const TemplateRaise& r) {
    throw Error(ErrorKind::kInvalidArgument, r.message);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument) throw;
    throw Error(ErrorKind::kInvalidArgument, fmt::format("chat template line {}: {}", in.line(), e.what()));
  }
  return out;
}

}  // namespace dgemma::jinja
