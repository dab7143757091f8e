// Built-in filters, tests, global functions and methods of strings, lists and dicts.
#pragma once
#include <string>

#include "chat/jinja_value.h"

namespace k3::jinja {

using FilterFn = Value (*)(Interp&, const Value&, Args&);
using TestFn = bool (*)(Interp&, const Value&, Args&);

FilterFn find_filter(const std::string& name);  // nullptr when unknown
TestFn find_test(const std::string& name);
// range, namespace, dict, raise_exception, strftime_now, joiner, cycler; Undefined when unknown.
Value find_global(const std::string& name);
// Bound method `obj.name` (str, list and dict methods), Undefined when there is none.
Value find_method(const Value& obj, const std::string& name);
// Names of the dict methods, which win over keys in `d.name` as in Jinja2.
bool is_dict_method(const std::string& name);

}  // namespace k3::jinja
