// Kernel table tests: the scalar kernels against ggml's CPU backend (dlopen), and every SIMD
// kernel of every ISA this CPU has against the scalar one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codebooks.h"
#include "common/error.h"
#include "iq_blocks.h"
#include "support/ggml_cpu_oracle.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/gemm.h"
#include "tensor/kernels.h"

namespace k3 {
namespace {

using T = GgmlType;
using Bytes = std::vector<uint8_t>;

const T kWeightTypes[] = {T::F32,  T::F16,  T::BF16,  T::Q4_0,  T::Q4_1,    T::Q5_0,  T::Q5_1, T::Q8_0,
                          T::Q2_K, T::Q2_K_SB, T::Q3_K, T::Q4_K, T::Q5_K, T::Q6_K, T::MXFP4, T::IQ4_NL, T::IQ4_XS,
                          T::Q1_0, T::Q2_0, T::NVFP4, T::TQ1_0, T::TQ2_0, T::IQ3_XXS, T::IQ3_S,
                          T::IQ2_XXS, T::IQ2_XS, T::IQ2_S, T::IQ1_S, T::IQ1_M};
const T kLatticeTypes[] = {T::IQ2_XXS, T::IQ2_XS, T::IQ2_S, T::IQ1_S, T::IQ1_M};
const T kActTypes[] = {T::F32, T::F16, T::BF16, T::Q8_0, T::Q8_1, T::Q8_K};

// Quantized dots whose SIMD forms evaluate the scalar reference's float operations in its order, so
// that they give its bits on every ISA: the K-quants, IQ4_XS and the lattice types (one value per
// super-block) and the 32-element block types (simd256_block32.inc and simd256_elem.inc, at every
// level).
bool is_lattice(T t) { return std::find(std::begin(kLatticeTypes), std::end(kLatticeTypes), t) != std::end(kLatticeTypes); }
bool order_exact(T t) {
  return t == T::Q2_K || t == T::Q2_K_SB || t == T::Q3_K || t == T::Q4_K || t == T::Q5_K || t == T::Q6_K ||
         t == T::IQ4_XS || t == T::Q4_0 || t == T::Q5_0 || t == T::Q8_0 || t == T::IQ4_NL || t == T::MXFP4 ||
         t == T::Q1_0 || t == T::Q2_0 || t == T::NVFP4 || t == T::TQ1_0 || t == T::TQ2_0 || t == T::IQ3_XXS ||
         t == T::IQ3_S || is_lattice(t);
}
bool is_float(T t) { return t == T::F32 || t == T::F16 || t == T::BF16; }
// Dots whose reference sums in the order of ggml's x86 vec_dot (its AVX2 form, in every x86 build
// with AVX2), so that they give its bits (docs/model.md, "Parity").
bool ggml_order(T t) { return t == T::Q8_0 || t == T::Q5_0 || t == T::Q2_K || t == T::Q6_K || t == T::IQ4_XS; }

std::vector<Isa> simd_isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::Avx2, Isa::AvxVnni, Isa::Avx512})
    if (isa_supported(i)) v.push_back(i);
  return v;
}

int64_t blk(T t) { return type_info(t).block; }
uint16_t h16(float f) { return fp32_to_fp16(f); }

// Offsets of the f16 scale fields in a weight block (the first is the multiplicative scale).
std::vector<int> f16_fields(T t) {
  switch (t) {
    case T::Q4_0: case T::Q5_0: case T::Q8_0: case T::IQ4_NL: case T::IQ4_XS: return {0};
    case T::Q1_0: case T::Q2_0: case T::IQ3_XXS: case T::IQ3_S: return {0};
    case T::TQ1_0: return {52};
    case T::TQ2_0: return {64};
    case T::IQ2_XXS: case T::IQ2_XS: case T::IQ2_S: case T::IQ1_S: return {0};
    case T::Q4_1: case T::Q5_1: case T::Q4_K: case T::Q5_K: return {0, 2};
    case T::Q2_K: case T::Q2_K_SB: return {80, 82};
    case T::Q3_K: return {108};
    case T::Q6_K: return {208};
    default: return {};
  }
}

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// The UE4M3 byte whose halved value is 2^e (e clamped to -10..7: subnormals 1, 2, 4 below -7).
uint8_t nvfp4_pow2(int e) {
  e = std::clamp(e, -10, 7);
  return static_cast<uint8_t>(e < -7 ? 1 << (e + 10) : (e + 8) << 3);
}

