// Repacked layouts (tensor/repack.h): a repacked row holds the file row's values, its reference
// dot gives the file type's bits, and every SIMD tile and decode row gives the reference's bits.
#include "tensor/repack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/gemm.h"
#include "tensor/kernels.h"

namespace k3 {
namespace {

using T = GgmlType;
using Bytes = std::vector<uint8_t>;

std::vector<Isa> simd_isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::Avx2, Isa::AvxVnni, Isa::Avx512})
    if (isa_supported(i)) v.push_back(i);
  return v;
}

// rows file-type rows of n elements with random codes. MXFP4: exponents 2 + (base + block index)
// mod 254, every one the lanes layout holds; Q8_0: scales ±2^(base / 16 - 8) with random
// mantissas, codes -128..127; Q4_K: d and dmin so, random 6-bit scales and mins.
Bytes random_rows(T t, std::mt19937& rng, int64_t rows, int64_t n, int base) {
  Bytes w(rows * row_size(t, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  const size_t bs = type_info(t).block_bytes;
  for (size_t b = 0; b < w.size() / bs; ++b) {
    if (t == T::MXFP4) {
      w[b * bs] = static_cast<uint8_t>(2 + (base + b) % 254);
    } else {
      for (int k = 0; k < (t == T::Q4_K ? 2 : 1); ++k) {  // Q4_K: d, dmin
        const float d = std::ldexp(1.0f + byte(rng) / 256.0f, base / 16 - 8) * (byte(rng) % 2 ? -1 : 1);
        const uint16_t h = fp32_to_fp16(d);
        std::memcpy(&w[b * bs + 2 * k], &h, 2);
      }
    }
  }
  return w;
}

// An activation row for weights of type t (Q8_0 or Q8_K) whose scale 2^s keeps every product with
// the weights finite and normal.
Bytes activation(T t, std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng) * scale;
  const T vt = kernels(t).vec_dot_type;
  Bytes a(row_size(vt, n));
  kernels(vt, Isa::Scalar).from_float(x.data(), a.data(), n);
  return a;
}

Bytes repacked(T t, const Bytes& w, int64_t rows, int64_t n) {
  Bytes r = w;
  repack_rows(t, r.data(), rows, n, row_size(t, n));
  return r;
}

// File types and the layouts they repack into. Q4_K_LANES sums in an order of its own (sub-block
// lanes, dot_ref.cpp); the others keep the file type's bits.
constexpr std::pair<T, T> kPairs[] = {{T::MXFP4, T::MXFP4_LANES}, {T::Q8_0, T::Q8_0_X8}, {T::Q4_K, T::Q4_K_LANES}};

float dot(T t, Isa isa, const uint8_t* w, const uint8_t* a, int64_t n) {
  float s;
  kernels(t, isa).vec_dot(n, &s, w, a);
  return s;
}

TEST(Repack, WhichRowsRepack) {
  for (auto [file, lanes] : kPairs) {
    EXPECT_EQ(repacked_type(file, 7168, 8), lanes);
    EXPECT_EQ(repacked_type(file, 256, 8), lanes);
    EXPECT_EQ(repacked_type(file, 288, 8), file);  // 9 blocks: not whole groups
    EXPECT_EQ(row_size(lanes, 7168), row_size(file, 7168));
  }
  EXPECT_EQ(repacked_type(T::Q6_K, 7168, 8), T::Q6_K);
  Bytes q(row_size(T::Q6_K, 256), 7);
  repack_rows(T::Q6_K, q.data(), 1, 256, q.size());
  EXPECT_EQ(q, Bytes(q.size(), 7));  // no faster layout: untouched
}

// Q2_K becomes Q2_K_SB where llama.cpp repacks it (its AVX-512 builds, a multiple of 8 rows): the
// same bytes, only the order of the sums changes.
TEST(Repack, Q2KSummedPerSuperBlockAtAvx512) {
  const Isa was = active_isa();
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    set_isa(isa);
    const T want = isa == Isa::Avx512 ? T::Q2_K_SB : T::Q2_K;
    EXPECT_EQ(repacked_type(T::Q2_K, 7168, 64), want) << isa_name(isa);
    EXPECT_EQ(repacked_type(T::Q2_K, 7168, 12), T::Q2_K) << isa_name(isa);
  }
  set_isa(was);
  EXPECT_TRUE(repack_keeps_bytes(T::Q2_K));
  EXPECT_FALSE(repack_keeps_bytes(T::Q8_0));
  Bytes q(row_size(T::Q2_K, 256), 7);
  repack_rows(T::Q2_K, q.data(), 1, 256, q.size());
  EXPECT_EQ(q, Bytes(q.size(), 7));
  EXPECT_EQ(row_size(T::Q2_K_SB, 7168), row_size(T::Q2_K, 7168));
  EXPECT_EQ(type_info(static_cast<uint32_t>(T::Q2_K_SB)), nullptr);  // never in a file
}

