// AVX-512 form of sgemm.h: tiles of 8 rows x 32 columns (16 accumulators) over packed operands.
#include "tensor/avx512.h"

#include <vector>

#include "tensor/sgemm.h"

namespace k3 {
namespace {

constexpr int64_t MR = 8, NR = 32;

// C tile (mr rows, nc columns) (+)= ap · bp over k.
void tile(int64_t mr, int64_t nc, int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
  const __mmask16 m0 = nc >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << nc) - 1);
  const __mmask16 m1 = nc >= 32 ? 0xFFFF : nc <= 16 ? 0 : static_cast<__mmask16>((1u << (nc - 16)) - 1);
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m512 b0 = _mm512_loadu_ps(bp + p * NR), b1 = _mm512_loadu_ps(bp + p * NR + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[p * MR + r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  for (int64_t r = 0; r < mr; ++r) {
    float* cr = c + r * ldc;
    if (accumulate) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, cr));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, cr + 16));
    }
    _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
    _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
  }
}

#include "tensor/sgemm_pack.inc"

}  // namespace

namespace detail {
const Sgemm kSgemmAvx512{MR, NR, pack_a, run, tile};
}  // namespace detail

}  // namespace k3
