// safetensors files (conversion.md §1.2) and the sharded checkpoint index
// (`model.safetensors.index.json`). The reader maps the file and validates the whole header against
// it before anything is read: dtype known, shape × dtype size = byte span (overflow-checked), spans
// inside the data area and not overlapping, names unique. Errors name the file and the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mmap.h"

namespace k3::st {

enum class DType : uint8_t { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2, F8_E8M0 };

// nullptr-safe lookups of the dtype table.
const char* dtype_name(DType t);
size_t dtype_size(DType t);
bool dtype_from_name(std::string_view name, DType* out);
bool dtype_is_float(DType t);  // BF16, F16, F32, F64 (the converter's generic float path)

struct TensorView {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;  // row-major (PyTorch) order
  uint64_t begin = 0, end = 0; // relative to the data area
  const uint8_t* data = nullptr;
  uint64_t nbytes() const { return end - begin; }
  int64_t nelements() const;
  std::string shape_string() const;  // "[3072, 1792]"
};

class File {
 public:
  static std::unique_ptr<File> open(const std::string& path);
  // Parses a private copy of `bytes` (tests, fuzzing); `name` stands in for the path.
  static std::unique_ptr<File> from_memory(const void* bytes, size_t n, const std::string& name);

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // in data-offset order
  const TensorView* find(std::string_view name) const;
  const TensorView& get(std::string_view name) const;  // throws naming file and tensor
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t size() const { return size_; }

  // Drops the mapped pages of [p, p + n) from this process (the page cache keeps them), so
  // streaming a large file keeps the resident set small. Only whole pages inside the range go.
  // Also asks the kernel to read the next stretch of the file ahead of the reader, so a cold
  // shard streams at disk speed instead of one fault-driven read-ahead window at a time.
  void release(const uint8_t* p, uint64_t n) const;

 private:
  void parse();
  std::string path_;
  MappedFile map_;
  std::vector<uint8_t> owned_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  mutable uint64_t ahead_ = 0;  // read-ahead requested up to this offset
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::map<std::string, std::string> metadata_;
};

// The shard map of a checkpoint directory: `model.safetensors.index.json` ("weight_map": name →
// shard file), or a lone `model.safetensors`. Shard file names must be plain names inside `dir`.
struct Index {
  std::string dir;
  std::string index_path;             // empty for a single-file checkpoint
  std::vector<std::string> shards;    // shard file names, sorted
  std::map<std::string, int> shard_of;  // tensor name → index into `shards`

  static Index load(const std::string& dir);
};

// Longest header a reader accepts (the real K3 shards have ~1 MB headers of ~5,000 tensors).
inline constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

}  // namespace k3::st