// How weights and activations are drawn.
// Random: uniform code bytes, random finite scales (float order matters: compare with tolerance).
// Pow2: every scale is ±2^e for one e per row (offsets of Q4_1/Q5_1 too), float values are small
//   integers times 2^e, so every partial sum is exact and any summation order gives the same bits.
// Extreme: code bytes drawn from the extreme patterns, scales from max/min-subnormal/±0.
enum class Mode { Random, Pow2, Extreme };

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  int uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(rng); }
  float sign() { return uni(0, 1) ? 1.0f : -1.0f; }

  uint8_t code_byte(Mode m) {
    static const uint8_t kExtreme[] = {0x00, 0xFF, 0x0F, 0xF0, 0x80, 0x7F, 0x88, 0x77, 0x08, 0x81};
    return m == Mode::Extreme ? kExtreme[uni(0, 9)] : static_cast<uint8_t>(uni(0, 255));
  }

  // n elements of weight type t. e2: the row's exponent for Pow2.
  Bytes weights(T t, int64_t n, Mode m, int e2) {
    Bytes b(row_size(t, n));
    if (is_float(t)) {
      for (int64_t i = 0; i < n; ++i) {
        const float v = m == Mode::Random ? normal() * std::ldexp(1.0f, uni(-6, 6))
                        : m == Mode::Pow2 ? std::ldexp(static_cast<float>(uni(-16, 16)), e2)
                                          : sign() * (uni(0, 1) ? 0.0f : std::ldexp(1.0f, uni(-10, 10)));
        store_float(t, b.data(), i, v);
      }
      return b;
    }
    for (uint8_t& v : b) v = code_byte(m);
    const size_t bb = type_info(t).block_bytes;
    for (size_t off = 0; off < b.size(); off += bb) {
      uint8_t* p = b.data() + off;
      if (t == T::MXFP4) {
        p[0] = static_cast<uint8_t>(m == Mode::Random ? uni(110, 135) : m == Mode::Pow2 ? e2 + 127 : uni(1, 200));
        continue;
      }
      if (t == T::NVFP4) {  // UE4M3: Pow2 the code of 2^e2 halved (e2 in -10..7), Extreme any byte
        for (int s = 0; s < 4; ++s)
          p[s] = static_cast<uint8_t>(m == Mode::Random ? uni(0x20, 0x50) : m == Mode::Pow2 ? nvfp4_pow2(e2) : uni(0, 255));
        continue;
      }
      const std::vector<int> f = f16_fields(t);
      for (size_t k = 0; k < f.size(); ++k) put16(p + f[k], scale16(m, e2, k > 0 && (t == T::Q4_1 || t == T::Q5_1)));
      if (t == T::IQ1_M) set_iq1_m_scale(p, scale16(m, e2, false));
    }
    return b;
  }

  // IQ1_M keeps its f16 scale in the top nibbles of its four scale words (bytes 48-55).
  static void set_iq1_m_scale(uint8_t* p, uint16_t d) {
    for (int w = 0; w < 4; ++w) p[49 + 2 * w] &= 0x0F;
    test::iqb::set_d(T::IQ1_M, p, d);
  }

  uint16_t scale16(Mode m, int e2, bool offset) {
    if (m == Mode::Random) return h16(normal() * std::ldexp(1.0f, uni(-12, 0)));
    if (m == Mode::Pow2) return h16(sign() * std::ldexp(offset ? static_cast<float>(uni(0, 15)) : 1.0f, e2));
    static const uint16_t kExtreme[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0000, 0x8000, 0x0400, 0x3C00};
    return kExtreme[uni(0, 7)];
  }

  static void store_float(T t, uint8_t* b, int64_t i, float v) {
    if (t == T::F32) std::memcpy(b + 4 * i, &v, 4);
    else put16(b + 2 * i, t == T::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v));
  }

  // Activation row of type t (a vec_dot_type). Random: scalar from_float of random floats.
  // Pow2/Extreme: codes in [-127, 127] with the scale 2^e2 (the activation contract).
  Bytes acts(T t, int64_t n, Mode m, int e2) {
    if (m == Mode::Random || is_float(t)) {
      if (is_float(t) && m != Mode::Random) return weights(t, n, m, e2);
      std::vector<float> x(n);
      for (float& v : x) v = normal() * (uni(0, 9) ? 1.0f : 8.0f);
      Bytes b(row_size(t, n));
      kernels(t, Isa::Scalar).from_float(x.data(), b.data(), n);
      return b;
    }
    Bytes b(row_size(t, n));
    auto code = [&] { return static_cast<int8_t>(m == Mode::Extreme ? (uni(0, 3) ? uni(0, 1) * 254 - 127 : uni(-1, 1)) : uni(-127, 127)); };
    const float d = std::ldexp(1.0f, e2);
    if (t == T::Q8_K) {
      auto* y = reinterpret_cast<block_q8_K*>(b.data());
      for (int64_t i = 0; i < n / QK_K; ++i) {
        y[i].d = sign() * d;
        for (int8_t& q : y[i].qs) q = code();
        for (int s = 0; s < 16; ++s) {
          int sum = 0;
          for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * s + j];
          y[i].bsums[s] = static_cast<int16_t>(sum);
        }
      }
    } else {
      const size_t bb = type_info(t).block_bytes;
      for (size_t off = 0; off < b.size(); off += bb) {
        uint8_t* p = b.data() + off;
        const int hdr = t == T::Q8_1 ? 4 : 2;
        int sum = 0;
        for (int j = 0; j < QK; ++j) {
          const int8_t q = code();
          sum += q;
          p[hdr + j] = static_cast<uint8_t>(q);
        }
        const float dd = sign() * d;
        put16(p, h16(dd));
        if (t == T::Q8_1) put16(p + 2, h16(dd * static_cast<float>(sum)));
      }
    }
    return b;
  }
};

