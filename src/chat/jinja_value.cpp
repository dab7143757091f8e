#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja_error.h"

namespace k3::jinja {

const Value* Args::get(size_t i, std::string_view name) const {
  if (i < pos.size()) return &pos[i];
  return kwarg(name);
}

const Value* Args::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.t_ = Type::None;
  return v;
}
Value::Value(bool b) : t_(Type::Bool), b_(b) {}
Value::Value(int64_t v) : t_(Type::Int), i_(v) {}
Value::Value(double v) : t_(Type::Float), f_(v) {}
Value::Value(std::string s) : t_(Type::String), s_(std::move(s)) {}

Value Value::array(std::vector<Value> items, bool tuple) {
  Value v;
  v.t_ = Type::Array;
  v.a_ = std::make_shared<ArrayData>();
  v.a_->items = std::move(items);
  v.a_->tuple = tuple;
  return v;
}
Value Value::object() {
  Value v;
  v.t_ = Type::Object;
  v.o_ = std::make_shared<ObjectData>();
  return v;
}
Value Value::namespace_object() {
  Value v = object();
  v.o_->is_namespace = true;
  return v;
}
Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.t_ = Type::Function;
  v.fn_ = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return v;
}

bool Value::is_namespace() const { return t_ == Type::Object && o_->is_namespace; }
bool Value::is_tuple() const { return t_ == Type::Array && a_->tuple; }
std::vector<Value>& Value::items() const { return a_->items; }
std::vector<std::pair<std::string, Value>>& Value::entries() const { return o_->entries; }

const Value* Value::find(std::string_view key) const {
  auto it = o_->index.find(std::string(key));
  return it == o_->index.end() ? nullptr : &o_->entries[it->second].second;
}

void Value::set(const std::string& key, Value v) const {
  auto it = o_->index.find(key);
  if (it != o_->index.end()) {
    o_->entries[it->second].second = std::move(v);
    return;
  }
  o_->index.emplace(key, o_->entries.size());
  o_->entries.emplace_back(key, std::move(v));
}

bool Value::erase(const std::string& key) const {
  auto it = o_->index.find(key);
  if (it == o_->index.end()) return false;
  o_->entries.erase(o_->entries.begin() + static_cast<std::ptrdiff_t>(it->second));
  o_->index.clear();
  for (size_t i = 0; i < o_->entries.size(); i++) o_->index.emplace(o_->entries[i].first, i);
  return true;
}

bool Value::truthy() const {
  switch (t_) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return b_;
    case Type::Int: return i_ != 0;
    case Type::Float: return f_ != 0.0;
    case Type::String: return !s_.empty();
    case Type::Array: return !a_->items.empty();
    case Type::Object: return o_->is_namespace || !o_->entries.empty();
    case Type::Function: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (t_) {
    case Type::Undefined: return "undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::Array: return a_->tuple ? "tuple" : "list";
    case Type::Object: return o_->is_namespace ? "Namespace" : "dict";
    case Type::Function: return "function";
  }
  return "?";
}

size_t Value::length() const {
  switch (t_) {
    case Type::Undefined: return 0;
    case Type::String: return utf8_length(s_);
    case Type::Array: return a_->items.size();
    case Type::Object: return o_->entries.size();
    default: render_error(std::string("object of type '") + type_name() + "' has no len()");
  }
}

// ---- UTF-8 ----

static size_t utf8_seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xE) return 3;
  if ((c >> 3) == 0x1E) return 4;
  return 1;
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t n = utf8_seq_len(static_cast<unsigned char>(s[i]));
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; k++)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        n = 1;
        break;
      }
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) n++;
  return n;
}

uint32_t utf8_decode(std::string_view ch) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(ch[i])); };
  switch (ch.size()) {
    case 1: return b(0) < 0x80 ? b(0) : 0xFFFD;
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// ---- printing ----

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e-07"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp = std::atoi(sci.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; i++)
    if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  } else if (exp < 0) {
    out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    size_t ip = static_cast<size_t>(exp) + 1;
    if (digits.size() <= ip) {
      out += digits + std::string(ip - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, ip) + "." + digits.substr(ip);
    }
  }
  return out;
}

static std::string repr_string(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (std::string_view ch : utf8_chars(s)) {
    uint32_t cp = utf8_decode(ch);
    char buf[16];
    if (cp == '\\') out += "\\\\";
    else if (cp == static_cast<uint32_t>(q)) (out += '\\') += q;
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      out += buf;
    } else if (cp == 0x2028 || cp == 0x2029) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += q;
  return out;
}

