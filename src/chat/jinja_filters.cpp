// Filters and tests (Jinja2 semantics; tojson as transformers defines it).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_text.h"

namespace k3::jinja {
namespace {

Value arg(const Args& a, size_t i, const char* name, Value dflt) {
  const Value* v = a.get(i, name);
  return v ? *v : dflt;
}
bool arg_bool(const Args& a, size_t i, const char* name, bool dflt) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : dflt;
}
int64_t arg_int(const Args& a, size_t i, const char* name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none() || v->is_undefined()) return dflt;
  if (!v->is_number()) render_error(std::string("argument '") + name + "' must be an integer");
  return v->is_float() ? static_cast<int64_t>(v->as_double()) : v->as_int();
}
std::optional<std::string> arg_str(const Args& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  return v->str();
}

std::vector<Value> seq(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_array()) return v.items();
  if (v.is_object()) {
    std::vector<Value> keys;
    for (const auto& e : v.entries()) keys.emplace_back(e.first);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> cs;
    for (auto c : utf8_chars(v.as_string())) cs.emplace_back(std::string(c));
    return cs;
  }
  render_error(std::string("'") + v.type_name() + "' object is not iterable");
}

// Jinja2's attribute getter: "a.b.0" walks items.
Value get_path(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t p = 0;
  while (true) {
    size_t q = path.find('.', p);
    std::string part = path.substr(p, q == std::string::npos ? std::string::npos : q - p);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? Interp::getitem(cur, Value(static_cast<int64_t>(std::stoll(part)))) : Interp::getitem(cur, Value(part));
    if (q == std::string::npos) return cur;
    if (cur.is_undefined()) return cur;
    p = q + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(text::lower(v.as_string()));
  return v;
}

std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const std::optional<std::string>& attr) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(sort_key(attr ? get_path(v, *attr) : v, case_sensitive), v);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? values_compare(y.first, x.first) < 0 : values_compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return out;
}

// ---- filters ----

