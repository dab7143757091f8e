// Run-time choice of the tiled matrix-matrix kernels (the tiles live in gemm_<isa>.cpp).
#include "tensor/gemm.h"

namespace k3 {

const GemmKernel* gemm_kernel(GgmlType t, Isa isa) {
  const Isa best = cpu_best_isa();
  if (isa > best) isa = best;
  if (isa == Isa::Avx512) return detail::gemm_kernel_avx512(t);
  return nullptr;
}

}  // namespace k3
