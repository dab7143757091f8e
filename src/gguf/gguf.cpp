// GGUF values, metadata with strict typed access, and split-set loading (gguf-contract.md §2, §7).
#include "gguf/gguf.h"

#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>
#include <iterator>

#include "common/error.h"
#include "gguf/internal.h"

namespace k3::gguf {

namespace detail {
std::string printable(std::string_view s, size_t max_len) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_len) {
      out += strprintf("...(%zu bytes)", s.size());
      break;
    }
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != 0x7f && c != '\\')
      out += static_cast<char>(c);
    else
      out += strprintf("\\x%02x", c);
  }
  return out;
}
}  // namespace detail

using detail::printable;

const char* value_type_name(ValueType t) {
  static const char* const names[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                      "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  auto i = static_cast<uint32_t>(t);
  return i < std::size(names) ? names[i] : "INVALID";
}

size_t Array::size() const {
  return std::visit([](const auto& v) { return v.size(); }, data);
}

namespace {
template <class T>
Value make(ValueType t, T x) {
  Value v;
  v.type = t;
  v.v.emplace<T>(std::move(x));
  return v;
}
}  // namespace

Value Value::u8(uint8_t x) { return make(ValueType::UINT8, x); }
Value Value::i8(int8_t x) { return make(ValueType::INT8, x); }
Value Value::u16(uint16_t x) { return make(ValueType::UINT16, x); }
Value Value::i16(int16_t x) { return make(ValueType::INT16, x); }
Value Value::u32(uint32_t x) { return make(ValueType::UINT32, x); }
Value Value::i32(int32_t x) { return make(ValueType::INT32, x); }
Value Value::f32(float x) { return make(ValueType::FLOAT32, x); }
Value Value::boolean(bool x) { return make(ValueType::BOOL, x); }
Value Value::str(std::string x) { return make(ValueType::STRING, std::move(x)); }
Value Value::u64(uint64_t x) { return make(ValueType::UINT64, x); }
Value Value::i64(int64_t x) { return make(ValueType::INT64, x); }
Value Value::f64(double x) { return make(ValueType::FLOAT64, x); }
Value Value::array(Array a) { return make(ValueType::ARRAY, std::move(a)); }

namespace {
std::string scalar_string(uint8_t x) { return std::to_string(x); }
std::string scalar_string(int8_t x) { return std::to_string(x); }
std::string scalar_string(uint16_t x) { return std::to_string(x); }
std::string scalar_string(int16_t x) { return std::to_string(x); }
std::string scalar_string(uint32_t x) { return std::to_string(x); }
std::string scalar_string(int32_t x) { return std::to_string(x); }
std::string scalar_string(uint64_t x) { return std::to_string(x); }
std::string scalar_string(int64_t x) { return std::to_string(x); }
std::string scalar_string(float x) { return strprintf("%.9g", x); }
std::string scalar_string(double x) { return strprintf("%.17g", x); }
std::string scalar_string(bool x) { return x ? "true" : "false"; }
std::string scalar_string(const std::string& x) {
  std::string s(1, '"');
  s += printable(x, 120);
  return s += '"';
}
std::string scalar_string(const Array& a) { return strprintf("%s[%zu]", value_type_name(a.elem), a.size()); }
}  // namespace

std::string Value::to_string(size_t max_elems) const {
  if (const Array* a = std::get_if<Array>(&v)) {
    std::string s = strprintf("%s[%zu]", value_type_name(a->elem), a->size());
    s += " [";
    std::visit(
        [&](const auto& vec) {
          for (size_t i = 0; i < vec.size() && i < max_elems; ++i) {
            if (i) s += ", ";
            using E = typename std::decay_t<decltype(vec)>::value_type;
            s += scalar_string(static_cast<E>(vec[i]));
          }
          if (vec.size() > max_elems) s += ", ...";
        },
        a->data);
    return s + "]";
  }
  return std::visit([](const auto& x) { return scalar_string(x); }, v);
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// ---- Metadata ----

const Value* Metadata::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &kvs_[it->second].value;
}

void Metadata::set(std::string key, Value v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    kvs_[it->second].value = std::move(v);
    return;
  }
  index_.emplace(key, kvs_.size());
  kvs_.push_back({std::move(key), std::move(v)});
}

