#include "tensor/scratch.h"

#include <malloc.h>

namespace k3 {

void scratch_trim() {
  if (!detail::scratch_released) return;
  detail::scratch_released = false;
  malloc_trim(0);
}

}  // namespace k3
