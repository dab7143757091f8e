// Global functions and the methods of str, list and dict that chat templates call.
#include <algorithm>
#include <ctime>
#include <memory>
#include <unordered_set>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_text.h"

namespace k3::jinja {
namespace {

constexpr int64_t kMaxRange = 1'000'000;

const Value& need(const Args& a, size_t i, const char* name, const char* fn) {
  const Value* v = a.get(i, name);
  if (!v) render_error(std::string(fn) + "() missing argument '" + name + "'");
  return *v;
}
std::optional<std::string> opt_str(const Args& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  if (!v->is_string()) render_error(std::string("argument '") + name + "' must be a string, not " + v->type_name());
  return v->as_string();
}
int64_t opt_int(const Args& a, size_t i, const char* name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) render_error(std::string("argument '") + name + "' must be an integer");
  return v->as_int();
}

Value str_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  for (const auto& p : parts) out.emplace_back(p);
  return Value::array(std::move(out));
}

// startswith/endswith accept a string or a tuple of strings.
bool affix(const std::string& s, const Value& what, bool prefix) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) render_error("startswith/endswith take a string or a tuple of strings");
    const std::string& x = p.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (what.is_array()) return std::any_of(what.items().begin(), what.items().end(), one);
  return one(what);
}

Value string_method(const Value& self, const std::string& name, Interp&, Args& a) {
  const std::string& s = self.as_string();
  if (name == "strip") return Value(text::strip(s, opt_str(a, 0, "chars"), true, true));
  if (name == "lstrip") return Value(text::strip(s, opt_str(a, 0, "chars"), true, false));
  if (name == "rstrip") return Value(text::strip(s, opt_str(a, 0, "chars"), false, true));
  if (name == "split") return str_list(text::split(s, opt_str(a, 0, "sep"), opt_int(a, 1, "maxsplit", -1), false));
  if (name == "rsplit") return str_list(text::split(s, opt_str(a, 0, "sep"), opt_int(a, 1, "maxsplit", -1), true));
  if (name == "splitlines") {
    const Value* k = a.get(0, "keepends");
    return str_list(text::splitlines(s, k && k->truthy()));
  }
  if (name == "startswith") return Value(affix(s, need(a, 0, "prefix", "startswith"), true));
  if (name == "endswith") return Value(affix(s, need(a, 0, "suffix", "endswith"), false));
  if (name == "replace")
    return Value(text::replace(s, need(a, 0, "old", "replace").str(), need(a, 1, "new", "replace").str(), opt_int(a, 2, "count", -1)));
  if (name == "upper") return Value(text::upper(s));
  if (name == "lower") return Value(text::lower(s));
  if (name == "title") return Value(text::title(s));
  if (name == "capitalize") return Value(text::capitalize(s));
  if (name == "swapcase") return Value(text::swapcase(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    std::string sub = need(a, 0, "sub", name.c_str()).str();
    size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") render_error("substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p))));
  }
  if (name == "count") {
    std::string sub = need(a, 0, "sub", "count").str();
    if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) n++;
    return Value(n);
  }
  if (name == "join") {
    const Value& it = need(a, 0, "iterable", "join");
    std::string out;
    bool first = true;
    for (const auto& x : it.is_array() ? it.items() : std::vector<Value>{}) {
      if (!x.is_string()) render_error(std::string("sequence item: expected str instance, ") + x.type_name() + " found");
      if (!first) out += s;
      first = false;
      out += x.as_string();
    }
    return Value(out);
  }
  if (name == "format") return Value(text::brace_format(s, a));
  if (name == "removeprefix") {
    std::string p = need(a, 0, "prefix", "removeprefix").str();
    return Value(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
  }
  if (name == "removesuffix") {
    std::string p = need(a, 0, "suffix", "removesuffix").str();
    return Value(p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0 ? s.substr(0, s.size() - p.size()) : s);
  }
  auto all = [&](auto pred) {
    if (s.empty()) return Value(false);
    for (auto ch : utf8_chars(s))
      if (!pred(utf8_decode(ch))) return Value(false);
    return Value(true);
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return all([](uint32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha") return all([](uint32_t c) { return c >= 0x80 ? !text::is_space(c) : ((c | 32) >= 'a' && (c | 32) <= 'z'); });
  if (name == "isalnum") return all([](uint32_t c) { return c >= 0x80 ? !text::is_space(c) : (((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9')); });
  if (name == "isspace") return all([](uint32_t c) { return text::is_space(c); });
  if (name == "islower") return Value(text::lower(s) == s && text::upper(s) != s);
  if (name == "isupper") return Value(text::upper(s) == s && text::lower(s) != s);
  if (name == "zfill") {
    int64_t w = opt_int(a, 0, "width", 0);
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (w <= len) return Value(s);
    size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    std::string r = s;
    r.insert(sign, std::string(static_cast<size_t>(w - len), '0'));
    return Value(r);
  }
  if (name == "encode") return Value(s);
  render_error("'str' object has no method '" + name + "'");
}

Value list_method(const Value& self, const std::string& name, Interp&, Args& a) {
  auto& items = self.items();
  auto index_arg = [&](size_t i, int64_t dflt) {
    int64_t k = opt_int(a, i, "index", dflt);
    int64_t n = static_cast<int64_t>(items.size());
    if (k < 0) k += n;
    return k;
  };
  if (name == "append") {
    items.push_back(need(a, 0, "object", "append"));
    return Value::none();
  }
  if (name == "extend") {
    const Value& it = need(a, 0, "iterable", "extend");
    if (it.is_array()) {
      std::vector<Value> add = it.items();
      items.insert(items.end(), add.begin(), add.end());
    }
    return Value::none();
  }
  if (name == "insert") {
    int64_t k = std::clamp<int64_t>(index_arg(0, 0), 0, static_cast<int64_t>(items.size()));
    items.insert(items.begin() + k, need(a, 1, "object", "insert"));
    return Value::none();
  }
  if (name == "pop") {
    if (items.empty()) render_error("pop from empty list");
    int64_t k = index_arg(0, -1);
    if (k < 0 || k >= static_cast<int64_t>(items.size())) render_error("pop index out of range");
    Value v = items[static_cast<size_t>(k)];
    items.erase(items.begin() + k);
    return v;
  }
  if (name == "remove") {
    const Value& x = need(a, 0, "value", "remove");
    for (auto it = items.begin(); it != items.end(); ++it)
      if (values_equal(*it, x)) {
        items.erase(it);
        return Value::none();
      }
    render_error("list.remove(x): x not in list");
  }
  if (name == "index") {
    const Value& x = need(a, 0, "value", "index");
    for (size_t i = 0; i < items.size(); i++)
      if (values_equal(items[i], x)) return Value(static_cast<int64_t>(i));
    render_error(x.repr() + " is not in list");
  }
  if (name == "count") {
    const Value& x = need(a, 0, "value", "count");
    return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) { return values_equal(v, x); })));
  }
  if (name == "copy") return Value::array(items, self.is_tuple());
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    return Value::none();
  }
  render_error(std::string("'") + self.type_name() + "' object has no method '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name, Interp&, Args& a) {
  if (name == "get") {
    const Value& k = need(a, 0, "key", "get");
    const Value* v = k.is_string() ? self.find(k.as_string()) : nullptr;
    if (v) return *v;
    const Value* d = a.get(1, "default");
    return d ? *d : Value::none();
  }
  if (name == "items" || name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : self.entries()) {
      if (name == "items") out.push_back(Value::array({Value(k), v}, true));
      else if (name == "keys") out.emplace_back(k);
      else out.push_back(v);
    }
    return Value::array(std::move(out));
  }
  if (name == "pop") {
    std::string k = need(a, 0, "key", "pop").str();
    if (const Value* v = self.find(k)) {
      Value r = *v;
      self.erase(k);
      return r;
    }
    if (const Value* d = a.get(1, "default")) return *d;
    render_error("KeyError: " + Value(k).repr());
  }
  if (name == "setdefault") {
    std::string k = need(a, 0, "key", "setdefault").str();
    if (const Value* v = self.find(k)) return *v;
    const Value* d = a.get(1, "default");
    self.set(k, d ? *d : Value::none());
    return d ? *d : Value::none();
  }
  if (name == "update") {
    if (!a.pos.empty() && a.pos[0].is_object())
      for (const auto& [k, v] : a.pos[0].entries()) self.set(k, v);
    for (const auto& [k, v] : a.kw) self.set(k, v);
    return Value::none();
  }
  if (name == "copy") {
    Value c = Value::object();
    for (const auto& [k, v] : self.entries()) c.set(k, v);
    return c;
  }
  render_error("'dict' object has no method '" + name + "'");
}

bool is_string_method(const std::string& n) {
  static const std::unordered_set<std::string> names = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace", "upper",
      "lower", "title", "capitalize", "swapcase", "find", "rfind", "index", "rindex", "count", "join", "format",
      "removeprefix", "removesuffix", "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace",
      "islower", "isupper", "zfill", "encode"};
  return names.count(n) > 0;
}
bool is_list_method(const std::string& n) {
  static const std::unordered_set<std::string> names = {"append", "extend", "insert", "pop", "remove", "index", "count", "copy", "reverse"};
  return names.count(n) > 0;
}

Value dict_from_args(const Args& a) {
  Value d = Value::object();
  for (const auto& p : a.pos) {
    if (p.is_object()) {
      for (const auto& [k, v] : p.entries()) d.set(k, v);
    } else if (p.is_array()) {
      for (const auto& pair : p.items()) {
        if (!pair.is_array() || pair.items().size() != 2) render_error("dictionary update sequence element must be a pair");
        d.set(pair.items()[0].str(), pair.items()[1]);
      }
    } else {
      render_error(std::string("'") + p.type_name() + "' object is not iterable");
    }
  }
  for (const auto& [k, v] : a.kw) d.set(k, v);
  return d;
}

Value g_range(Interp&, Args& a) {
  int64_t start = 0, stop, step = 1;
  auto num = [](const Value& v) {
    if (!v.is_int() && !v.is_bool()) render_error(std::string("range() integer argument expected, got ") + v.type_name());
    return v.as_int();
  };
  if (a.pos.size() == 1) {
    stop = num(a.pos[0]);
  } else if (a.pos.size() == 2 || a.pos.size() == 3) {
    start = num(a.pos[0]);
    stop = num(a.pos[1]);
    if (a.pos.size() == 3) step = num(a.pos[2]);
  } else {
    render_error("range expected 1 to 3 arguments");
  }
  if (step == 0) render_error("range() arg 3 must not be zero");
  __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  __int128 count = span <= 0 ? 0 : (span + (step > 0 ? step : -static_cast<__int128>(step)) - 1) / (step > 0 ? step : -static_cast<__int128>(step));
  if (count > kMaxRange) render_error("range() too large");
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;
    i -= step;
  }
  return Value::array(std::move(out));
}

Value g_namespace(Interp&, Args& a) {
  Value ns = Value::namespace_object();
  Value d = dict_from_args(a);
  for (const auto& [k, v] : d.entries()) ns.set(k, v);
  return ns;
}

Value g_dict(Interp&, Args& a) { return dict_from_args(a); }

Value g_raise_exception(Interp&, Args& a) {
  std::string msg = a.pos.empty() ? std::string("raise_exception() called") : a.pos[0].str();
  throw TemplateError(TemplateError::Kind::Raised, msg);
}

Value g_strftime_now(Interp&, Args& a) {
  std::string fmt = a.pos.empty() ? std::string("%Y-%m-%d") : a.pos[0].str();
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return Value(std::string(buf, n));
}

Value g_joiner(Interp&, Args& a) {
  std::string sep = a.pos.empty() ? std::string(", ") : a.pos[0].str();
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](Interp&, Args&) {
    if (!*used) {
      *used = true;
      return Value("");
    }
    return Value(sep);
  });
}

}  // namespace

