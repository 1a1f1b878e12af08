// Recursive-descent parser with jinja2's grammar and operator precedence (jinja2/parser.py):
// condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary - + < postfix/filters/tests.
#include "text/jinja/parser.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "text/jinja/interpreter.h"
#include "text/jinja/lexer.h"

namespace dgemma::jinja {
namespace {

// Expression / statement nesting, chained operators included (`a ~ b ~ c` is as deep as its chain):
// deeper input is refused at parse time, so evaluation never recurses deeper than this.
constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Program run() {
    Program& p = prog_;
    p.sym = Symbols{intern("loop"), intern("varargs"), intern("kwargs"), intern("caller"), intern("<captured>")};
    p.body = parse_body({});
    if (cur().type != TokenType::kEof) fail("unexpected tag");
    std::set<std::string> free;
    for (const auto& n : read_names_)
      if (!assigned_.count(n)) free.insert(n);
    p.free_names.assign(free.begin(), free.end());
    return std::move(prog_);
  }

  std::string_view intern(std::string_view name) { return *prog_.pool.insert(std::string(name)).first; }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& msg) const { syntax_error(cur().line, msg); }

  bool is_op(std::string_view op) const { return cur().type == TokenType::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::kName && cur().text == n; }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool accept_name(std::string_view n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail(fmt::format("expected '{}'{}", op, describe()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected a name" + describe());
    return t_[i_++].text;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail("expected '%}'" + describe());
    ++i_;
  }
  std::string describe() const {
    switch (cur().type) {
      case TokenType::kEof: return ", got the end of the template";
      case TokenType::kBlockEnd: return ", got '%}'";
      case TokenType::kVarEnd: return ", got '}}'";
      default: return ", got '" + cur().text + "'";
    }
  }

  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail("template nested too deeply");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // Counts the links of a left-deep chain (a + b + c...) against the nesting limit.
  struct Links {
    explicit Links(Parser& p) : p_(p) {}
    void add() {
      if (++p_.depth_ > kMaxNesting) p_.fail("template nested too deeply");
      ++n_;
    }
    ~Links() { p_.depth_ -= n_; }
    Parser& p_;
    int n_ = 0;
  };

  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Parses until a block tag whose name is in `ends` (left as the current token) or the end.
  Body parse_body(const std::vector<std::string_view>& ends) {
    Depth d(*this);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == TokenType::kEof) {
        if (!ends.empty()) fail(fmt::format("unexpected end of template, expected '{{% {} %}}'", ends.front()));
        return body;
      }
      if (tok.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        ++i_;
      } else if (tok.type == TokenType::kVarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = tok.line;
        s->expr = parse_tuple(/*allow_empty=*/false);
        if (cur().type != TokenType::kVarEnd) fail("expected '}}'" + describe());
        ++i_;
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::kBlockBegin) {
        const Token& name = peek();
        if (name.type != TokenType::kName) {
          ++i_;
          fail("expected a statement name" + describe());
        }
        if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          ++i_;  // leave the tag name current
          return body;
        }
        i_ += 2;
        body.push_back(parse_statement(name));
      } else {
        fail("unexpected token" + describe());
      }
    }
  }

  void expect_end_tag(std::string_view name) {
    if (!accept_name(name)) fail(fmt::format("expected '{{% {} %}}'", name));
    expect_block_end();
  }

  StmtPtr parse_statement(const Token& tag) {
    auto s = std::make_unique<Stmt>();
    s->line = tag.line;
    const std::string& n = tag.text;
    if (n == "if") {
      s->kind = StmtKind::kIf;
      ExprPtr cond = parse_tuple(false);
      while (true) {
        expect_block_end();
        Body b = parse_body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (accept_name("elif")) {
          cond = parse_tuple(false);
          continue;
        }
        if (accept_name("else")) {
          expect_block_end();
          s->branches.emplace_back(nullptr, parse_body({"endif"}));
        }
        expect_end_tag("endif");
        return s;
      }
    }
    if (n == "for") {
      s->kind = StmtKind::kFor;
      parse_targets(*s, /*bound=*/true);
      if (!accept_name("in")) fail("expected 'in'" + describe());
      s->expr = parse_tuple(false, /*with_condexpr=*/false);
      if (accept_name("if")) s->cond = parse_expression();
      if (is_name("recursive")) fail("unsupported construct 'recursive' loops");
      expect_block_end();
      ++loop_depth_;
      const size_t names_before = read_names_.size();
      s->body = parse_body({"endfor", "else"});
      s->uses_loop = reads_since(names_before, "loop");
      --loop_depth_;
      if (accept_name("else")) {
        expect_block_end();
        s->else_body = parse_body({"endfor"});
      }
      expect_end_tag("endfor");
      return s;
    }
    if (n == "set") {
      if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == "." ) {
        s->kind = StmtKind::kSet;
        s->targets.push_back(intern(expect_name()));
        read_names_.emplace_back(s->targets.back());
        expect_op(".");
        s->text = expect_name();
        expect_op("=");
        s->expr = parse_tuple(false);
        expect_block_end();
        return s;
      }
      parse_targets(*s, /*bound=*/false);
      if (accept_op("=")) {
        s->kind = StmtKind::kSet;
        s->expr = parse_tuple(false);
        expect_block_end();
        return s;
      }
      if (s->tuple_target) fail("a block set takes one name");
      s->kind = StmtKind::kSetBlock;
      s->filter = parse_filter_chain_on_captured();
      expect_block_end();
      s->body = parse_body({"endset"});
      expect_end_tag("endset");
      return s;
    }
    if (n == "macro") {
      s->kind = StmtKind::kMacro;
      s->text = expect_name();
      s->sym = intern(s->text);
      assigned_.insert(s->text);
      parse_params(*s);
      expect_block_end();
      const int saved = loop_depth_;
      loop_depth_ = 0;
      const size_t names_before = read_names_.size();
      s->body = parse_body({"endmacro"});
      s->uses_varargs = reads_since(names_before, "varargs");
      s->uses_kwargs = reads_since(names_before, "kwargs");
      loop_depth_ = saved;
      expect_end_tag("endmacro");
      return s;
    }
    if (n == "call") {
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_params(*s);
      s->expr = parse_expression();
      if (s->expr->kind != ExprKind::kCall) fail("expected a macro call after 'call'");
      expect_block_end();
      assigned_.insert("caller");
      s->body = parse_body({"endcall"});
      expect_end_tag("endcall");
      return s;
    }
    if (n == "filter") {
      s->kind = StmtKind::kFilterBlock;
      auto captured = node(ExprKind::kCaptured, tag.line);
      s->filter = parse_filter_names(std::move(captured));
      expect_block_end();
      s->body = parse_body({"endfilter"});
      expect_end_tag("endfilter");
      return s;
    }
    if (n == "with") {
      s->kind = StmtKind::kWith;
      while (cur().type != TokenType::kBlockEnd) {
        if (!s->targets.empty()) expect_op(",");
        s->targets.push_back(intern(expect_name()));
        assigned_.emplace(s->targets.back());
        expect_op("=");
        s->values.push_back(parse_expression());
      }
      expect_block_end();
      s->body = parse_body({"endwith"});
      expect_end_tag("endwith");
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) syntax_error(tag.line, fmt::format("'{}' outside of a loop", n));
      s->kind = n == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
      return s;
    }
    if (n == "generation") {  // transformers' AssistantTracker tag: renders its body
      s->kind = StmtKind::kScope;
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      expect_end_tag("endgeneration");
      return s;
    }
    syntax_error(tag.line, fmt::format("unsupported construct '{{% {} %}}'", n));
  }

  bool reads_since(size_t first, std::string_view name) const {
    return std::find(read_names_.begin() + static_cast<std::ptrdiff_t>(first), read_names_.end(), name) != read_names_.end();
  }

  // `bound`: loop variables are never inputs; a `set` target may also be read as an input first
  // (`{% set x = x | default(1) %}`), so it stays a free name.
  void parse_targets(Stmt& s, bool bound) {
    bool parens = accept_op("(");
    while (true) {
      s.targets.push_back(intern(expect_name()));
      if (bound) assigned_.emplace(s.targets.back());
      if (!accept_op(",")) break;
      s.tuple_target = true;
      if (cur().type != TokenType::kName) break;
    }
    if (parens) {
      s.tuple_target = true;
      expect_op(")");
    }
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!accept_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (accept_op(")")) break;
      Param p;
      p.name = intern(expect_name());
      assigned_.emplace(p.name);
      if (accept_op("=")) p.default_value = parse_expression();
      s.params.push_back(std::move(p));
    }
  }

  ExprPtr parse_filter_chain_on_captured() {
    ExprPtr e = node(ExprKind::kCaptured, cur().line);
    if (!accept_op("|")) return nullptr;
    return parse_filter_names(std::move(e));
  }

  // `name(args) | name2 ...` applied to `operand` (the leading '|' already consumed).
  ExprPtr parse_filter_names(ExprPtr operand) {
    Links links(*this);
    while (true) {
      links.add();
      operand = parse_one_filter(std::move(operand));
      if (!accept_op("|")) return operand;
    }
  }

  // ---- expressions ----

  ExprPtr parse_tuple(bool allow_empty, bool with_condexpr = true) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!accept_op(",")) break;
        is_tuple = true;
      }
      if (cur().type == TokenType::kVarEnd || cur().type == TokenType::kBlockEnd || is_op(")") || is_name("in") ||
          (is_tuple && is_name("if")))
        break;
      items.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    if (!is_tuple) {
      if (items.empty()) {
        if (!allow_empty) fail("expected an expression" + describe());
        return node(ExprKind::kTuple, line);
      }
      return std::move(items[0]);
    }
    auto t = node(ExprKind::kTuple, line);
    t->children = std::move(items);
    return t;
  }

  ExprPtr parse_expression() {
    Depth d(*this);
    ExprPtr e = parse_or();
    Links links(*this);
    while (is_name("if")) {
      links.add();
      const int line = cur().line;
      ++i_;
      auto c = node(ExprKind::kCondition, line);
      ExprPtr cond = parse_or();
      ExprPtr other = accept_name("else") ? parse_expression() : nullptr;
      c->children.push_back(std::move(cond));
      c->children.push_back(std::move(e));
      c->children.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(ExprKind kind, std::string op, ExprPtr l, ExprPtr r, int line) {
    auto e = node(kind, line);
    e->name = std::move(op);
    e->children.push_back(std::move(l));
    e->children.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    Links links(*this);
    while (is_name("or")) {
      links.add();
      const int line = cur().line;
      ++i_;
      e = binary(ExprKind::kOr, "or", std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    Links links(*this);
    while (is_name("and")) {
      links.add();
      const int line = cur().line;
      ++i_;
      e = binary(ExprKind::kAnd, "and", std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth d(*this);
      auto e = node(ExprKind::kNot, cur().line);
      ++i_;
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> cmp;
    Links links(*this);
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        op = cur().text;
        ++i_;
      } else if (is_name("in")) {
        op = "in";
        ++i_;
      } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      links.add();
      if (!cmp) {
        cmp = node(ExprKind::kCompare, line);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    Links links(*this);
    while (is_op("+") || is_op("-")) {
      links.add();
      const int line = cur().line;
      std::string op = t_[i_++].text;
      e = binary(ExprKind::kBinary, op, std::move(e), parse_concat(), line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    Links links(*this);
    while (is_op("~")) {
      links.add();
      const int line = cur().line;
      ++i_;
      e = binary(ExprKind::kBinary, "~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    Links links(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      links.add();
      const int line = cur().line;
      std::string op = t_[i_++].text;
      e = binary(ExprKind::kBinary, op, std::move(e), parse_pow(), line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    Links links(*this);
    while (is_op("**")) {
      links.add();
      const int line = cur().line;
      ++i_;
      e = binary(ExprKind::kBinary, "**", std::move(e), parse_unary(true), line);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().line);
      ++i_;
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    const int line = tok.line;
    switch (tok.type) {
      case TokenType::kName: {
        ++i_;
        auto e = node(ExprKind::kLiteral, line);
        if (tok.text == "true" || tok.text == "True") {
          e->literal = Value::boolean(true);
        } else if (tok.text == "false" || tok.text == "False") {
          e->literal = Value::boolean(false);
        } else if (tok.text == "none" || tok.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = tok.text;
          e->sym = intern(tok.text);
          read_names_.push_back(tok.text);
        }
        return e;
      }
      case TokenType::kString: {
        std::string s;
        while (cur().type == TokenType::kString) s += t_[i_++].text;  // adjacent literals concatenate
        auto e = node(ExprKind::kLiteral, line);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case TokenType::kInt: {
        ++i_;
        auto e = node(ExprKind::kLiteral, line);
        e->literal = Value::integer(tok.int_value);
        return e;
      }
      case TokenType::kFloat: {
        ++i_;
        auto e = node(ExprKind::kLiteral, line);
        e->literal = Value::floating(tok.float_value);
        return e;
      }
      case TokenType::kOp:
        if (tok.text == "(") {
          ++i_;
          ExprPtr e = parse_tuple(/*allow_empty=*/true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") {
          ++i_;
          auto e = node(ExprKind::kList, line);
          while (!accept_op("]")) {
            if (!e->children.empty()) expect_op(",");
            if (accept_op("]")) break;
            e->children.push_back(parse_expression());
          }
          return e;
        }
        if (tok.text == "{") {
          ++i_;
          auto e = node(ExprKind::kDict, line);
          while (!accept_op("}")) {
            if (!e->children.empty()) expect_op(",");
            if (accept_op("}")) break;
            e->children.push_back(parse_expression());
            expect_op(":");
            e->children.push_back(parse_expression());
          }
          return e;
        }
        break;
      default:
        break;
    }
    fail("unexpected token" + describe());
  }

  ExprPtr parse_postfix(ExprPtr e) {
    Links links(*this);
    while (true) {
      if (is_op(".") || is_op("[") || is_op("(")) links.add();
      if (is_op(".")) {
        const int line = cur().line;
        ++i_;
        auto g = node(ExprKind::kGetAttr, line);
        if (cur().type == TokenType::kName) {
          g->name = t_[i_++].text;
        } else if (cur().type == TokenType::kInt) {  // x.0 is x[0]
          g->kind = ExprKind::kGetItem;
          auto idx = node(ExprKind::kLiteral, line);
          idx->literal = Value::integer(t_[i_++].int_value);
          g->children.push_back(std::move(e));
          g->children.push_back(std::move(idx));
          e = std::move(g);
          continue;
        } else {
          fail("expected an attribute name" + describe());
        }
        g->children.push_back(std::move(e));
        e = std::move(g);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    Depth d(*this);
    const int line = cur().line;
    expect_op("[");
    std::vector<ExprPtr> parts;  // start, stop, step
    bool slice = false;
    auto part = [&]() -> ExprPtr {
      if (is_op(":") || is_op("]")) return nullptr;
      return parse_expression();
    };
    parts.push_back(part());
    if (accept_op(":")) {
      slice = true;
      parts.push_back(part());
      if (accept_op(":")) parts.push_back(part());
    }
    expect_op("]");
    if (!slice) {
      if (!parts[0]) fail("expected a subscript");
      auto g = node(ExprKind::kGetItem, line);
      g->children.push_back(std::move(obj));
      g->children.push_back(std::move(parts[0]));
      return g;
    }
    auto s = node(ExprKind::kSlice, line);
    s->children.push_back(std::move(obj));
    for (auto& p : parts) s->children.push_back(std::move(p));
    while (s->children.size() < 4) s->children.push_back(nullptr);
    return s;
  }

  // Arguments after the callee/operand already in children[0].
  void parse_call_args(Expr& e) {
    Depth d(*this);
    expect_op("(");
    bool first = true;
    while (!accept_op(")")) {
      if (!first) {
        expect_op(",");
        if (accept_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail("unsupported construct '*args' / '**kwargs' in a call");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOp && peek().text == "=") {
        std::string key = t_[i_].text;
        i_ += 2;
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail("a positional argument follows a keyword argument");
        e.children.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = node(ExprKind::kCall, cur().line);
    c->children.push_back(std::move(callee));
    parse_call_args(*c);
    return c;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    Links links(*this);
    while (true) {
      if (is_op("|") || is_name("is") || is_op("(")) links.add();
      if (is_op("|")) {
        ++i_;
        e = parse_one_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == TokenType::kName) {
      ++i_;
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_one_filter(ExprPtr operand) {
    auto f = node(ExprKind::kFilter, cur().line);
    f->name = dotted_name();
    if (!filter_exists(f->name)) syntax_error(f->line, fmt::format("unsupported construct: filter '{}'", f->name));
    f->children.push_back(std::move(operand));
    if (is_op("(")) parse_call_args(*f);
    return f;
  }

  ExprPtr parse_test(ExprPtr operand) {
    const int line = cur().line;
    ++i_;  // is
    auto t = node(ExprKind::kTest, line);
    t->negated = accept_name("not");
    t->name = dotted_name();
    if (!test_exists(t->name)) syntax_error(line, fmt::format("unsupported construct: test '{}'", t->name));
    t->children.push_back(std::move(operand));
    const Token& c = cur();
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((c.type == TokenType::kName || c.type == TokenType::kString || c.type == TokenType::kInt ||
                c.type == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
      t->children.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }

  Program prog_;
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> read_names_;
  std::set<std::string> assigned_;
};

}  // namespace

Program parse_template(std::string_view source) { return Parser(tokenize(source)).run(); }

}  // namespace dgemma::jinja
