#pragma once
// The parsed template: expression and statement nodes (one struct each, the kind says which fields
// are used), as jinja2's parser builds them.
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace dgemma::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // children: items
  kTuple,      // children: items
  kDict,       // children: key, value, key, value...
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]] (null children for omitted parts)
  kCall,       // children[0](children[1..], kwargs)
  kFilter,     // children[0] | name(children[1..], kwargs)
  kTest,       // children[0] is [not] name(children[1..], kwargs)   (negated)
  kNeg,        // -children[0]
  kPos,        // +children[0]
  kNot,        // not children[0]
  kBinary,     // children[0] op children[1]: + - * / // % ** ~
  kAnd,        // children[0] and children[1]
  kOr,         // children[0] or children[1]
  kCompare,    // children[0] ops[0] children[1] ops[1] children[2]... (== != < <= > >= in notin)
  kCondition,  // children[1] if children[0] else children[2] (null: undefined)
  kCaptured,   // the text captured by a block set / filter block (its filter chain's operand)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  std::string name;  // name, attribute, filter, test, binary operator
  std::string_view sym;  // kName: the interned name (Program::pool), compared by address
  Value literal;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  // Filters and tests resolved at parse time (index into the interpreter's tables).
  int builtin = -1;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches
  kFor,          // targets in expr [if cond] body [else else_body]
  kSet,          // targets = expr, or ns.attr = expr (attr non-empty)
  kSetBlock,     // {% set target %}body{% endset %} (filter: optional chain over kCaptured)
  kMacro,        // name(params) body
  kCallBlock,    // {% call(params) expr %}body{% endcall %}
  kFilterBlock,  // {% filter chain %}body{% endfilter %}
  kWith,         // {% with targets = values %}body{% endwith %}
  kBreak,
  kContinue,
  kScope,        // body in the current scope ({% generation %})
};

struct Param {
  std::string_view name;  // interned
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                                   // kData; kMacro name; kSet attr
  ExprPtr expr;                                       // output / for iterable / set value / call expr
  ExprPtr cond;                                       // for ... if cond
  ExprPtr filter;                                     // set block / filter block chain
  std::vector<std::pair<ExprPtr, Body>> branches;     // if / elif / else (null condition)
  std::vector<std::string_view> targets;              // for / set / with names (interned)
  std::string_view sym;                               // kMacro: the macro's name (interned)
  bool tuple_target = false;                          // `for a, b in` / `set a, b =`
  std::vector<ExprPtr> values;                        // with: one per target
  std::vector<Param> params;                          // macro / call block parameters
  Body body;
  Body else_body;
  // What the body reads (found by the parser), so that unused loop / macro objects are not built.
  bool uses_loop = false;     // for: `loop`
  bool uses_varargs = false;  // macro: `varargs`
  bool uses_kwargs = false;   // macro: `kwargs`
};

// Every variable name of a template, interned: scopes compare names by address.
struct Symbols {
  std::string_view loop, varargs, kwargs, caller, captured;
};

struct Program {
  std::set<std::string, std::less<>> pool;  // node-based: addresses stay put when the Program moves
  Symbols sym;
  Body body;
  std::vector<std::string> free_names;  // names the template reads that no loop, macro or with binds
};

}  // namespace dgemma::jinja