void Metadata::erase(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  kvs_.erase(kvs_.begin() + it->second);
  index_.clear();
  for (size_t i = 0; i < kvs_.size(); ++i) index_.emplace(kvs_[i].key, i);
}

namespace {
std::string prefix(const std::string& context) { return context.empty() ? "" : context + ": "; }

const Value& typed(const Metadata& m, std::string_view key, ValueType want) {
  const Value* v = m.find(key);
  if (!v) fail("%skey '%s' not found", prefix(m.context).c_str(), printable(key).c_str());
  if (v->type != want)
    fail("%skey '%s' has wrong type %s, expected %s", prefix(m.context).c_str(), printable(key).c_str(),
         value_type_name(v->type), value_type_name(want));
  return *v;
}
}  // namespace

uint32_t Metadata::get_u32(std::string_view key) const {
  return std::get<uint32_t>(typed(*this, key, ValueType::UINT32).v);
}
int32_t Metadata::get_i32(std::string_view key) const {
  return std::get<int32_t>(typed(*this, key, ValueType::INT32).v);
}
uint16_t Metadata::get_u16(std::string_view key) const {
  return std::get<uint16_t>(typed(*this, key, ValueType::UINT16).v);
}
float Metadata::get_f32(std::string_view key) const { return std::get<float>(typed(*this, key, ValueType::FLOAT32).v); }
bool Metadata::get_bool(std::string_view key) const { return std::get<bool>(typed(*this, key, ValueType::BOOL).v); }
const std::string& Metadata::get_str(std::string_view key) const {
  return std::get<std::string>(typed(*this, key, ValueType::STRING).v);
}
const Array& Metadata::get_array(std::string_view key) const {
  return std::get<Array>(typed(*this, key, ValueType::ARRAY).v);
}

uint32_t Metadata::get_u32_or(std::string_view key, uint32_t fallback) const {
  return has(key) ? get_u32(key) : fallback;
}
float Metadata::get_f32_or(std::string_view key, float fallback) const { return has(key) ? get_f32(key) : fallback; }
bool Metadata::get_bool_or(std::string_view key, bool fallback) const { return has(key) ? get_bool(key) : fallback; }
std::optional<std::string> Metadata::get_str_opt(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_str(key);
}

std::vector<uint32_t> Metadata::get_u32_per_layer(std::string_view key, uint32_t n) const {
  const Value* v = find(key);
  if (v && v->type == ValueType::UINT32) return std::vector<uint32_t>(n, std::get<uint32_t>(v->v));
  if (!v || v->type != ValueType::ARRAY)
    fail("%skey '%s' %s, expected UINT32 or an INT32/UINT32 array of %u elements", prefix(context).c_str(),
         printable(key).c_str(), v ? strprintf("has wrong type %s", value_type_name(v->type)).c_str() : "not found", n);
  const Array& a = std::get<Array>(v->v);
  if (a.elem != ValueType::UINT32 && a.elem != ValueType::INT32)
    fail("%skey '%s' is an array of %s, expected INT32 or UINT32 elements", prefix(context).c_str(),
         printable(key).c_str(), value_type_name(a.elem));
  if (a.size() != n)
    fail("%skey '%s' has %zu elements, expected %u (one per layer)", prefix(context).c_str(), printable(key).c_str(),
         a.size(), n);
  if (a.elem == ValueType::UINT32) return std::get<std::vector<uint32_t>>(a.data);
  std::vector<uint32_t> out(n);
  const auto& in = std::get<std::vector<int32_t>>(a.data);
  for (uint32_t i = 0; i < n; ++i) {
    if (in[i] < 0)
      fail("%skey '%s' element %u is negative (%d)", prefix(context).c_str(), printable(key).c_str(), i, in[i]);
    out[i] = static_cast<uint32_t>(in[i]);
  }
  return out;
}

