// Jinja parser: tokens -> statement list. Operator precedence and statement forms follow Jinja2.
#pragma once
#include <string>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace k3::jinja {

// Throws TemplateError (Syntax) naming the line and column; unsupported statements
// (include, extends, block, import...) are reported as such.
Body parse(std::vector<Token> tokens, const std::string& name);

}  // namespace k3::jinja