std::vector<float> to_float(T t, const Bytes& b, int64_t n) {
  std::vector<float> y(n);
  kernels(t, Isa::Scalar).to_float(b.data(), y.data(), n);
  return y;
}

// Σ|w_i·a_i| over the dequantized rows: the scale of the dot's rounding error.
double abs_terms(T wt, const Bytes& w, T at, const Bytes& a, int64_t n) {
  const std::vector<float> x = to_float(wt, w, n), y = to_float(at, a, n);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(x[i]) * y[i]);
  return s;
}

float dot(T t, Isa isa, const Bytes& w, const Bytes& a, int64_t n) {
  float s = NAN;
  kernels(t, isa).vec_dot(n, &s, w.data(), a.data());
  return s;
}

// Counts per test of the block (or element) counts exercised.
std::vector<int64_t> row_lengths(T t) {
  if (is_float(t)) return {1, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257, 1000, 7168, 28672};
  return {blk(t), 3 * blk(t), 7 * blk(t), 8 * blk(t), 112 * blk(t)};
}

// ---- dispatch ----------------------------------------------------------------------------------

TEST(Kernels, TableAndVecDotTypes) {
  const std::pair<T, T> expect[] = {
      {T::F32, T::F32},   {T::F16, T::F16},   {T::BF16, T::BF16}, {T::Q4_0, T::Q8_0},   {T::Q4_1, T::Q8_1},
      {T::Q5_0, T::Q8_0}, {T::Q5_1, T::Q8_1}, {T::Q8_0, T::Q8_0}, {T::Q2_K, T::Q8_K},   {T::Q3_K, T::Q8_K},
      {T::Q4_K, T::Q8_K}, {T::Q5_K, T::Q8_K}, {T::Q6_K, T::Q8_K}, {T::MXFP4, T::Q8_0},  {T::IQ4_NL, T::Q8_0},
      {T::IQ4_XS, T::Q8_K}, {T::Q1_0, T::Q8_0}, {T::Q2_0, T::Q8_0}, {T::NVFP4, T::Q8_0}, {T::TQ1_0, T::Q8_K},
      {T::TQ2_0, T::Q8_K}, {T::IQ3_XXS, T::Q8_K}, {T::IQ3_S, T::Q8_K}, {T::IQ2_XXS, T::Q8_K}, {T::IQ2_XS, T::Q8_K},
      {T::IQ2_S, T::Q8_K},  {T::IQ1_S, T::Q8_K}, {T::IQ1_M, T::Q8_K}};
  for (Isa isa : kAllIsas) {
    for (auto [t, vdt] : expect) {
      const QuantKernels& k = kernels(t, isa);
      EXPECT_EQ(k.vec_dot_type, vdt) << type_name(t);
      EXPECT_TRUE(k.to_float && k.vec_dot) << type_name(t);
    }
    for (T t : kActTypes) EXPECT_TRUE(kernels(t, isa).from_float && kernels(t, isa).to_float) << type_name(t);
  }
  EXPECT_THROW(kernels(T::I8), Error);
  if (const test::GgmlCpu* g = test::GgmlCpu::get()) {
    for (auto [t, vdt] : expect) EXPECT_EQ(g->traits(static_cast<uint32_t>(t))->vec_dot_type, static_cast<int>(vdt));
  }
}

