#include "common/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "common/sysmem.h"

namespace k3 {

void populate_pages(const void* p, size_t n) {
  if (!p || n == 0) return;
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || n > available_memory() / 2) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~static_cast<uintptr_t>(page - 1);
  void* start = reinterpret_cast<void*>(a);
  const size_t len = reinterpret_cast<uintptr_t>(p) + n - a;
#ifdef MADV_POPULATE_READ
  if (madvise(start, len, MADV_POPULATE_READ) == 0) return;
#else
  // Linux >= 5.14 value; older kernels answer EINVAL and the read-ahead below runs instead.
  if (madvise(start, len, 22) == 0) return;
#endif
  madvise(start, len, MADV_WILLNEED);
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("%s: cannot stat: %s", path.c_str(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("%s: not a regular file", path.c_str());
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("%s: cannot mmap: %s", path.c_str(), std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

namespace {

constexpr uintptr_t kHuge = uintptr_t{2} << 20;

// len bytes (a multiple of the page size) of anonymous read-write memory whose start lies `offset`
// bytes past a 2 MB boundary, advised MADV_HUGEPAGE: 2 MB pages where the kernel gives them, whole
// ones wherever the region's 2 MB pages line up with those of the address it stands for.
uint8_t* map_huge_aligned(size_t len, uintptr_t offset, const std::string& what) {
  void* a = mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) fail("%s: cannot allocate %zu bytes: %s", what.c_str(), len, std::strerror(errno));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(a), b = lo + (offset % kHuge + kHuge - lo % kHuge) % kHuge;
  if (b > lo) munmap(a, b - lo);
  if (lo + len + kHuge > b + len) munmap(reinterpret_cast<void*>(b + len), lo + len + kHuge - (b + len));
  madvise(reinterpret_cast<void*>(b), len, MADV_HUGEPAGE);
  return reinterpret_cast<uint8_t*>(b);
}

}  // namespace

void MappedFile::copy_to_anonymous() const {
  if (!data_) return;
  const long page = sysconf(_SC_PAGESIZE);
  const size_t len = (size_ + page - 1) / page * page;
  // at the mapping's offset within a 2 MB page, so that moving it keeps its huge pages whole
  uint8_t* b = map_huge_aligned(len, reinterpret_cast<uintptr_t>(data_), path_ + ": the weights");
  std::memcpy(b, data_, size_);
  mprotect(b, len, PROT_READ);
  if (mremap(b, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, const_cast<uint8_t*>(data_)) == MAP_FAILED) {
    const int e = errno;
    munmap(b, len);
    fail("%s: cannot move the weights into anonymous memory: %s", path_.c_str(), std::strerror(e));
  }
}

AnonymousRegion::AnonymousRegion(size_t n, const std::string& what) : size_(n) {
  mapped_ = (n + kHuge - 1) / kHuge * kHuge;
  if (mapped_ > 0) data_ = map_huge_aligned(mapped_, 0, what);
}

AnonymousRegion::~AnonymousRegion() {
  if (data_) munmap(data_, mapped_);
}

void AnonymousRegion::seal() const {
  if (data_) mprotect(data_, mapped_, PROT_READ);
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace k3
