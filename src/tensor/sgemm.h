// Single-threaded float32 matrix product C (+)= A·B with row-major operands, for the products
// whose operands are already float32 (the vision encoder's dequantized weight bands and its
// attention tiles). Register-blocked outer products: a tile of C stays in registers while k runs
// (AVX-512: 8 rows x 32 columns, AVX2: 4 x 16), one broadcast of A and two vector loads of B per
// step. A is packed into tiles [k][mr] and B panels into [k][nr], so both are read sequentially
// (rows a power of two of bytes apart would fall into the same few L1 sets); a caller that
// multiplies one A by many B packs it once (pack_a + run). The scalar reference sums over k in
// order; the SIMD forms agree within float32 rounding (tests/tensor/test_sgemm.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/kernels.h"

namespace k3 {

struct Sgemm {
  int64_t mr, nr;  // rows of A per packed tile, columns of B per packed panel
  // ap: packed_size(m, k) floats; tile t (rows t·mr ..) starts at ap + t·mr·k, laid out [k][mr].
  void (*pack_a)(int64_t m, int64_t k, const float* a, int64_t lda, float* ap);
  // C[i][j] = (accumulate ? C[i][j] : 0) + sum_p A[i][p] * B[p][j], i < m, j < n, p < k, with A
  // packed by pack_a, B k x n (row stride ldb), C m x n (ldc).
  void (*run)(int64_t m, int64_t n, int64_t k, const float* ap, const float* b, int64_t ldb, float* c, int64_t ldc,
              bool accumulate);
  // The register tile: C (mr_used <= mr rows, nc <= nr columns) (+)= one packed A tile · one packed
  // B panel ([k][nr], zero-padded), for callers that lay out B panels themselves.
  void (*tile)(int64_t mr_used, int64_t nc, int64_t k, const float* ap, const float* bp, float* c, int64_t ldc,
               bool accumulate);
  size_t packed_size(int64_t m, int64_t k) const { return static_cast<size_t>((m + mr - 1) / mr * mr * k); }
};

// For the active ISA, or a given one (falls back to the best available below it).
const Sgemm& sgemm_kernel();
const Sgemm& sgemm_kernel(Isa isa);

// pack_a into a per-thread buffer, then run.
void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
           int64_t ldc, bool accumulate);

namespace detail {
extern const Sgemm kSgemmAvx2, kSgemmAvx512;
}  // namespace detail

}  // namespace k3
