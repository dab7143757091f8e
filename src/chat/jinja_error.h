// Errors of the Jinja engine: a syntax error when a template is parsed, a render error (type
// error, undefined attribute, unsupported filter...) or an exception raised by the template itself
// through raise_exception(). what() is "NAME:LINE:COL: MESSAGE"; message() is MESSAGE alone.
#pragma once
#include <string>

#include "common/error.h"

namespace k3::jinja {

class TemplateError : public k3::Error {
 public:
  enum class Kind { Syntax, Render, Raised };

  TemplateError(Kind kind, std::string message, int line = 0, int col = 0, std::string name = {})
      : k3::Error(format(message, line, col, name)),
        kind_(kind),
        message_(std::move(message)),
        line_(line),
        col_(col),
        name_(std::move(name)) {}

  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  int line() const { return line_; }  // 1-based; 0 when unknown
  int col() const { return col_; }
  const std::string& template_name() const { return name_; }
  bool located() const { return line_ > 0; }

 private:
  static std::string format(const std::string& m, int line, int col, const std::string& name) {
    if (line <= 0) return m;
    return (name.empty() ? std::string("template") : name) + ":" + std::to_string(line) + ":" +
           std::to_string(col) + ": " + m;
  }
  Kind kind_;
  std::string message_;
  int line_, col_;
  std::string name_;
};

// Thrown by builtins; the interpreter adds the position of the expression being evaluated.
[[noreturn]] inline void render_error(const std::string& msg) {
  throw TemplateError(TemplateError::Kind::Render, msg);
}

}  // namespace k3::jinja
