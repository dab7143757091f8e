// Run-time choice of the tiled matrix-matrix kernels (the tiles live in gemm_<isa>.cpp).
#include "tensor/gemm.h"
#include "tensor/scratch.h"

#include <vector>

namespace k3 {

const GemmKernel* gemm_kernel(GgmlType t, Isa isa) {
  switch (usable_isa(isa)) {
    case Isa::Avx512: return detail::gemm_kernel_avx512(t);
    case Isa::AvxVnni: return detail::gemm_kernel_avxvnni(t);
    case Isa::Avx2: return detail::gemm_kernel_avx2(t);
    default: return nullptr;
  }
}

void gemm_rows(GgmlType t, int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_tok, float* y, int64_t ldy) {
  const Isa isa = active_isa();
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const GemmKernel* g = gemm_kernel(t, isa);
  if (!g) {
    const auto vec_dot = kernels(t, isa).vec_dot;
    for (int64_t k = 0; k < n_tok; ++k)
      for (int64_t r = 0; r < n_rows; ++r) vec_dot(n, y + k * ldy + r, wb + r * w_stride, ab + k * a_stride);
    return;
  }
  const size_t ps = g->packed_size(n);
  if (ps == 0) return g->run(n, w, w_stride, n_rows, a, a_stride, n_tok, y, ldy);
  thread_local std::vector<uint8_t> packed;
  scratch_size(packed, ps * static_cast<size_t>(n_tok));
  for (int64_t k = 0; k < n_tok; ++k) g->pack(ab + k * a_stride, packed.data() + k * ps, n);
  g->run(n, w, w_stride, n_rows, packed.data(), ps, n_tok, y, ldy);
}

}  // namespace k3
