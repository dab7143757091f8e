// The target's side of verification (dspark.md §10 R1-R4): every row of a pass over k tokens gives
// the logits a one-token decode gives at its position, and State::rewind to any kept position
// leaves the state bit for bit the one feeding just those tokens leaves, in both journal modes.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "helpers.h"

using namespace k3;
using namespace k3::test;

namespace {

struct Case {
  NamedConfig cfg;
  model::KeepMode mode;
};

class Rewind : public ::testing::TestWithParam<Case> {};

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

TEST_P(Rewind, EveryKeptPositionIsTheOneByOneState) {
  const auto path = make_model(GetParam().cfg.make(1e-5f), std::string("rw_") + GetParam().cfg.name);
  auto m = model::Model::load(path);
  const int32_t V = m->n_vocab();
  ThreadPool pool(2);
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  const auto prompt = prompt_ids(9, V, 3), cont = prompt_ids(7, V, 5);
  const int64_t k = static_cast<int64_t>(cont.size());
  model::State base = m->new_state(64);
  std::vector<float> l;
  m->forward(base, prompt.data(), static_cast<int64_t>(prompt.size()), opt, model::Logits::Last, &l);
  // one by one: the states and logits after each token
  std::vector<model::State> step;
  std::vector<std::vector<float>> step_logits;
  model::State b = base;
  for (int64_t t = 0; t < k; ++t) {
    m->forward(b, &cont[t], 1, opt, model::Logits::Last, &l);
    step.push_back(b);
    step_logits.push_back(l);
  }
  for (int64_t keep = 1; keep <= k; ++keep) {
    model::State a = base;
    a.keep_rows(k, GetParam().mode);
    std::vector<float> rows;
    m->forward(a, cont.data(), k, opt, model::Logits::All, &rows);
    for (int64_t t = 0; t < k; ++t)
      ASSERT_TRUE(same_bits(&rows[t * V], step_logits[t].data(), V)) << "row " << t << " of the pass";
    a.rewind(base.n_past() + keep, pool);
    ASSERT_EQ(a.n_past(), base.n_past() + keep);
    EXPECT_EQ(model::State::max_abs_diff(a, step[keep - 1]), 0.0) << "kept " << keep;
    for (size_t il = 0; il < a.layers.size(); ++il) {
      const auto& x = a.layers[il];
      const auto& y = step[keep - 1].layers[il];
      ASSERT_TRUE(x.conv.size() == y.conv.size() && same_bits(x.conv.data(), y.conv.data(), x.conv.size())) << il;
      ASSERT_TRUE(x.rec.size() == y.rec.size() && same_bits(x.rec.data(), y.rec.data(), x.rec.size())) << il;
      ASSERT_TRUE(x.kv.size() == y.kv.size() && same_bits(x.kv.data(), y.kv.data(), x.kv.size())) << il;
    }
    // and it decodes on exactly like the one-by-one state
    model::State c = step[keep - 1];
    std::vector<float> la, lc;
    const int32_t next = 17;
    m->forward(a, &next, 1, opt, model::Logits::Last, &la);
    m->forward(c, &next, 1, opt, model::Logits::Last, &lc);
    EXPECT_TRUE(same_bits(la.data(), lc.data(), V)) << "decode after keeping " << keep;
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const NamedConfig& c : kConfigs)
    for (model::KeepMode mode : {model::KeepMode::Inputs, model::KeepMode::States}) v.push_back({c, mode});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Configs, Rewind, ::testing::ValuesIn(cases()), [](const auto& info) {
  return std::string(info.param.cfg.name) + (info.param.mode == model::KeepMode::Inputs ? "_inputs" : "_states");
});

TEST(RewindErrors, OnlyWithinARecordedPass) {
  auto m = model::Model::load(make_model(config_b(1e-5f), "rw_b"));
  ThreadPool pool(1);
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  const auto ids = prompt_ids(6, m->n_vocab(), 2);
  model::State st = m->new_state(32);
  m->forward(st, ids.data(), 3, opt, model::Logits::None, nullptr);
  EXPECT_THROW(st.rewind(2, pool), Error) << "nothing recorded";
  st.keep_rows(2);
  m->forward(st, ids.data() + 3, 3, opt, model::Logits::None, nullptr);
  EXPECT_THROW(st.rewind(4, pool), Error) << "a pass longer than kept";
  st.keep_rows(3);
  m->forward(st, ids.data(), 3, opt, model::Logits::None, nullptr);
  EXPECT_THROW(st.rewind(6, pool), Error) << "before the pass";
  EXPECT_THROW(st.rewind(10, pool), Error) << "after the pass";
  st.rewind(8, pool);
  EXPECT_EQ(st.n_past(), 8);
  EXPECT_THROW(st.rewind(7, pool), Error) << "one rewind a pass";
}

}  // namespace
