// k3's Jinja engine: the subset of Jinja2 that model chat templates use, configured as Hugging
// Face transformers configures it (trim_blocks, lstrip_blocks, loop controls, transformers'
// tojson, raise_exception, strftime_now). Values follow Python: `{{ true }}` prints True, floats
// print like repr(), dicts keep insertion order.
//
//   k3::jinja::Template t(source, "Kimi-K3.jinja");     // throws TemplateError on syntax errors
//   std::string prompt = t.render(vars);               // vars: a JSON object
//
// A Template is immutable after construction; render() may run concurrently from many threads.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja_error.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_value.h"

namespace k3::jinja {

struct Stmt;

class Template {
 public:
  // Parses `source`; `name` appears in error messages. Unknown filters and tests are reported
  // here, with their line, rather than when first reached.
  explicit Template(std::string_view source, std::string name = "template", LexOptions opts = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the variables of `vars` (a JSON object; key order is kept).
  std::string render(const nlohmann::ordered_json& vars) const;
  std::string render(const Value& vars) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::unique_ptr<std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace k3::jinja
