// The Template entry points (parse once, render with a context and limits) and the globals every
// template sees (range, namespace, dict, raise_exception, strftime_now).
#include "text/jinja/template.h"

#include <ctime>

#include <fmt/format.h>

#include "text/jinja/interpreter.h"
#include "text/jinja/parser.h"
#include "util/error.h"

namespace dgemma::jinja {

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