// ---- Model and split sets ----

std::string split_path(const std::string& prefix, int no, int count) {
  return prefix + strprintf("-%05d-of-%05d.gguf", no, count);
}

namespace {
bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A split key must have its exact type (UINT16 / INT32); the message names the part.
uint16_t split_u16(const File& f, std::string_view key) {
  const Value* v = f.meta().find(key);
  if (!v) fail("%s: split key '%s' is missing", f.path().c_str(), std::string(key).c_str());
  if (v->type != ValueType::UINT16)
    fail("%s: split key '%s' has wrong type %s, expected UINT16", f.path().c_str(), std::string(key).c_str(),
         value_type_name(v->type));
  return std::get<uint16_t>(v->v);
}
}  // namespace

Model Model::open(const std::string& path) {
  Model m;
  m.files_.push_back(File::open(path));
  const File& first = *m.files_.front();
  uint16_t count = first.meta().has(kSplitCount) ? split_u16(first, kSplitCount) : 0;
  if (count > 1) {
    if (uint16_t no = split_u16(first, kSplitNo); no != 0)
      fail("%s: split.no is %u: a split set must be opened from its first part", path.c_str(), no);
    const Value* total = first.meta().find(kSplitTensorsCount);
    if (!total) fail("%s: split key 'split.tensors.count' is missing", path.c_str());
    if (total->type != ValueType::INT32)
      fail("%s: split key 'split.tensors.count' has wrong type %s, expected INT32", path.c_str(),
           value_type_name(total->type));
    const std::string suffix = strprintf("-%05d-of-%05d.gguf", 1, count);
    if (path.size() < suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
      fail("%s: split.count is %u but the file name does not end in '%s'", path.c_str(), count, suffix.c_str());
    const std::string stem = path.substr(0, path.size() - suffix.size());
    for (int i = 1; i < count; ++i) {
      std::string part = split_path(stem, i + 1, count);
      if (!file_exists(part))
        fail("%s: split part %d of %u is missing: expected file %s", path.c_str(), i + 1, count, part.c_str());
      m.files_.push_back(File::open(part));
      File& f = *m.files_.back();
      if (uint16_t no = split_u16(f, kSplitNo); no != i)
        fail("%s: split.no is %u, expected %d for part %d of %u", part.c_str(), no, i, i + 1, count);
      if (f.meta().has(kSplitCount))
        if (uint16_t c = split_u16(f, kSplitCount); c != count)
          fail("%s: split.count is %u, expected %u as in %s", part.c_str(), c, count, path.c_str());
      for (TensorInfo& t : f.tensors_) t.file_index = static_cast<uint32_t>(i);
    }
  }
  for (const auto& f : m.files_) {
    for (const TensorInfo& t : f->tensors()) {
      auto [it, fresh] = m.by_name_.emplace(t.name, &t);
      if (!fresh)
        fail("%s: tensor '%s' is also in %s", f->path().c_str(), printable(t.name).c_str(),
             m.files_[it->second->file_index]->path().c_str());
      m.order_.push_back(&t);
    }
  }
  if (count > 1) {
    int32_t want = first.meta().get_i32(kSplitTensorsCount);
    if (want < 0 || m.order_.size() != static_cast<size_t>(want))
      fail("%s: split.tensors.count is %d but the %u parts hold %zu tensors", path.c_str(), want, count,
           m.order_.size());
  }
  return m;
}

const TensorInfo* Model::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& Model::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("%s: tensor '%s' not found", files_.front()->path().c_str(), printable(name).c_str());
  return *t;
}

}  // namespace k3::gguf
