// Named intermediates (style habit 8): every block reports its outputs by name and layer, like
// llama.cpp's cb(cur, "name", il), so a parity failure can be traced to the first op that
// diverges. `k3 logits --dump DIR` writes them with DumpTrace.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace k3::model {

class Trace {
 public:
  virtual ~Trace() = default;
  // data: T rows of n floats, one per token of the current batch (il = -1 for non-layer values).
  virtual void record(const char* name, int il, const float* data, int64_t T, int64_t n) = 0;
};

// Appends each (name, layer) to DIR/<name>.<il>.f32 (raw little-endian float32, rows in token
// order across calls) and writes DIR/index.json ({"tensors":[{"name","layer","n","rows","file"}]})
// when destroyed.
class DumpTrace : public Trace {
 public:
  explicit DumpTrace(std::string dir);
  ~DumpTrace() override;
  void record(const char* name, int il, const float* data, int64_t T, int64_t n) override;

 private:
  struct Entry {
    std::string file;
    int64_t n = 0, rows = 0;
  };
  std::string dir_;
  std::map<std::pair<std::string, int>, Entry> entries_;
};

}  // namespace k3::model