Value f_abs(Interp&, const Value& v, Args&) {
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  render_error(std::string("bad operand type for abs(): '") + v.type_name() + "'");
}
Value f_attr(Interp&, const Value& v, Args& a) { return Interp::getattr(v, arg(a, 0, "name", Value("")).str()); }
Value f_batch(Interp&, const Value& v, Args& a) {
  int64_t n = arg_int(a, 0, "linecount", 1);
  if (n <= 0) render_error("batch size must be positive");
  const Value* fill = a.get(1, "fill_with");
  std::vector<Value> out, cur;
  for (auto& x : seq(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::array(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::array(cur));
  }
  return Value::array(out);
}
Value f_capitalize(Interp&, const Value& v, Args&) { return Value(text::capitalize(v.str())); }
Value f_center(Interp&, const Value& v, Args& a) {
  std::string s = v.str();
  int64_t w = arg_int(a, 0, "width", 80);
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (w <= len) return Value(s);
  // Python's str.center puts the odd extra space on the right unless the length is odd.
  int64_t total = w - len;
  int64_t left = total / 2 + (total & w & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}
Value f_length(Interp&, const Value& v, Args&) { return Value(static_cast<int64_t>(v.length())); }
Value f_default(Interp&, const Value& v, Args& a) {
  Value d = arg(a, 0, "default_value", Value(""));
  bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) return d;
  return v;
}
Value f_dictsort(Interp&, const Value& v, Args& a) {
  if (!v.is_object()) render_error("dictsort requires a mapping");
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  std::string by = arg(a, 1, "by", Value("key")).str();
  bool reverse = arg_bool(a, 2, "reverse", false);
  if (by != "key" && by != "value") render_error("dictsort: 'by' must be 'key' or 'value'");
  std::vector<Value> pairs;
  for (const auto& [k, x] : v.entries()) pairs.push_back(Value::array({Value(k), x}, true));
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& p, const Value& q) {
    size_t i = by == "key" ? 0 : 1;
    Value x = sort_key(p.items()[i], cs), y = sort_key(q.items()[i], cs);
    return reverse ? values_compare(y, x) < 0 : values_compare(x, y) < 0;
  });
  return Value::array(pairs);
}
Value f_escape(Interp&, const Value& v, Args&) { return Value(text::html_escape(v.str())); }
Value f_first(Interp&, const Value& v, Args&) {
  auto s = seq(v);
  return s.empty() ? Value::undefined("No first item, sequence was empty.") : s.front();
}
Value f_last(Interp&, const Value& v, Args&) {
  auto s = seq(v);
  return s.empty() ? Value::undefined("No last item, sequence was empty.") : s.back();
}
Value f_float(Interp&, const Value& v, Args& a) {
  Value d = arg(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    std::string s = text::strip(v.as_string(), std::nullopt, true, true);
    char* end = nullptr;
    double x = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value(x);
  }
  return d;
}
Value f_int(Interp&, const Value& v, Args& a) {
  Value d = arg(a, 0, "default", Value(int64_t{0}));
  int64_t base = arg_int(a, 1, "base", 10);
  if (v.is_float()) return Value(static_cast<int64_t>(v.as_double()));
  if (v.is_number()) return Value(v.as_int());
  if (v.is_string()) {
    std::string s = text::strip(v.as_string(), std::nullopt, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (!s.empty() && end && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(x));
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0' && std::isfinite(f)) return Value(static_cast<int64_t>(f));
  }
  return d;
}
Value f_format(Interp&, const Value& v, Args& a) { return Value(text::percent_format(v.str(), a.pos)); }
Value f_indent(Interp&, const Value& v, Args& a) {
  const Value* w = a.get(0, "width");
  std::string ind = w && w->is_string() ? w->as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, arg_int(a, 0, "width", 4))), ' ');
  bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
  std::string s = v.str() + "\n";
  auto lines = text::splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); i++) rv += (i ? "\n" + ind : "") + lines[i];
  } else if (!lines.empty()) {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); i++) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return Value(rv);
}
Value f_items(Interp&, const Value& v, Args&) {
  if (v.is_undefined()) return Value::array();
  if (!v.is_object()) render_error("items filter requires a mapping");
  std::vector<Value> out;
  for (const auto& [k, x] : v.entries()) out.push_back(Value::array({Value(k), x}, true));
  return Value::array(out);
}
Value f_join(Interp&, const Value& v, Args& a) {
  std::string sep = arg(a, 0, "d", Value("")).str();
  auto attr = arg_str(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (auto& x : seq(v)) {
    if (!first) out += sep;
    first = false;
    out += (attr ? get_path(x, *attr) : x).str();
  }
  return Value(out);
}
Value f_list(Interp&, const Value& v, Args&) { return Value::array(seq(v)); }
Value f_lower(Interp&, const Value& v, Args&) { return Value(text::lower(v.str())); }
Value f_upper(Interp&, const Value& v, Args&) { return Value(text::upper(v.str())); }
Value f_map(Interp& in, const Value& v, Args& a) {
  std::vector<Value> out;
  if (const Value* attr = a.kwarg("attribute")) {
    const Value* dflt = a.kwarg("default");
    for (auto& x : seq(v)) {
      Value r = get_path(x, attr->str());
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return Value::array(out);
  }
  if (a.pos.empty()) render_error("map requires a filter name or attribute=");
  std::string name = a.pos[0].str();
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (auto& x : seq(v)) {
    Args copy = rest;
    out.push_back(in.apply_filter(name, x, copy));
  }
  return Value::array(out);
}
Value minmax(const Value& v, Args& a, bool want_max) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  auto attr = arg_str(a, 1, "attribute");
  auto s = seq(v);
  if (s.empty()) return Value::undefined(want_max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
  Value best = s[0];
  for (size_t i = 1; i < s.size(); i++) {
    int c = values_compare(sort_key(attr ? get_path(s[i], *attr) : s[i], cs), sort_key(attr ? get_path(best, *attr) : best, cs));
    if (want_max ? c > 0 : c < 0) best = s[i];
  }
  return best;
}
Value f_max(Interp&, const Value& v, Args& a) { return minmax(v, a, true); }
Value f_min(Interp&, const Value& v, Args& a) { return minmax(v, a, false); }
Value f_pprint(Interp&, const Value& v, Args&) { return Value(v.repr()); }
Value select_impl(Interp& in, const Value& v, Args& a, bool by_attr, bool keep) {
  std::vector<Value> out;
  size_t i0 = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty()) render_error("selectattr/rejectattr need an attribute name");
    attr = a.pos[0].str();
    i0 = 1;
  }
  std::string test = a.pos.size() > i0 ? a.pos[i0].str() : "";
  Args targs;
  if (a.pos.size() > i0 + 1) targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(i0 + 1), a.pos.end());
  for (auto& x : seq(v)) {
    Value subject = by_attr ? get_path(x, attr) : x;
    bool ok;
    if (test.empty()) {
      ok = subject.truthy();
    } else {
      Args copy = targs;
      ok = in.apply_test(test, subject, copy);
    }
    if (ok == keep) out.push_back(x);
  }
  return Value::array(out);
}
Value f_select(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, Args& a) { return select_impl(in, v, a, true, false); }
Value f_replace(Interp&, const Value& v, Args& a) {
  return Value(text::replace(v.str(), arg(a, 0, "old", Value("")).str(), arg(a, 1, "new", Value("")).str(), arg_int(a, 2, "count", -1)));
}
Value f_reverse(Interp&, const Value& v, Args&) {
  if (v.is_string()) {
    auto cs = utf8_chars(v.as_string());
    std::string out;
    for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
    return Value(out);
  }
  auto s = seq(v);
  std::reverse(s.begin(), s.end());
  return Value::array(s);
}
Value f_round(Interp&, const Value& v, Args& a) {
  int64_t prec = arg_int(a, 0, "precision", 0);
  std::string method = arg(a, 1, "method", Value("common")).str();
  if (!v.is_number()) render_error("round requires a number");
  double x = v.as_double(), m = std::pow(10.0, static_cast<double>(prec));
  double r;
  if (method == "common") r = std::nearbyint(x * m) / m;  // Python round(): ties to even
  else if (method == "ceil") r = std::ceil(x * m) / m;
  else if (method == "floor") r = std::floor(x * m) / m;
  else render_error("round: method must be 'common', 'ceil' or 'floor'");
  return Value(r);
}
Value f_safe(Interp&, const Value& v, Args&) { return v; }
Value f_sort(Interp&, const Value& v, Args& a) {
  return Value::array(sorted(seq(v), arg_bool(a, 0, "reverse", false), arg_bool(a, 1, "case_sensitive", false), arg_str(a, 2, "attribute")));
}
Value f_string(Interp&, const Value& v, Args&) { return Value(v.str()); }
Value f_striptags(Interp&, const Value& v, Args&) {
  std::string s = v.str(), out;
  bool in_tag = false;
  for (char c : s) {
    if (c == '<') in_tag = true;
    else if (c == '>' && in_tag) in_tag = false;
    else if (!in_tag) out += c;
  }
  auto words = text::split(out, std::nullopt, -1, false);
  std::string r;
  for (size_t i = 0; i < words.size(); i++) r += (i ? " " : "") + words[i];
  return Value(r);
}
Value f_sum(Interp&, const Value& v, Args& a) {
  auto attr = arg_str(a, 0, "attribute");
  Value total = arg(a, 1, "start", Value(int64_t{0}));
  for (auto& x : seq(v)) total = arith("+", total, attr ? get_path(x, *attr) : x);
  return total;
}
Value f_title(Interp&, const Value& v, Args&) {
  // Jinja2's title: words start after '-', whitespace, or an opening bracket.
  std::string s = v.str(), out;
  bool start = true;
  for (auto ch : utf8_chars(s)) {
    uint32_t c = utf8_decode(ch);
    std::string piece(ch);
    out += start ? text::upper(piece) : text::lower(piece);
    start = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
  }
  return Value(out);
}
Value f_tojson(Interp&, const Value& v, Args& a) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  JsonOptions o;
  o.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  const Value* ind = a.get(1, "indent");
  if (ind && !ind->is_none() && !ind->is_undefined()) {
    if (ind->is_string()) o.indent_str = ind->as_string(), o.indent = 0;
    else o.indent = static_cast<int>(std::clamp<int64_t>(ind->as_int(), 0, 64));
    o.item_sep = ",";
  }
  const Value* seps = a.get(2, "separators");
  if (seps && seps->is_array()) {
    if (seps->items().size() != 2) render_error("tojson: separators must be a pair");
    o.item_sep = seps->items()[0].str();
    o.key_sep = seps->items()[1].str();
  }
  o.sort_keys = arg_bool(a, 3, "sort_keys", false);
  return Value(json_dumps(v, o));
}
Value f_trim(Interp&, const Value& v, Args& a) { return Value(text::strip(v.str(), arg_str(a, 0, "chars"), true, true)); }
Value f_truncate(Interp&, const Value& v, Args& a) {
  std::string s = v.str();
  int64_t length = arg_int(a, 0, "length", 255);
  bool killwords = arg_bool(a, 1, "killwords", false);
  std::string end = arg(a, 2, "end", Value("...")).str();
  int64_t leeway = arg_int(a, 3, "leeway", 5);
  auto cs = utf8_chars(s);
  int64_t n = static_cast<int64_t>(cs.size()), elen = static_cast<int64_t>(utf8_length(end));
  if (n <= length + leeway) return Value(s);
  std::string head;
  for (int64_t i = 0; i < std::max<int64_t>(0, length - elen); i++) head += cs[static_cast<size_t>(i)];
  if (killwords) return Value(head + end);
  size_t sp = head.rfind(' ');
  if (sp != std::string::npos) head.resize(sp);
  return Value(head + end);
}
Value f_unique(Interp&, const Value& v, Args& a) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  auto attr = arg_str(a, 1, "attribute");
  std::vector<Value> out, seen;
  for (auto& x : seq(v)) {
    Value k = sort_key(attr ? get_path(x, *attr) : x, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, k); })) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  return Value::array(out);
}
Value f_wordcount(Interp&, const Value& v, Args&) {
  // Jinja2 counts regex \w+ runs.
  int64_t n = 0;
  bool in_word = false;
  const std::string s = v.str();
  for (auto ch : utf8_chars(s)) {
    uint32_t c = utf8_decode(ch);
    bool w = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c >= 0x80 && !text::is_space(c));
    if (w && !in_word) n++;
    in_word = w;
  }
  return Value(n);
}

