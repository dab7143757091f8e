// Streaming GGUF writer and split/merge helpers (gguf-contract.md §1, §7).
#include "gguf/writer.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <set>

#include "common/error.h"
#include "gguf/internal.h"

namespace k3::gguf {

using detail::kMagic;
using detail::kMaxName;
using detail::printable;

namespace {
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;

// Byte size of a planned tensor, with the same rules the reader enforces.
uint64_t spec_bytes(const TensorSpec& t, const std::string& path) {
  const char* name = t.name.c_str();
  if (t.name.size() > kMaxName) fail("%s: tensor name '%s' is longer than %zu bytes", path.c_str(), name, kMaxName);
  if (t.ne.empty() || t.ne.size() > 4)
    fail("%s: tensor '%s' has %zu dims, expected 1..4", path.c_str(), name, t.ne.size());
  const TypeInfo* ti = type_info(static_cast<uint32_t>(t.type));
  if (!ti && find_type(t.type))
    fail("%s: tensor '%s' has type %s, a layout k3 keeps in memory only", path.c_str(), name, type_name(t.type));
  if (!ti) fail("%s: tensor '%s' has unknown type id %u", path.c_str(), name, static_cast<uint32_t>(t.type));
  for (int64_t n : t.ne)
    if (n < 0) fail("%s: tensor '%s' has a negative dimension", path.c_str(), name);
  if (t.ne[0] % ti->block != 0)
    fail("%s: tensor '%s' (%s) has ne[0] = %" PRId64 ", not a multiple of %" PRId64, path.c_str(), name, ti->name,
         t.ne[0], ti->block);
  uint64_t bytes = static_cast<uint64_t>(t.ne[0] / ti->block);
  bool over = __builtin_mul_overflow(bytes, static_cast<uint64_t>(ti->block_bytes), &bytes);
  for (size_t d = 1; d < t.ne.size(); ++d)
    over |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(t.ne[d]), &bytes);
  if (over || bytes > (uint64_t{1} << 62)) fail("%s: tensor '%s' byte size overflows", path.c_str(), name);
  return bytes;
}

// Encodes the header, KVs and tensor infos into memory (they are small next to the data).
class Encoder {
 public:
  std::vector<uint8_t> out;