TEST(Kernels, IsaSelection) {
  const Isa best = cpu_best_isa();
  std::printf("cpu_best_isa = %s, active = %s\n", isa_name(best), isa_name(active_isa()));
  const Isa saved = active_isa();
  set_isa(Isa::Scalar);
  EXPECT_EQ(active_isa(), Isa::Scalar);
  EXPECT_EQ(&kernels(T::Q4_K), &kernels(T::Q4_K, Isa::Scalar));
  set_isa(Isa::Avx512);
  EXPECT_EQ(active_isa(), best);  // never above what the CPU supports
  set_isa(Isa::AvxVnni);  // AVX-VNNI is its own CPUID bit: an AVX-512 CPU may lack it
  EXPECT_TRUE(isa_supported(active_isa()));
  EXPECT_EQ(active_isa(), isa_supported(Isa::AvxVnni) ? Isa::AvxVnni : Isa::Avx2);
  EXPECT_EQ(&kernels(T::Q8_0), &kernels(T::Q8_0, active_isa()));
  set_isa(saved);
}

// ---- scalar kernels against ggml ---------------------------------------------------------------

TEST(KernelsVsGgml, FromFloat) {
  const test::GgmlCpu* g = test::GgmlCpu::get();
  ASSERT_TRUE(g) << "ggml CPU backend (node-llama-cpp's libggml-cpu) not found: run tools/setup test";
  Gen gen(1);
  for (T t : {T::F16, T::BF16, T::Q8_0, T::Q8_1, T::Q8_K}) {
    for (int rep = 0; rep < 40; ++rep) {
      const int64_t n = QK_K * (1 + rep % 7);
      std::vector<float> x(n);
      const float scale = std::ldexp(1.0f, gen.uni(-30, 30));
      for (float& v : x) v = gen.normal() * scale;
      if (rep % 4 == 1)  // exact rounding ties: amax 127 makes 127/amax exactly 1
        for (int64_t i = 0; i < n; ++i) x[i] = i % 32 == 0 ? 127.0f : static_cast<float>(gen.uni(-126, 126)) + 0.5f;
      if (rep % 4 == 2)  // subnormal and huge magnitudes, signed zeros
        for (float& v : x) v = gen.uni(0, 3) == 0 ? gen.sign() * 0.0f : bits_f32(gen.uni(1, 0x7FFFFF)) * (gen.uni(0, 1) ? 1.0f : 1e30f);
      Bytes mine(row_size(t, n)), theirs(row_size(t, n));
      kernels(t, Isa::Scalar).from_float(x.data(), mine.data(), n);
      g->traits(static_cast<uint32_t>(t))->from_float(x.data(), theirs.data(), n);
      ASSERT_EQ(mine, theirs) << type_name(t) << " rep " << rep;
    }
  }
}

TEST(KernelsVsGgml, VecDot) {
  const test::GgmlCpu* g = test::GgmlCpu::get();
  ASSERT_TRUE(g) << "ggml CPU backend (node-llama-cpp's libggml-cpu) not found: run tools/setup test";
  std::printf("ggml variant: %s\n", g->variant().c_str());
  Gen gen(2);
  for (T t : kWeightTypes) {
    if (!type_info(static_cast<uint32_t>(t))) continue;  // k3's own (Q2_K_SB: tests/tensor/test_vs_llama.cpp)
    const T at = kernels(t, Isa::Scalar).vec_dot_type;
    double worst = 0.0;
    for (int64_t n : row_lengths(t)) {
      if (n % blk(at)) continue;
      for (Mode m : {Mode::Random, Mode::Pow2}) {
        const int e2 = gen.uni(-8, 2);
        const Bytes w = gen.weights(t, n, m, e2), a = gen.acts(at, n, m, e2);
        const float mine = dot(t, Isa::Scalar, w, a, n);
        float theirs = NAN;
        g->traits(static_cast<uint32_t>(t))->vec_dot(static_cast<int>(n), &theirs, 0, w.data(), 0, a.data(), 0, 1);
        const double scale = abs_terms(t, w, at, a, n);
        const double err = std::fabs(static_cast<double>(mine) - theirs);
        worst = std::max(worst, scale > 0 ? err / scale : err);
        EXPECT_LE(err, 1e-6 * scale) << type_name(t) << " n=" << n << " mode " << int(m) << ": " << mine << " vs " << theirs;
        if (ggml_order(t)) {
          EXPECT_EQ(std::memcmp(&mine, &theirs, sizeof(float)), 0)
              << type_name(t) << " n=" << n << ": not ggml's bits, " << mine << " vs " << theirs;
        }
      }
    }
    std::printf("%-7s worst |k3 - ggml| / sum|terms| = %.2e\n", type_name(t), worst);
  }
}

