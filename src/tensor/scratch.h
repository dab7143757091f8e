// Per-thread scratch buffers of the hot paths (std::vectors owned by a thread_local). Sizing one
// keeps its capacity, so a call that needs no more than an earlier one allocates nothing: steady
// decoding makes no heap allocation (tests/model/test_no_alloc.cpp). A buffer over 1 MiB and more
// than four times what this call needs, left by a long prompt, is given back first, and
// scratch_trim() returns it to the system, so generation does not keep prompt-sized scratch
// resident.
#pragma once
#include <cstddef>
#include <vector>

namespace k3 {

namespace detail {
inline thread_local bool scratch_released = false;
}

template <class T>
void release_if_oversized(std::vector<T>& v, size_t n) {
  if (v.capacity() * sizeof(T) > (size_t{1} << 20) && v.capacity() / 4 > n) {
    std::vector<T>().swap(v);
    detail::scratch_released = true;
  }
}

// If this thread gave scratch back since the last call, hands the allocator's free memory to the
// system (freed buffers otherwise stay in malloc's arenas). Once per forward pass.
void scratch_trim();

// Asks for 2 MB pages over the whole 2 MB pages inside [p, p + bytes) (transparent huge pages in
// "madvise" mode otherwise fault a fresh buffer in 4 KB at a time).
void advise_huge_pages(void* p, size_t bytes);

// Room for n elements, its contents dropped where it grows: a buffer regrown after generation gave
// it back is advised into 2 MB pages before its first touch (the first prompt after a generation
// ran 13-22 % slower faulting it in 4 KB pages; docs/performance.md, "Scratch in 2 MB pages").
template <class T>
void scratch_room(std::vector<T>& v, size_t n) {
  if (n <= v.capacity()) return;
  std::vector<T>().swap(v);
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
}

// n value-initialised elements.
template <class T>
void scratch_zeros(std::vector<T>& v, size_t n) {
  release_if_oversized(v, n);
  scratch_room(v, n);
  v.assign(n, T{});
}

// n elements, contents unspecified (the caller writes them all).
template <class T>
void scratch_size(std::vector<T>& v, size_t n) {
  release_if_oversized(v, n);
  scratch_room(v, n);
  v.resize(n);
}

}  // namespace k3
