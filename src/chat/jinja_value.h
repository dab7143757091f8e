// Values of the Jinja engine. Python semantics where chat templates can observe them: lists and
// dicts are shared references (a namespace or list mutated in a macro is seen by the caller),
// dicts keep insertion order, str() / repr() / json.dumps() print like CPython.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace k3::jinja {

class Value;
class Interp;
struct ArrayData;
struct ObjectData;
struct FunctionData;

// Arguments of a call: positional then keyword, in source order.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The i-th positional argument, else the keyword `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
  const Value* kwarg(std::string_view name) const;
};

using NativeFn = std::function<Value(Interp&, Args&)>;

class Value {
 public:
  enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Function };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b);
  Value(int v) : Value(static_cast<int64_t>(v)) {}
  Value(int64_t v);
  Value(double v);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value array(std::vector<Value> items = {}, bool tuple = false);
  static Value object();
  static Value namespace_object();
  static Value function(std::string name, NativeFn fn);

  Type type() const { return t_; }
  bool is_undefined() const { return t_ == Type::Undefined; }
  bool is_none() const { return t_ == Type::None; }
  bool is_bool() const { return t_ == Type::Bool; }
  bool is_int() const { return t_ == Type::Int; }
  bool is_float() const { return t_ == Type::Float; }
  bool is_number() const { return t_ == Type::Int || t_ == Type::Float || t_ == Type::Bool; }
  bool is_string() const { return t_ == Type::String; }
  bool is_array() const { return t_ == Type::Array; }
  bool is_object() const { return t_ == Type::Object; }
  bool is_namespace() const;
  bool is_tuple() const;
  bool is_mapping() const { return t_ == Type::Object && !is_namespace(); }
  bool is_function() const { return t_ == Type::Function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return t_ == Type::Bool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return t_ == Type::Float ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return s_; }
  const std::string& undefined_hint() const { return s_; }
  std::vector<Value>& items() const;                                // Array
  std::vector<std::pair<std::string, Value>>& entries() const;      // Object
  const Value* find(std::string_view key) const;                    // Object
  void set(const std::string& key, Value v) const;                  // Object
  bool erase(const std::string& key) const;                         // Object
  const FunctionData& fn() const { return *fn_; }

  bool truthy() const;
  // Python str(): what {{ x }} prints. Undefined prints as "".
  std::string str() const;
  // Python repr(), used for containers.
  std::string repr() const;
  // Number of items (code points for strings). Throws for scalars.
  size_t length() const;
  const char* type_name() const;

  static Value from_json(const nlohmann::ordered_json& j);
  static Value from_json(const nlohmann::json& j);
  nlohmann::ordered_json to_json() const;

 private:
  Type t_ = Type::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;  // String value, or the Undefined's hint
  std::shared_ptr<ArrayData> a_;
  std::shared_ptr<ObjectData> o_;
  std::shared_ptr<FunctionData> fn_;
};

struct ArrayData {
  std::vector<Value> items;
  bool tuple = false;
};

struct ObjectData {
  std::vector<std::pair<std::string, Value>> entries;
  std::unordered_map<std::string, size_t> index;
  bool is_namespace = false;
};

struct FunctionData {
  std::string name;
  NativeFn call;
};

// Python ==, with int/float/bool compared as numbers and containers element by element.
bool values_equal(const Value& a, const Value& b);
// Python <: numbers with numbers, strings with strings (code-point order), sequences
// lexicographically; anything else throws. Returns -1, 0 or 1.
int values_compare(const Value& a, const Value& b);

struct JsonOptions {
  int indent = -1;           // < 0: no newlines
  std::string indent_str;    // used instead of spaces when indent was given as a string
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
};
// Python json.dumps(value, ...) as transformers' tojson filter calls it.
std::string json_dumps(const Value& v, const JsonOptions& opts);

// Python float repr ("1.0", "0.1", "1e-07", "1e+20", "inf", "nan").
std::string format_float(double d);

// UTF-8 helpers: code points of a string (invalid bytes count as one each).
std::vector<std::string_view> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);
void utf8_append(std::string& out, uint32_t cp);
uint32_t utf8_decode(std::string_view one_char);  // one element of utf8_chars(); invalid -> U+FFFD

}  // namespace k3::jinja
