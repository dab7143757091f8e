#include "tensor/matmul.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"

namespace k3 {
namespace {

using T = GgmlType;

const T kWeightTypes[] = {T::F32,     T::F16,    T::BF16,  T::Q4_0,  T::Q4_1,  T::Q5_0,  T::Q5_1,   T::Q8_0,
                          T::Q2_K,    T::Q3_K,   T::Q4_K,  T::Q5_K,  T::Q6_K,  T::MXFP4, T::IQ4_NL, T::IQ4_XS,
                          T::IQ2_XXS, T::IQ2_XS, T::IQ2_S, T::IQ1_S, T::IQ1_M};

struct Problem {
  T type;
  int64_t ne0, ne1, n_tokens;
  size_t nb1;
  std::vector<uint8_t> w;
  std::vector<float> x;
  WeightView view() const { return {type, w.data(), ne0, ne1, nb1}; }
};

// Weights written by the reference quantizer, rows padded by `pad` bytes.
Problem make_problem(T t, int64_t ne0, int64_t ne1, int64_t n_tokens, size_t pad, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Problem p{t, ne0, ne1, n_tokens, row_size(t, ne0) + pad, {}, {}};
  std::vector<float> wf(ne0), flat(ne0, 1.0f);
  p.w.assign(p.nb1 * ne1, 0xCD);
  for (int64_t r = 0; r < ne1; ++r) {
    for (float& v : wf) v = nd(rng) * 0.05f;
    quantize_rows(t, wf.data(), p.w.data() + r * p.nb1, 1, ne0, ref::requires_imatrix(t) ? flat.data() : nullptr);
  }
  p.x.resize(n_tokens * ne0);
  for (float& v : p.x) v = nd(rng);
  return p;
}

std::vector<float> run(const Problem& p, int threads) {
  ThreadPool pool(threads);
  std::vector<float> y(p.n_tokens * p.ne1, NAN);
  matmul(p.view(), p.x.data(), p.n_tokens, y.data(), pool);
  return y;
}

// Naive reference: the activation rounded to the partner format by the scalar quantizer, both
// rows dequantized by the scalar kernels, products summed in double. With a Q8_1 partner the
// offset term of each block uses the block's stored sum s = f16(d·Σq), as llama.cpp does.
double naive(const Problem& p, int64_t t, int64_t r, double* abs_sum) {
  const QuantKernels& kw = kernels(p.type, Isa::Scalar);
  const T vt = kw.vec_dot_type;
  std::vector<uint8_t> xq(row_size(vt, p.ne0));
  kernels(vt, Isa::Scalar).from_float(p.x.data() + t * p.ne0, xq.data(), p.ne0);
  std::vector<float> xa(p.ne0), wr(p.ne0);
  kernels(vt, Isa::Scalar).to_float(xq.data(), xa.data(), p.ne0);
  kw.to_float(p.w.data() + r * p.nb1, wr.data(), p.ne0);
  double s = 0.0;
  *abs_sum = 0.0;
  for (int64_t i = 0; i < p.ne0; ++i) {
    s += static_cast<double>(wr[i]) * xa[i];
    *abs_sum += std::fabs(static_cast<double>(wr[i]) * xa[i]);
  }
  if (vt == T::Q8_1) {
    const size_t wb = type_info(p.type).block_bytes;
    for (int64_t b = 0; b < p.ne0 / QK; ++b) {
      uint16_t m, sa;
      std::memcpy(&m, p.w.data() + r * p.nb1 + b * wb + 2, 2);
      std::memcpy(&sa, xq.data() + b * sizeof(block_q8_1) + 2, 2);
      double sum_a = 0.0;
      for (int j = 0; j < QK; ++j) sum_a += xa[b * QK + j];
      s += static_cast<double>(fp16_to_fp32(m)) * (fp16_to_fp32(sa) - sum_a);
    }
  }
  return s;
}

TEST(Matmul, AllTypesAgainstNaiveAndThreadCounts) {
  for (T t : kWeightTypes) {
    const int64_t blk = std::max<int64_t>(type_info(t).block, type_info(kernels(t).vec_dot_type).block);
    const int64_t ne0 = blk == 256 ? 512 : 96;
    for (int64_t n_tokens : {1, 3, 21}) {
      const Problem p = make_problem(t, ne0, 37, n_tokens, n_tokens == 3 ? 16 : 0, 100 + n_tokens);
      const std::vector<float> y1 = run(p, 1), y2 = run(p, 2), y3 = run(p, 3);
      ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << type_name(t) << " T=" << n_tokens;
      ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4)) << type_name(t) << " T=" << n_tokens;
      for (int64_t tok = 0; tok < n_tokens; ++tok) {
        for (int64_t r = 0; r < p.ne1; ++r) {
          double abs_sum;
          const double ref = naive(p, tok, r, &abs_sum);
          ASSERT_NEAR(y1[tok * p.ne1 + r], ref, 1e-6 * abs_sum + 1e-30)
              << type_name(t) << " T=" << n_tokens << " token " << tok << " row " << r;
        }
      }
    }
  }
}

