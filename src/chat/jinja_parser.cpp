#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja_error.h"

namespace k3::jinja {
namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions and blocks

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& name) : t_(std::move(toks)), name_(name) {}

  Body parse_template() {
    std::string end;
    Body b = parse_body({}, &end, Pos{1, 1});
    return b;
  }

 private:
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.error("template nested too deeply", p.cur());
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  Pos pos() const { return Pos{cur().line, cur().col}; }
  void next() {
    if (i_ + 1 < t_.size()) i_++;
  }

  [[noreturn]] void error(const std::string& msg, const Token& at) const {
    throw TemplateError(TemplateError::Kind::Syntax, msg, at.line, at.col, name_);
  }
  [[noreturn]] void error(const std::string& msg, Pos p) const {
    throw TemplateError(TemplateError::Kind::Syntax, msg, p.line, p.col, name_);
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokType::Text: return "text";
      case TokType::VarBegin: return "'{{'";
      case TokType::VarEnd: return "'}}'";
      case TokType::BlockBegin: return "'{%'";
      case TokType::BlockEnd: return "'%}'";
      case TokType::Name: return "'" + t.text + "'";
      case TokType::String: return "string";
      case TokType::Int:
      case TokType::Float: return "number";
      case TokType::Op: return "'" + t.text + "'";
      case TokType::Eof: return "end of template";
    }
    return "?";
  }

  bool is_op(const char* op) const { return cur().type == TokType::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokType::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe(cur()), cur());
  }
  std::string expect_name() {
    if (cur().type != TokType::Name) error("expected a name, got " + describe(cur()), cur());
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokType::BlockEnd) error("expected '%}', got " + describe(cur()), cur());
    next();
  }

  // ---- statements ----

  // Parses until `{% <one of end_tags>` (consumed: the BlockBegin and the tag name) or Eof.
  Body parse_body(std::initializer_list<const char*> end_tags, std::string* found, Pos opened) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokType::Eof) {
        if (end_tags.size() == 0) return body;
        std::string want;
        for (const char* e : end_tags) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
        error("unexpected end of template: the block opened at line " + std::to_string(opened.line) +
                  " needs " + want,
              t);
      }
      if (t.type == TokType::Text) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::Text, pos());
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokType::VarBegin) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::Output, pos());
        next();
        s->expr = parse_tuple(true);
        if (cur().type != TokType::VarEnd) error("expected '}}', got " + describe(cur()), cur());
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokType::BlockBegin) {
        next();
        if (cur().type == TokType::Name) {
          for (const char* e : end_tags)
            if (cur().text == e) {
              *found = e;
              next();
              return body;
            }
        }
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe(t), t);
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.type != TokType::Name) error("expected a statement name, got " + describe(t), t);
    const std::string kw = t.text;
    Pos p = pos();
    next();
    if (kw == "if") return parse_if(p);
    if (kw == "for") return parse_for(p);
    if (kw == "set") return parse_set(p);
    if (kw == "macro") return parse_macro(p);
    if (kw == "call") return parse_call_block(p);
    if (kw == "filter") return parse_filter_block(p);
    if (kw == "break" || kw == "continue") {
      auto s = std::make_unique<Stmt>(kw == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, p);
      expect_block_end();
      return s;
    }
    if (kw == "do") {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Do, p);
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (kw == "generation") {  // transformers' assistant-mask marker: renders its body inline
      auto s = std::make_unique<Stmt>(Stmt::Kind::Scope, p);
      expect_block_end();
      std::string end;
      s->body = parse_body({"endgeneration"}, &end, p);
      expect_block_end();
      return s;
    }
    static const char* unsupported[] = {"include", "extends", "block", "import", "from", "with", "autoescape", "trans"};
    for (const char* u : unsupported)
      if (kw == u) error("unsupported statement '" + kw + "'", p);
    if (kw.rfind("end", 0) == 0 || kw == "else" || kw == "elif")
      error("unexpected '" + kw + "' (no open block it could close)", p);
    error("unknown statement '" + kw + "'", p);
  }

  StmtPtr parse_if(Pos p) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::If, p);
    ExprPtr cond = parse_tuple(false);
    expect_block_end();
    while (true) {
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, &end, p);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = parse_tuple(false);
        expect_block_end();
        continue;
      }
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &end, p);
      }
      expect_block_end();
      return s;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    names.push_back(expect_name());
    while (skip_op(",")) {
      if (cur().type != TokType::Name || is_name("in")) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for(Pos p) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::For, p);
    s->targets = parse_targets();
    if (!skip_name("in")) error("expected 'in' in for loop, got " + describe(cur()), cur());
    s->expr = parse_tuple(false, /*with_condexpr=*/false);
    if (skip_name("if")) s->cond = parse_expression();
    if (skip_name("recursive")) error("unsupported: recursive for loops", p);
    expect_block_end();
    std::string end;
    s->body = parse_body({"else", "endfor"}, &end, p);
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end, p);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(Pos p) {
    Pos tp = pos();
    if (skip_op("(")) {  // {% set (a, b) = ... %}
      auto target = std::make_unique<Expr>(Expr::Kind::Tuple, tp);
      do {
        auto m = std::make_unique<Expr>(Expr::Kind::Name, pos());
        m->name = expect_name();
        target->elems.push_back(std::move(m));
      } while (skip_op(","));
      expect_op(")");
      expect_op("=");
      auto s = std::make_unique<Stmt>(Stmt::Kind::Set, p);
      s->target = std::move(target);
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    std::string first = expect_name();
    ExprPtr target;
    if (skip_op(".")) {
      target = std::make_unique<Expr>(Expr::Kind::GetAttr, tp);
      target->a = std::make_unique<Expr>(Expr::Kind::Name, tp);
      target->a->name = first;
      target->name = expect_name();
    } else if (is_op(",")) {
      target = std::make_unique<Expr>(Expr::Kind::Tuple, tp);
      auto n = std::make_unique<Expr>(Expr::Kind::Name, tp);
      n->name = first;
      target->elems.push_back(std::move(n));
      while (skip_op(",")) {
        auto m = std::make_unique<Expr>(Expr::Kind::Name, pos());
        m->name = expect_name();
        target->elems.push_back(std::move(m));
      }
    } else {
      target = std::make_unique<Expr>(Expr::Kind::Name, tp);
      target->name = first;
    }
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Set, p);
      s->target = std::move(target);
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (target->kind != Expr::Kind::Name) error("a block set assigns to a single name", p);
    auto s = std::make_unique<Stmt>(Stmt::Kind::SetBlock, p);
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter_expr(nullptr);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, &end, p);
    expect_block_end();
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam mp;
      mp.name = expect_name();
      if (skip_op("=")) mp.default_value = parse_expression();
      params.push_back(std::move(mp));
    }
    next();
  }

  StmtPtr parse_macro(Pos p) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, p);
    s->name = expect_name();
    parse_params(s->params);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endmacro"}, &end, p);
    if (cur().type == TokType::Name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(Pos p) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::CallBlock, p);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression();
    if (s->expr->kind != Expr::Kind::Call) error("expected a call after 'call'", p);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endcall"}, &end, p);
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(Pos p) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::FilterBlock, p);
    s->expr = parse_filter_chain(nullptr, /*first_without_pipe=*/true);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endfilter"}, &end, p);
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  ExprPtr parse_tuple(bool allow_empty_end, bool with_condexpr = true) {
    Pos p = pos();
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto t = std::make_unique<Expr>(Expr::Kind::Tuple, p);
    t->elems.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokType::VarEnd || cur().type == TokType::BlockEnd || (allow_empty_end && is_op(")")))
        break;
      t->elems.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return t;
  }

  ExprPtr parse_expression() {
    DepthGuard g(*this);
    Pos p = pos();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      next();
      auto c = std::make_unique<Expr>(Expr::Kind::Cond, p);
      c->a = parse_or();
      c->b = std::move(e);
      if (skip_name("else")) c->c = parse_expression();
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, Pos p) {
    auto e = std::make_unique<Expr>(Expr::Kind::Binary, p);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    Pos p = pos();
    ExprPtr l = parse_and();
    while (skip_name("or")) l = binary("or", std::move(l), parse_and(), p);
    return l;
  }
  ExprPtr parse_and() {
    Pos p = pos();
    ExprPtr l = parse_not();
    while (skip_name("and")) l = binary("and", std::move(l), parse_not(), p);
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      auto e = std::make_unique<Expr>(Expr::Kind::Not, pos());
      next();
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    Pos p = pos();
    ExprPtr l = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().type == TokType::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == TokType::Name && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = std::make_unique<Expr>(Expr::Kind::Compare, p);
        cmp->a = std::move(l);
      }
      cmp->ops.emplace_back(op, parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(l);
  }
  ExprPtr parse_math1() {
    Pos p = pos();
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      l = binary(op, std::move(l), parse_concat(), p);
    }
    return l;
  }
  ExprPtr parse_concat() {
    Pos p = pos();
    ExprPtr l = parse_math2();
    while (skip_op("~")) l = binary("~", std::move(l), parse_math2(), p);
    return l;
  }
  ExprPtr parse_math2() {
    Pos p = pos();
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      l = binary(op, std::move(l), parse_pow(), p);
    }
    return l;
  }
  ExprPtr parse_pow() {
    Pos p = pos();
    ExprPtr l = parse_unary(true);
    while (skip_op("**")) l = binary("**", std::move(l), parse_unary(true), p);
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    Pos p = pos();
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = std::make_unique<Expr>(is_op("-") ? Expr::Kind::Neg : Expr::Kind::Pos, p);
      next();
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    Pos p = pos();
    switch (t.type) {
      case TokType::Name: {
        auto e = std::make_unique<Expr>(Expr::Kind::Literal, p);
        if (t.text == "true" || t.text == "True") e->value = Value(true);
        else if (t.text == "false" || t.text == "False") e->value = Value(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::Name;
          e->name = t.text;
        }
        next();
        return e;
      }
      case TokType::String: {
        std::string s;
        while (cur().type == TokType::String) {
          s += cur().text;
          next();
        }
        auto e = std::make_unique<Expr>(Expr::Kind::Literal, p);
        e->value = Value(std::move(s));
        return e;
      }
      case TokType::Int:
      case TokType::Float: {
        auto e = std::make_unique<Expr>(Expr::Kind::Literal, p);
        e->value = t.type == TokType::Int ? Value(t.ival) : Value(t.fval);
        next();
        return e;
      }
      case TokType::Op:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return std::make_unique<Expr>(Expr::Kind::Tuple, p);
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto e = std::make_unique<Expr>(Expr::Kind::List, p);
          while (!is_op("]")) {
            if (!e->elems.empty()) expect_op(",");
            if (is_op("]")) break;
            e->elems.push_back(parse_expression());
          }
          next();
          return e;
        }
        if (t.text == "{") {
          next();
          auto e = std::make_unique<Expr>(Expr::Kind::Dict, p);
          while (!is_op("}")) {
            if (!e->pairs.empty()) expect_op(",");
            if (is_op("}")) break;
            ExprPtr k = parse_expression();
            expect_op(":");
            e->pairs.emplace_back(std::move(k), parse_expression());
          }
          next();
          return e;
        }
        break;
      default: break;
    }
    error("unexpected " + describe(t) + " in expression", t);
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      Pos p = e->pos;  // errors point at the start of the whole expression
      if (skip_op(".")) {
        auto g = std::make_unique<Expr>(Expr::Kind::GetAttr, p);
        g->a = std::move(e);
        if (cur().type == TokType::Name) {
          g->name = cur().text;
        } else if (cur().type == TokType::Int) {
          g->kind = Expr::Kind::GetItem;
          g->b = std::make_unique<Expr>(Expr::Kind::Literal, pos());
          g->b->value = Value(cur().ival);
        } else {
          error("expected an attribute name after '.', got " + describe(cur()), cur());
        }
        next();
        e = std::move(g);
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), p);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, Pos p) {
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (is_op(":")) {
        is_slice = true;
        if (++n > 2) error("too many ':' in slice", cur());
        next();
        continue;
      }
      if (is_op("]")) break;
      if (parts[n]) error("expected ']' or ':', got " + describe(cur()), cur());
      parts[n] = parse_expression();
    }
    next();
    if (!is_slice) {
      if (!parts[0]) error("empty subscript", p);
      auto g = std::make_unique<Expr>(Expr::Kind::GetItem, p);
      g->a = std::move(obj);
      g->b = std::move(parts[0]);
      return g;
    }
    auto s = std::make_unique<Expr>(Expr::Kind::Slice, p);
    s->a = std::move(obj);
    s->b = std::move(parts[0]);
    s->c = std::move(parts[1]);
    if (parts[2]) s->elems.push_back(std::move(parts[2]));
    return s;
  }

  void parse_call_args(CallArgs& args) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (skip_op("*")) {
        args.star = parse_expression();
      } else if (skip_op("**")) {
        args.dstar = parse_expression();
      } else if (cur().type == TokType::Name && peek().type == TokType::Op && peek().text == "=") {
        std::string k = cur().text;
        next();
        next();
        args.kw.emplace_back(k, parse_expression());
      } else {
        if (!args.kw.empty()) error("positional argument after keyword argument", cur());
        args.pos.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = std::make_unique<Expr>(Expr::Kind::Call, callee->pos);
    c->a = std::move(callee);
    parse_call_args(c->args);
    return c;
  }

  ExprPtr parse_filter_chain(ExprPtr e, bool first_without_pipe) {
    bool first = first_without_pipe;
    while (first || is_op("|")) {
      if (!first) next();
      first = false;
      auto f = std::make_unique<Expr>(Expr::Kind::Filter, pos());
      f->name = expect_name();
      while (skip_op(".")) f->name += "." + expect_name();
      f->a = std::move(e);
      if (is_op("(")) parse_call_args(f->args);
      e = std::move(f);
    }
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e), false);
      } else if (is_name("is")) {
        auto t = std::make_unique<Expr>(Expr::Kind::Test, pos());
        next();
        if (skip_name("not")) t->negated = true;
        t->name = expect_name();
        t->a = std::move(e);
        if (is_op("(")) {
          parse_call_args(t->args);
        } else if ((cur().type == TokType::Name || cur().type == TokType::String || cur().type == TokType::Int ||
                    cur().type == TokType::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") && !is_name("in") &&
                   !is_name("not") && !is_name("is")) {
          ExprPtr arg = parse_primary();
          t->args.pos.push_back(parse_postfix(std::move(arg)));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  const std::string& name_;
};

}  // namespace

Body parse(std::vector<Token> tokens, const std::string& name) { return Parser(std::move(tokens), name).parse_template(); }

}  // namespace k3::jinja