std::string Value::repr() const {
  switch (t_) {
    case Type::String: return repr_string(s_);
    case Type::Array: {
      std::string out = a_->tuple ? "(" : "[";
      for (size_t i = 0; i < a_->items.size(); i++) {
        if (i) out += ", ";
        out += a_->items[i].repr();
      }
      if (a_->tuple && a_->items.size() == 1) out += ",";
      return out + (a_->tuple ? ")" : "]");
    }
    case Type::Object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : o_->entries) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + v.repr();
      }
      out += "}";
      return o_->is_namespace ? "<Namespace " + out + ">" : out;
    }
    default: return str();
  }
}

std::string Value::str() const {
  switch (t_) {
    case Type::Undefined: return "";
    case Type::None: return "None";
    case Type::Bool: return b_ ? "True" : "False";
    case Type::Int: return std::to_string(i_);
    case Type::Float: return format_float(f_);
    case Type::String: return s_;
    case Type::Array: return repr();
    case Type::Object: return repr();
    case Type::Function: return "<function " + fn_->name + ">";
  }
  return "";
}

// ---- comparison ----

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if ((a.is_float() || b.is_float())) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: return true;
    case Value::Type::String: return a.as_string() == b.as_string();
    case Value::Type::Array: {
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size() || a.is_tuple() != b.is_tuple()) return false;
      for (size_t i = 0; i < x.size(); i++)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Type::Object: {
      if (a.is_namespace() || b.is_namespace()) return &a.entries() == &b.entries();
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [k, v] : a.entries()) {
        const Value* o = b.find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    }
    case Value::Type::Function: return &a.fn() == &b.fn();
    default: return false;
  }
}

int values_compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); i++) {
      if (values_equal(x[i], y[i])) continue;
      return values_compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  render_error(std::string("'<' not supported between instances of '") + a.type_name() + "' and '" +
               b.type_name() + "'");
}

// ---- JSON ----

static void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (std::string_view ch : utf8_chars(s)) {
    unsigned char c = static_cast<unsigned char>(ch[0]);
    if (ch.size() == 1 && c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; continue;
        case '\\': out += "\\\\"; continue;
        case '\n': out += "\\n"; continue;
        case '\r': out += "\\r"; continue;
        case '\t': out += "\\t"; continue;
        case '\b': out += "\\b"; continue;
        case '\f': out += "\\f"; continue;
        default: break;
      }
      if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
      continue;
    }
    if (!ensure_ascii) {
      out += ch;
      continue;
    }
    uint32_t cp = utf8_decode(ch);
    if (cp >= 0x10000) {
      uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    }
    out += buf;
  }
  out += '"';
}

static void json_dump(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  auto newline = [&](int d) {
    if (o.indent < 0 && o.indent_str.empty()) return;
    out += '\n';
    for (int i = 0; i < d; i++) out += o.indent_str.empty() ? std::string(static_cast<size_t>(o.indent), ' ') : o.indent_str;
  };
  if (depth > 512) render_error("tojson: value nested too deeply");
  switch (v.type()) {
    case Value::Type::Undefined:
    case Value::Type::Function:
      render_error(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
    case Value::Type::None: out += "null"; return;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Float: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += format_float(d);
      return;
    }
    case Value::Type::String: json_string(out, v.as_string(), o.ensure_ascii); return;
    case Value::Type::Array: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); i++) {
        if (i) out += o.item_sep;
        newline(depth + 1);
        json_dump(out, items[i], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Type::Object: {
      std::vector<const std::pair<std::string, Value>*> es;
      for (const auto& e : v.entries()) es.push_back(&e);
      if (es.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(es.begin(), es.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < es.size(); i++) {
        if (i) out += o.item_sep;
        newline(depth + 1);
        json_string(out, es[i]->first, o.ensure_ascii);
        out += o.key_sep;
        json_dump(out, es[i]->second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
  }
}

std::string json_dumps(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_dump(out, v, opts, 0);
  return out;
}

template <class J>
static Value value_from_json(const J& j, int depth) {
  if (depth > 1000) throw k3::Error("JSON input nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e, depth + 1));
      return Value::array(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value o = Value::object();
      for (auto it = j.begin(); it != j.end(); ++it) o.set(it.key(), value_from_json(it.value(), depth + 1));
      return o;
    }
    default: return Value::none();
  }
}

Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j, 0); }
Value Value::from_json(const nlohmann::json& j) { return value_from_json(j, 0); }

nlohmann::ordered_json Value::to_json() const {
  switch (t_) {
    case Type::Undefined:
    case Type::None:
    case Type::Function: return nullptr;
    case Type::Bool: return b_;
    case Type::Int: return i_;
    case Type::Float: return f_;
    case Type::String: return s_;
    case Type::Array: {
      auto j = nlohmann::ordered_json::array();
      for (const auto& e : a_->items) j.push_back(e.to_json());
      return j;
    }
    case Type::Object: {
      auto j = nlohmann::ordered_json::object();
      for (const auto& [k, v] : o_->entries) j[k] = v.to_json();
      return j;
    }
  }
  return nullptr;
}

}  // namespace k3::jinja
