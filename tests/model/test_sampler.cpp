// Samplers: greedy, temperature, top-k, top-p, min-p, seeded determinism.
#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "model/sampler.h"

using namespace k3;
using namespace k3::model;

namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};

std::map<int32_t, int> histogram(SamplerParams p, int n) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(kLogits.data(), static_cast<int32_t>(kLogits.size()))];
  return h;
}

TEST(Sampler, GreedyAtTemperatureZero) {
  SamplerParams p;
  p.temp = 0;
  Sampler s(p);
  EXPECT_EQ(s.sample(kLogits.data(), 6), 1);  // lowest id among ties
  EXPECT_EQ(Sampler::argmax(kLogits.data(), 6), 1);
}

TEST(Sampler, SeededIsDeterministic) {
  SamplerParams p;
  p.temp = 1.0f, p.seed = 42;
  EXPECT_EQ(histogram(p, 200), histogram(p, 200));
  SamplerParams q = p;
  q.seed = 43;
  Sampler a(p), b(q);
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 64; ++i) sa.push_back(a.sample(kLogits.data(), 6)), sb.push_back(b.sample(kLogits.data(), 6));
  EXPECT_NE(sa, sb);
}

TEST(Sampler, TopKKeepsOnlyK) {
  SamplerParams p;
  p.temp = 1.0f, p.top_k = 2, p.seed = 1;
  const auto h = histogram(p, 2000);
  for (const auto& [id, n] : h) EXPECT_TRUE(id == 1 || id == 3) << id;
  EXPECT_GT(h.at(1), 800);
  EXPECT_GT(h.at(3), 800);
}

TEST(Sampler, TopPAndMinP) {
  SamplerParams p;
  p.temp = 1.0f, p.top_p = 0.5f, p.seed = 2;  // the two tied best tokens hold ~0.6 of the mass
  for (const auto& [id, n] : histogram(p, 1000)) EXPECT_TRUE(id == 1 || id == 3) << id;
  SamplerParams q;
  q.temp = 1.0f, q.min_p = 0.3f, q.seed = 3;  // keeps p >= 0.3 * p_max: ids 1, 3, 2 (e^-1 = 0.37)
  for (const auto& [id, n] : histogram(q, 1000)) EXPECT_TRUE(id == 1 || id == 2 || id == 3) << id;
}

TEST(Sampler, TemperatureSharpens) {
  SamplerParams hot, cold;
  hot.temp = 2.0f, cold.temp = 0.25f, hot.seed = cold.seed = 5;
  const auto h = histogram(hot, 4000), c = histogram(cold, 4000);
  EXPECT_GT(c.at(1) + c.at(3), h.at(1) + h.at(3));
  EXPECT_GT(h.size(), c.size() - 1);
}

TEST(Sampler, BadParameters) {
  SamplerParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  SamplerParams q;
  q.min_p = 2.0f;
  EXPECT_THROW(Sampler{q}, Error);
}

}  // namespace
