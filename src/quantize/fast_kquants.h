// Fast K-quant quantization for the quantizer: the same bytes as ref::quantize_rows (and so as
// ggml_quantize_chunk), with the scale searches of Q2_K, Q4_K, Q5_K and Q6_K run lane-parallel on
// AVX2 / AVX-512 (fast_kquants_impl.h). Other types, and CPUs or K3_ISA settings without AVX2,
// use the reference quantizers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/types.h"

namespace k3::quant {

// ggml_quantize_chunk semantics over whole rows: nrows rows of n_per_row floats, imatrix
// (n_per_row weights) may be null. Returns bytes written; throws k3::Error for a type that
// cannot be written or a row length that is not a multiple of the block size.
size_t quantize_rows(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix);

// Whether quantize_rows takes the SIMD path for t with the active ISA.
bool has_fast_path(GgmlType t);

}  // namespace k3::quant
