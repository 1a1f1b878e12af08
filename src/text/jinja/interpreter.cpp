// Execution of statements with jinja2's runtime semantics: scoping (loops and macros open a scope, if
// does not), loop variables, macros and call blocks, and the render limits. Expressions are evaluated
// in evaluate.cpp, the Template entry points and globals are template.cpp.
#include "text/jinja/interpreter.h"

#include <fmt/format.h>

#include "util/error.h"

namespace dgemma::jinja {

namespace {

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

}  // namespace dgemma::jinja
