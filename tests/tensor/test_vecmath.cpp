// The SIMD vecmath forms against the libm references, in ulp (distance between the floats' ordered
// bit patterns): exp, sigmoid and situ's tanh are libm's to the bit; silu is llama.cpp's vector
// form, 4 ulp from libm. K3_LIBM_EVERY_FLOAT=1 checks every float where the suite samples every
// 257th (~1 min a level each for exp/sigmoid and tanh).
#include "tensor/vecmath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
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

// f(chunk) over the floats x = bits(u) for u = 0, step, 2·step, ... (step 257, or 1 with
// K3_LIBM_EVERY_FLOAT set) with keep(x), in chunks of up to 1 << 20.
template <class Keep, class F>
void over_floats(Keep&& keep, F&& f) {
  const uint64_t step = std::getenv("K3_LIBM_EVERY_FLOAT") ? 1 : 257;
  std::vector<float> chunk;
  for (uint64_t u = 0; u <= 0xffffffffu; u += step) {
    float x;
    const uint32_t b = static_cast<uint32_t>(u);
    std::memcpy(&x, &b, 4);
    if (keep(x)) chunk.push_back(x);
    if (chunk.size() == (1u << 20) || u + step > 0xffffffffu) f(chunk), chunk.clear();
  }
}

// exp and sigmoid are libm's to the bit (glibc's expf, vecmath_simd.inc), so llama.cpp's ggml_exp and
// ggml_sigmoid: on the inputs above, every 257th float of [-110, 90] (8.7 million) and the two
// floats where only the fused reduction gives glibc's bits; silu is llama.cpp's vector form
// (tests/tensor/test_vs_llama.cpp holds it to those bits), 4 ulp from libm.
TEST(VecMath, ExpSigmoidAreLibmSiluWithinUlps) {
  for (Isa isa : kIsas) {
    if (isa > cpu_best_isa()) continue;
    float w = 0;
    std::vector<float> edges = inputs(-110.0f, 90.0f);
    for (float x : {0x1.04845ep+5f, -0x1.f8cbb2p+5f}) edges.push_back(x);
    auto check = [&](const std::vector<float>& x) {
      EXPECT_EQ(max_ulps(isa, [](const VecMath& v) { return v.exp; }, x, &w), 0) << isa_name(isa) << " exp at " << w;
      EXPECT_EQ(max_ulps(isa, [](const VecMath& v) { return v.sigmoid; }, x, &w), 0) << isa_name(isa) << " sigmoid at " << w;
    };
    check(edges);
    over_floats([](float x) { return x >= -110.0f && x <= 90.0f; }, check);
    const auto x = inputs(-110.0f, 90.0f);
    EXPECT_LE(max_ulps(isa, [](const VecMath& v) { return v.silu; }, x, &w), 4) << isa_name(isa) << " silu at " << w;
  }
}

// situ's tanh is libm's tanhf to the bit (llama.cpp's ggml_tanh calls it): every 257th float, through
// situ with a = 30 (tanh and sigmoid 1) and β = λ = 1, so that it returns tanh(b); and situ equals
// its scalar form (libm, the model's order) for several β, λ.
TEST(VecMath, SituIsLibm) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (Isa isa : kIsas) {
    if (isa > cpu_best_isa()) continue;
    int64_t differ = 0;
    over_floats([](float x) { return !std::isnan(x); }, [&](const std::vector<float>& b) {
      std::vector<float> t(b.size(), 30.0f);
      vecmath(isa).situ(t.data(), b.data(), static_cast<int64_t>(b.size()), SituParams{1.0f, 1.0f, 1.0f, 1.0f});
      for (size_t i = 0; i < b.size(); ++i) {
        const float want = tanhf(b[i]);
        differ += std::memcmp(&t[i], &want, 4) != 0;
      }
    });
    EXPECT_EQ(differ, 0) << isa_name(isa) << ": tanh is not libm's";
    for (auto [beta, lambda] : {std::pair{2.0f, 0.0f}, std::pair{1.5f, 4.0f}, std::pair{0.5f, 0.25f}}) {
      const SituParams p{beta, 1.0f / beta, lambda, lambda > 0 ? 1.0f / lambda : 0.0f};
      std::vector<float> a = inputs(-40.0f, 40.0f), u(a.size());
      for (float& v : u) v = nd(rng);
      std::vector<float> ref = a, got = a;
      vecmath(Isa::Scalar).situ(ref.data(), u.data(), static_cast<int64_t>(a.size()), p);
      vecmath(isa).situ(got.data(), u.data(), static_cast<int64_t>(a.size()), p);
      EXPECT_EQ(got, ref) << isa_name(isa) << " beta " << beta << " lambda " << lambda;
    }
  }
}

