#include "chat/jinja_interp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"

namespace k3::jinja {
namespace {

constexpr int kMaxCallDepth = 256;

struct DepthGuard {
  int& d;
  explicit DepthGuard(int& depth) : d(depth) {
    if (++d > kMaxCallDepth) {
      --d;
      render_error("maximum macro recursion depth exceeded");
    }
  }
  ~DepthGuard() { --d; }
};

[[noreturn]] void undefined_error(const Value& v) {
  render_error(v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};
    case Value::Type::Array: return v.items();
    case Value::Type::Object: {
      std::vector<Value> keys;
      for (const auto& e : v.entries()) keys.emplace_back(e.first);
      return keys;
    }
    case Value::Type::String: {
      std::vector<Value> chars;
      for (auto c : utf8_chars(v.as_string())) chars.emplace_back(std::string(c));
      return chars;
    }
    default: render_error(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

int64_t checked(bool overflow, int64_t r) {
  if (overflow) render_error("integer overflow");
  return r;
}

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

}  // namespace

// ---- arithmetic ----

Value arith(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  char o = op[0];
  if (a.is_number() && b.is_number()) {
    bool fl = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.as_double() == 0) render_error("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (op == "**") {
      if (!fl && b.as_int() >= 0) {
        int64_t r = 1, base = a.as_int();
        for (int64_t e = b.as_int(); e > 0 && r != 0; e--)
          if (__builtin_mul_overflow(r, base, &r)) render_error("integer overflow");
        return Value(r);
      }
      return Value(std::pow(a.as_double(), b.as_double()));
    }
    if (op == "//" || o == '%') {
      if ((fl && b.as_double() == 0) || (!fl && b.as_int() == 0)) render_error("division by zero");
      if (fl) {
        double x = a.as_double(), y = b.as_double();
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        if (op == "//") return Value(std::floor((x - m) / y + 0.5));
        return Value(m);
      }
      int64_t x = a.as_int(), y = b.as_int();
      if (op == "//") return Value(floordiv(x, y));
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    if (fl) {
      double x = a.as_double(), y = b.as_double();
      return Value(o == '+' ? x + y : (o == '-' ? x - y : x * y));
    }
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    bool ov = o == '+' ? __builtin_add_overflow(x, y, &r) : (o == '-' ? __builtin_sub_overflow(x, y, &r) : __builtin_mul_overflow(x, y, &r));
    return Value(checked(ov, r));
  }
  if (o == '+' && a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
  if (o == '+' && a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    return Value::array(std::move(items), a.is_tuple());
  }
  if (op == "*" && (a.is_string() || a.is_array()) && (b.is_int() || b.is_bool())) {
    int64_t n = std::max<int64_t>(0, b.as_int());
    size_t unit = a.is_string() ? a.as_string().size() : a.items().size();
    if (unit && static_cast<uint64_t>(n) > (size_t{64} << 20) / unit) render_error("repetition result too large");
    if (a.is_string()) {
      std::string s;
      for (int64_t i = 0; i < n; i++) s += a.as_string();
      return Value(std::move(s));
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < n; i++) items.insert(items.end(), a.items().begin(), a.items().end());
    return Value::array(std::move(items), a.is_tuple());
  }
  if (op == "*" && (b.is_string() || b.is_array()) && (a.is_int() || a.is_bool())) return arith(op, b, a);
  render_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Undefined: return false;
    case Value::Type::String:
      if (!item.is_string())
        render_error(std::string("'in <string>' requires string as left operand, not ") + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::Array:
      for (const auto& e : container.items())
        if (values_equal(e, item)) return true;
      return false;
    case Value::Type::Object: return item.is_string() && container.find(item.as_string()) != nullptr;
    default: render_error(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }
}

// ---- attribute and item access ----

Value Interp::getattr(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::Undefined: undefined_error(obj);
    case Value::Type::Object: {
      if (!obj.is_namespace() && is_dict_method(name)) return find_method(obj, name);
      if (const Value* v = obj.find(name)) return *v;
      return Value::undefined(std::string("'") + (obj.is_namespace() ? "Namespace" : "dict object") +
                              "' has no attribute '" + name + "'");
    }
    case Value::Type::String:
    case Value::Type::Array: {
      Value m = find_method(obj, name);
      if (!m.is_undefined()) return m;
      break;
    }
    default: break;
  }
  return Value::undefined(std::string("'") + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value Interp::getitem(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Value::Type::Undefined: undefined_error(obj);
    case Value::Type::Object: {
      if (!key.is_string()) return Value::undefined("'dict object' has no key " + key.repr());  // keys are strings
      const std::string& k = key.as_string();
      if (const Value* v = obj.find(k)) return *v;
      if (!obj.is_namespace() && is_dict_method(k)) return find_method(obj, k);
      return Value::undefined("'dict object' has no attribute '" + k + "'");
    }
    case Value::Type::Array:
    case Value::Type::String: {
      if (key.is_string()) return getattr(obj, key.as_string());
      if (!key.is_int() && !key.is_bool())
        render_error(std::string(obj.type_name()) + " indices must be integers, not " + key.type_name());
      int64_t i = key.as_int();
      if (obj.is_array()) {
        int64_t n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(std::string(obj.type_name()) + " index out of range");
        return obj.items()[static_cast<size_t>(i)];
      }
      auto chars = utf8_chars(obj.as_string());
      int64_t n = static_cast<int64_t>(chars.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("string index out of range");
      return Value(std::string(chars[static_cast<size_t>(i)]));
    }
    default:
      return Value::undefined(std::string("'") + obj.type_name() + " object' has no attribute '" + key.str() + "'");
  }
}

Value Interp::slice(const Value& obj, const Value& vstart, const Value& vstop, const Value& vstep) {
  if (obj.is_undefined()) undefined_error(obj);
  auto as_opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) render_error(std::string("slice ") + what + " must be an integer or None");
    return v.as_int();
  };
  int64_t step = as_opt(vstep, "step").value_or(1);
  if (step == 0) render_error("slice step cannot be zero");
  std::vector<std::string_view> chars;
  int64_t n;
  if (obj.is_string()) {
    chars = utf8_chars(obj.as_string());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_array()) {
    n = static_cast<int64_t>(obj.items().size());
  } else {
    render_error(std::string("'") + obj.type_name() + "' object is not subscriptable");
  }
  auto norm = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t start = norm(as_opt(vstart, "start"), step > 0 ? 0 : n - 1);
  int64_t stop = norm(as_opt(vstop, "stop"), step > 0 ? n : -1);
  std::vector<size_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::string s;
    for (size_t i : idx) s += chars[i];
    return Value(std::move(s));
  }
  std::vector<Value> items;
  for (size_t i : idx) items.push_back(obj.items()[i]);
  return Value::array(std::move(items), obj.is_tuple());
}

// ---- calls ----

Value Interp::call(const Value& fn, Args& args) {
  if (fn.is_undefined()) undefined_error(fn);
  if (!fn.is_function()) render_error(std::string("'") + fn.type_name() + "' object is not callable");
  return fn.fn().call(*this, args);
}

Value Interp::apply_filter(const std::string& name, const Value& v, Args& args) {
  FilterFn f = find_filter(name);
  if (!f) render_error("unknown filter '" + name + "'");
  return f(*this, v, args);
}

bool Interp::apply_test(const std::string& name, const Value& v, Args& args) {
  TestFn t = find_test(name);
  if (!t) render_error("unknown test '" + name + "'");
  return t(*this, v, args);
}

void Interp::eval_args(const CallArgs& ca, Args& out, const FramePtr& f) {
  for (const auto& e : ca.pos) out.pos.push_back(eval(*e, f));
  if (ca.star) {
    Value s = eval(*ca.star, f);
    for (const auto& v : iterate(s)) out.pos.push_back(v);
  }
  for (const auto& [k, e] : ca.kw) out.kw.emplace_back(k, eval(*e, f));
  if (ca.dstar) {
    Value d = eval(*ca.dstar, f);
    if (!d.is_object()) render_error("argument after ** must be a mapping");
    for (const auto& [k, v] : d.entries()) out.kw.emplace_back(k, v);
  }
}

Value Interp::make_macro(const Stmt& m, const FramePtr& closure) {
  std::weak_ptr<Frame> weak = closure;
  const Stmt* mp = &m;
  return Value::function(m.name, [mp, weak](Interp& in, Args& args) {
    FramePtr c = weak.lock();
    return in.call_macro(*mp, c ? c : in.root_, args, nullptr);
  });
}

Value Interp::call_macro(const Stmt& m, const FramePtr& closure, Args& args, const Value*) {
  DepthGuard g(call_depth_);
  auto f = std::make_shared<Frame>();
  f->parent = closure;
  std::vector<bool> used(args.kw.size(), false);
  for (size_t i = 0; i < m.params.size(); i++) {
    const MacroParam& p = m.params[i];
    Value v;
    bool have = false;
    if (i < args.pos.size()) {
      v = args.pos[i];
      have = true;
    }
    for (size_t k = 0; k < args.kw.size(); k++)
      if (args.kw[k].first == p.name) {
        if (have) render_error("macro '" + m.name + "' got multiple values for argument '" + p.name + "'");
        v = args.kw[k].second;
        used[k] = have = true;
      }
    if (!have) v = p.default_value ? eval(*p.default_value, f) : Value::undefined("parameter '" + p.name + "' was not provided");
    f->vars[p.name] = std::move(v);
  }
  std::vector<Value> varargs;
  for (size_t i = m.params.size(); i < args.pos.size(); i++) varargs.push_back(args.pos[i]);
  Value kwargs = Value::object();
  for (size_t k = 0; k < args.kw.size(); k++) {
    if (used[k]) continue;
    if (args.kw[k].first == "caller") f->vars["caller"] = args.kw[k].second;
    else kwargs.set(args.kw[k].first, args.kw[k].second);
  }
  f->vars["varargs"] = Value::array(std::move(varargs), /*tuple=*/true);
  f->vars["kwargs"] = kwargs;
  std::string out;
  exec_body(m.body, out, f);
  return Value(std::move(out));
}

// ---- expressions ----

Value Interp::lookup(const std::string& name, const FramePtr& f) const {
  for (const Frame* fr = f.get(); fr; fr = fr->parent.get()) {
    auto it = fr->vars.find(name);
    if (it != fr->vars.end()) return it->second;
  }
  Value g = find_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interp::eval(const Expr& e, const FramePtr& f) {
  try {
    return eval_inner(e, f);
  } catch (const TemplateError& err) {
    if (err.located()) throw;
    throw TemplateError(err.kind(), err.message(), e.pos.line, e.pos.col, name_);
  }
}

Value Interp::eval_inner(const Expr& e, const FramePtr& f) {
  switch (e.kind) {
    case Expr::Kind::Literal: return e.value;
    case Expr::Kind::Name: return lookup(e.name, f);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.elems.size());
      for (const auto& x : e.elems) items.push_back(eval(*x, f));
      return Value::array(std::move(items), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
      Value d = Value::object();
      for (const auto& [k, v] : e.pairs) {
        Value key = eval(*k, f);
        d.set(key.is_string() ? key.as_string() : key.str(), eval(*v, f));
      }
      return d;
    }
    case Expr::Kind::GetAttr: return getattr(eval(*e.a, f), e.name);
    case Expr::Kind::GetItem: {
      Value obj = eval(*e.a, f);
      return getitem(obj, eval(*e.b, f));
    }
    case Expr::Kind::Slice: {
      Value obj = eval(*e.a, f);
      Value start = e.b ? eval(*e.b, f) : Value::none();
      Value stop = e.c ? eval(*e.c, f) : Value::none();
      Value step = e.elems.empty() ? Value::none() : eval(*e.elems[0], f);
      return slice(obj, start, stop, step);
    }
    case Expr::Kind::Call: {
      Value fn = eval(*e.a, f);
      Args args;
      eval_args(e.args, args, f);
      return call(fn, args);
    }
    case Expr::Kind::Filter: {
      Value v = e.a ? eval(*e.a, f) : f->vars.at("\x01filter_input");
      Args args;
      eval_args(e.args, args, f);
      return apply_filter(e.name, v, args);
    }
    case Expr::Kind::Test: {
      Value v;
      // `x.y is defined` must not fail when x.y is missing, only when x itself is undefined.
      v = eval(*e.a, f);
      Args args;
      eval_args(e.args, args, f);
      return Value(apply_test(e.name, v, args) != e.negated);
    }
    case Expr::Kind::Not: return Value(!eval(*e.a, f).truthy());
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: {
      Value v = eval(*e.a, f);
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number()) render_error(std::string("bad operand type for unary ") + (e.kind == Expr::Kind::Neg ? "-" : "+") + ": '" + v.type_name() + "'");
      if (e.kind == Expr::Kind::Pos) return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return Value(-v.as_double());
      return Value(checked(v.as_int() == std::numeric_limits<int64_t>::min(), -v.as_int()));
    }
    case Expr::Kind::Binary: return eval_binary(e, f);
    case Expr::Kind::Compare: return eval_compare(e, f);
    case Expr::Kind::Cond:
      if (eval(*e.a, f).truthy()) return eval(*e.b, f);
      return e.c ? eval(*e.c, f) : Value::undefined("the condition of an inline if was false and it has no else");
  }
  return Value();
}

Value Interp::eval_binary(const Expr& e, const FramePtr& f) {
  const std::string& op = e.name;
  if (op == "and") {
    Value l = eval(*e.a, f);
    return l.truthy() ? eval(*e.b, f) : l;
  }
  if (op == "or") {
    Value l = eval(*e.a, f);
    return l.truthy() ? l : eval(*e.b, f);
  }
  Value l = eval(*e.a, f);
  Value r = eval(*e.b, f);
  if (op == "~") return Value(l.str() + r.str());
  if (op == "%" && l.is_string()) {
    Args args;
    if (r.is_tuple()) args.pos = r.items();
    else args.pos.push_back(r);
    return apply_filter("format", l, args);
  }
  return arith(op, l, r);
}

Value Interp::eval_compare(const Expr& e, const FramePtr& f) {
  Value l = eval(*e.a, f);
  for (const auto& [op, rhs] : e.ops) {
    Value r = eval(*rhs, f);
    bool ok;
    if (op == "==") ok = values_equal(l, r);
    else if (op == "!=") ok = !values_equal(l, r);
    else if (op == "in") ok = contains(r, l);
    else if (op == "notin") ok = !contains(r, l);
    else {
      if (l.is_undefined()) undefined_error(l);
      if (r.is_undefined()) undefined_error(r);
      int c = values_compare(l, r);
      ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!ok) return Value(false);
    l = std::move(r);
  }
  return Value(true);
}

// ---- statements ----

void Interp::assign(const Expr& target, const Value& v, const FramePtr& f) {
  if (target.kind == Expr::Kind::Name) {
    f->vars[target.name] = v;
    return;
  }
  if (target.kind == Expr::Kind::Tuple) {
    std::vector<Value> items = iterate(v);
    if (items.size() != target.elems.size())
      render_error("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(target.elems.size()) + " names");
    for (size_t i = 0; i < items.size(); i++) assign(*target.elems[i], items[i], f);
    return;
  }
  // ns.attr = v
  Value ns = eval(*target.a, f);
  if (!ns.is_namespace()) render_error("cannot assign attribute on non-namespace object");
  ns.set(target.name, v);
}

Interp::Flow Interp::exec_body(const Body& body, std::string& out, const FramePtr& f) {
  for (const auto& s : body) {
    Flow fl;
    try {
      fl = exec(*s, out, f);
    } catch (const TemplateError& err) {
      if (err.located()) throw;
      throw TemplateError(err.kind(), err.message(), s->pos.line, s->pos.col, name_);
    }
    if (fl != Flow::Normal) return fl;
  }
  return Flow::Normal;
}

void Interp::exec_for(const Stmt& s, std::string& out, const FramePtr& f) {
  std::vector<Value> items = iterate(eval(*s.expr, f));
  auto bind = [&](Frame& fr, const Value& item) {
    if (s.targets.size() == 1) {
      fr.vars[s.targets[0]] = item;
      return;
    }
    std::vector<Value> parts = iterate(item);
    if (parts.size() != s.targets.size())
      render_error("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) + " loop variables");
    for (size_t i = 0; i < parts.size(); i++) fr.vars[s.targets[i]] = parts[i];
  };
  if (s.cond) {
    std::vector<Value> kept;
    for (const auto& item : items) {
      auto fr = std::make_shared<Frame>();
      fr->parent = f;
      bind(*fr, item);
      if (eval(*s.cond, fr).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body, out, f);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  Value loop = Value::object();
  loop.set("length", Value(n));
  loop.set("depth", Value(int64_t{1}));
  loop.set("depth0", Value(int64_t{0}));
  for (int64_t i = 0; i < n; i++) {
    auto fr = std::make_shared<Frame>();
    fr->parent = f;
    bind(*fr, items[static_cast<size_t>(i)]);
    loop.set("index0", Value(i));
    loop.set("index", Value(i + 1));
    loop.set("revindex", Value(n - i));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::function("cycle", [i](Interp&, Args& a) {
               if (a.pos.empty()) render_error("no items for cycling given");
               return a.pos[static_cast<size_t>(i) % a.pos.size()];
             }));
    fr->vars["loop"] = loop;
    if (exec_body(s.body, out, fr) == Flow::Break) break;
  }
}

Interp::Flow Interp::exec(const Stmt& s, std::string& out, const FramePtr& f) {
  switch (s.kind) {
    case Stmt::Kind::Text: out += s.text; break;
    case Stmt::Kind::Output: out += eval(*s.expr, f).str(); break;
    case Stmt::Kind::If:
      for (const auto& [cond, body] : s.branches)
        if (eval(*cond, f).truthy()) return exec_body(body, out, f);
      return exec_body(s.else_body, out, f);
    case Stmt::Kind::For: exec_for(s, out, f); break;
    case Stmt::Kind::Set: {
      assign(*s.target, eval(*s.expr, f), f);
      break;
    }
    case Stmt::Kind::SetBlock: {
      std::string body;
      exec_body(s.body, body, f);
      Value v(std::move(body));
      if (s.expr) {
        f->vars["\x01filter_input"] = v;
        v = eval(*s.expr, f);
        f->vars.erase("\x01filter_input");
      }
      f->vars[s.target->name] = v;
      break;
    }
    case Stmt::Kind::Macro: f->vars[s.name] = make_macro(s, f); break;
    case Stmt::Kind::CallBlock: {
      const Expr& call_expr = *s.expr;
      Value fn = eval(*call_expr.a, f);
      Args args;
      eval_args(call_expr.args, args, f);
      std::weak_ptr<Frame> weak = f;
      const Stmt* sp = &s;
      args.kw.emplace_back("caller", Value::function("caller", [sp, weak](Interp& in, Args& a) {
                             auto fr = std::make_shared<Frame>();
                             FramePtr parent = weak.lock();
                             fr->parent = parent ? parent : in.root_;
                             for (size_t i = 0; i < sp->params.size(); i++) {
                               const Value* v = a.get(i, sp->params[i].name);
                               fr->vars[sp->params[i].name] =
                                   v ? *v : (sp->params[i].default_value ? in.eval(*sp->params[i].default_value, fr) : Value());
                             }
                             std::string o;
                             in.exec_body(sp->body, o, fr);
                             return Value(std::move(o));
                           }));
      out += call(fn, args).str();
      break;
    }
    case Stmt::Kind::FilterBlock: {
      std::string body;
      exec_body(s.body, body, f);
      auto fr = std::make_shared<Frame>();
      fr->parent = f;
      fr->vars["\x01filter_input"] = Value(std::move(body));
      out += eval(*s.expr, fr).str();
      break;
    }
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
    case Stmt::Kind::Do: eval(*s.expr, f); break;
    case Stmt::Kind::Scope: return exec_body(s.body, out, f);
  }
  return Flow::Normal;
}

std::string Interp::render(const Body& body, const Value& context) {
  root_ = std::make_shared<Frame>();
  if (context.is_object())
    for (const auto& [k, v] : context.entries()) root_->vars[k] = v;
  std::string out;
  exec_body(body, out, root_);
  root_.reset();
  return out;
}

}  // namespace k3::jinja
