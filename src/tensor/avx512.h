// Included first by the AVX-512 translation units (compiled with AVX-512 flags, called only after
// the run-time CPU check). GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_*; GCC
// bug 105593), so those warnings are off for the rest of such a file.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "tensor/blocks.h"

namespace k3 {
namespace {  // each AVX-512 file gets its own copy (kernels_impl.h explains why)

// A field of 16 consecutive blocks `stride` bytes apart: gathered as dwords (the bytes after the
// field still lie inside its block), the field in the low bits.
inline __m512i gather16(const void* p, int stride) {
  const __m512i off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(stride));
  return _mm512_i32gather_epi32(off, p, 1);
}
// The F16 field of 16 blocks as floats.
inline __m512 f16x16(const void* p, int stride) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gather16(p, stride))); }
// e8m0_half of 16 MXFP4 blocks.
inline __m512 e8m0_half_x16(const block_mxfp4* x) {
  const __m512i e = _mm512_and_si512(gather16(&x->e, sizeof(block_mxfp4)), _mm512_set1_epi32(0xFF));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2)), normal, tiny));
}

}  // namespace
}  // namespace k3
