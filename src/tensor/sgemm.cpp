#include "tensor/sgemm.h"

#include "tensor/scratch.h"

namespace k3 {

namespace {

// The reference: A "packed" as its rows back to back, sums over k in order.
void pack_rows(int64_t m, int64_t k, const float* a, int64_t lda, float* ap) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) ap[i * k + p] = a[i * lda + p];
}

void run_ref(int64_t m, int64_t n, int64_t k, const float* ap, const float* b, int64_t ldb, float* c, int64_t ldc,
             bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = accumulate ? c[i * ldc + j] : 0.0f;
      for (int64_t p = 0; p < k; ++p) s += ap[i * k + p] * b[p * ldb + j];
      c[i * ldc + j] = s;
    }
}

void tile_ref(int64_t mr, int64_t nc, int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
  run_ref(mr, nc, k, ap, bp, 1, c, ldc, accumulate);
}

constexpr Sgemm kScalar{1, 1, pack_rows, run_ref, tile_ref};

}  // namespace

const Sgemm& sgemm_kernel(Isa isa) {
  switch (usable_isa(isa)) {
    case Isa::Avx512: return detail::kSgemmAvx512;
    case Isa::AvxVnni:  // no VNNI in a float GEMM: the AVX2 kernel
    case Isa::Avx2: return detail::kSgemmAvx2;
    case Isa::Scalar: break;
  }
  return kScalar;
}

const Sgemm& sgemm_kernel() { return sgemm_kernel(active_isa()); }

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
           int64_t ldc, bool accumulate) {
  const Sgemm& g = sgemm_kernel();
  thread_local std::vector<float> ap;
  scratch_size(ap, g.packed_size(m, k));
  g.pack_a(m, k, a, lda, ap.data());
  g.run(m, n, k, ap.data(), b, ldb, c, ldc, accumulate);
}

}  // namespace k3
