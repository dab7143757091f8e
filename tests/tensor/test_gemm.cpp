// The tiled matrix-matrix kernels (and their decode rows) against the per-(row, token) vec_dot of
// the same ISA: every output must have the same bits, for shapes that leave partial tiles and
// partial block groups.
#include "tensor/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/quant_ref.h"

namespace k3 {
namespace {

using T = GgmlType;

const T kTypes[] = {T::F32,   T::F16,  T::BF16, T::Q8_0,  T::Q4_0,  T::Q5_0,  T::IQ4_NL,  T::MXFP4,
                    T::Q2_K,  T::Q2_K_SB, T::Q3_K, T::Q4_K, T::Q5_K,  T::Q6_K,  T::IQ4_XS, T::Q1_0,
                    T::Q2_0,  T::NVFP4, T::TQ1_0, T::TQ2_0, T::IQ3_XXS, T::IQ3_S, T::IQ2_XXS, T::IQ2_XS,
                    T::IQ2_S, T::IQ1_S, T::IQ1_M};

struct Case {
  int64_t n, rows, tokens;
};

// Returns the number of outputs compared (0 when the ISA has no tile for the type).
int64_t check(T t, Isa isa, const Case& cs, uint32_t seed) {
  const GemmKernel* g = gemm_kernel(t, isa);
  if (!g) return 0;
  const QuantKernels& kw = kernels(t, isa);
  const T vt = kw.vec_dot_type;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // Weight rows padded by 3 bytes so that rows are not aligned.
  const size_t wrow = row_size(t, cs.n), ws = wrow + 3;
  std::vector<uint8_t> w(ws * cs.rows, 0xCD);
  std::vector<float> f(cs.n), imatrix(cs.n, 1.0f);
  const float* qw = ref::requires_imatrix(t) ? imatrix.data() : nullptr;
  for (int64_t r = 0; r < cs.rows; ++r) {
    for (float& v : f) v = nd(rng) * 0.05f;
    quantize_rows(t == T::Q2_K_SB ? T::Q2_K : t, f.data(), w.data() + r * ws, 1, cs.n, qw);  // the same bytes
  }
  const size_t arow = row_size(vt, cs.n);
  std::vector<uint8_t> a(arow * cs.tokens);
  for (int64_t k = 0; k < cs.tokens; ++k) {
    for (float& v : f) v = nd(rng);
    kernels(vt, isa).from_float(f.data(), a.data() + k * arow, cs.n);
  }
  const size_t ps = g->packed_size(cs.n);
  std::vector<uint8_t> packed;
  const uint8_t* act = a.data();
  size_t stride = arow;
  if (ps) {
    packed.resize(ps * cs.tokens);
    for (int64_t k = 0; k < cs.tokens; ++k) g->pack(a.data() + k * arow, packed.data() + k * ps, cs.n);
    act = packed.data();
    stride = ps;
  }
  const int64_t ldy = cs.rows + 2;  // a wider output row: the tile must only write its own outputs
  std::vector<float> y(ldy * cs.tokens, -7.0f);
  g->run(cs.n, w.data(), ws, cs.rows, act, stride, cs.tokens, y.data(), ldy);
  for (int64_t k = 0; k < cs.tokens; ++k) {
    std::vector<float> dec(cs.rows, -7.0f);  // the decode entry, all rows in one call, same packed activation
    if (g->rows) g->rows(cs.n, w.data(), ws, cs.rows, act + k * stride, dec.data());
    for (int64_t r = 0; r < cs.rows; ++r) {
      float want;
      kw.vec_dot(cs.n, &want, w.data() + r * ws, a.data() + k * arow);
      const float got = y[k * ldy + r];
      EXPECT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
          << type_name(t) << " " << isa_name(isa) << " n=" << cs.n << " rows=" << cs.rows
          << " tokens=" << cs.tokens << " r=" << r << " t=" << k << ": " << got << " vs " << want;
      if (g->rows) {
        EXPECT_EQ(std::memcmp(&dec[r], &want, sizeof(float)), 0)
            << type_name(t) << " " << isa_name(isa) << " rows() n=" << cs.n << " r=" << r << " t=" << k << ": " << dec[r] << " vs " << want;
      }
    }
    for (int64_t r = cs.rows; r < ldy; ++r) EXPECT_EQ(y[k * ldy + r], -7.0f) << "wrote outside its tile";
  }
  return cs.rows * cs.tokens;
}

// F16, BF16, Q6_K and (but at AVX-512) F32 and Q5_K have decode rows (their tile over two rows, in
// parts) where decode_in_parts asks for them, else none (vec_dot a row); Q4_0, IQ4_NL and MXFP4
// have rows one at a time or in parts: both forms are checked, and that the table follows the switch.
// (At AVX-512 the Q2_K, Q3_K and Q5_K rows are always in parts.)
bool switched(T t, Isa isa) {
  return t == T::F16 || t == T::BF16 || t == T::Q6_K || ((t == T::F32 || t == T::Q5_K) && isa != Isa::Avx512) ||
         t == T::Q4_0 || t == T::IQ4_NL || t == T::MXFP4;
}
bool rows_without_parts(T t) { return t == T::Q4_0 || t == T::IQ4_NL || t == T::MXFP4; }

TEST(Gemm, BitIdenticalToVecDot) {
  // n: short rows (2, 4 and 7 blocks: one short 8-block group; 128 is ssm_f_b's width), whole
  // groups, groups plus tail blocks; for the float types also non-multiples of 16 and 64.
  const int64_t ns_block[] = {64, 128, 224, 512, 1120, 2048};
  const int64_t ns_float[] = {48, 64, 200, 1120, 1043};
  struct Restore {  // the CPU's own form again, also when an assertion ends the test
    bool parts = decode_in_parts();
    ~Restore() { set_decode_in_parts(parts); }
  } restore;
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    for (T t : kTypes)
      for (bool parts : {false, true}) {
        if (!parts && !switched(t, isa)) continue;
        set_decode_in_parts(parts);
        if (const GemmKernel* g = gemm_kernel(t, isa); g && switched(t, isa)) {
          EXPECT_EQ(g->rows != nullptr, parts || rows_without_parts(t)) << type_name(t) << " " << isa_name(isa);
          EXPECT_EQ(g->rows_in_parts, parts) << type_name(t) << " " << isa_name(isa);
        }
        const bool is_float = t == T::F32 || t == T::F16 || t == T::BF16;
        int64_t compared = 0;
        uint32_t seed = 1;
        for (int64_t n : is_float ? std::vector<int64_t>(std::begin(ns_float), std::end(ns_float))
                                  : std::vector<int64_t>(std::begin(ns_block), std::end(ns_block))) {
          if (n % type_info(t).block || n % type_info(kernels(t, isa).vec_dot_type).block) continue;
          for (int64_t rows : {1, 2, 3, 7})
            for (int64_t tokens : {1, 2, 3, 5, 9}) compared += check(t, isa, {n, rows, tokens}, seed++);
        }
        // Every token count 2..33 on one shape.
        const int64_t n = is_float ? 200 : type_info(t).block == 256 ? 768 : 1120;
        if (n % type_info(t).block == 0)
          for (int64_t tokens = 2; tokens <= 33; ++tokens) compared += check(t, isa, {n, 5, tokens}, seed++);
        // A kernel that takes its own token count a call (the lattice types): around it and past twice it.
        if (const GemmKernel* g = gemm_kernel(t, isa); g && g->tokens > 0)
          for (int64_t tokens : {g->tokens - 1, g->tokens, g->tokens + 1, 2 * g->tokens + 3})
            compared += check(t, isa, {n, 3, tokens}, seed++);
        const bool expect_tile = isa != Isa::Scalar && t != T::IQ4_XS;
        EXPECT_EQ(compared > 0, expect_tile) << type_name(t) << " " << isa_name(isa);
      }
  }
}

// gemm_rows (the calling-thread entry MLA uses) under every ISA, packed and unpacked types.
TEST(Gemm, RowsEntryMatchesVecDot) {
  const Isa saved = active_isa();
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    set_isa(isa);
    for (T t : {T::F32, T::Q8_0}) {
      const int64_t n = 320, rows = 13, tokens = 6;
      const QuantKernels& kw = kernels(t);
      std::mt19937 rng(7);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> f(n * std::max(rows, tokens));
      for (float& v : f) v = nd(rng);
      const size_t ws = row_size(t, n), as = row_size(kw.vec_dot_type, n);
      std::vector<uint8_t> w(ws * rows), a(as * tokens);
      quantize_rows(t, f.data(), w.data(), rows, n, nullptr);
      for (int64_t k = 0; k < tokens; ++k) kernels(kw.vec_dot_type).from_float(f.data() + (k + 3) * n, a.data() + k * as, n);
      std::vector<float> y(rows * tokens);
      gemm_rows(t, n, w.data(), ws, rows, a.data(), as, tokens, y.data(), rows);
      for (int64_t k = 0; k < tokens; ++k)
        for (int64_t r = 0; r < rows; ++r) {
          float want;
          kw.vec_dot(n, &want, w.data() + r * ws, a.data() + k * as);
          EXPECT_EQ(std::memcmp(&y[k * rows + r], &want, sizeof want), 0) << type_name(t) << " " << isa_name(isa);
        }
    }
  }
  set_isa(saved);
}

}  // namespace
}  // namespace k3
