// Reference quantizers (quant_ref.h) byte for byte against ggml_quantize_chunk, without and with
// an importance matrix, on data chosen to hit every rounding and tie rule of quant-formats.md;
// and quantize -> dequantize error bounds per type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "ggml_ref.h"
#include "tensor/fp16.h"
#include "tensor/quant_ref.h"

namespace {

using k3::GgmlType;
using k3::test::GgmlRef;
namespace ref = k3::ref;

#define REQUIRE_GGML(g)              \
  const GgmlRef* g = GgmlRef::get(); \
  ASSERT_NE(g, nullptr) << GgmlRef::load_error()

using Rng = std::mt19937;
float uniform(Rng& r, float a, float b) { return std::uniform_real_distribution<float>(a, b)(r); }
int randint(Rng& r, int a, int b) { return std::uniform_int_distribution<int>(a, b)(r); }
bool chance(Rng& r, double p) { return std::bernoulli_distribution(p)(r); }

constexpr float kE2M1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

// ---- data sets: fill rows x n floats ----

using Gen = std::function<void(Rng&, float*, int64_t rows, int64_t n)>;
struct Dataset {
  const char* name;
  Gen gen;
};

void gen_normal(Rng& r, float* x, int64_t rows, int64_t n) {
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < rows; ++i) {
    const float sigma = std::pow(10.f, uniform(r, -3, 1));
    for (int64_t j = 0; j < n; ++j) x[i * n + j] = sigma * nd(r);
  }
}

// Student-t with 3 degrees of freedom, and one value in 300 an outlier 50-1000x larger.
void gen_heavy(Rng& r, float* x, int64_t rows, int64_t n) {
  std::student_t_distribution<float> td(3);
  for (int64_t i = 0; i < rows; ++i) {
    const float sigma = std::pow(10.f, uniform(r, -3, 1));
    for (int64_t j = 0; j < n; ++j) x[i * n + j] = sigma * td(r) * (chance(r, 1.0 / 300) ? uniform(r, 50, 1000) : 1.f);
  }
}

// Row 0 all zero; elsewhere whole 32-blocks of +0 or -0, scattered +-0 elements, and whole
// 256-element super-blocks of zeros.
void gen_zeros(Rng& r, float* x, int64_t rows, int64_t n) {
  gen_normal(r, x, rows, n);
  std::fill(x, x + n, 0.f);
  for (int64_t i = 1; i < rows; ++i)
    for (int64_t b = 0; b < n / 32; ++b) {
      float* xb = x + i * n + 32 * b;
      const int kind = randint(r, 0, 7);
      if (n >= 256 && b % 8 == 0 && chance(r, 0.2)) std::fill(xb, xb + std::min<int64_t>(256, n - 32 * b), 0.f);
      if (kind == 0) std::fill(xb, xb + 32, 0.f);
      if (kind == 1) std::fill(xb, xb + 32, -0.f);
      if (kind >= 2 && kind <= 4)
        for (int j = 0; j < 32; ++j)
          if (chance(r, 0.4)) xb[j] = chance(r, 0.5) ? 0.f : -0.f;
    }
}

// Values on half-integer grids of a power of two, so that quotients land exactly on rounding
// ties; blocks whose largest |x| occurs twice with opposite signs (first-max rule); constant blocks.
void gen_ties(Rng& r, float* x, int64_t rows, int64_t n) {
  const int ranges[] = {1, 2, 3, 4, 7, 8, 15, 16, 31, 63, 127};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < n / 32; ++b) {
      float* xb = x + i * n + 32 * b;
      const float s = std::ldexp(1.f, randint(r, -8, 4));
      const int M = ranges[randint(r, 0, 10)];
      const bool halves = chance(r, 0.5);
      for (int j = 0; j < 32; ++j)
        xb[j] = (static_cast<float>(randint(r, -M, M)) + (halves && chance(r, 0.5) ? 0.5f : 0.f)) * s;
      const int kind = randint(r, 0, 5);
      if (kind == 0) {  // -A first, +A later, both the largest magnitude
        const int p = randint(r, 0, 15), q = randint(r, 16, 31);
        xb[p] = -(M + 1) * s;
        xb[q] = (M + 1) * s;
      } else if (kind == 1) {
        xb[randint(r, 0, 31)] = static_cast<float>(M) * s;  // exact +-M*s extremes: amax / nmax ties
        xb[randint(r, 0, 31)] = -static_cast<float>(M) * s;
      } else if (kind == 2 && chance(r, 0.3)) {
        std::fill(xb, xb + 32, xb[0]);
      }
    }
}

