// AVX2 form of sgemm.h: tiles of 4 rows x 16 columns (8 accumulators) over packed operands.
#include <immintrin.h>

#include <vector>

#include "tensor/sgemm.h"

namespace k3 {
namespace {

constexpr int64_t MR = 4, NR = 16;

void tile(int64_t mr, int64_t nc, int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(bp + p * NR), b1 = _mm256_loadu_ps(bp + p * NR + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + p * MR + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  alignas(32) float out[MR][NR];
  for (int r = 0; r < MR; ++r) _mm256_store_ps(out[r], acc[r][0]), _mm256_store_ps(out[r] + 8, acc[r][1]);
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nc; ++j) c[r * ldc + j] = accumulate ? c[r * ldc + j] + out[r][j] : out[r][j];
}

#include "tensor/sgemm_pack.inc"

}  // namespace

namespace detail {
const Sgemm kSgemmAvx2{MR, NR, pack_a, run, tile};
}  // namespace detail

}  // namespace k3
