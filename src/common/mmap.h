// Read-only memory map of a whole file. Move-only; unmaps on destruction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace k3 {

// Faults the pages of [p, p + n) in (read-only file mapping) so that the first reads do not each
// pay a page fault: MADV_POPULATE_READ where the kernel has it (as MAP_POPULATE does at map time),
// else MADV_WILLNEED read-ahead. Skipped when the range exceeds half of the memory available to the
// process (common/sysmem.h, cgroup limit included): it would only evict itself. Advisory: failures
// are ignored.
void populate_pages(const void* p, size_t n);

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws k3::Error naming the path
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Replaces the mapping by anonymous memory holding the same bytes at the same address (so
  // pointers into it stay valid), in 2 MB pages where the kernel gives them (MADV_HUGEPAGE), for
  // hosts where the page cache's small pages slow the weight streams (docs/benchmarks.md has what
  // it changed where measured). The file's page cache is left as clean, reclaimable cache.
  // Logically const: the bytes do not change. Throws k3::Error when memory runs out.
  void copy_to_anonymous() const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Anonymous memory for weights that k3 rewrites at load (tensor/repack.h): 2 MB aligned, in 2 MB
// pages where the kernel gives them (MADV_HUGEPAGE), as copy_to_anonymous gives them. Move-only;
// unmaps on destruction. Throws k3::Error naming `what` when memory runs out.
class AnonymousRegion {
 public:
  AnonymousRegion(size_t n, const std::string& what);
  ~AnonymousRegion();
  AnonymousRegion(const AnonymousRegion&) = delete;
  AnonymousRegion& operator=(const AnonymousRegion&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  void seal() const;  // read-only from now on

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0, mapped_ = 0;
};

}  // namespace k3
