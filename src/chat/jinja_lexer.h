// Jinja lexer: template source -> tokens. Whitespace control is applied here, as Jinja2 does:
// `-` on a tag strips all whitespace on that side; lstrip_blocks removes spaces/tabs before a
// block or comment tag that starts a line (unless `{%+`); trim_blocks removes the first newline
// after a block or comment tag (unless `+%}`); one trailing newline of the source is dropped.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::jinja {

struct LexOptions {
  bool trim_blocks = true;  // transformers' configuration
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

enum class TokType { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  TokType type;
  std::string text;  // Text content, name, unescaped string value or operator
  int64_t ival = 0;
  double fval = 0;
  int line = 0, col = 0;
};

// Throws TemplateError (Syntax) with the position of the offending character.
std::vector<Token> lex(std::string_view source, const LexOptions& opts, const std::string& name);

}  // namespace k3::jinja