// MXFP4 scales 2^-128 and 2^-127 (exponents 0, 1) are subnormal as f32, which the lanes layout's
// exponent fields cannot hold: rows with one such block anywhere stay in the file's layout.
TEST(Repack, Mxfp4SubnormalScalesAreNotRepackable) {
  std::mt19937 rng(3);
  const int64_t n = 512, rows = 3, blocks = rows * n / QK;
  const size_t rs = row_size(T::MXFP4, n);
  const Bytes w = random_rows(T::MXFP4, rng, rows, n, 0);
  EXPECT_TRUE(repackable(T::MXFP4, w.data(), rows, n, rs));
  for (int e : {0, 1})
    for (int64_t b : {int64_t{0}, blocks / 2, blocks - 1}) {
      Bytes t = w;
      t[b * sizeof(block_mxfp4)] = static_cast<uint8_t>(e);
      EXPECT_FALSE(repackable(T::MXFP4, t.data(), rows, n, rs)) << "exponent " << e << " in block " << b;
      // a narrower view reads the first 256 elements of each row: the block counts where it is one of them
      EXPECT_EQ(repackable(T::MXFP4, t.data(), rows, 256, rs), b % (n / QK) >= 256 / QK) << "block " << b;
    }
  Bytes q = random_rows(T::Q8_0, rng, rows, n, 100);
  EXPECT_TRUE(repackable(T::Q8_0, q.data(), rows, n, row_size(T::Q8_0, n)));
}

// Never read from or written to a file: the file-type lookups do not know it.
TEST(Repack, NotAFileType) {
  for (auto [file, lanes] : kPairs) {
    EXPECT_EQ(type_info(static_cast<uint32_t>(lanes)), nullptr);
    ASSERT_NE(find_type(lanes), nullptr);
    EXPECT_EQ(type_by_name(type_name(lanes)), nullptr) << type_name(lanes);
  }
  EXPECT_STREQ(type_name(T::MXFP4_LANES), "mxfp4_lanes");
}

TEST(Repack, SameValuesSameReferenceBits) {
  std::mt19937 rng(5);
  for (auto [file, lanes] : kPairs)
    for (int64_t n : {256, 768, 7168}) {
      const int64_t rows = 3;
      const Bytes w = random_rows(file, rng, rows, n, 110), l = repacked(file, w, rows, n);
      const size_t rs = row_size(file, n);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> want(n), got(n);
        kernels(file, Isa::Scalar).to_float(w.data() + r * rs, want.data(), n);
        kernels(lanes, Isa::Scalar).to_float(l.data() + r * rs, got.data(), n);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), n * sizeof(float))) << type_name(lanes) << " n " << n;
        const Bytes a = activation(file, rng, n, 1.0f);
        const float f = dot(file, Isa::Scalar, w.data() + r * rs, a.data(), n);
        const float g = dot(lanes, Isa::Scalar, l.data() + r * rs, a.data(), n);
        if (lanes == T::Q4_K_LANES) {  // the same integer sums, added in another order
          std::vector<float> av(n);
          kernels(kernels(file).vec_dot_type, Isa::Scalar).to_float(a.data(), av.data(), n);
          double mag = 0.0;
          for (int64_t e = 0; e < n; ++e) mag += std::fabs(static_cast<double>(want[e]) * av[e]);
          EXPECT_NEAR(f, g, 1e-6 * mag) << "n " << n;
        } else {
          EXPECT_EQ(0, std::memcmp(&f, &g, sizeof(float))) << type_name(lanes) << " n " << n << ": " << f << " vs " << g;
        }
      }
    }
}