  template <class T>
  void pod(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void value(const Value& v, const std::string& path, const std::string& key) {
    switch (v.type) {
      case ValueType::UINT8:
        return pod(std::get<uint8_t>(v.v));
      case ValueType::INT8:
        return pod(std::get<int8_t>(v.v));
      case ValueType::UINT16:
        return pod(std::get<uint16_t>(v.v));
      case ValueType::INT16:
        return pod(std::get<int16_t>(v.v));
      case ValueType::UINT32:
        return pod(std::get<uint32_t>(v.v));
      case ValueType::INT32:
        return pod(std::get<int32_t>(v.v));
      case ValueType::FLOAT32:
        return pod(std::get<float>(v.v));
      case ValueType::BOOL:
        return pod<uint8_t>(std::get<bool>(v.v));
      case ValueType::STRING:
        return str(std::get<std::string>(v.v));
      case ValueType::UINT64:
        return pod(std::get<uint64_t>(v.v));
      case ValueType::INT64:
        return pod(std::get<int64_t>(v.v));
      case ValueType::FLOAT64:
        return pod(std::get<double>(v.v));
      case ValueType::ARRAY:
        return array(std::get<Array>(v.v), path, key);
    }
    fail("%s: key '%s' has unknown value type %d", path.c_str(), key.c_str(), static_cast<int>(v.type));
  }

 private:
  void array(const Array& a, const std::string& path, const std::string& key) {
    if (a.elem == ValueType::ARRAY) fail("%s: key '%s' is an array of arrays", path.c_str(), key.c_str());
    pod<int32_t>(static_cast<int32_t>(a.elem));
    pod<uint64_t>(a.size());
    std::visit(
        [&](const auto& vec) {
          using E = typename std::decay_t<decltype(vec)>::value_type;
          for (const auto& x : vec) {
            if constexpr (std::is_same_v<E, std::string>)
              str(x);
            else if constexpr (std::is_same_v<E, bool>)
              pod<uint8_t>(x);
            else
              pod<E>(x);
          }
        },
        a.data);
  }
};
}  // namespace

Writer::Writer(std::string path, Metadata meta, std::vector<TensorSpec> tensors, uint32_t alignment)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), specs_(std::move(tensors)), alignment_(alignment) {
  if (const Value* a = meta.find("general.alignment")) {
    if (a->type != ValueType::UINT32)
      fail("%s: key 'general.alignment' has wrong type %s, expected UINT32", path_.c_str(), value_type_name(a->type));
    uint32_t key = std::get<uint32_t>(a->v);
    if (alignment != kDefaultAlignment && alignment != key)
      fail("%s: alignment %u conflicts with general.alignment = %u", path_.c_str(), alignment, key);
    alignment_ = key;
  } else if (alignment != kDefaultAlignment) {
    meta.set("general.alignment", Value::u32(alignment));
  }
  if (!detail::is_pow2(alignment_)) fail("%s: alignment %u must be a non-zero power of two", path_.c_str(), alignment_);

  Encoder e;
  e.pod(kMagic);
  e.pod(kVersion);
  e.pod<int64_t>(static_cast<int64_t>(specs_.size()));
  e.pod<int64_t>(static_cast<int64_t>(meta.kvs().size()));
  for (const KV& kv : meta.kvs()) {
    if (kv.key.empty()) fail("%s: empty metadata key", path_.c_str());
    e.str(kv.key);
    e.pod<int32_t>(static_cast<int32_t>(kv.value.type));
    e.value(kv.value, path_, kv.key);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorSpec& t : specs_) {
    if (!names.insert(t.name).second) fail("%s: duplicate tensor name '%s'", path_.c_str(), printable(t.name).c_str());
    uint64_t bytes = spec_bytes(t, path_);
    e.str(t.name);
    e.pod<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) e.pod<int64_t>(n);
    e.pod<uint32_t>(static_cast<uint32_t>(t.type));
    e.pod<uint64_t>(offset);
    sizes_.push_back(bytes);
    offset += detail::pad_to(bytes, alignment_);
  }
  e.out.resize(detail::pad_to(e.out.size(), alignment_), 0);

  f_ = std::make_unique<SeqWriter>(tmp_path_);
  try {
    put(e.out.data(), e.out.size());
    advance();
  } catch (...) {  // the destructor will not run
    f_.reset();
    std::remove(tmp_path_.c_str());
    throw;
  }
}

Writer::~Writer() {
  f_.reset();
  if (!finished_) std::remove(tmp_path_.c_str());
}

void Writer::put(const void* data, size_t n) { f_->write(data, n); }

void Writer::advance() {
  static const uint8_t zeros[256] = {};
  while (cur_ < specs_.size() && sizes_[cur_] > 0 && cur_written_ == sizes_[cur_]) {
    for (uint64_t pad = detail::pad_to(sizes_[cur_], alignment_) - sizes_[cur_]; pad > 0;) {
      size_t k = std::min<uint64_t>(pad, sizeof(zeros));
      put(zeros, k);
      pad -= k;
    }
    ++cur_;
    cur_written_ = 0;
  }
}

void Writer::write(const void* data, size_t n) {
  K3_ASSERT(f_ != nullptr);
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    while (cur_ < specs_.size() && sizes_[cur_] == 0) ++cur_;  // empty tensors take no bytes
    if (cur_ == specs_.size()) fail("%s: %zu bytes written past the last tensor", path_.c_str(), n);
    size_t k = std::min<uint64_t>(n, sizes_[cur_] - cur_written_);
    put(p, k);
    p += k;
    n -= k;
    cur_written_ += k;
    advance();
  }
}

void Writer::write_tensor(const std::string& name, const void* data, size_t n) {
  if (cur_ == specs_.size()) fail("%s: tensor '%s' written after the last planned tensor", path_.c_str(), name.c_str());
  const TensorSpec& t = specs_[cur_];
  if (t.name != name) fail("%s: tensor '%s' written where '%s' is next", path_.c_str(), name.c_str(), t.name.c_str());
  if (cur_written_ != 0) fail("%s: tensor '%s' is already partly written", path_.c_str(), name.c_str());
  if (n != sizes_[cur_])
    fail("%s: tensor '%s' has %zu bytes of data, expected %" PRIu64, path_.c_str(), name.c_str(), n, sizes_[cur_]);
  if (n == 0)
    ++cur_;
  else
    write(data, n);
}

