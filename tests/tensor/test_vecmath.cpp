// The SIMD vecmath forms against the libm references, in ulp (distance between the floats' ordered
// bit patterns). Bounds: exp 2, sigmoid 4, silu 3, situ 8 (three or four rounded factors of a few
// ulp each); the measured maxima are 1, 3, 2 and 6 (AVX2 and AVX-512 alike).
#include "tensor/vecmath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace k3 {
namespace {

int64_t ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : i;
}
int64_t ulps(float a, float b) { return std::llabs(ordered(a) - ordered(b)); }

// Inputs covering every binade that matters: a dense ramp, random values and edges.
std::vector<float> inputs(float lo, float hi) {
  std::vector<float> v;
  for (int i = 0; i <= 20000; ++i) v.push_back(lo + (hi - lo) * static_cast<float>(i) / 20000);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> e(-30.0f, 7.0f);
  for (int i = 0; i < 20000; ++i) {
    const float m = std::exp2(e(rng));
    v.push_back(i % 2 ? m : -m);
  }
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.34657f, -0.34657f, 0.5f, 9.0f, -9.0f, 20.0f, -20.0f, 88.0f,
                  -87.0f, -103.0f, -104.5f, 88.72f, 89.0f, -150.0f})
    v.push_back(x);
  v.push_back(1.0f);  // odd length: exercises the tail
  return v;
}

template <class F>
int64_t max_ulps(Isa isa, F&& pick, const std::vector<float>& x, float* worst) {
  std::vector<float> ref = x, got = x;
  pick(vecmath(Isa::Scalar))(ref.data(), static_cast<int64_t>(ref.size()));
  pick(vecmath(isa))(got.data(), static_cast<int64_t>(got.size()));
  int64_t m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t u = ulps(ref[i], got[i]);
    if (u > m) m = u, *worst = x[i];
  }
  return m;
}

const Isa kIsas[] = {Isa::Avx2, Isa::Avx512};

TEST(VecMath, ExpSigmoidSiluWithinUlps) {
  for (Isa isa : kIsas) {
    if (isa > cpu_best_isa()) continue;
    float w = 0;
    const auto x = inputs(-110.0f, 90.0f);
    EXPECT_LE(max_ulps(isa, [](const VecMath& v) { return v.exp; }, x, &w), 2) << isa_name(isa) << " exp at " << w;
    EXPECT_LE(max_ulps(isa, [](const VecMath& v) { return v.sigmoid; }, x, &w), 4) << isa_name(isa) << " sigmoid at " << w;
    EXPECT_LE(max_ulps(isa, [](const VecMath& v) { return v.silu; }, x, &w), 3) << isa_name(isa) << " silu at " << w;
  }
}

TEST(VecMath, SituWithinUlps) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (Isa isa : kIsas) {
    if (isa > cpu_best_isa()) continue;
    for (auto [beta, lambda] : {std::pair{2.0f, 0.0f}, std::pair{1.5f, 4.0f}, std::pair{0.5f, 0.25f}}) {
      const SituParams p{beta, 1.0f / beta, lambda, lambda > 0 ? 1.0f / lambda : 0.0f};
      std::vector<float> a = inputs(-40.0f, 40.0f), b(a.size());
      for (float& v : b) v = nd(rng);
      std::vector<float> ref = a, got = a;
      vecmath(Isa::Scalar).situ(ref.data(), b.data(), static_cast<int64_t>(a.size()), p);
      vecmath(isa).situ(got.data(), b.data(), static_cast<int64_t>(a.size()), p);
      int64_t m = 0;
      size_t at = 0;
      for (size_t i = 0; i < a.size(); ++i)
        if (ulps(ref[i], got[i]) > m) m = ulps(ref[i], got[i]), at = i;
      EXPECT_LE(m, 8) << isa_name(isa) << " beta " << beta << " lambda " << lambda << " at a=" << a[at]
                      << " b=" << b[at] << ": " << ref[at] << " vs " << got[at];
    }
  }
}

// The scalar table entry is the reference itself (libm, model order).
TEST(VecMath, ScalarIsLibm) {
  std::vector<float> x = {-3.0f, -0.5f, 0.0f, 0.25f, 7.0f};
  std::vector<float> y = x;
  vecmath(Isa::Scalar).sigmoid(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], 1.0f / (1.0f + expf(-x[i])));
}

}  // namespace
}  // namespace k3
