// The validating GGUF reader (gguf-contract.md §1). Every length, count and offset is checked
// against the bytes that remain before anything is allocated, so a hostile header can cost at most
// a small multiple of the file size in memory.
#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "common/error.h"
#include "gguf/gguf.h"
#include "gguf/internal.h"

static_assert(std::endian::native == std::endian::little, "GGUF is read by memcpy of little-endian fields");

namespace k3::gguf {

using detail::kMagic;
using detail::kMaxName;
using detail::printable;

namespace {
// Smallest encodings: a KV is a non-empty key (8 + 1), a type (4) and one value byte; a tensor
// info is a name (8), n_dims (4), one ne (8), a type (4) and an offset (8).
constexpr uint64_t kMinKV = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfo = 8 + 4 + 8 + 4 + 8;

size_t value_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    case ValueType::STRING:
      return 8;  // the length prefix, at least
    case ValueType::ARRAY:
      return 4 + 8;
  }
  return 1;
}
}  // namespace

class Parser {
 public:
  explicit Parser(File& f) : f_(f), p_(f.base_), size_(f.size_) {}

  void run() {
    header();
    // Counts are not trusted: KVs and infos are read one by one until the bytes run out. A count
    // that cannot fit in the bytes left is named in front of whatever error that leads to.
    if (static_cast<uint64_t>(n_kv_) > (size_ - pos_) / kMinKV)
      suspect_ = strprintf("KV count %" PRId64 " cannot fit in the %zu bytes left", n_kv_, size_ - pos_);
    for (int64_t i = 0; i < n_kv_; ++i) kv(i);
    alignment();
    suspect_.clear();
    const uint64_t fit = (size_ - pos_) / kMinTensorInfo;
    if (static_cast<uint64_t>(n_tensors_) > fit)
      suspect_ = strprintf("tensor count %" PRId64 " cannot fit in the %zu bytes left", n_tensors_, size_ - pos_);
    f_.tensors_.reserve(std::min<uint64_t>(n_tensors_, fit));
    uint64_t expected = 0;
    for (int64_t i = 0; i < n_tensors_; ++i) expected = tensor_info(i, expected);
    suspect_.clear();
    data();
  }

 private:
  [[noreturn]] __attribute__((format(printf, 2, 3))) void error(const char* fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    std::string msg(std::max(0, std::vsnprintf(nullptr, 0, fmt, ap)), '\0');
    std::vsnprintf(msg.data(), msg.size() + 1, fmt, ap2);
    va_end(ap2);
    va_end(ap);
    if (!suspect_.empty()) msg = suspect_ + ": " + msg;
    fail("%s: %s", f_.path_.c_str(), msg.c_str());
  }

  void need(uint64_t n) {
    if (n > size_ - pos_)
      error("truncated in %s at offset %zu: needs %" PRIu64 " bytes, %zu left", where_.c_str(), pos_, n, size_ - pos_);
  }

  template <class T>
  T read() {
    need(sizeof(T));
    T x;
    std::memcpy(&x, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return x;
  }

  std::string read_string() {
    uint64_t n = read<uint64_t>();
    if (n > size_ - pos_)
      error("truncated in %s at offset %zu: string length %" PRIu64 " exceeds the %zu bytes left", where_.c_str(),
            pos_ - 8, n, size_ - pos_);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }

  void header() {
    where_ = "header";
    if (size_ < 4) error("file is too small to be GGUF (%zu bytes)", size_);
    uint32_t magic = read<uint32_t>();
    if (magic != kMagic) error("bad magic 0x%08x, not a GGUF file", magic);
    uint32_t version = read<uint32_t>();
    if (version == 0 || version == 1) error("GGUF version %u is not supported (need 2 or 3)", version);
    if ((version & 0xffff) == 0)
      error("GGUF version 0x%08x looks byte-swapped: big-endian files are not supported", version);
    if (version > 3) error("GGUF version %u is newer than the supported version 3", version);
    f_.version_ = version;
    n_tensors_ = read<int64_t>();
    n_kv_ = read<int64_t>();
    if (n_tensors_ < 0) error("tensor count is negative (%" PRId64 ")", n_tensors_);
    if (n_kv_ < 0) error("KV count is negative (%" PRId64 ")", n_kv_);
  }

  ValueType value_type(int32_t id, const char* what) {
    if (id < 0 || id > static_cast<int32_t>(ValueType::FLOAT64))
      error("%s has unknown %s %d", where_.c_str(), what, id);
    return static_cast<ValueType>(id);
  }

  template <class T>
  std::vector<T> read_vector(uint64_t n) {
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), p_ + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }

