// Scalar reference quantizers and dequantizers, one per type, written from quant-formats.md and
// byte-identical to ggml's. They are the oracle for the SIMD kernels and what files are written with.
#pragma once
#include <cstddef>
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
// Whether ggml_quantize_chunk insists on an importance matrix for the type
// (ggml_quantize_requires_imatrix): IQ2_XXS, IQ2_XS, IQ1_S.
bool requires_imatrix(GgmlType t);

// Per-type dequantizers: n elements, a multiple of the block size (not checked here).
void dequantize_row_f16(const uint16_t* x, float* y, int64_t n);
void dequantize_row_bf16(const uint16_t* x, float* y, int64_t n);
void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n);
void dequantize_row_q4_1(const block_q4_1* x, float* y, int64_t n);
void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t n);
void dequantize_row_q5_1(const block_q5_1* x, float* y, int64_t n);
void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n);
void dequantize_row_q8_0_x8(const block_q8_0x8* x, float* y, int64_t n);
void dequantize_row_q4_K_lanes(const block_q4_Kl* x, float* y, int64_t n);
void dequantize_row_q8_1(const block_q8_1* x, float* y, int64_t n);
void dequantize_row_q2_K(const block_q2_K* x, float* y, int64_t n);
void dequantize_row_q3_K(const block_q3_K* x, float* y, int64_t n);
void dequantize_row_q4_K(const block_q4_K* x, float* y, int64_t n);
void dequantize_row_q5_K(const block_q5_K* x, float* y, int64_t n);
void dequantize_row_q6_K(const block_q6_K* x, float* y, int64_t n);
void dequantize_row_q8_K(const block_q8_K* x, float* y, int64_t n);
void dequantize_row_mxfp4(const block_mxfp4* x, float* y, int64_t n);
void dequantize_row_mxfp4_lanes(const block_mxfp4x8* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const block_iq4_nl* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const block_iq4_xs* x, float* y, int64_t n);
void dequantize_row_iq2_xxs(const block_iq2_xxs* x, float* y, int64_t n);
void dequantize_row_iq2_xs(const block_iq2_xs* x, float* y, int64_t n);
void dequantize_row_iq2_s(const block_iq2_s* x, float* y, int64_t n);
void dequantize_row_iq1_s(const block_iq1_s* x, float* y, int64_t n);
void dequantize_row_iq1_m(const block_iq1_m* x, float* y, int64_t n);
// The f16 super-block scale of an IQ1_M block (the top nibbles of its four scale words).
uint16_t iq1_m_scale(const block_iq1_m& b);
void dequantize_row_q1_0(const block_q1_0* x, float* y, int64_t n);
void dequantize_row_q2_0(const block_q2_0* x, float* y, int64_t n);
void dequantize_row_tq1_0(const block_tq1_0* x, float* y, int64_t n);
void dequantize_row_tq2_0(const block_tq2_0* x, float* y, int64_t n);
void dequantize_row_nvfp4(const block_nvfp4* x, float* y, int64_t n);
void dequantize_row_iq3_xxs(const block_iq3_xxs* x, float* y, int64_t n);
void dequantize_row_iq3_s(const block_iq3_s* x, float* y, int64_t n);

// Per-type quantizers of ONE row of n elements (n a multiple of the block size), as
// ggml_quantize_chunk writes it. qw: the row's importance weights (n floats) or null; types
// without a weighted path (F16, BF16, Q8_0, MXFP4, Q1_0, Q2_0, TQ1_0, TQ2_0, NVFP4) take none.
void quantize_row_f16(const float* x, uint16_t* y, int64_t n);
void quantize_row_bf16(const float* x, uint16_t* y, int64_t n);
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n, const float* qw);
void quantize_row_q4_1(const float* x, block_q4_1* y, int64_t n, const float* qw);
void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n, const float* qw);
void quantize_row_q5_1(const float* x, block_q5_1* y, int64_t n, const float* qw);
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
void quantize_row_q2_K(const float* x, block_q2_K* y, int64_t n, const float* qw);
void quantize_row_q3_K(const float* x, block_q3_K* y, int64_t n, const float* qw);
void quantize_row_q4_K(const float* x, block_q4_K* y, int64_t n, const float* qw);
void quantize_row_q5_K(const float* x, block_q5_K* y, int64_t n, const float* qw);
void quantize_row_q6_K(const float* x, block_q6_K* y, int64_t n, const float* qw);
void quantize_row_mxfp4(const float* x, block_mxfp4* y, int64_t n);
void quantize_row_iq4_nl(const float* x, block_iq4_nl* y, int64_t n, const float* qw);
void quantize_row_iq4_xs(const float* x, block_iq4_xs* y, int64_t n, const float* qw);
// The lattice types; IQ2_XXS, IQ2_XS and IQ1_S throw k3::Error without qw.
void quantize_row_iq2_xxs(const float* x, block_iq2_xxs* y, int64_t n, const float* qw);
void quantize_row_iq2_xs(const float* x, block_iq2_xs* y, int64_t n, const float* qw);
void quantize_row_iq2_s(const float* x, block_iq2_s* y, int64_t n, const float* qw);
void quantize_row_iq1_s(const float* x, block_iq1_s* y, int64_t n, const float* qw);
void quantize_row_iq1_m(const float* x, block_iq1_m* y, int64_t n, const float* qw);
void quantize_row_q1_0(const float* x, block_q1_0* y, int64_t n);
void quantize_row_q2_0(const float* x, block_q2_0* y, int64_t n);
void quantize_row_tq1_0(const float* x, block_tq1_0* y, int64_t n);
void quantize_row_tq2_0(const float* x, block_tq2_0* y, int64_t n);
void quantize_row_nvfp4(const float* x, block_nvfp4* y, int64_t n);
void quantize_row_iq3_xxs(const float* x, block_iq3_xxs* y, int64_t n, const float* qw);
void quantize_row_iq3_s(const float* x, block_iq3_s* y, int64_t n, const float* qw);

// Activation types, ggml's reference rounding (roundf / nearest_int), not the SIMD one (§4, §10).
// Q8_K leaves bsums of an all-zero block untouched, as ggml does.
void quantize_row_q8_1(const float* x, block_q8_1* y, int64_t n);
void quantize_row_q8_K(const float* x, block_q8_K* y, int64_t n);

}  // namespace k3::ref
