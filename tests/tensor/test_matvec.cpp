// matvec_batch (and matvec_here): every output is one vec_dot (same bits as calling it), for any
// thread count and grouping; groups see their rows in `then` after all of the group's products for
// those rows.
#include "tensor/matvec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <random>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/repack.h"

namespace k3 {
namespace {

using T = GgmlType;

struct Mat {
  T type;
  int64_t ne0, ne1;
  std::vector<uint8_t> w;
  WeightView view() const { return {type, w.data(), ne0, ne1, row_size(type, ne0)}; }
};

Mat make(T t, int64_t ne0, int64_t ne1, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> f(ne0 * ne1);
  for (float& v : f) v = nd(rng);
  Mat m{t, ne0, ne1, std::vector<uint8_t>(row_size(t, ne0) * ne1)};
  quantize_rows(t, f.data(), m.w.data(), ne1, ne0, nullptr);
  return m;
}

TEST(Matvec, BatchIsOneVecDotPerOutput) {
  // Four groups of two (gate/up-like pairs) over 1024 inputs: 2 x 4 x 200 rows, several chunks each.
  std::vector<Mat> mats;
  for (int i = 0; i < 8; ++i) mats.push_back(make(i % 3 ? T::MXFP4 : T::Q8_0, 1024, 200, 40 + i));
  std::vector<float> x(1024);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> buf_q, buf_m;
  const Isa saved = active_isa();
  for (Isa isa : kAllIsas) {  // decode rows on packed activations (AVX2, AVX-VNNI) or vec_dot
  if (!isa_supported(isa)) continue;
  set_isa(isa);
  for (int n_threads : {1, 2, 3}) {
    ThreadPool pool(n_threads);
    std::vector<std::vector<float>> y(8, std::vector<float>(200, -1.0f));
    std::vector<Matvec> mv;
    for (int i = 0; i < 8; ++i)
      mv.push_back({mats[i].view(), quantize_activation(mats[i].type, x.data(), 1024, i % 3 ? buf_m : buf_q), y[i].data()});
    std::vector<std::atomic<int>> seen(4 * 200);
    matvec_batch(mv.data(), mv.size(), 2, pool, 32, [&](size_t g, int64_t r0, int64_t r1) {
      ASSERT_EQ(r0 % 32, 0);
      for (int64_t r = r0; r < r1; ++r) {
        ASSERT_NE(y[2 * g][r], -1.0f);  // both products of the group are done for these rows
        ASSERT_NE(y[2 * g + 1][r], -1.0f);
        seen[g * 200 + r]++;
      }
    });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
    for (int i = 0; i < 8; ++i)
      for (int64_t r = 0; r < 200; ++r) {
        float s;
        kernels(mats[i].type).vec_dot(1024, &s, mats[i].w.data() + r * row_size(mats[i].type, 1024),
                                      mv[i].xq);
        ASSERT_EQ(s, y[i][r]) << isa_name(isa) << " threads " << n_threads << " product " << i << " row " << r;
      }
  }
  }
  set_isa(saved);
}

TEST(Matvec, SeveralTokensAreOneVecDotPerOutput) {
  // Products of 1-12 tokens (decode, the rows of a verify pass, an expert's rows of a short prompt)
  // through each ISA's decode rows and tiles: the file layouts and their lanes, types with and
  // without packed activations and one without tiles (IQ4_XS), at K3-like widths and the tiny
  // models' one-block width, in groups of two whose tokens share their activations, strided
  // activations and outputs: every output is that (row, token)'s vec_dot.
  const T types[] = {T::F32, T::F16, T::BF16, T::Q8_0, T::Q8_0_X8, T::MXFP4, T::MXFP4_LANES, T::Q4_K, T::Q4_K_LANES, T::IQ4_XS};
  const int64_t rows = 151;  // odd: the few-token tiles run a last row alone (few_parts)
  const Isa saved = active_isa();
  for (const int64_t n : {1024, 32})
  for (size_t i = 0; i < std::size(types); ++i) {
    const T file = types[i] == T::Q8_0_X8       ? T::Q8_0
                   : types[i] == T::MXFP4_LANES ? T::MXFP4
                   : types[i] == T::Q4_K_LANES  ? T::Q4_K
                                                : types[i];
    if (n % type_info(file).block || (file != types[i] && repacked_type(file, n, rows) != types[i])) continue;
    Mat mats[2];
    for (int j = 0; j < 2; ++j) {
      mats[j] = make(file, n, rows, 70 + 2 * static_cast<uint32_t>(i) + j);
      if (file != types[i]) repack_rows(file, mats[j].w.data(), rows, n, row_size(file, n)), mats[j].type = types[i];
    }
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const GgmlType vt = kernels(types[i]).vec_dot_type;
    const size_t xs = row_size(vt, n) + 32;  // n_tok rows, 32 bytes apart more than a row
    for (Isa isa : kAllIsas) {
      if (!isa_supported(isa)) continue;
      set_isa(isa);
      ThreadPool pool(2);
      for (int64_t n_tok = 1; n_tok <= 12; ++n_tok) {
        std::vector<uint8_t> act(n_tok * xs);
        for (int64_t t = 0; t < n_tok; ++t) {
          std::vector<float> x(n);
          for (float& v : x) v = nd(rng);
          kernels(vt).from_float(x.data(), act.data() + t * xs, n);
        }
        std::vector<std::vector<float>> y(2, std::vector<float>(n_tok * (rows + 7), -1.0f));
        Matvec mv[2];
        for (int j = 0; j < 2; ++j) mv[j] = {mats[j].view(), act.data(), y[j].data(), n_tok, xs, rows + 7};
        matvec_batch(mv, 2, 2, pool);
        for (int j = 0; j < 2; ++j)
          for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              float s;
              kernels(types[i]).vec_dot(n, &s, mats[j].w.data() + r * row_size(types[i], n), act.data() + t * xs);
              ASSERT_EQ(s, y[j][t * (rows + 7) + r]) << isa_name(isa) << " " << type_name(types[i]) << " n " << n
                                                     << " tokens " << n_tok << " token " << t << " row " << r;
            }
        if (n_tok == 1) {  // matvec_here, a region's thread alone: the same kernels, the same bits
          std::vector<std::vector<float>> yb = y;
          for (int j = 0; j < 2; ++j) std::fill(y[j].begin(), y[j].end(), -1.0f);
          MatvecPacks packs;
          matvec_here(mv, 2, packs);
          ASSERT_EQ(y, yb) << isa_name(isa) << " " << type_name(types[i]) << " n " << n;
        }
      }
    }
  }
  set_isa(saved);
}

TEST(Matvec, DecodeRowsOfAnyCountAreOneVecDotPerOutput) {
  // The llama.cpp-order rows (Q8_0, Q5_0, Q8_0_X8) and the 512-bit Q4_K_LANES, Q2_K (Q2_K_SB: the
  // same bytes), Q3_K and Q5_K rows take a chunk's rows in one call and run them in parts, an odd
  // last row alone: every row count up to 19, and 45 (several chunks on two threads), rows of 256
  // and 2048 inputs, as a group of two products.
  const T types[] = {T::Q8_0, T::Q5_0, T::Q8_0_X8, T::Q4_K_LANES, T::Q2_K, T::Q2_K_SB, T::Q3_K, T::Q5_K};
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const Isa saved = active_isa();
  ThreadPool pool(2);
  for (T t : types)
    for (int64_t n : {256, 2048}) {
      std::vector<float> x(n);
      for (float& v : x) v = nd(rng);
      std::vector<uint8_t> buf;
      const void* xq = quantize_activation(t, x.data(), n, buf);
      for (int64_t rows = 1; rows <= 45; rows += rows < 19 ? 1 : 26) {
        const T file = t == T::Q8_0_X8 ? T::Q8_0 : t == T::Q4_K_LANES ? T::Q4_K : t == T::Q2_K_SB ? T::Q2_K : t;
        Mat m[2] = {make(file, n, rows, 90 + static_cast<uint32_t>(rows)), make(file, n, rows, 190 + static_cast<uint32_t>(rows))};
        for (Mat& mi : m) {
          if (file != t) repack_rows(file, mi.w.data(), rows, n, row_size(file, n));  // Q2_K_SB: bytes kept
          mi.type = t;
        }
        for (Isa isa : kAllIsas) {
          if (!isa_supported(isa)) continue;
          set_isa(isa);
          std::vector<float> y[2] = {std::vector<float>(rows, -1.0f), std::vector<float>(rows, -1.0f)};
          const Matvec mv[2] = {{m[0].view(), xq, y[0].data()}, {m[1].view(), xq, y[1].data()}};
          matvec_batch(mv, 2, 2, pool);
          for (int j = 0; j < 2; ++j)
            for (int64_t r = 0; r < rows; ++r) {
              float s;
              kernels(t).vec_dot(n, &s, m[j].w.data() + r * row_size(t, n), xq);
              ASSERT_EQ(s, y[j][r]) << isa_name(isa) << " " << type_name(t) << " n " << n << " rows " << rows << " row " << r;
            }
        }
      }
    }
  set_isa(saved);
}

// A region is cut by the decode chunk rule in force (kernels.h, decode_chunks): chunks of
// clamp(region bytes / (threads · per_thread), 64 KiB, max_kib KiB) of whole rows, each group's rows
// cut from its first row on, the last chunk of a group shorter; every row in one chunk.
TEST(Matvec, RegionsAreCutByTheDecodeChunkRule) {
  struct Restore {
    DecodeChunks rule = decode_chunks();
    ~Restore() { set_decode_chunks(rule); }
  } restore;
  const int64_t n = 2048, rows[2] = {4096, 40};  // Q8_0: 2176 bytes a row, 8.5 MiB and 85 KiB
  const Mat m[2] = {make(T::Q8_0, n, rows[0], 3), make(T::Q8_0, n, rows[1], 4)};
  const size_t row = row_size(T::Q8_0, n), bytes = row * static_cast<size_t>(rows[0] + rows[1]);
  std::vector<float> x(n, 0.25f), y[2] = {std::vector<float>(rows[0]), std::vector<float>(rows[1])};
  std::vector<uint8_t> buf;
  const void* xq = quantize_activation(T::Q8_0, x.data(), n, buf);
  const Matvec mv[2] = {{m[0].view(), xq, y[0].data()}, {m[1].view(), xq, y[1].data()}};
  // the cap (4096, 1024, 64 KiB), the claims (4 and 3 a thread under a cap they do not reach), the floor
  for (const DecodeChunks rule : {DecodeChunks{1, 4096}, DecodeChunks{2, 1024}, DecodeChunks{4, 4096}, DecodeChunks{3, 65536},
                                  DecodeChunks{64, 64}, DecodeChunks{64, 65536}})
    for (const int threads : {2, 3}) {
      set_decode_chunks(rule);
      ThreadPool pool(threads);
      std::mutex mu;
      std::vector<std::array<int64_t, 3>> cuts;  // group, first row, end row
      matvec_batch(mv, 2, 1, pool, 1, [&](size_t g, int64_t r0, int64_t r1) {
        std::lock_guard<std::mutex> lk(mu);
        cuts.push_back({static_cast<int64_t>(g), r0, r1});
      });
      std::sort(cuts.begin(), cuts.end());
      const size_t chunk = std::clamp(bytes / (static_cast<size_t>(threads) * rule.per_thread), size_t{64} << 10, rule.max_kib << 10);
      const int64_t per = static_cast<int64_t>(chunk / row);
      std::vector<std::array<int64_t, 3>> want;
      for (int64_t g = 0; g < 2; ++g)
        for (int64_t r = 0; r < rows[g]; r += per) want.push_back({g, r, std::min(rows[g], r + per)});
      EXPECT_EQ(cuts, want) << rule.per_thread << ":" << rule.max_kib << " on " << threads << " threads";
    }
}

TEST(Matvec, LargeMatmulSameBitsAnyThreads) {
  const Mat m = make(T::Q8_0, 2048, 600, 1);  // 1.3 MB: many chunks
  std::vector<float> x(2048, 0.5f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  std::vector<float> ref(600);
  {
    ThreadPool pool(1);
    matmul(m.view(), x.data(), 1, ref.data(), pool);
  }
  for (int n : {2, 3}) {
    ThreadPool pool(n);
    std::vector<float> y(600);
    for (int rep = 0; rep < 50; ++rep) {
      matmul(m.view(), x.data(), 1, y.data(), pool);
      ASSERT_EQ(y, ref) << n << " threads, repetition " << rep;
    }
  }
}

}  // namespace
}  // namespace k3
