#include "tensor/scratch.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdint>

namespace k3 {

void scratch_trim() {
  if (!detail::scratch_released) return;
  detail::scratch_released = false;
  malloc_trim(0);
}

void advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);  // advice: failure is harmless
}

}  // namespace k3
