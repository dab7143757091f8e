// Syntax tree of a parsed template. Every node keeps the line/column where it starts so render
// errors point into the template.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace k3::jinja {

struct Pos {
  int line = 0, col = 0;
};

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct CallArgs {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  ExprPtr star;      // *args
  ExprPtr dstar;     // **kwargs
};

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    List,      // elems
    Tuple,     // elems
    Dict,      // pairs
    GetAttr,   // a . name
    GetItem,   // a [ b ]
    Slice,     // a [ b : c : d ]  (absent parts null)
    Call,      // a ( args )
    Filter,    // a | name ( args ); a null inside {% filter %}
    Test,      // a is [not] name ( args )
    Not,       // not a
    Neg,       // - a
    Pos,       // + a
    Binary,    // a op b: + - * / // % ** ~ and or in notin
    Compare,   // a (op b)+ with ops == != < > <= >=
    Cond,      // b if a else c   (c may be null)
  };
  Kind kind;
  Pos pos;
  Value value;
  std::string name;  // Name, GetAttr, Filter, Test; operator of Binary
  ExprPtr a, b, c;
  std::vector<ExprPtr> elems;
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
  std::vector<std::pair<std::string, ExprPtr>> ops;  // Compare
  CallArgs args;
  bool negated = false;  // Test
  Expr(Kind k, Pos p) : kind(k), pos(p) {}
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;
};

struct Stmt {
  enum class Kind {
    Text,       // text
    Output,     // expr
    If,         // branches (cond, body), else_body
    For,        // targets, expr (iterable), cond (filter), body, else_body
    Set,        // target expr (Name / Tuple / GetAttr) = expr
    SetBlock,   // target = rendered body, optional filter
    Macro,      // name, params, body
    CallBlock,  // expr (the call), params (caller's), body
    FilterBlock,// expr (filter chain with null innermost), body
    Break,
    Continue,
    Do,         // expr
    Scope,      // body (generation blocks and the like: rendered inline)
  };
  Kind kind;
  Pos pos;
  std::string text;
  std::string name;
  ExprPtr expr, target, cond;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<MacroParam> params;
  Stmt(Kind k, Pos p) : kind(k), pos(p) {}
};

}  // namespace k3::jinja
