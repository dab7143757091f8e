// The blocked (flash) attention against the plain one that forms every score row, under every ISA,
// for patch counts around the 64-query and 256-key tiles, several head sizes and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/kernels.h"
#include "vision/attention.h"

namespace k3::vision {
namespace {

TEST(VisionAttention, BlockedMatchesFullScores) {
  const Isa saved = active_isa();
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (isa > cpu_best_isa()) continue;
    set_isa(isa);
    for (int64_t n : {1, 7, 64, 65, 256, 257, 600}) {
      for (auto [H, D] : {std::pair<int64_t, int64_t>{2, 16}, {3, 48}}) {
        std::mt19937 rng(static_cast<unsigned>(n * 31 + D));
        std::normal_distribution<float> nd(0.0f, 1.5f);
        std::vector<float> qkv(n * 3 * H * D);
        for (float& v : qkv) v = nd(rng);
        std::vector<float> o(n * H * D), ref(n * H * D), vt;
        ThreadPool pool(n > 100 ? 3 : 1);
        attention(qkv.data(), n, H, D, vt, o.data(), pool);
        attention_ref(qkv.data(), n, H, D, ref.data());
        double worst = 0;
        for (size_t i = 0; i < o.size(); ++i) worst = std::max(worst, std::fabs(double(o[i]) - ref[i]));
        EXPECT_LT(worst, 2e-5) << "n " << n << " heads " << H << "x" << D << " " << isa_name(isa);
      }
    }
  }
  set_isa(saved);
}

// Scores far apart (a softmax that is nearly one-hot, then shifts between key blocks) stay exact:
// the running maximum rescales what earlier blocks accumulated.
TEST(VisionAttention, LargeScoresAcrossKeyBlocks) {
  const int64_t n = 520, H = 1, D = 8;
  std::vector<float> qkv(n * 3 * D, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    qkv[t * 3 * D] = 4.0f;                                             // q
    qkv[t * 3 * D + D] = static_cast<float>(t % 300) * 0.35f;          // k: the largest scores in the second key block
    qkv[t * 3 * D + 2 * D] = static_cast<float>(t);                    // v
  }
  std::vector<float> o(n * D), ref(n * D), vt;
  ThreadPool pool(2);
  attention(qkv.data(), n, H, D, vt, o.data(), pool);
  attention_ref(qkv.data(), n, H, D, ref.data());
  for (int64_t i = 0; i < n * D; ++i) ASSERT_NEAR(o[i], ref[i], 1e-3 * (1 + std::fabs(ref[i]))) << i;
}

}  // namespace
}  // namespace k3::vision