// ---- SIMD against scalar -----------------------------------------------------------------------

TEST(KernelsSimd, FromFloatExact) {
  Gen gen(3);
  for (Isa isa : simd_isas()) {
    for (T t : kActTypes) {
      for (int rep = 0; rep < 60; ++rep) {
        const int64_t n = t == T::F16 || t == T::BF16 || t == T::F32 ? 1 + gen.uni(0, 600) : QK_K * (1 + rep % 5);
        std::vector<float> x(n);
        const float scale = std::ldexp(1.0f, gen.uni(-40, 40));
        for (float& v : x) v = gen.normal() * scale;
        if (rep % 5 == 1)
          for (int64_t i = 0; i < n; ++i) x[i] = i % 32 == 5 ? -127.0f : static_cast<float>(gen.uni(-126, 126)) + 0.5f;
        if (rep % 5 == 2)
          for (float& v : x) v = gen.uni(0, 2) == 0 ? gen.sign() * 0.0f : gen.sign() * bits_f32(gen.uni(1, 0x7F7FFFFF));
        if (rep % 5 == 3)
          for (int64_t i = 0; i < n; ++i) x[i] = i < QK_K ? 0.0f : x[i];  // all-zero blocks
        Bytes ref(row_size(t, n)), got(row_size(t, n), 0xAB);
        kernels(t, Isa::Scalar).from_float(x.data(), ref.data(), n);
        kernels(t, isa).from_float(x.data(), got.data(), n);
        ASSERT_EQ(ref, got) << isa_name(isa) << " " << type_name(t) << " rep " << rep << " n " << n;
      }
    }
  }
}

TEST(KernelsSimd, ToFloatExact) {
  Gen gen(4);
  const T kAll[] = {T::F32,  T::F16,  T::BF16,  T::Q4_0,  T::Q4_1,  T::Q5_0,    T::Q5_1,  T::Q8_0,   T::Q8_1,
                    T::Q2_K, T::Q3_K, T::Q4_K,  T::Q5_K,  T::Q6_K,  T::Q8_K,    T::MXFP4, T::IQ4_NL, T::IQ4_XS,
                    T::Q1_0, T::Q2_0, T::NVFP4, T::TQ1_0, T::TQ2_0, T::IQ3_XXS, T::IQ3_S,
                    T::IQ2_XXS, T::IQ2_XS, T::IQ2_S, T::IQ1_S, T::IQ1_M};
  for (Isa isa : simd_isas()) {
    for (T t : kAll) {
      for (int64_t n : row_lengths(t)) {
        for (Mode m : {Mode::Random, Mode::Pow2, Mode::Extreme}) {
          Bytes b;
          if (t == T::Q8_1 || t == T::Q8_K) b = gen.acts(t, n, m == Mode::Random ? Mode::Pow2 : m, gen.uni(-20, 20));
          else b = gen.weights(t, n, m, gen.uni(-24, 8));
          std::vector<float> ref(n), got(n, NAN);
          kernels(t, Isa::Scalar).to_float(b.data(), ref.data(), n);
          kernels(t, isa).to_float(b.data(), got.data(), n);
          ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), n * sizeof(float)))
              << isa_name(isa) << " " << type_name(t) << " n " << n << " mode " << int(m);
        }
      }
    }
  }
}

// Scales of one exponent make every sum exact (Gen::Pow2), so SIMD must equal scalar bit for bit;
// this covers all code values, subnormal f16 scales (2^-24) and the largest power-of-two scales.
TEST(KernelsSimd, VecDotExactPow2) {
  Gen gen(5);
  for (Isa isa : simd_isas()) {
    for (T t : kWeightTypes) {
      const T at = kernels(t, Isa::Scalar).vec_dot_type;
      for (int64_t n : row_lengths(t)) {
        if (n % blk(at)) continue;
        for (int rep = 0; rep < 4; ++rep) {
          const int ew = is_float(t) ? gen.uni(-20, 4) : t == T::MXFP4 ? gen.uni(-60, 60) : gen.uni(-24, 12);
          const int ea = is_float(t) ? gen.uni(-20, 4) : gen.uni(-12, 4);
          const bool extreme = rep == 3 && !is_float(t) && n <= 8 * blk(t);  // all-extreme codes only on short rows
          const Bytes w = gen.weights(t, n, extreme ? Mode::Extreme : Mode::Pow2, ew);
          Bytes a = gen.acts(at, n, extreme ? Mode::Extreme : Mode::Pow2, ea);
          if (extreme) {  // keep the power-of-two scales: re-draw them
            const Bytes wp = gen.weights(t, n, Mode::Pow2, ew);
            Bytes w2 = w;
            const size_t bb = type_info(t).block_bytes;
            for (size_t off = 0; off < w2.size(); off += bb) {
              if (t == T::MXFP4) w2[off] = wp[off];
              if (t == T::NVFP4) std::memcpy(&w2[off], &wp[off], 4);
              for (int f : f16_fields(t)) std::memcpy(&w2[off + f], &wp[off + f], 2);
            }
            EXPECT_EQ(dot(t, Isa::Scalar, w2, a, n), dot(t, isa, w2, a, n)) << isa_name(isa) << " " << type_name(t) << " n " << n;
            continue;
          }
          const float ref = dot(t, Isa::Scalar, w, a, n), got = dot(t, isa, w, a, n);
          EXPECT_EQ(ref, got) << isa_name(isa) << " " << type_name(t) << " n " << n << " ew " << ew << " ea " << ea;
        }
      }
    }
  }
}