// MXFP4 edge blocks: |max| at or next to a power of two (where float32 log2f rounds up), the
// other elements on E2M1 grid midpoints (ties) or random.
void gen_pow2(Rng& r, float* x, int64_t rows, int64_t n) {
  const float fracs[] = {1.f - 0x1p-24f, 1.f, 1.f + 0x1p-23f, 1.f - 0x1p-23f, 0.75f, 1.5f - 0x1p-23f, 1.f - 0x1p-20f};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < n / 32; ++b) {
      float* xb = x + i * n + 32 * b;
      const int k = randint(r, -30, 30);
      const float amax = std::ldexp(fracs[randint(r, 0, 6)], k);
      const float step = std::ldexp(1.f, k - 2);  // E2M1 unit when amax is just below 2^k
      for (int j = 0; j < 32; ++j) {
        if (chance(r, 0.5)) {
          const int m = randint(r, 0, 6);
          xb[j] = (kE2M1[m] + kE2M1[m + 1]) * 0.5f * step * (chance(r, 0.5) ? 1.f : -1.f);
        } else {
          xb[j] = uniform(r, -amax, amax);
        }
      }
      xb[randint(r, 0, 31)] = chance(r, 0.5) ? amax : -amax;
    }
}

// What K3's MXFP4 experts dequantize to: E2M1 values times a power of two per 32-block.
void gen_mxfp4_src(Rng& r, float* x, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < n / 32; ++b) {
      const float s = std::ldexp(1.f, randint(r, -14, -2));
      for (int j = 0; j < 32; ++j) x[i * n + 32 * b + j] = kE2M1[randint(r, 0, 7)] * s * (chance(r, 0.5) ? 1.f : -1.f);
    }
}

// Very small magnitudes: subnormals and values around GROUP_MAX_EPS = 1e-15.
void gen_tiny(Rng& r, float* x, int64_t rows, int64_t n) {
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < n / 32; ++b) {
      const float s = std::ldexp(1.f, randint(r, -60, -40));
      for (int j = 0; j < 32; ++j) x[i * n + 32 * b + j] = s * nd(r);
    }
}

const Dataset kDatasets[] = {
    {"normal", gen_normal}, {"heavy", gen_heavy},     {"zeros", gen_zeros}, {"ties", gen_ties},
    {"pow2", gen_pow2},     {"mxfp4", gen_mxfp4_src}, {"tiny", gen_tiny},
};
constexpr int64_t kSizes[] = {32, 256, 512, 3584};

// Importance matrix: log-normal weights, every 17th column zero, and with zero_block a whole zero
// super-block (columns 256..511, for rows of 512 or more).
std::vector<float> make_imatrix(Rng& r, int64_t n, bool zero_block) {
  std::normal_distribution<float> nd(0.f, 1.5f);
  std::vector<float> w(n);
  for (int64_t c = 0; c < n; ++c) w[c] = c % 17 == 5 || (zero_block && c >= 256 && c < 512) ? 0.f : std::exp(nd(r));
  return w;
}

// ---- byte parity with ggml_quantize_chunk ----

// Elements per data set and row size: 16Ki (about 6 s for all types), 32x more with K3_EXHAUSTIVE=1.
int64_t row_elements() { return std::getenv("K3_EXHAUSTIVE") ? 1 << 19 : 1 << 14; }