// The delta rule in the order of llama.cpp's gated_delta_net built for the level's vector width W
// (8 floats for the scalar and AVX2 levels, 16 for AVX-512): each row's two inner products in
// ggml_vec_dot_f32's order (four W-lane accumulators over steps of 4W, added (0 + 2) + (1 + 3),
// the lanes as the build's reduce adds them, the last d % 4W products into a float W, then W/2
// rounded and added, the rest fused), the state updated with fused multiply-adds; over several
// steps of one state, d with and without such a tail. tensor_test_vs_llama checks the same bits
// against llama.cpp's own op.
TEST(VecMath, DeltaRuleInLlamaOrder) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  auto dot = [](const float* x, const float* y, int64_t n, int64_t W) {
    std::vector<float> lane(4 * W, 0.0f);  // accumulator r, lane l at r·W + l
    const int64_t steps = n / (4 * W);
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t e = 0; e < 4 * W; ++e) lane[e] = std::fma(x[s * 4 * W + e], y[s * 4 * W + e], lane[e]);
    std::vector<float> v(W);
    for (int64_t l = 0; l < W; ++l) v[l] = (lane[l] + lane[2 * W + l]) + (lane[W + l] + lane[3 * W + l]);
    if (W == 16)
      for (int64_t l = 0; l < 8; ++l) v[l] += v[l + 8];
    for (int64_t l = 0; l < 4; ++l) v[l] += v[l + 4];
    float sum = W == 16 ? (v[0] + v[2]) + (v[1] + v[3]) : (v[0] + v[1]) + (v[2] + v[3]);
    int64_t i = steps * 4 * W;
    auto products_then_adds = [&](int64_t group) {
      std::vector<float> prod(group);
      for (int64_t e = 0; e < group; ++e) prod[e] = x[i + e] * y[i + e];
      for (float p : prod) sum += p;
      i += group;
    };
    while (n - i >= W) products_then_adds(W);
    if (n - i >= W / 2) products_then_adds(W / 2);
    for (; i < n; ++i) sum = std::fma(x[i], y[i], sum);
    return sum;
  };
  for (int64_t d : {16, 24, 64, 128, 72}) {
    std::vector<float> S0(d * d);
    for (float& x : S0) x = nd(rng);
    std::vector<std::vector<float>> steps;
    for (int t = 0; t < 3; ++t) {
      std::vector<float> in(4 * d);  // eg, k, q, v
      for (int64_t i = 0; i < 4 * d; ++i) in[i] = i < d ? std::exp(-std::fabs(nd(rng))) : nd(rng);
      steps.push_back(in);
    }
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (isa > cpu_best_isa()) continue;
      const int64_t W = isa == Isa::Avx512 ? 16 : 8;
      std::vector<float> S = S0, want_S = S0;
      std::vector<double> Sd(S0.begin(), S0.end());
      for (size_t t = 0; t < steps.size(); ++t) {
        const float *eg = steps[t].data(), *k = eg + d, *q = eg + 2 * d, *v = eg + 3 * d;
        std::vector<float> o(d), want(d);
        vecmath(isa).delta_rule(S.data(), d, eg, k, q, v, 0.7f, 0.125f, o.data());
        for (int64_t j = 0; j < d; ++j) {
          float* Sj = &want_S[j * d];
          for (int64_t i = 0; i < d; ++i) Sj[i] *= eg[i];
          const float delta = (v[j] - dot(Sj, k, d, W)) * 0.7f;
          for (int64_t i = 0; i < d; ++i) Sj[i] = std::fma(k[i], delta, Sj[i]);
          want[j] = dot(Sj, q, d, W) * 0.125f;
          // and the step in double, a bound on the order's rounding
          double u = 0, y = 0;
          for (int64_t i = 0; i < d; ++i) u += (Sd[j * d + i] *= eg[i]) * k[i];
          for (int64_t i = 0; i < d; ++i) y += (Sd[j * d + i] += k[i] * 0.7 * (v[j] - u)) * q[i];
          ASSERT_NEAR(o[j], y * 0.125, 1e-5) << isa_name(isa) << " d " << d << " step " << t << " j " << j;
        }
        EXPECT_EQ(o, want) << isa_name(isa) << " d " << d << " step " << t;
        EXPECT_EQ(S, want_S) << isa_name(isa) << " d " << d << " step " << t;
      }
    }
  }
}

