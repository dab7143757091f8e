#include "quantize/fast_kquants.h"

#include "common/error.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"

namespace k3::quant {
namespace avx512 {
bool quantize_rows(uint32_t type, const float* src, void* dst, int64_t nrows, int64_t n, const float* qw);
}
namespace avx2 {
bool quantize_rows(uint32_t type, const float* src, void* dst, int64_t nrows, int64_t n, const float* qw);
}

static bool simd_type(GgmlType t) {
  return t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}

bool has_fast_path(GgmlType t) { return simd_type(t) && active_isa() != Isa::Scalar; }

size_t quantize_rows(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix) {
  if (!simd_type(t) || n_per_row <= 0 || n_per_row % 256 != 0)
    return ref::quantize_rows(t, src, dst, nrows, n_per_row, imatrix);
  const uint32_t id = static_cast<uint32_t>(t);
  bool done = false;
  switch (active_isa()) {
    case Isa::Avx512: done = avx512::quantize_rows(id, src, dst, nrows, n_per_row, imatrix); break;
    case Isa::Avx2:
    case Isa::AvxVnni: done = avx2::quantize_rows(id, src, dst, nrows, n_per_row, imatrix); break;
    default: break;
  }
  if (!done) return ref::quantize_rows(t, src, dst, nrows, n_per_row, imatrix);
  return row_size(t, n_per_row) * static_cast<size_t>(nrows);
}

}  // namespace k3::quant
