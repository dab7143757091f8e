// Streaming safetensors writer: the header is fixed from the tensor specs, then the data is
// appended in spec order. Written to "<path>.tmp" and renamed by finish().
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "convert/safetensors.h"

namespace k3::st {

struct Spec {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;
};

class Writer {
 public:
  Writer(std::string path, std::vector<Spec> specs);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  void write(const void* data, size_t n);  // next bytes in spec order
  void finish();

 private:
  std::string path_, tmp_;
  FILE* f_ = nullptr;
  uint64_t expect_ = 0, written_ = 0;
  bool done_ = false;
};

// The header JSON for specs laid out back to back (also used by tests to build bad files).
std::string header_json(const std::vector<Spec>& specs);

}  // namespace k3::st