// Random scales: float order matters, except where the SIMD form keeps the reference's order.
TEST(KernelsSimd, VecDotRandom) {
  Gen gen(6);
  for (Isa isa : simd_isas()) {
    for (T t : kWeightTypes) {
      const T at = kernels(t, Isa::Scalar).vec_dot_type;
      double worst = 0.0;
      for (int64_t n : row_lengths(t)) {
        if (n % blk(at)) continue;
        for (int rep = 0; rep < 3; ++rep) {
          const Mode m = rep == 2 ? Mode::Extreme : Mode::Random;
          const Bytes w = gen.weights(t, n, m, 0), a = gen.acts(at, n, Mode::Random, 0);
          const float ref = dot(t, Isa::Scalar, w, a, n), got = dot(t, isa, w, a, n);
          if (order_exact(t)) {
            EXPECT_EQ(std::memcmp(&ref, &got, sizeof ref), 0) << isa_name(isa) << " " << type_name(t) << " n " << n << ": " << got << " vs " << ref;
            continue;
          }
          const double scale = abs_terms(t, w, at, a, n);
          const double err = std::fabs(static_cast<double>(ref) - got);
          if (std::isinf(scale)) continue;  // extreme scales can overflow the float sum
          worst = std::max(worst, err / scale);
          EXPECT_LE(err, 1e-6 * scale) << isa_name(isa) << " " << type_name(t) << " n " << n << ": " << ref << " vs " << got;
        }
      }
      std::printf("%s %-7s worst |simd - scalar| / sum|terms| = %.2e\n", isa_name(isa), type_name(t), worst);
    }
  }
}

// The AMX-order F16 product (kernels.h): the same bits on every ISA, and a correct dot product.
TEST(KernelsSimd, F16AmxOrderSameOnEveryIsa) {
  Gen gen(9);
  for (int64_t n : {16, 32, 48, 64, 256, 1040, 7168}) {
    for (int rep = 0; rep < 4; ++rep) {
      const Bytes w = gen.weights(T::F16, n, Mode::Random, 0);
      std::vector<float> a(n);
      for (float& v : a) v = gen.normal();
      float ref = 0;
      kernels(T::F16, Isa::Scalar).dot_f16_f32_amx(n, &ref, w.data(), a.data());
      double exact = 0, terms = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double p = static_cast<double>(fp16_to_fp32(reinterpret_cast<const uint16_t*>(w.data())[i])) * a[i];
        exact += p, terms += std::fabs(p);
      }
      EXPECT_LE(std::fabs(ref - exact), 1e-6 * terms) << "n " << n;
      for (Isa isa : simd_isas()) {
        float got = 0;
        kernels(T::F16, isa).dot_f16_f32_amx(n, &got, w.data(), a.data());
        EXPECT_EQ(ref, got) << isa_name(isa) << " n " << n;
      }
    }
  }
}

