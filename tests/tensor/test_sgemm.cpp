// sgemm under every ISA against the scalar reference: shapes with row and column tails (the 8 x 32
// and 4 x 16 tiles), strided operands, and accumulate on and off.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/sgemm.h"

namespace k3 {
namespace {

TEST(Sgemm, EveryIsaMatchesTheReference) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa > cpu_best_isa()) continue;
    const Sgemm& g = sgemm_kernel(isa);
    const Sgemm& ref_g = sgemm_kernel(Isa::Scalar);
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 33, 5}, {8, 32, 128}, {9, 47, 64},
                           {64, 256, 128}, {13, 16, 300}, {3, 70, 1}}) {
      for (bool acc : {false, true}) {
        const int64_t lda = k + 3, ldb = n + 5, ldc = n + 2;
        std::mt19937 rng(static_cast<unsigned>(m * 131 + n * 7 + k));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> a(m * lda), b(k * ldb), c(m * ldc), ref;
        for (float& v : a) v = nd(rng);
        for (float& v : b) v = nd(rng);
        for (float& v : c) v = nd(rng);
        ref = c;
        std::vector<float> ap(g.packed_size(m, k)), ar(ref_g.packed_size(m, k));
        g.pack_a(m, k, a.data(), lda, ap.data());
        g.run(m, n, k, ap.data(), b.data(), ldb, c.data(), ldc, acc);
        ref_g.pack_a(m, k, a.data(), lda, ar.data());
        ref_g.run(m, n, k, ar.data(), b.data(), ldb, ref.data(), ldc, acc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t x = static_cast<size_t>(i * ldc + j);
            if (j >= n) ASSERT_EQ(c[x], ref[x]) << "wrote outside C";  // the padding columns stay
            else ASSERT_NEAR(c[x], ref[x], 1e-4 * std::sqrt(double(k)) * (1 + std::fabs(ref[x])))
                << isa_name(isa) << " " << m << "x" << n << "x" << k << " at " << i << "," << j;
          }
      }
    }
  }
}

}  // namespace
}  // namespace k3
