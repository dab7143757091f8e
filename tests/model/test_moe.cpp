// The routed experts' few-row path (a decode step or a verify pass of up to 16 rows: one region for
// the gate/up rows of every (row, expert) pair, one for their downs) against the grouped path of
// longer batches (one product per expert over its rows): each of 20 different rows, alone, among the
// first 4 and among all 20, must give the same result.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "helpers.h"
#include "model/moe.h"

using namespace k3;
using namespace k3::test;

namespace {

void check(const model::SynthOptions& o, const char* name, int threads) {
  auto m = model::Model::load(make_model(o, name));
  const model::HParams& hp = m->hparams();
  ThreadPool pool(threads);
  model::Ctx ctx{pool, model::F16Rule::Round};
  const int64_t H = hp.n_embd, T = 20, T_few = 4;  // 20 > the few-row path's 16
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int n_moe = 0;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.ffn_kind(il) != model::FfnKind::MoE) continue;
    ++n_moe;
    const model::LayerWeights& w = m->weights().layers[il];
    std::vector<float> xs(T * H), one(T * H), few(T_few * H), many(T * H);
    for (float& v : xs) v = nd(rng);
    for (int64_t t = 0; t < T; ++t) model::moe_forward(ctx, hp, w, il, &xs[t * H], 1, &one[t * H]);
    model::moe_forward(ctx, hp, w, il, xs.data(), T_few, few.data());
    model::moe_forward(ctx, hp, w, il, xs.data(), T, many.data());
    double scale = 0;
    for (float v : one) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    ASSERT_GT(scale, 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) {
        const float ref = one[t * H + i];
        ASSERT_NEAR(many[t * H + i], ref, 1e-6 * scale) << name << " layer " << il << " row " << t << " " << i;
        if (t < T_few) {  // the same products (an expert read once for its rows), the same bits
          ASSERT_EQ(few[t * H + i], ref) << name << " layer " << il << " row " << t << " " << i;
        }
      }
  }
  EXPECT_GT(n_moe, 0) << name;
}

TEST(Moe, FewRowPathMatchesGroupedPath) {
  check(config_c(1e-5f), "moe_c", 1);  // MXFP4 experts
  check(config_d(1e-5f), "moe_d", 2);  // q8_0
  check(config_a(1e-5f), "moe_a", 3);  // f32
  // Experts large enough (139 KB per MXFP4 matrix) that the few-row regions are cut into several
  // chunks, claimed by worker threads.
  model::SynthOptions big = config_c(1e-5f);
  big.n_embd = 256;
  big.latent = 256;
  big.n_ff_exp = 1024;
  check(big, "moe_big2", 2);
  check(big, "moe_big3", 3);
}

}  // namespace