// MXFP4 exhaustively: all 16 codes under all 256 exponents.
TEST(KernelsSimd, Mxfp4AllCodesAllExponents) {
  Gen gen(7);
  for (Isa isa : simd_isas()) {
    for (int e = 0; e < 256; ++e) {
      const int64_t n = 4 * QK;
      Bytes w(row_size(T::MXFP4, n));
      for (int b = 0; b < 4; ++b) {
        w[b * 17] = static_cast<uint8_t>(e);
        for (int j = 0; j < 16; ++j) w[b * 17 + 1 + j] = static_cast<uint8_t>((j + b) % 16 | ((15 - j + 3 * b) % 16) << 4);
      }
      std::vector<float> ref(n), got(n);
      kernels(T::MXFP4, Isa::Scalar).to_float(w.data(), ref.data(), n);
      kernels(T::MXFP4, isa).to_float(w.data(), got.data(), n);
      ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), n * sizeof(float))) << isa_name(isa) << " e " << e;
      // The activation scale keeps e's products finite and normal: the sum is then exact.
      const Bytes a = gen.acts(T::Q8_0, n, Mode::Pow2, std::clamp(100 - e, -24, 15));
      EXPECT_EQ(dot(T::MXFP4, Isa::Scalar, w, a, n), dot(T::MXFP4, isa, w, a, n)) << isa_name(isa) << " e " << e;
    }
  }
}

// The MXFP4 decode rows and tiles (gemm.h) under every exponent, as the vec_dot above: each group
// of 8 blocks takes its exponents in one vector (e8m0x8), so they must give the reference's bits
// for the subnormal scales (e = 0, 1) and the largest (254, 255) as for the rest. Rows of 11
// blocks: a full group, then a short one; block b's exponent is e + b (mod 256), so each row mixes
// neighbouring exponents and every exponent meets every lane.
TEST(KernelsSimd, Mxfp4RowsAllExponents) {
  Gen gen(11);
  const int64_t nb = 11, n = nb * QK, rows = 3, toks = 2;
  for (Isa isa : simd_isas()) {
    const GemmKernel* g = gemm_kernel(T::MXFP4, isa);
    ASSERT_NE(g, nullptr) << isa_name(isa);
    for (int e = 0; e < 256; ++e) {
      Bytes w(rows * row_size(T::MXFP4, n));
      for (int64_t b = 0; b < rows * nb; ++b) {
        w[b * 17] = static_cast<uint8_t>((e + b) % 256);
        for (int j = 0; j < 16; ++j) w[b * 17 + 1 + j] = static_cast<uint8_t>(gen.uni(0, 255));
      }
      const size_t wrow = row_size(T::MXFP4, n), arow = row_size(T::Q8_0, n), ps = g->packed_size(n);
      Bytes a, packed(ps * toks);
      for (int64_t k = 0; k < toks; ++k) {
        const Bytes ak = gen.acts(T::Q8_0, n, Mode::Pow2, std::clamp(100 - e, -24, 15));
        a.insert(a.end(), ak.begin(), ak.end());
        g->pack(a.data() + k * arow, packed.data() + k * ps, n);
      }
      std::vector<float> y(rows * toks);
      g->run(n, w.data(), wrow, rows, packed.data(), ps, toks, y.data(), rows);
      std::vector<float> dec(rows * toks, NAN);  // the decode entry, a token's rows in one call
      for (int64_t k = 0; k < toks; ++k) g->rows(n, w.data(), wrow, rows, packed.data() + k * ps, &dec[k * rows]);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < toks; ++k) {
          const Bytes wr(w.begin() + r * wrow, w.begin() + (r + 1) * wrow), ak(a.begin() + k * arow, a.begin() + (k + 1) * arow);
          const float want = dot(T::MXFP4, Isa::Scalar, wr, ak, n), one = dec[k * rows + r];
          ASSERT_EQ(0, std::memcmp(&want, &one, sizeof(float))) << isa_name(isa) << " rows() e " << e << " r " << r << " t " << k;
          ASSERT_EQ(0, std::memcmp(&want, &y[k * rows + r], sizeof(float))) << isa_name(isa) << " tile e " << e << " r " << r << " t " << k;
        }
    }
  }
}