const GgmlType kQuantTypes[] = {GgmlType::F32,   GgmlType::F16,   GgmlType::BF16,    GgmlType::Q4_0,   GgmlType::Q4_1,
                                GgmlType::Q5_0,  GgmlType::Q5_1,  GgmlType::Q8_0,    GgmlType::Q2_K,   GgmlType::Q3_K,
                                GgmlType::Q4_K,  GgmlType::Q5_K,  GgmlType::Q6_K,    GgmlType::MXFP4,  GgmlType::IQ4_NL,
                                GgmlType::IQ4_XS, GgmlType::Q1_0, GgmlType::Q2_0,    GgmlType::TQ1_0,  GgmlType::TQ2_0,
                                GgmlType::NVFP4, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                                GgmlType::IQ2_S, GgmlType::IQ1_S, GgmlType::IQ1_M};

std::string type_param_name(const testing::TestParamInfo<GgmlType>& p) { return k3::type_name(p.param); }

class QuantizeExact : public testing::TestWithParam<GgmlType> {};

TEST_P(QuantizeExact, MatchesGgml) {
  REQUIRE_GGML(g);
  const GgmlType t = GetParam();
  const int64_t block = k3::type_info(t).block;
  ASSERT_TRUE(ref::can_quantize(t));
  int64_t total_bad = 0, total_rows = 0;
  for (const Dataset& ds : kDatasets) {
    int64_t rows_tested[2] = {0, 0}, bad[2] = {0, 0};
    for (int64_t n : kSizes) {
      if (n % block) continue;
      const int64_t rows = std::max<int64_t>(4, row_elements() / n);
      Rng rng(static_cast<uint32_t>(n * 131 + std::strlen(ds.name)));
      std::vector<float> x(rows * n);
      ds.gen(rng, x.data(), rows, n);
      const std::vector<float> imatrix = make_imatrix(rng, n, true);
      const size_t row_bytes = g->row_size(t, n);
      ASSERT_EQ(row_bytes, k3::row_size(t, n));
      for (int w = ref::requires_imatrix(t) ? 1 : 0; w < 2; ++w) {  // ggml aborts without one there
        const float* qw = w ? imatrix.data() : nullptr;
        std::vector<uint8_t> ours(rows * row_bytes, 0xCD), theirs(rows * row_bytes, 0xCD);
        ASSERT_EQ(ref::quantize_rows(t, x.data(), ours.data(), rows, n, qw), rows * row_bytes);
        ASSERT_EQ(g->quantize_chunk(t, x.data(), theirs.data(), rows, n, qw), rows * row_bytes);
        for (int64_t i = 0; i < rows; ++i) {
          if (std::memcmp(ours.data() + i * row_bytes, theirs.data() + i * row_bytes, row_bytes) == 0) continue;
          if (++bad[w] <= 2) {
            size_t k = 0;
            while (ours[i * row_bytes + k] == theirs[i * row_bytes + k]) ++k;
            ADD_FAILURE() << k3::type_name(t) << " " << ds.name << " n=" << n << (w ? " imatrix" : "") << " row " << i
                          << ": first differing byte " << k % k3::type_info(t).block_bytes << " of block "
                          << k / k3::type_info(t).block_bytes << " (k3 " << int(ours[i * row_bytes + k]) << ", ggml "
                          << int(theirs[i * row_bytes + k]) << ")";
          }
        }
        rows_tested[w] += rows;
      }
    }
    std::printf("  %-7s %-7s mismatching rows: plain %lld/%lld, imatrix %lld/%lld\n", k3::type_name(t), ds.name,
                static_cast<long long>(bad[0]), static_cast<long long>(rows_tested[0]), static_cast<long long>(bad[1]),
                static_cast<long long>(rows_tested[1]));
    total_bad += bad[0] + bad[1];
    total_rows += rows_tested[0] + rows_tested[1];
  }
  EXPECT_EQ(total_bad, 0) << "of " << total_rows << " rows";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantizeExact, testing::ValuesIn(kQuantTypes), type_param_name);