// The causal conv sums each output's window as llama.cpp's ssm_conv does in its build of the
// level's vector width W (8 floats for the scalar and AVX2 levels, 16 for AVX-512): products of
// W taps at a time, then W/2 if that many remain, added one by one, then fused multiply-adds;
// with the state moved on by T. Decode (T = 1) and batches longer and shorter than the window,
// channel ranges that end off the vector width, kernels of 1 to 17 taps.
TEST(VecMath, CausalConvInLlamaOrder) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto window_sum = [](const float* w, const float* x, int64_t K, int64_t W) {
    float acc = 0.0f;
    int64_t j = 0;
    for (int64_t group : {W, W / 2})
      while (K - j >= group) {
        float prod[16];
        for (int64_t i = 0; i < group; ++i) prod[i] = w[j + i] * x[j + i];
        for (int64_t i = 0; i < group; ++i) acc += prod[i];
        j += group;
        if (group == W / 2) break;
      }
    for (; j < K; ++j) acc = std::fma(w[j], x[j], acc);
    return acc;
  };
  for (int64_t K : {1, 2, 4, 5, 9, 17})
    for (int64_t T : {1, 2, 7, 40}) {
      const int64_t D = 45, S = K - 1, c0 = 3, c1 = 42;
      std::vector<float> p(T * D), w(D * K), state0(D * S);
      for (auto* v : {&p, &w, &state0})
        for (float& x : *v) x = nd(rng);
      for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (isa > cpu_best_isa()) continue;
        // expected: the window of each channel is its S previous inputs, then the batch
        std::vector<float> want(T * D, -1.0f), want_state = state0;
        for (int64_t c = c0; c < c1; ++c) {
          std::vector<float> seq(state0.begin() + c * S, state0.begin() + (c + 1) * S);
          for (int64_t t = 0; t < T; ++t) seq.push_back(p[t * D + c]);
          for (int64_t t = 0; t < T; ++t) want[t * D + c] = window_sum(&w[c * K], &seq[t], K, isa == Isa::Avx512 ? 16 : 8);
          for (int64_t j = 0; j < S; ++j) want_state[c * S + j] = seq[T + j];
        }
        std::vector<float> y(T * D, -1.0f), state = state0;
        vecmath(isa).causal_conv(p.data(), w.data(), state.data(), T, D, K, c0, c1, y.data());
        EXPECT_EQ(y, want) << isa_name(isa) << " K " << K << " T " << T;
        EXPECT_EQ(state, want_state) << isa_name(isa) << " K " << K << " T " << T;
      }
    }
}

// Softmax: every level within 2e-7 of the scalar form (libm) — its vector exp is ggml's, a few ulp
// from libm (tensor_test_vs_llama holds its bits to llama.cpp's) —; a masked row differs from an
// unmasked one only where the last block is short, and not at all for rows of whole blocks.
TEST(VecMath, SoftmaxNearLibm) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t n : {1, 5, 8, 16, 23, 64, 100}) {
    std::vector<float> x(n);
    for (float& f : x) f = nd(rng);
    std::vector<float> ref = x;
    vecmath(Isa::Scalar).softmax(ref.data(), n, false);
    for (Isa isa : kIsas) {
      if (isa > cpu_best_isa()) continue;
      std::vector<float> plain = x, masked = x;
      vecmath(isa).softmax(plain.data(), n, false);
      vecmath(isa).softmax(masked.data(), n, true);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(plain[i], ref[i], 2e-7) << isa_name(isa) << " n " << n << " i " << i;
        EXPECT_NEAR(masked[i], ref[i], 2e-7) << isa_name(isa) << " n " << n << " i " << i;
      }
      if (n % 16 == 0) {
        EXPECT_EQ(plain, masked) << isa_name(isa) << " n " << n;
      }
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