  bool read_bool() {
    uint8_t b = read<uint8_t>();
    if (b > 1) error("%s has BOOL byte %u, expected 0 or 1", where_.c_str(), b);
    return b;
  }

  Array read_array() {
    Array a;
    a.elem = value_type(read<int32_t>(), "array element type");
    if (a.elem == ValueType::ARRAY) error("%s is an array of arrays, which GGUF readers do not accept", where_.c_str());
    uint64_t n = read<uint64_t>();
    uint64_t left = size_ - pos_;
    if (n > left / value_size(a.elem))
      error("truncated in %s: array of %" PRIu64 " %s elements exceeds the %" PRIu64 " bytes left", where_.c_str(), n,
            value_type_name(a.elem), left);
    switch (a.elem) {
      case ValueType::UINT8:
        a.data = read_vector<uint8_t>(n);
        break;
      case ValueType::INT8:
        a.data = read_vector<int8_t>(n);
        break;
      case ValueType::UINT16:
        a.data = read_vector<uint16_t>(n);
        break;
      case ValueType::INT16:
        a.data = read_vector<int16_t>(n);
        break;
      case ValueType::UINT32:
        a.data = read_vector<uint32_t>(n);
        break;
      case ValueType::INT32:
        a.data = read_vector<int32_t>(n);
        break;
      case ValueType::FLOAT32:
        a.data = read_vector<float>(n);
        break;
      case ValueType::UINT64:
        a.data = read_vector<uint64_t>(n);
        break;
      case ValueType::INT64:
        a.data = read_vector<int64_t>(n);
        break;
      case ValueType::FLOAT64:
        a.data = read_vector<double>(n);
        break;
      case ValueType::BOOL: {
        std::vector<bool> v(n);
        for (uint64_t i = 0; i < n; ++i) v[i] = read_bool();
        a.data = std::move(v);
        break;
      }
      case ValueType::STRING: {
        std::vector<std::string> v(n);
        for (uint64_t i = 0; i < n; ++i) v[i] = read_string();
        a.data = std::move(v);
        break;
      }
      case ValueType::ARRAY:
        break;
    }
    return a;
  }

  Value read_value(ValueType t) {
    switch (t) {
      case ValueType::UINT8:
        return Value::u8(read<uint8_t>());
      case ValueType::INT8:
        return Value::i8(read<int8_t>());
      case ValueType::UINT16:
        return Value::u16(read<uint16_t>());
      case ValueType::INT16:
        return Value::i16(read<int16_t>());
      case ValueType::UINT32:
        return Value::u32(read<uint32_t>());
      case ValueType::INT32:
        return Value::i32(read<int32_t>());
      case ValueType::FLOAT32:
        return Value::f32(read<float>());
      case ValueType::BOOL:
        return Value::boolean(read_bool());
      case ValueType::STRING:
        return Value::str(read_string());
      case ValueType::ARRAY:
        return Value::array(read_array());
      case ValueType::UINT64:
        return Value::u64(read<uint64_t>());
      case ValueType::INT64:
        return Value::i64(read<int64_t>());
      case ValueType::FLOAT64:
        return Value::f64(read<double>());
    }
    K3_ASSERT(false);
    __builtin_unreachable();
  }

  void kv(int64_t i) {
    where_ = strprintf("key of KV %" PRId64 " of %" PRId64, i, n_kv_);
    std::string key = read_string();
    if (key.empty()) error("KV %" PRId64 " of %" PRId64 " has an empty key", i, n_kv_);
    if (f_.meta_.has(key)) error("duplicate key '%s' (KV %" PRId64 ")", printable(key).c_str(), i);
    where_ = strprintf("value of KV %" PRId64 " of %" PRId64 " '%s'", i, n_kv_, printable(key).c_str());
    ValueType t = value_type(read<int32_t>(), "value type");
    f_.meta_.set(std::move(key), read_value(t));
  }

  void alignment() {
    const Value* v = f_.meta_.find("general.alignment");
    if (!v) return;
    if (v->type != ValueType::UINT32)
      error("key 'general.alignment' has wrong type %s, expected UINT32", value_type_name(v->type));
    uint32_t a = std::get<uint32_t>(v->v);
    if (!detail::is_pow2(a)) error("general.alignment is %u, must be a non-zero power of two", a);
    f_.alignment_ = a;
  }