void Writer::finish() {
  K3_ASSERT(f_ != nullptr && !finished_);
  while (cur_ < specs_.size() && sizes_[cur_] == 0) ++cur_;
  if (cur_ < specs_.size())
    fail("%s: tensor '%s' has %" PRIu64 " of %" PRIu64 " bytes written", path_.c_str(), specs_[cur_].name.c_str(),
         cur_written_, sizes_[cur_]);
  f_->finish();
  f_.reset();
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail("%s: cannot rename from %s: %s", path_.c_str(), tmp_path_.c_str(), std::strerror(errno));
  finished_ = true;
}

// ---- splitting ----

SplitPlan plan_split(const std::vector<TensorSpec>& tensors, uint64_t max_bytes, uint64_t max_tensors) {
  SplitPlan plan;
  plan.parts.emplace_back();
  uint64_t bytes = 0;
  for (const TensorSpec& t : tensors) {
    uint64_t size = detail::pad_to(spec_bytes(t, "split plan"), kDefaultAlignment);
    const auto& part = plan.parts.back();
    bool full =
        !part.empty() && ((max_tensors && part.size() >= max_tensors) || (max_bytes && bytes + size > max_bytes));
    if (full) {
      plan.parts.emplace_back();
      bytes = 0;
    }
    plan.parts.back().push_back(t);
    bytes += size;
  }
  if (plan.parts.size() > UINT16_MAX)
    fail("split plan: %zu parts, more than a split set can number", plan.parts.size());
  return plan;
}

Metadata split_metadata(const Metadata& full, uint16_t no, uint16_t count, int32_t total_tensors) {
  Metadata m;
  if (no == 0) m = full;
  m.context = full.context;
  m.set(std::string(kSplitNo), Value::u16(no));
  m.set(std::string(kSplitCount), Value::u16(count));
  m.set(std::string(kSplitTensorsCount), Value::i32(total_tensors));
  return m;
}

namespace {
std::vector<TensorSpec> specs_of(const std::vector<const TensorInfo*>& tensors) {
  std::vector<TensorSpec> specs;
  for (const TensorInfo* t : tensors)
    specs.push_back({t->name, t->type, std::vector<int64_t>(t->ne, t->ne + t->n_dims)});
  return specs;
}

Metadata without_split_keys(const Metadata& meta) {
  Metadata m = meta;
  for (std::string_view k : {kSplitNo, kSplitCount, kSplitTensorsCount}) m.erase(k);
  return m;
}

void write_all(Writer& w, const std::vector<const TensorInfo*>& tensors) {
  for (const TensorInfo* t : tensors) w.write_tensor(t->name, t->data, t->nbytes);
  w.finish();
}
}  // namespace

void rewrite(const File& f, const std::string& out_path) {
  std::vector<const TensorInfo*> tensors;
  for (const TensorInfo& t : f.tensors()) tensors.push_back(&t);
  Writer w(out_path, f.meta(), specs_of(tensors), f.alignment());
  write_all(w, tensors);
}

std::vector<std::string> write_split(const Model& m, const std::string& prefix, uint64_t max_bytes,
                                     uint64_t max_tensors) {
  if (m.tensors().size() > INT32_MAX) fail("%s: too many tensors to split", prefix.c_str());
  SplitPlan plan = plan_split(specs_of(m.tensors()), max_bytes, max_tensors);
  const Metadata meta = without_split_keys(m.meta());
  const auto count = static_cast<uint16_t>(plan.parts.size());
  std::vector<std::string> paths;
  for (uint16_t i = 0; i < count; ++i) {
    paths.push_back(split_path(prefix, i + 1, count));
    std::vector<const TensorInfo*> tensors;
    for (const TensorSpec& s : plan.parts[i]) tensors.push_back(&m.get(s.name));
    Writer w(paths.back(), split_metadata(meta, i, count, static_cast<int32_t>(m.tensors().size())),
             std::move(plan.parts[i]));
    write_all(w, tensors);
  }
  return paths;
}

void write_merged(const Model& m, const std::string& out_path) {
  Writer w(out_path, without_split_keys(m.meta()), specs_of(m.tensors()));
  write_all(w, m.tensors());
}

}  // namespace k3::gguf