// Tiles (partial tiles: 5 rows, 1-6 tokens) and decode rows against the scalar reference, on rows
// that are not aligned; every exponent meets every lane (exponent = base + block index). At AVX-512
// both forms of the table (full_width_512: the 512-bit decode rows and Q8_0_X8's 512-bit prefill
// tiles, or the 256-bit ones); at every level the rows that may run either way (the 256-bit
// Q4_K_LANES rows, the MXFP4_LANES rows) in one part and in two (decode_in_parts), whichever
// this CPU uses.
TEST(Repack, TilesAndRowsGiveReferenceBits) {
  std::mt19937 rng(9);
  struct Restore {  // the CPU's own forms again, also when an assertion ends the test
    bool full = full_width_512(), parts = decode_in_parts();
    ~Restore() { set_full_width_512(full), set_decode_in_parts(parts); }
  } restore;
  for (auto [file, lanes] : kPairs)
    for (Isa isa : simd_isas())
      for (int form = 0; form < 4; ++form) {
        const bool full_width = form < 2, parts = form % 2;
        if (!full_width && isa != Isa::Avx512) continue;
        set_full_width_512(full_width), set_decode_in_parts(parts);
        const std::string how = std::string(full_width ? "" : " (256-bit rows)") + (parts ? " (rows in parts)" : "");
        const GemmKernel* g = gemm_kernel(lanes, isa);
        ASSERT_NE(g, nullptr) << isa_name(isa);
        ASSERT_NE(g->rows, nullptr) << isa_name(isa);
        // the 256-bit Q4_K_LANES rows and the MXFP4_LANES rows take the form asked for; Q8_0_X8's
        // and the 512-bit Q4_K_LANES ones are always in parts
        const bool in_parts = lanes == T::Q8_0_X8 || (lanes == T::Q4_K_LANES && isa == Isa::Avx512) || parts;
        ASSERT_EQ(in_parts, g->rows_in_parts) << type_name(lanes) << " " << isa_name(isa) << how;
        for (int base = 0; base < 256; base += 7) {
          const int64_t n = base % 2 ? 512 : 1792, rows = 5, toks = 1 + base % 19;  // tiles of 8 tokens: whole, partial, odd
          const size_t rs = row_size(file, n), ws = rs + 3, arow = row_size(kernels(file).vec_dot_type, n),
                       ps = g->packed_size(n);
          const Bytes l = repacked(file, random_rows(file, rng, rows, n, base), rows, n);
          Bytes w(rows * ws);
          for (int64_t r = 0; r < rows; ++r) std::memcpy(&w[r * ws], &l[r * rs], rs);
          Bytes a, packed(ps * toks);
          // MXFP4's exponent e scales by 2^(e - 128): an activation of 2^(100 - e) keeps the products normal.
          const float scale = file == T::MXFP4 ? std::ldexp(1.0f, std::clamp(100 - base, -24, 15)) : 1.0f;
          for (int64_t k = 0; k < toks; ++k) {
            const Bytes ak = activation(file, rng, n, scale);
            a.insert(a.end(), ak.begin(), ak.end());
            g->pack(a.data() + k * arow, packed.data() + k * ps, n);
          }
          std::vector<float> y(rows * toks);
          g->run(n, w.data(), ws, rows, packed.data(), ps, toks, y.data(), rows);
          std::vector<float> dec(rows * toks, NAN);  // the decode entry, all rows of a token in one call
          for (int64_t k = 0; k < toks; ++k) g->rows(n, w.data(), ws, rows, packed.data() + k * ps, &dec[k * rows]);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t k = 0; k < toks; ++k) {
              const float want = dot(lanes, Isa::Scalar, &w[r * ws], &a[k * arow], n), one = dec[k * rows + r];
              ASSERT_EQ(0, std::memcmp(&want, &one, sizeof(float)))
                  << type_name(lanes) << " " << isa_name(isa) << how << " rows() base " << base << " r " << r << " t " << k << ": "
                  << one << " vs " << want;
              ASSERT_EQ(0, std::memcmp(&want, &y[k * rows + r], sizeof(float)))
                  << type_name(lanes) << " " << isa_name(isa) << " tile base " << base << " r " << r << " t " << k;
            }
        }
      }
}

}  // namespace
}  // namespace k3