bool is_dict_method(const std::string& n) {
  static const std::unordered_set<std::string> names = {"get", "items", "keys", "values", "pop", "setdefault", "update", "copy"};
  return names.count(n) > 0;
}

Value find_method(const Value& obj, const std::string& name) {
  using Impl = Value (*)(const Value&, const std::string&, Interp&, Args&);
  Impl impl = nullptr;
  if (obj.is_string() && is_string_method(name)) impl = string_method;
  else if (obj.is_array() && is_list_method(name)) impl = list_method;
  else if (obj.is_mapping() && is_dict_method(name)) impl = dict_method;
  if (!impl) return Value::undefined(std::string("'") + obj.type_name() + " object' has no attribute '" + name + "'");
  return Value::function(name, [obj, name, impl](Interp& in, Args& a) { return impl(obj, name, in, a); });
}

Value find_global(const std::string& name) {
  static const std::unordered_map<std::string, Value> globals = {
      {"range", Value::function("range", g_range)},
      {"namespace", Value::function("namespace", g_namespace)},
      {"dict", Value::function("dict", g_dict)},
      {"raise_exception", Value::function("raise_exception", g_raise_exception)},
      {"strftime_now", Value::function("strftime_now", g_strftime_now)},
      {"joiner", Value::function("joiner", g_joiner)},
  };
  auto it = globals.find(name);
  return it == globals.end() ? Value() : it->second;
}

}  // namespace k3::jinja
