// Scalar reference quantizers and dequantizers, one per type, written from quant-formats.md and
// byte-identical to ggml's. They are the oracle for the SIMD kernels and what files are written with.
#pragma once
#include <cstdint>

#include "tensor/blocks.h"
#include "tensor/types.h"

namespace k3::ref {

// Dequantize n elements (n a multiple of the type's block size) of a row of type t.
void dequantize_row(GgmlType t, const void* x, float* y, int64_t n);

// ggml_quantize_chunk semantics: nrows rows of n_per_row floats; imatrix may be null.
// Returns bytes written. Throws k3::Error for a type it cannot produce.
size_t quantize_rows(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* imatrix);
bool can_quantize(GgmlType t);

}  // namespace k3::ref
