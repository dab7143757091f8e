// Forward-pass invariants that need no reference: batch = chunked = token-by-token prefill, state
// after prefill + decode = state after prefilling everything, 1 thread = 2 threads, the context
// limit, out-of-vocabulary ids.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "helpers.h"

using namespace k3;
using namespace k3::test;

namespace {

class Forward : public ::testing::TestWithParam<NamedConfig> {};

// Batch vs chunked vs incremental differ only by float summation order inside ops (none here:
// every op is per token or sequential), so they must agree to rounding.
TEST_P(Forward, BatchChunkedIncrementalAgree) {
  const auto path = make_model(GetParam().make(1e-5f), std::string("fwd_") + GetParam().name);
  auto m = model::Model::load(path);
  const auto ids = prompt_ids(23, m->n_vocab());
  const Rows batch = k3_logits(*m, ids, 0);
  const Rows chunked = k3_logits(*m, ids, 5);
  const Rows incr = k3_logits(*m, ids, 1);
  const double scale = max_abs(batch);
  EXPECT_GT(scale, 0.1);
  EXPECT_LE(max_abs_diff(batch, chunked), 1e-4 * scale) << "batch vs chunked";
  EXPECT_LE(max_abs_diff(batch, incr), 1e-4 * scale) << "batch vs incremental";
}

TEST_P(Forward, StateAfterDecodeEqualsPrefill) {
  const auto path = make_model(GetParam().make(1e-5f), std::string("fwd_") + GetParam().name);
  auto m = model::Model::load(path);
  const auto ids = prompt_ids(12, m->n_vocab(), 3);
  ThreadPool pool(1);
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  model::State a = m->new_state(32), b = m->new_state(32);
  std::vector<float> la, lb;
  m->prefill(a, std::vector<int32_t>(ids.begin(), ids.begin() + 9), 0, opt, model::Logits::Last, &la);
  for (size_t i = 9; i < ids.size(); ++i) m->forward(a, &ids[i], 1, opt, model::Logits::Last, &la);
  m->prefill(b, ids, 0, opt, model::Logits::Last, &lb);
  EXPECT_EQ(a.n_past(), b.n_past());
  EXPECT_LE(model::State::max_abs_diff(a, b), 1e-5);
  ASSERT_EQ(la.size(), lb.size());
  double d = 0;
  for (size_t i = 0; i < la.size(); ++i) d = std::max(d, std::fabs(double(la[i]) - lb[i]));
  EXPECT_LE(d, 1e-4);
}

TEST_P(Forward, ThreadsIdentical) {
  const auto path = make_model(GetParam().make(1e-5f), std::string("fwd_") + GetParam().name);
  auto m = model::Model::load(path);
  const auto ids = prompt_ids(17, m->n_vocab(), 5);
  for (int64_t chunk : {int64_t(0), int64_t(1)}) {
    const Rows one = k3_logits(*m, ids, chunk, 1), two = k3_logits(*m, ids, chunk, 2);
    EXPECT_EQ(max_abs_diff(one, two), 0.0) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, Forward, ::testing::ValuesIn(kConfigs),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ForwardErrors, ContextLimitAndVocabulary) {
  const auto path = make_model(config_b(1e-5f), "fwd_b");
  auto m = model::Model::load(path);
  ThreadPool pool(1);
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  model::State st = m->new_state(4);
  std::vector<float> l;
  const std::vector<int32_t> ids = {1, 2, 3};
  m->prefill(st, ids, 0, opt, model::Logits::Last, &l);
  try {
    m->prefill(st, ids, 0, opt, model::Logits::Last, &l);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context size exceeded"), std::string::npos) << e.what();
  }
  EXPECT_EQ(st.n_past(), 3);  // unchanged by the failed call
  const int32_t bad[] = {5, m->n_vocab()};
  try {
    m->forward(st, bad, 2, opt, model::Logits::Last, &l);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  const int32_t neg = -1;
  EXPECT_THROW(m->forward(st, &neg, 1, opt, model::Logits::Last, &l), Error);
  EXPECT_EQ(st.n_past(), 3);
}

}  // namespace
