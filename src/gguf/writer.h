// Streaming GGUF writer: the plan (metadata and tensor infos) is fixed first, then tensor data is
// streamed in plan order, so the file is never held in memory. Output goes to "<path>.tmp" and is
// renamed on finish(); a writer destroyed before finish() removes its temporary file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/seq_file.h"
#include "gguf/gguf.h"

namespace k3::gguf {

struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // 1..4 dims, ggml order
};

// The data alignment is `general.alignment` when `meta` has it; otherwise `alignment`, which is
// then recorded as `general.alignment` unless it is the default 32.
class Writer {
 public:
  Writer(std::string path, Metadata meta, std::vector<TensorSpec> tensors, uint32_t alignment = 32);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Appends bytes of the current tensor; a tensor may be written in several calls. Moving to the
  // next tensor happens automatically once the current one has all its bytes.
  void write(const void* data, size_t n);
  // Writes the whole data of the tensor `name` (must be the next one in plan order).
  void write_tensor(const std::string& name, const void* data, size_t n);
  // Checks every tensor is complete, fsyncs, renames to the final path.
  void finish();
  const std::string& path() const { return path_; }

 private:
  void put(const void* data, size_t n);
  void advance();  // pads and steps past every complete tensor
  std::string path_, tmp_path_;
  std::unique_ptr<SeqWriter> f_;
  std::vector<TensorSpec> specs_;
  std::vector<uint64_t> sizes_;
  uint32_t alignment_;
  size_t cur_ = 0;
  uint64_t cur_written_ = 0;
  bool finished_ = false;
};

// Splitting a plan into a set (gguf-contract.md §7): part 1 carries all metadata, every part
// carries split.no / split.count / split.tensors.count. Limits: max_bytes (0 = none) and
// max_tensors (0 = none) per part; a tensor is never split.
struct SplitPlan {
  std::vector<std::vector<TensorSpec>> parts;
};
SplitPlan plan_split(const std::vector<TensorSpec>& tensors, uint64_t max_bytes, uint64_t max_tensors);
// Metadata for part `no` (0-based) of a set.
Metadata split_metadata(const Metadata& full, uint16_t no, uint16_t count, int32_t total_tensors);

// Writes `f` again with the same KVs (order and types) and the same tensors (order, types, data):
// a file from a conformant writer comes out byte-identical.
void rewrite(const File& f, const std::string& out_path);
// Writes a model (one file or a split set) as the split set `split_path(prefix, i, N)`; returns the
// part paths. The split.* keys of the input are replaced.
std::vector<std::string> write_split(const Model& m, const std::string& prefix, uint64_t max_bytes,
                                     uint64_t max_tensors);
// Writes a model (usually a split set) as one file without split.* keys.
void write_merged(const Model& m, const std::string& out_path);

}  // namespace k3::gguf