// k3 quantize refuses a type without an importance matrix exactly where ggml_quantize_chunk does.
TEST(QuantizeExact, RequiresImatrixAsGgml) {
  REQUIRE_GGML(g);
  int checked = 0;
  for (uint32_t id = 0; id < 64; ++id)
    if (const k3::TypeInfo* ti = k3::type_info(id)) {
      EXPECT_EQ(ref::requires_imatrix(ti->type), g->requires_imatrix(ti->type)) << ti->name;
      ++checked;
    }
  EXPECT_GE(checked, 35);
}

// Activation types against ggml's quantize_row_q8_1_ref / quantize_row_q8_K_ref (same initial
// buffer bytes: Q8_K leaves bsums of an all-zero block unwritten).
TEST(QuantizeExact, ActivationTypes) {
  REQUIRE_GGML(g);
  for (GgmlType t : {GgmlType::Q8_1, GgmlType::Q8_K}) {
    const auto ggml_q = g->quantize_row_ref(t);
    ASSERT_NE(ggml_q, nullptr) << k3::type_name(t);
    const size_t bb = k3::type_info(t).block_bytes;
    for (const Dataset& ds : kDatasets) {
      const int64_t n = 3584, rows = 4;
      Rng rng(7);
      std::vector<float> x(rows * n);
      ds.gen(rng, x.data(), rows, n);
      const int64_t nb = rows * n / k3::type_info(t).block;
      std::vector<uint8_t> ours(nb * bb, 0xA5), theirs(nb * bb, 0xA5);
      if (t == GgmlType::Q8_1)
        ref::quantize_row_q8_1(x.data(), reinterpret_cast<k3::block_q8_1*>(ours.data()), rows * n);
      else
        ref::quantize_row_q8_K(x.data(), reinterpret_cast<k3::block_q8_K*>(ours.data()), rows * n);
      ggml_q(x.data(), theirs.data(), rows * n);
      int64_t bad = 0;
      for (int64_t b = 0; b < nb; ++b) bad += std::memcmp(ours.data() + b * bb, theirs.data() + b * bb, bb) != 0;
      EXPECT_EQ(bad, 0) << k3::type_name(t) << " " << ds.name << ": mismatching blocks of " << nb;
    }
  }
}

// ---- quantize -> dequantize error ----

// The largest relative RMSE of the rows, sqrt(sum w (x - x')^2 / sum w x^2), weighted by the
// importance matrix when one is used (the error the weighted search minimizes: columns of weight
// 0 are free to be far off).
double rel_rmse(GgmlType t, const std::vector<float>& x, int64_t rows, int64_t n, const float* qw) {
  std::vector<uint8_t> q(rows * k3::row_size(t, n));
  ref::quantize_rows(t, x.data(), q.data(), rows, n, qw);
  std::vector<float> y(x.size());
  ref::dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(y.size()));
  double worst = 0;
  for (int64_t i = 0; i < rows; ++i) {
    double err = 0, sig = 0;
    for (int64_t j = i * n; j < (i + 1) * n; ++j) {
      const double w = qw ? qw[j - i * n] : 1.0, d = static_cast<double>(x[j]) - y[j];
      err += w * d * d;
      sig += w * x[j] * x[j];
    }
    worst = std::max(worst, std::sqrt(err / sig));
  }
  return worst;
}

