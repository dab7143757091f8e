// Every type k3 quantize writes against ggml's ggml_quantize_chunk (the libggml-base.so of
// node-llama-cpp 3.22.1, dlopen'ed) and the project's reference quantizers: byte for byte, on
// random, heavy-tailed, MXFP4-sourced and edge-case data, with and without an importance matrix,
// through the SIMD searches of every ISA this CPU has (and the scalar fallback).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../tensor/ggml_ref.h"
#include "common/error.h"
#include "quantize/fast_kquants.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"

using namespace k3;

namespace {

enum class Data { Normal, HeavyTail, Mxfp4, Edge, Tiny, Grid };

std::vector<float> make_data(Data kind, int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<float> x(n);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::student_t_distribution<float> td(1.5f);
  switch (kind) {
    case Data::Normal:
      for (auto& v : x) v = 0.02f * nd(g);
      break;
    case Data::HeavyTail:
      for (auto& v : x) v = 0.01f * td(g);
      for (int64_t i = 0; i < n; i += 97) x[i] *= 50.f;  // outliers
      break;
    case Data::Mxfp4: {
      // Expert weights as the checkpoint stores them: MXFP4 blocks, dequantized.
      std::vector<float> src(n);
      for (auto& v : src) v = 0.02f * nd(g);
      std::vector<uint8_t> q(row_size(GgmlType::MXFP4, n));
      ref::quantize_rows(GgmlType::MXFP4, src.data(), q.data(), 1, n, nullptr);
      ref::dequantize_row(GgmlType::MXFP4, q.data(), x.data(), n);
      break;
    }
    case Data::Tiny:
      // ranges so small that nmax/(max - min) overflows (the SIMD search hands them to scalar
      // code), subnormals, and ordinary blocks in between
      for (int64_t i = 0; i < n; ++i) {
        const int64_t blk = (i / 16) % 4;
        if (blk == 0) x[i] = 1e-39f * static_cast<float>(i % 5);
        else if (blk == 1) x[i] = -3e-38f + 1e-45f * static_cast<float>(i % 3);
        else if (blk == 2) x[i] = 1e-36f * nd(g);
        else x[i] = nd(g);
      }
      break;
    case Data::Grid:
      // values on a coarse grid: many rounding ties in every search
      for (auto& v : x) v = 0.125f * static_cast<float>(static_cast<int>(8 * nd(g)));
      break;
    case Data::Edge:
      // zero blocks, constant blocks, one non-zero value, tiny values, negative-only blocks
      for (int64_t i = 0; i < n; ++i) {
        const int64_t blk = (i / 32) % 6;
        if (blk == 0) x[i] = 0.f;
        else if (blk == 1) x[i] = 0.5f;
        else if (blk == 2) x[i] = (i % 32 == 7) ? 3.f : 0.f;
        else if (blk == 3) x[i] = 1e-20f * nd(g);
        else if (blk == 4) x[i] = -std::fabs(nd(g));
        else x[i] = nd(g);
      }
      break;
  }
  return x;
}

std::vector<float> make_imatrix(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::exponential_distribution<float> ed(1.f);
  std::vector<float> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = (i % 61 == 0) ? 0.f : ed(g);
  return w;
}

const GgmlType kAllTypes[] = {GgmlType::F16,     GgmlType::BF16,   GgmlType::Q4_0,  GgmlType::Q4_1,   GgmlType::Q5_0,
                              GgmlType::Q5_1,    GgmlType::Q8_0,   GgmlType::Q2_K,  GgmlType::Q3_K,   GgmlType::Q4_K,
                              GgmlType::Q5_K,    GgmlType::Q6_K,   GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                              GgmlType::Q1_0,    GgmlType::Q2_0,   GgmlType::TQ1_0, GgmlType::TQ2_0,  GgmlType::NVFP4,
                              GgmlType::IQ3_XXS, GgmlType::IQ3_S,
                              GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ1_S,  GgmlType::IQ1_M};

bool is_lattice(GgmlType t) {
  return t == GgmlType::IQ2_XXS || t == GgmlType::IQ2_XS || t == GgmlType::IQ2_S || t == GgmlType::IQ1_S || t == GgmlType::IQ1_M;
}

struct Case {
  Data data;
  bool imatrix;
};

}  // namespace

TEST(GgmlParity, EveryWriterIsByteExact) {
  const test::GgmlRef* g = test::GgmlRef::get();
  ASSERT_NE(g, nullptr) << test::GgmlRef::load_error();
  int checked = 0;
  // row lengths: one super-block (a partial SIMD batch), a few, and K3's hidden size
  for (int64_t n : {256, 1024, 7168}) {
    const int64_t rows = n == 7168 ? 3 : 12;
    for (Data d : {Data::Normal, Data::HeavyTail, Data::Mxfp4, Data::Edge, Data::Tiny, Data::Grid}) {
      const std::vector<float> x = make_data(d, n * rows, 17 + static_cast<int>(d) + static_cast<uint32_t>(n));
      const std::vector<float> qw = make_imatrix(n, 5 + static_cast<int>(d));
      for (GgmlType t : kAllTypes) {
        if (is_lattice(t)) continue;  // no SIMD search; test_quant_exact holds their writers to ggml
        for (bool im : {false, true}) {
          const float* w = im ? qw.data() : nullptr;
          const size_t rb = row_size(t, n), bytes = rb * rows;
          std::vector<uint8_t> want(bytes), got_ref(bytes);
          ASSERT_EQ(g->quantize_chunk(t, x.data(), want.data(), rows, n, w), bytes);
          ref::quantize_rows(t, x.data(), got_ref.data(), rows, n, w);
          EXPECT_EQ(0, std::memcmp(want.data(), got_ref.data(), bytes))
              << "reference vs ggml: " << type_name(t) << " n " << n << " data " << static_cast<int>(d) << " imatrix " << im;
          for (Isa isa : kAllIsas) {
            if (!isa_supported(isa)) continue;
            set_isa(isa);
            if (isa != Isa::Scalar && !quant::has_fast_path(t)) continue;  // the reference again
            std::vector<uint8_t> got(bytes, 0xAB);
            EXPECT_EQ(quant::quantize_rows(t, x.data(), got.data(), rows, n, w), bytes);
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_EQ(0, std::memcmp(want.data() + r * rb, got.data() + r * rb, rb))
                  << type_name(t) << " n " << n << " row " << r << " isa " << isa_name(isa) << " data "
                  << static_cast<int>(d) << " imatrix " << im;
            ++checked;
          }
          set_isa(cpu_best_isa());
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// Where ggml needs an importance matrix (ggml_quantize_requires_imatrix), k3's row quantizer refuses
// without one, naming the type and how to make one.
TEST(GgmlParity, RefusesWithoutImatrixWhereGgmlNeedsOne) {
  const test::GgmlRef* g = test::GgmlRef::get();
  ASSERT_NE(g, nullptr) << test::GgmlRef::load_error();
  std::vector<float> x(256, 0.5f);
  std::vector<uint8_t> out(row_size(GgmlType::F32, 256));  // room for any type
  for (GgmlType t : kAllTypes) {
    bool threw = false;
    try {
      quant::quantize_rows(t, x.data(), out.data(), 1, 256, nullptr);
    } catch (const Error& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find(type_name(t)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("k3 imatrix"), std::string::npos) << e.what();
    }
    EXPECT_EQ(threw, g->requires_imatrix(t)) << type_name(t);
  }
}
