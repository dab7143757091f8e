// SHA-256 (OpenSSL) for tensor bytes and whole files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace k3::convert {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  std::string hex();  // finalizes; the object is reset for reuse

 private:
  void* ctx_;
};

std::string sha256_hex(const void* data, size_t n);

}  // namespace k3::convert
