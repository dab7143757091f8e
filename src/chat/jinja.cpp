#include "chat/jinja.h"

#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_parser.h"

namespace k3::jinja {
namespace {

// Checks filter and test names so a template with an unknown one fails when loaded.
class Validator {
 public:
  explicit Validator(const std::string& name) : name_(name) {}

  void body(const Body& b) {
    for (const auto& s : b) stmt(*s);
  }

 private:
  void stmt(const Stmt& s) {
    expr(s.expr.get());
    expr(s.target.get());
    expr(s.cond.get());
    for (const auto& [c, b] : s.branches) {
      expr(c.get());
      body(b);
    }
    for (const auto& p : s.params) expr(p.default_value.get());
    body(s.body);
    body(s.else_body);
  }

  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == Expr::Kind::Filter && !find_filter(e->name))
      throw TemplateError(TemplateError::Kind::Syntax, "unknown filter '" + e->name + "'", e->pos.line, e->pos.col, name_);
    if (e->kind == Expr::Kind::Test && !find_test(e->name))
      throw TemplateError(TemplateError::Kind::Syntax, "unknown test '" + e->name + "'", e->pos.line, e->pos.col, name_);
    expr(e->a.get());
    expr(e->b.get());
    expr(e->c.get());
    for (const auto& x : e->elems) expr(x.get());
    for (const auto& [k, v] : e->pairs) {
      expr(k.get());
      expr(v.get());
    }
    for (const auto& [op, x] : e->ops) expr(x.get());
    for (const auto& x : e->args.pos) expr(x.get());
    for (const auto& [k, x] : e->args.kw) expr(x.get());
    expr(e->args.star.get());
    expr(e->args.dstar.get());
  }

  const std::string& name_;
};

}  // namespace

Template::Template(std::string_view source, std::string name, LexOptions opts) : name_(std::move(name)) {
  body_ = std::make_unique<Body>(parse(lex(source, opts, name_), name_));
  Validator(name_).body(*body_);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& vars) const {
  if (!vars.is_object() && !vars.is_null())
    throw TemplateError(TemplateError::Kind::Render, "template variables must be a JSON object");
  return render(Value::from_json(vars));
}

std::string Template::render(const Value& vars) const {
  Interp in(name_);
  try {
    return in.render(*body_, vars);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError(TemplateError::Kind::Render, "out of memory while rendering " + name_);
  } catch (const std::exception& e) {
    throw TemplateError(TemplateError::Kind::Render, std::string("internal error while rendering: ") + e.what());
  }
}

}  // namespace k3::jinja