// Each output is exactly one vec_dot of the active ISA: same bits as calling it directly.
TEST(Matmul, EachOutputIsOneVecDot) {
  for (T t : {T::Q4_K, T::Q8_0, T::MXFP4, T::BF16, T::IQ2_XXS, T::IQ1_S}) {
    const Problem p = make_problem(t, 1024, 70, 33, 0, 7);
    const std::vector<float> y = run(p, 2);
    const QuantKernels& kw = kernels(t);
    const T vt = kw.vec_dot_type;
    std::vector<uint8_t> xq(row_size(vt, p.ne0));
    for (int64_t tok = 0; tok < p.n_tokens; ++tok) {
      kernels(vt).from_float(p.x.data() + tok * p.ne0, xq.data(), p.ne0);
      for (int64_t r = 0; r < p.ne1; ++r) {
        float s;
        kw.vec_dot(p.ne0, &s, p.w.data() + r * p.nb1, xq.data());
        ASSERT_EQ(s, y[tok * p.ne1 + r]) << type_name(t) << " token " << tok << " row " << r;
      }
    }
  }
}

TEST(Matmul, LargeTileSplit) {
  // Enough rows and tokens for several work items per thread and several token tiles.
  const Problem p = make_problem(T::Q4_0, 4096, 300, 40, 0, 11);
  EXPECT_EQ(run(p, 1), run(p, 2));
}

// then(job, r0, r1) covers every row of every job exactly once, each range when its values (every
// token's) are already final, and the products keep the bits of the plain batch: a decode step and a
// verify pass (rows reported by the chunks, on the pool's threads) and a prompt (once per job).
TEST(Matmul, RowsReadyOncePerRowWhenFinal) {
  const Problem a = make_problem(T::Q4_K, 1024, 1536, 20, 0, 3), b = make_problem(T::Q8_0, 512, 700, 20, 0, 4);
  for (int64_t tokens : {1, 3, 20})
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      std::vector<float> ya(tokens * a.ne1, NAN), yb(tokens * b.ne1, NAN), ra(ya.size()), rb(yb.size());
      const MatmulJob plain[] = {{a.view(), a.x.data(), ra.data()}, {b.view(), b.x.data(), rb.data()}};
      matmul_batch(plain, 2, tokens, pool);
      const MatmulJob jobs[] = {{a.view(), a.x.data(), ya.data()}, {b.view(), b.x.data(), yb.data()}};
      std::vector<std::atomic<int>> seen_a(a.ne1), seen_b(b.ne1);
      std::atomic<int> early{0};
      matmul_batch(jobs, 2, tokens, pool, [&](size_t job, int64_t r0, int64_t r1) {
        const std::vector<float>& y = job ? yb : ya;
        const std::vector<float>& ref = job ? rb : ra;
        const int64_t ne1 = job ? b.ne1 : a.ne1;
        for (int64_t r = r0; r < r1; ++r) {
          (job ? seen_b : seen_a)[r].fetch_add(1);
          for (int64_t t = 0; t < tokens; ++t)
            if (std::memcmp(&y[t * ne1 + r], &ref[t * ne1 + r], sizeof(float)) != 0) early.fetch_add(1);
        }
      });
      const std::string where = std::to_string(tokens) + " tokens, " + std::to_string(threads) + " threads";
      EXPECT_EQ(early.load(), 0) << where << ": a range reported before its values were final";
      for (int64_t r = 0; r < a.ne1; ++r) ASSERT_EQ(seen_a[r].load(), 1) << where << ": row " << r << " of job 0";
      for (int64_t r = 0; r < b.ne1; ++r) ASSERT_EQ(seen_b[r].load(), 1) << where << ": row " << r << " of job 1";
      EXPECT_EQ(ya, ra) << where;
      EXPECT_EQ(yb, rb) << where;
    }
}

TEST(Matmul, RejectsBadShapes) {
  ThreadPool pool(1);
  std::vector<uint8_t> w(1024);
  std::vector<float> x(256), y(4);
  EXPECT_THROW(matmul({T::Q4_K, w.data(), 128, 1, 1024}, x.data(), 1, y.data(), pool), Error);
  EXPECT_THROW(matmul({T::Q4_0, w.data(), 64, 1, 10}, x.data(), 1, y.data(), pool), Error);
}

}  // namespace
}  // namespace k3