// ---- tests ----

bool t_boolean(Interp&, const Value& v, Args&) { return v.is_bool(); }
bool t_callable(Interp&, const Value& v, Args&) { return v.is_function(); }
bool t_defined(Interp&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, Args&) { return v.is_undefined(); }
bool t_divisibleby(Interp&, const Value& v, Args& a) {
  Value n = arg(a, 0, "num", Value(int64_t{1}));
  Value r = arith("%", v, n);
  return !r.truthy();
}
bool t_eq(Interp&, const Value& v, Args& a) { return values_equal(v, arg(a, 0, "other", Value())); }
bool t_ne(Interp&, const Value& v, Args& a) { return !values_equal(v, arg(a, 0, "other", Value())); }
bool t_lt(Interp&, const Value& v, Args& a) { return values_compare(v, arg(a, 0, "other", Value())) < 0; }
bool t_le(Interp&, const Value& v, Args& a) { return values_compare(v, arg(a, 0, "other", Value())) <= 0; }
bool t_gt(Interp&, const Value& v, Args& a) { return values_compare(v, arg(a, 0, "other", Value())) > 0; }
bool t_ge(Interp&, const Value& v, Args& a) { return values_compare(v, arg(a, 0, "other", Value())) >= 0; }
bool t_escaped(Interp&, const Value&, Args&) { return false; }
bool t_even(Interp&, const Value& v, Args&) {
  if (!v.is_int() && !v.is_bool()) render_error("even test requires an integer");
  return v.as_int() % 2 == 0;
}
bool t_odd(Interp&, const Value& v, Args&) {
  if (!v.is_int() && !v.is_bool()) render_error("odd test requires an integer");
  return v.as_int() % 2 != 0;
}
bool t_false(Interp&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }
bool t_true(Interp&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }
bool t_float(Interp&, const Value& v, Args&) { return v.is_float(); }
bool t_integer(Interp&, const Value& v, Args&) { return v.is_int(); }
bool t_number(Interp&, const Value& v, Args&) { return v.is_number(); }  // bool is a Number in Python
bool t_in(Interp&, const Value& v, Args& a) { return contains(arg(a, 0, "seq", Value()), v); }
bool t_iterable(Interp&, const Value& v, Args&) { return v.is_undefined() || v.is_string() || v.is_array() || v.is_object(); }
bool t_sequence(Interp&, const Value& v, Args&) { return v.is_string() || v.is_array() || v.is_mapping(); }
bool t_mapping(Interp&, const Value& v, Args&) { return v.is_mapping(); }
bool t_none(Interp&, const Value& v, Args&) { return v.is_none(); }
bool t_string(Interp&, const Value& v, Args&) { return v.is_string(); }
bool t_lower(Interp&, const Value& v, Args&) {
  std::string s = v.str();
  return text::lower(s) == s && text::upper(s) != s;
}
bool t_upper(Interp&, const Value& v, Args&) {
  std::string s = v.str();
  return text::upper(s) == s && text::lower(s) != s;
}
bool t_sameas(Interp&, const Value& v, Args& a) {
  Value o = arg(a, 0, "other", Value());
  if (v.type() != o.type()) return false;
  switch (v.type()) {
    case Value::Type::Array: return &v.items() == &o.items();
    case Value::Type::Object: return &v.entries() == &o.entries();
    case Value::Type::Function: return &v.fn() == &o.fn();
    case Value::Type::Float: return false;
    default: return values_equal(v, o);
  }
}
bool t_filter(Interp&, const Value& v, Args&) { return v.is_string() && find_filter(v.as_string()) != nullptr; }
bool t_test(Interp&, const Value& v, Args&) { return v.is_string() && find_test(v.as_string()) != nullptr; }

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::unordered_map<std::string, FilterFn> filters = {
      {"abs", f_abs},           {"attr", f_attr},         {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"forceescape", f_escape}, {"format", f_format},    {"indent", f_indent},
      {"int", f_int},           {"items", f_items},       {"join", f_join},         {"last", f_last},
      {"length", f_length},     {"list", f_list},         {"lower", f_lower},       {"map", f_map},
      {"max", f_max},           {"min", f_min},           {"pprint", f_pprint},     {"reject", f_reject},
      {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round},
      {"safe", f_safe},         {"select", f_select},     {"selectattr", f_selectattr}, {"sort", f_sort},
      {"string", f_string},     {"striptags", f_striptags}, {"sum", f_sum},         {"title", f_title},
      {"tojson", f_tojson},     {"trim", f_trim},         {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  auto it = filters.find(name);
  return it == filters.end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  static const std::unordered_map<std::string, TestFn> tests = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},   {"undefined", t_undefined},
      {"divisibleby", t_divisibleby}, {"eq", t_eq},     {"equalto", t_eq},        {"==", t_eq},
      {"ne", t_ne},           {"!=", t_ne},             {"lt", t_lt},             {"lessthan", t_lt},
      {"<", t_lt},            {"le", t_le},             {"<=", t_le},             {"gt", t_gt},
      {"greaterthan", t_gt},  {">", t_gt},              {"ge", t_ge},             {">=", t_ge},
      {"escaped", t_escaped}, {"even", t_even},         {"odd", t_odd},           {"false", t_false},
      {"true", t_true},       {"float", t_float},       {"integer", t_integer},   {"number", t_number},
      {"in", t_in},           {"iterable", t_iterable}, {"sequence", t_sequence}, {"mapping", t_mapping},
      {"none", t_none},       {"string", t_string},     {"lower", t_lower},       {"upper", t_upper},
      {"sameas", t_sameas},   {"filter", t_filter},     {"test", t_test},
  };
  auto it = tests.find(name);
  return it == tests.end() ? nullptr : it->second;
}

}  // namespace k3::jinja