  // Reads tensor info i, whose data must start at `expected` (the packed layout); returns where
  // the next tensor's data must start.
  uint64_t tensor_info(int64_t i, uint64_t expected) {
    where_ = strprintf("name of tensor info %" PRId64 " of %" PRId64, i, n_tensors_);
    TensorInfo t;
    t.name = read_string();
    const std::string name = printable(t.name);
    if (t.name.size() > kMaxName)
      error("tensor %" PRId64 " name '%s' is %zu bytes, the limit is %zu", i, name.c_str(), t.name.size(), kMaxName);
    if (!names_.insert(t.name).second) error("duplicate tensor name '%s' (tensor %" PRId64 ")", name.c_str(), i);
    where_ = strprintf("tensor info %" PRId64 " of %" PRId64 " '%s'", i, n_tensors_, name.c_str());
    t.n_dims = read<uint32_t>();
    if (t.n_dims < 1 || t.n_dims > 4) error("tensor '%s' has n_dims %u, expected 1..4", name.c_str(), t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      t.ne[d] = read<int64_t>();
      if (t.ne[d] < 0) error("tensor '%s' has negative ne[%u] = %" PRId64, name.c_str(), d, t.ne[d]);
    }
    uint32_t type_id = read<uint32_t>();
    const TypeInfo* ti = type_info(type_id);
    if (!ti) error("tensor '%s' has unknown type id %d", name.c_str(), static_cast<int32_t>(type_id));
    t.type = ti->type;
    t.offset = read<uint64_t>();

    if (t.ne[0] % ti->block != 0)
      error("tensor '%s' (%s) has ne[0] = %" PRId64 ", not a multiple of the block size %" PRId64, name.c_str(),
            ti->name, t.ne[0], ti->block);
    int64_t elems = 1;
    for (int64_t n : t.ne)
      if (__builtin_mul_overflow(elems, n, &elems)) error("tensor '%s' element count overflows", name.c_str());
    uint64_t bytes = static_cast<uint64_t>(t.ne[0] / ti->block);
    bool over = __builtin_mul_overflow(bytes, static_cast<uint64_t>(ti->block_bytes), &bytes);
    for (int d = 1; d < 4; ++d) over |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(t.ne[d]), &bytes);
    if (over) error("tensor '%s' byte size overflows", name.c_str());
    t.nbytes = bytes;

    if (t.offset != expected)
      error("tensor '%s' has offset %" PRIu64 ", expected %" PRIu64, name.c_str(), t.offset, expected);
    // expected <= size_ + alignment here, so the sums below cannot overflow.
    if (t.nbytes > size_ || expected + t.nbytes > size_)
      error("tensor '%s' data (offset %" PRIu64 ", %" PRIu64 " bytes) lies beyond the end of the file (%zu bytes)",
            name.c_str(), t.offset, t.nbytes, size_);
    f_.tensors_.push_back(std::move(t));
    return expected + detail::pad_to(f_.tensors_.back().nbytes, f_.alignment_);
  }

  void data() {
    f_.data_offset_ = detail::pad_to(pos_, f_.alignment_);
    if (f_.tensors_.empty()) return;  // a file without tensors may end before its padding
    if (f_.data_offset_ > size_)
      error("truncated in padding: the data blob starts at offset %" PRIu64 ", beyond the end of the file (%zu bytes)",
            f_.data_offset_, size_);
    for (TensorInfo& t : f_.tensors_) {
      if (t.offset + t.nbytes > size_ - f_.data_offset_)
        error("tensor '%s' data at file offset %" PRIu64 " (%" PRIu64
              " bytes) lies beyond the end of the file (%zu bytes)",
              printable(t.name).c_str(), f_.data_offset_ + t.offset, t.nbytes, size_);
      t.data = p_ + f_.data_offset_ + t.offset;
    }
  }

  File& f_;
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  int64_t n_tensors_ = 0, n_kv_ = 0;
  std::string where_;    // the section being read, for messages
  std::string suspect_;  // an implausible count, blamed first
  std::unordered_set<std::string> names_;
};

std::unique_ptr<File> File::open(const std::string& path) {
  auto f = std::unique_ptr<File>(new File());
  f->path_ = path;
  f->map_ = MappedFile(path);
  f->base_ = f->map_.data();
  f->size_ = f->map_.size();
  f->meta_.context = path;
  Parser(*f).run();
  return f;
}

std::unique_ptr<File> File::from_memory(const void* bytes, size_t n, const std::string& name) {
  auto f = std::unique_ptr<File>(new File());
  f->path_ = name;
  f->owned_.assign(static_cast<const uint8_t*>(bytes), static_cast<const uint8_t*>(bytes) + n);
  f->base_ = f->owned_.data();
  f->size_ = n;
  f->meta_.context = name;
  Parser(*f).run();
  return f;
}

}  // namespace k3::gguf
