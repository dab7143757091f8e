// Digests of tensor bytes: SHA-256 (OpenSSL) for the manifest anyone can check, and XXH3-128 for
// reading back a part just written (the bytes were SHA-256'd once as they were produced; the read
// back only has to show the file holds those bytes, at memory speed).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/seq_file.h"

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

class Xxh3 {
 public:
  Xxh3();
  ~Xxh3();
  Xxh3(const Xxh3&) = delete;
  Xxh3& operator=(const Xxh3&) = delete;
  void update(const void* data, size_t n);
  std::string hex();  // finalizes; the object is reset for reuse

 private:
  void* state_;
};

std::string sha256_hex(const void* data, size_t n);

enum class Digest { Sha256, Xxh3 };

// The digest of `n` bytes at `offset` of a file read through `in` (bounded memory whatever the
// size). `on_bytes` reports progress.
std::string digest_file_range(Digest kind, SeqReader& in, uint64_t offset, uint64_t n,
                              const std::function<void(uint64_t)>& on_bytes = {});

}  // namespace k3::convert
