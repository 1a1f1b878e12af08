#pragma once
// The tree-walking evaluator behind jinja::Template (interpreter.cpp), plus the builtin filters,
// tests (filters.cpp) and Python methods (methods.cpp) it dispatches to.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/template.h"
#include "text/jinja/value.h"

namespace dgemma::jinja {

// One variable scope: the template's top level, a for loop, a macro call, a with block.
// Names are interned (Program::pool): equal names are the same string, compared by address.
struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string_view, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const Frame* f = this; f; f = f->parent.get())
      for (const auto& [k, v] : f->vars)
        if (k.data() == name.data()) return &v;
    return nullptr;
  }
  void set(std::string_view name, Value v) {
    for (auto& [k, old] : vars)
      if (k.data() == name.data()) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};
using FramePtr = std::shared_ptr<Frame>;

// A template-level failure raised by raise_exception(): its message is passed on verbatim.
struct TemplateRaise {
  std::string message;
};

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, const Symbols& sym) : limits_(limits), sym_(sym) {}

  const Symbols& symbols() const { return sym_; }

  void exec_body(const Body& body, const FramePtr& frame, std::string& out);
  Value eval(const Expr& e, const FramePtr& frame);

  // Python/jinja2 operations shared with filters and methods.
  Value getattr(const Value& obj, const std::string& name);  // obj.name
  Value getitem(const Value& obj, const Value& key);         // obj[key]
  std::vector<Value> iterate(const Value& v);                 // for x in v (dict: keys)
  Value call(const Value& fn, CallArgs& args);
  bool contains(const Value& container, const Value& item);   // item in container

  void check_size(size_t bytes) const;
  void count_iterations(size_t n);

  int line() const { return line_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow exec(const Stmt& s, const FramePtr& frame, std::string& out);
  Flow exec_list(const Body& body, const FramePtr& frame, std::string& out);
  Flow exec_for(const Stmt& s, const FramePtr& frame, std::string& out);
  void define_macro(const Stmt& s, const FramePtr& frame);
  Value eval_call(const Expr& e, const FramePtr& frame);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  Value eval_slice(const Expr& e, const FramePtr& frame);
  CallArgs eval_args(const Expr& e, const FramePtr& frame, size_t first);
  void assign(const Stmt& s, const FramePtr& frame, Value v);
  void append(std::string& out, std::string_view s) const;

  const RenderLimits& limits_;
  const Symbols& sym_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
};

// Builtin filters and tests (filters.cpp). Throws a template error for unknown names.
Value apply_filter(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args);
bool filter_exists(const std::string& name);
bool test_exists(const std::string& name);

// Python methods of str / dict / list (methods.cpp): obj.name(args), or nullopt when obj has no such
// method. is_method tells whether the attribute exists (for `x.items` lookups without a call).
std::optional<Value> call_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs& args);
bool is_method(const Value& obj, const std::string& name);
bool is_unsafe_method(const std::string& name);  // list.append, dict.update...

// Python's `fmt % args` (args: a tuple, a mapping for %(name)s, or one value).
std::string printf_format(const std::string& fmt, const Value& args);

// Helpers shared by filters and methods.
int64_t to_index(const Value& v, const char* what);
std::string value_to_str(const Value& v);
Value make_string(Interpreter& in, std::string s);

}  // namespace dgemma::jinja
