// matmul_f32 (float32 activations against any stored weight type, the vision encoder's products)
// against its plain double-precision reference, under every ISA, for shapes that leave partial
// token blocks and row bands, with one and several threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/matmul_f32.h"
#include "tensor/types.h"

namespace k3 {
namespace {

using T = GgmlType;

TEST(MatmulF32, MatchesReferenceForEveryTypeAndIsa) {
  const Isa saved = active_isa();
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa > cpu_best_isa()) continue;
    set_isa(isa);
    for (T t : {T::F32, T::F16, T::BF16, T::Q8_0, T::Q4_K}) {
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        const int64_t n = 256, rows = 45, tokens = 70;  // a partial band of 32 rows and block of 64 tokens
        std::mt19937 rng(11);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> wf(n * rows), x(n * tokens);
        for (float& v : wf) v = nd(rng);
        for (float& v : x) v = nd(rng);
        const size_t rs = row_size(t, n);
        std::vector<uint8_t> w(rs * rows);
        quantize_rows(t, wf.data(), w.data(), rows, n, nullptr);
        const WeightView wv{t, w.data(), n, rows, rs};
        std::vector<float> y(rows * tokens), ref(rows * tokens);
        matmul_f32(wv, x.data(), tokens, y.data(), pool);
        matmul_f32_ref(wv, x.data(), tokens, ref.data());
        double worst = 0;
        for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(double(y[i]) - ref[i]) / (1.0 + std::fabs(ref[i])));
        EXPECT_LT(worst, 2e-5) << type_name(t) << " " << isa_name(isa) << " threads " << threads;
      }
    }
  }
  set_isa(saved);
}

// The activations are used unrounded: a value BF16 cannot hold changes the product.
TEST(MatmulF32, ActivationsStayFloat32) {
  ThreadPool pool(1);
  const int64_t n = 32;
  std::vector<uint16_t> w(n, 0x3F80);  // BF16 1.0
  std::vector<float> x(n, 0.0f);
  x[0] = 1.0f + 0x1p-20f;
  float y = 0;
  matmul_f32(WeightView{T::BF16, w.data(), n, 1, n * sizeof(uint16_t)}, x.data(), 1, &y, pool);
  EXPECT_EQ(y, 1.0f + 0x1p-20f);
}

}  // namespace
}  // namespace k3
