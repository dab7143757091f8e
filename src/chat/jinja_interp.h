// Jinja evaluator: walks the syntax tree with Jinja2's scoping (a frame per macro call and per
// loop iteration; `set` writes the innermost frame; macros resolve free names where they were
// defined) and Python value semantics.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace k3::jinja {

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

class Interp {
 public:
  explicit Interp(const std::string& template_name) : name_(template_name) {}

  // Renders `body` with the variables of `context` (a mapping).
  std::string render(const Body& body, const Value& context);

  // Used by filters, tests and methods.
  Value call(const Value& fn, Args& args);
  Value apply_filter(const std::string& name, const Value& v, Args& args);
  bool apply_test(const std::string& name, const Value& v, Args& args);
  static Value getattr(const Value& obj, const std::string& name);
  static Value getitem(const Value& obj, const Value& key);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const Body& body, std::string& out, const FramePtr& f);
  Flow exec(const Stmt& s, std::string& out, const FramePtr& f);
  void exec_for(const Stmt& s, std::string& out, const FramePtr& f);
  void assign(const Expr& target, const Value& v, const FramePtr& f);
  Value eval(const Expr& e, const FramePtr& f);
  Value eval_inner(const Expr& e, const FramePtr& f);
  Value eval_binary(const Expr& e, const FramePtr& f);
  Value eval_compare(const Expr& e, const FramePtr& f);
  void eval_args(const CallArgs& ca, Args& out, const FramePtr& f);
  Value lookup(const std::string& name, const FramePtr& f) const;
  Value make_macro(const Stmt& m, const FramePtr& closure);
  Value call_macro(const Stmt& m, const FramePtr& closure, Args& args, const Value* caller);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

  const std::string& name_;
  FramePtr root_;
  int call_depth_ = 0;
};

// Binary arithmetic shared with filters (sum): + - * / // % **.
Value arith(const std::string& op, const Value& a, const Value& b);
// `in` operator.
bool contains(const Value& container, const Value& item);

}  // namespace k3::jinja
