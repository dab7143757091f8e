// Weight layouts that k3 keeps in memory only: rows repacked at load so that the SIMD kernels read
// them with fewer instructions. A repacked row holds the same values in the same bytes per element.
// The products of Q8_0_X8 and MXFP4_LANES give the file type's bits (the same block sums, added in
// the same order); Q4_K_LANES and Q2_K_SB add the same exact integer sums in another order (their
// own scalar references, dot_ref.cpp), within the type matrix's bound of the file type's.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/types.h"

namespace k3 {

// The type a matrix of ne1 rows of type t and ne0 elements becomes, or t where there is no faster
// layout: MXFP4 and Q8_0 rows whose width is a multiple of 256 become MXFP4_LANES and Q8_0_X8
// (blocks.h: every 8 MXFP4 blocks one group whose block sums land in the kernels' lanes without
// horizontal sums; every 8 Q8_0 blocks one group with its 8 scales in one load); Q4_K becomes
// Q4_K_LANES (each super-block's codes laid out by sub-block lanes, its scales and mins ready to
// widen). At the AVX-512 level (active_isa()), Q2_K matrices of a multiple of 8 rows become
// Q2_K_SB, the same bytes summed in the order of llama.cpp's AVX-512 builds, which repack exactly
// those (docs/model.md, "Parity").
GgmlType repacked_type(GgmlType t, int64_t ne0, int64_t ne1);

// Whether repacking rows of type t leaves their bytes as they are (only the type changes).
inline bool repack_keeps_bytes(GgmlType t) { return t == GgmlType::Q2_K; }

// Whether the values of nrows rows of type t (ne0 elements, `stride` bytes apart) fit the repacked
// layout: not for MXFP4 rows with a block exponent of 0 or 1 (scales 2^-128 and
// 2^-127, subnormal as f32; the lanes layout keeps f32 exponent fields). Real weights never have
// them; a tensor that does keeps the file's layout.
bool repackable(GgmlType t, const uint8_t* rows, int64_t nrows, int64_t ne0, size_t stride);

// Rewrites nrows rows of ne0 elements of type t, `stride` bytes apart, in place into the repacked
// layout (nothing where repack_keeps_bytes). The rows must be repackable.
void repack_rows(GgmlType t, uint8_t* rows, int64_t nrows, int64_t ne0, size_t stride);

}  // namespace k3
