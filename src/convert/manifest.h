// MANIFEST.json of a converted model: for every output tensor the SHA-256 of its bytes, its ggml
// type and shape, `{"tensors": {name: {"sha256": hex, "type": "bf16", "ne": [..]}}}`, written
// deterministically (sorted names, fixed formatting) and atomically (temporary file + rename).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace k3::convert {

struct ManifestEntry {
  std::string sha256;
  std::string type;          // ggml type name, e.g. "bf16", "f32", "mxfp4"
  std::vector<int64_t> ne;   // ggml order
  bool operator==(const ManifestEntry&) const = default;
};

struct Manifest {
  std::map<std::string, ManifestEntry> tensors;

  static Manifest load(const std::string& path);  // throws naming the file and entry
  void save(const std::string& path) const;       // temp + fsync + rename
  std::string to_json() const;
};

// Checks GGUF files against a manifest. Every tensor of every file is hashed; a tensor whose
// name, type, shape or hash disagrees is reported by name. Manifest tensors absent from the files
// are reported when the files form complete split sets (or standalone files): text tensors when
// text files are given, mmproj tensors ("v.", "mm.") when an mmproj is.
struct VerifyReport {
  size_t files = 0, tensors_checked = 0, tensors_ok = 0;
  uint64_t bytes = 0;
  std::vector<std::string> problems;  // one line each, naming file and tensor
  bool ok() const { return problems.empty(); }
};
VerifyReport verify_files(const Manifest& m, const std::vector<std::string>& files, int jobs,
                          const std::function<void(uint64_t)>& on_bytes = {});

}  // namespace k3::convert
