// GGUF v3 container (gguf-contract.md §1, §2, §7): a validating, memory-mapped reader with
// strict typed key access, split-set loading, and value types shared with the writer.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/mmap.h"
#include "tensor/types.h"

namespace k3::gguf {

enum class ValueType : int32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

// An array holds one element type; strings are owned.
struct Array {
  ValueType elem = ValueType::UINT8;
  std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>, std::vector<int16_t>,
               std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>, std::vector<bool>,
               std::vector<std::string>, std::vector<uint64_t>, std::vector<int64_t>, std::vector<double>>
      data;
  size_t size() const;
};

struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, Array, uint64_t,
               int64_t, double>
      v;

  static Value u8(uint8_t x), i8(int8_t x), u16(uint16_t x), i16(int16_t x), u32(uint32_t x), i32(int32_t x),
      f32(float x), boolean(bool x), str(std::string x), u64(uint64_t x), i64(int64_t x), f64(double x);
  static Value array(Array a);
  std::string to_string(size_t max_elems = 8) const;  // for `k3 info`
};

struct KV {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  GgmlType type;
  uint32_t n_dims = 1;
  int64_t ne[4] = {1, 1, 1, 1};
  uint64_t offset = 0;  // relative to the data blob of the file that holds it
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (null for a writer's plan)
  uint32_t file_index = 0;        // split part (0 for a single file)
  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // "[4096, 32000]"
};

// Metadata with strict typed access like llama.cpp's loader: a present key of another type is an
// error naming the key and both types.
class Metadata {
 public:
  const std::vector<KV>& kvs() const { return kvs_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Throw if missing or of another type.
  uint32_t get_u32(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  uint16_t get_u16(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_str(std::string_view key) const;
  const Array& get_array(std::string_view key) const;
  // Missing -> fallback; wrong type -> throw.
  uint32_t get_u32_or(std::string_view key, uint32_t fallback) const;
  float get_f32_or(std::string_view key, float fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::optional<std::string> get_str_opt(std::string_view key) const;
  // "Scalar or per-layer array" keys (gguf-contract.md §2): a UINT32 scalar broadcast to n, or an
  // INT32/UINT32 array of exactly n elements.
  std::vector<uint32_t> get_u32_per_layer(std::string_view key, uint32_t n) const;

  void set(std::string key, Value v);  // replaces an existing key in place, else appends
  void erase(std::string_view key);

  std::string context;  // prefixed to error messages, e.g. the file path

 private:
  std::vector<KV> kvs_;
  std::map<std::string, size_t, std::less<>> index_;
};

// One GGUF file, memory-mapped and fully validated on open (every count, length, offset, shape,
// type, alignment and name is checked against the file; errors name the file and the field).
class File {
 public:
  static std::unique_ptr<File> open(const std::string& path);
  // Parses a private copy of `bytes`; `name` stands in for the path in messages (fuzzing, tests).
  static std::unique_ptr<File> from_memory(const void* bytes, size_t n, const std::string& name);
  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data blob
  const Metadata& meta() const { return meta_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  void copy_to_anonymous() const { map_.copy_to_anonymous(); }  // MappedFile::copy_to_anonymous

 private:
  std::string path_;
  MappedFile map_;
  std::vector<uint8_t> owned_;  // from_memory only
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 3;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  Metadata meta_;
  std::vector<TensorInfo> tensors_;
  friend class Parser;
  friend class Model;  // numbers the parts of a split set
};

// A model: one file or a split set opened from its first part (gguf-contract.md §7), presenting
// one tensor namespace; metadata comes from the first part.
class Model {
 public:
  static Model open(const std::string& path);
  const Metadata& meta() const { return files_.front()->meta(); }
  const std::vector<std::unique_ptr<File>>& files() const { return files_; }
  const std::vector<const TensorInfo*>& tensors() const { return order_; }
  const TensorInfo* find(std::string_view name) const;
  const TensorInfo& get(std::string_view name) const;  // throws naming the tensor
  void copy_to_anonymous() const {  // every file: MappedFile::copy_to_anonymous
    for (const auto& f : files_) f->copy_to_anonymous();
  }

 private:
  std::vector<std::unique_ptr<File>> files_;
  std::vector<const TensorInfo*> order_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
};

// Keys of a split set (gguf-contract.md §7).
inline constexpr std::string_view kSplitNo = "split.no", kSplitCount = "split.count",
                                  kSplitTensorsCount = "split.tensors.count";

// Name of part `no` (1-based) of `count` for a split prefix: "<prefix>-00002-of-00005.gguf".
std::string split_path(const std::string& prefix, int no, int count);

}  // namespace k3::gguf