// Bounds from the code width b: a uniform b-bit grid spanning a block's range 2*amax has step
// D = 2*amax/2^b and error RMS D/sqrt(12); with amax ~ 2.5 sigma for Gaussian blocks of 16-32
// that is ~1.45 * 2^-b of sigma. The bound allows twice that: 3 * 2^-b. The non-uniform
// codebooks get the b of their grid density: MXFP4's E2M1 (3 magnitude bits + sign, power-of-two
// scale) b = 3, the IQ3 grids b = 3; IQ4 b = 4. NVFP4 b = 2: ggml's layout has no tensor scale,
// so blocks of small values (|x| ≲ 0.05, rows of σ 1e-3 here) get UE4M3's 3-bit subnormal scales.
// The 1-bit, 2-bit and ternary types, whose one scale per block leaves most values of a Gaussian
// block on one or two levels, b = 1.
// F16 / BF16 round each value: 2^-11 / 2^-8 relative.
double error_bound(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return std::ldexp(1.0, -11);
    case GgmlType::BF16: return std::ldexp(1.0, -8);
    case GgmlType::Q1_0:
    case GgmlType::Q2_0:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0: return 3 * std::ldexp(1.0, -1);
    case GgmlType::Q2_K:
    case GgmlType::NVFP4: return 3 * std::ldexp(1.0, -2);
    case GgmlType::Q3_K:
    case GgmlType::MXFP4:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: return 3 * std::ldexp(1.0, -3);
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q4_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: return 3 * std::ldexp(1.0, -4);
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q5_K: return 3 * std::ldexp(1.0, -5);
    case GgmlType::Q6_K: return 3 * std::ldexp(1.0, -6);
    case GgmlType::Q8_0: return 3 * std::ldexp(1.0, -8);
    // The lattice types: 8-value codewords of 3 levels (IQ2: 2.06-2.56 bits a value, IQ1: 1.56-1.75),
    // taken as b = 2 and b = 1.5.
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: return 3 * std::ldexp(1.0, -2);
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M: return 3 * std::pow(2.0, -1.5);
    default: return 0;
  }
}

class RoundTrip : public testing::TestWithParam<GgmlType> {};

TEST_P(RoundTrip, ErrorWithinBound) {
  const GgmlType t = GetParam();
  // The float types, Q8_0, MXFP4, NVFP4, the 1-, 2-bit and ternary types ignore an importance
  // matrix (their bytes are checked above).
  const bool weighted = t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16 && t != GgmlType::Q8_0 &&
                        t != GgmlType::MXFP4 && t != GgmlType::NVFP4 && t != GgmlType::Q1_0 && t != GgmlType::Q2_0 &&
                        t != GgmlType::TQ1_0 && t != GgmlType::TQ2_0;
  // The lattice types only with one, as llama-quantize writes them: unweighted, IQ1_M fits each
  // super-block's outliers (weights x²) and leaves a rel. RMSE of 6 on heavy tails, as ggml does.
  const bool lattice = t == GgmlType::IQ2_XXS || t == GgmlType::IQ2_XS || t == GgmlType::IQ2_S || t == GgmlType::IQ1_S ||
                       t == GgmlType::IQ1_M;
  const int64_t n = 3584, rows = 8;
  for (const bool heavy : {false, true}) {
    const Dataset& ds = kDatasets[heavy ? 1 : 0];
    Rng rng(42);
    std::vector<float> x(rows * n);
    ds.gen(rng, x.data(), rows, n);
    const std::vector<float> imatrix = make_imatrix(rng, n, false);
    // Heavy tails: a block's range is set by its outlier, so the other elements get a coarser
    // grid than amax ~ 2.5 sigma gives; where the weights discount the outlier that error shows.
    const double bound = error_bound(t) * (heavy ? 2 : 1);
    const double plain = lattice ? 0 : rel_rmse(t, x, rows, n, nullptr);
    const double with_imatrix = weighted ? rel_rmse(t, x, rows, n, imatrix.data()) : 0;
    char w[16] = "-";
    if (weighted) std::snprintf(w, sizeof w, "%.5f", with_imatrix);
    std::printf("  %-7s %-7s rel RMSE %.5f, with imatrix %s, bound %.5f\n", k3::type_name(t), ds.name, plain, w, bound);
    EXPECT_LE(plain, bound) << ds.name;
    EXPECT_LE(with_imatrix, bound) << ds.name << " imatrix";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, RoundTrip, testing::ValuesIn(kQuantTypes), type_param_name);

}  // namespace