// Every codebook entry, sign pattern, scale code and code byte of the types with a codebook or a
// small code space (codebooks.h) through every form of every ISA: vec_dot, the decode rows and the
// tiles, against the scalar vec_dot bit for bit (a power-of-two block scale; NVFP4 every scale byte).
TEST(KernelsSimd, CodebooksExhaustive) {
  Gen gen(12);
  const int64_t n = 2048, toks = 3;
  for (T t : test::kCodebookTypes) {
    const std::vector<uint8_t> w = test::codebook_blocks(t, fp32_to_fp16(0.25f));
    const size_t wrow = row_size(t, n);
    const int64_t rows = static_cast<int64_t>(w.size() / wrow);
    const T at = kernels(t, Isa::Scalar).vec_dot_type;
    const size_t arow = row_size(at, n);
    Bytes a;
    for (int64_t k = 0; k < toks; ++k) {
      const Bytes ak = gen.acts(at, n, k == 2 ? Mode::Extreme : Mode::Pow2, -3);
      a.insert(a.end(), ak.begin(), ak.end());
    }
    std::vector<float> want(rows * toks);
    for (int64_t k = 0; k < toks; ++k)
      for (int64_t r = 0; r < rows; ++r)
        kernels(t, Isa::Scalar).vec_dot(n, &want[k * rows + r], w.data() + r * wrow, a.data() + k * arow);
    for (Isa isa : simd_isas()) {
      int64_t bad = 0;
      std::vector<float> got(rows * toks, NAN);
      for (int64_t k = 0; k < toks; ++k)
        for (int64_t r = 0; r < rows; ++r) kernels(t, isa).vec_dot(n, &got[k * rows + r], w.data() + r * wrow, a.data() + k * arow);
      bad += std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0;
      const GemmKernel* g = gemm_kernel(t, isa);
      ASSERT_NE(g, nullptr) << isa_name(isa) << " " << type_name(t);
      const size_t ps = g->packed_size(n);
      Bytes packed(ps * toks);
      if (ps)
        for (int64_t k = 0; k < toks; ++k) g->pack(a.data() + k * arow, packed.data() + k * ps, n);
      std::fill(got.begin(), got.end(), NAN);
      g->run(n, w.data(), wrow, rows, ps ? packed.data() : a.data(), ps ? ps : arow, toks, got.data(), rows);
      bad += std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0;
      if (g->rows) {
        std::fill(got.begin(), got.end(), NAN);
        for (int64_t k = 0; k < toks; ++k) g->rows(n, w.data(), wrow, rows, packed.data() + k * ps, &got[k * rows]);
        bad += std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0;
      }
      EXPECT_EQ(bad, 0) << isa_name(isa) << " " << type_name(t);
    }
  }
}

// The lattice types exhaustively: rows naming every grid entry under every sign pattern (IQ2) or
// shift sign (IQ1) and every scale code (iq_blocks.h), with random f16 scales and activations.
// Every SIMD dot, tile and decode row gives the scalar reference's bits; the scalar dot agrees with
// ggml's within rounding.
TEST(KernelsSimd, LatticeExhaustive) {
  Gen gen(12);
  const test::GgmlCpu* g = test::GgmlCpu::get();
  for (T t : kLatticeTypes) {
    const Bytes w = test::iq_exhaustive_blocks(t, [&](int64_t) { return gen.scale16(Mode::Random, 0, false); });
    const int64_t n = static_cast<int64_t>(w.size() / type_info(t).block_bytes) * QK_K;
    const Bytes a = gen.acts(T::Q8_K, n, Mode::Random, 0);
    const float ref = dot(t, Isa::Scalar, w, a, n);
    if (g) {
      float theirs = NAN;
      g->traits(static_cast<uint32_t>(t))->vec_dot(static_cast<int>(n), &theirs, 0, w.data(), 0, a.data(), 0, 1);
      EXPECT_LE(std::fabs(static_cast<double>(ref) - theirs), 1e-6 * abs_terms(t, w, T::Q8_K, a, n)) << type_name(t);
    }
    // The same values as rows of 16 super-blocks, against 3 tokens, through the tiles.
    const int64_t rn = 16 * QK_K, rows = n / rn, toks = 3;
    const size_t wrow = row_size(t, rn), arow = row_size(T::Q8_K, rn);
    for (Isa isa : simd_isas()) {
      const float got = dot(t, isa, w, a, n);
      EXPECT_EQ(std::memcmp(&ref, &got, sizeof ref), 0) << isa_name(isa) << " " << type_name(t) << ": " << got << " vs " << ref;
      const GemmKernel* gk = gemm_kernel(t, isa);
      ASSERT_NE(gk, nullptr) << isa_name(isa) << " " << type_name(t);
      const size_t ps = gk->packed_size(rn);  // 0: the tile reads the Q8_K rows as they are
      Bytes packed(ps * toks);
      for (int64_t k = 0; ps && k < toks; ++k) gk->pack(a.data() + k * arow, packed.data() + k * ps, rn);
      std::vector<float> y(rows * toks);
      gk->run(rn, w.data(), wrow, rows, ps ? packed.data() : a.data(), ps ? ps : arow, toks, y.data(), rows);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < toks; ++k) {
          float want;
          kernels(t, isa).vec_dot(rn, &want, w.data() + r * wrow, a.data() + k * arow);
          ASSERT_EQ(std::memcmp(&want, &y[k * rows + r], sizeof want), 0) << isa_name(isa) << " " << type_name(t) << " tile r " << r << " t " << k;
        }
    }
  }
}

}  // namespace
}  // namespace k3
