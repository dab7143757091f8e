// Multi-sequence batches: one forward over segments of several sequences (prompt chunks and
// single decode tokens mixed) gives every sequence exactly what it gets when run alone, leaves
// exactly the same states, and a bad segment refuses the whole batch with every state unchanged.
//
// Exact equality is expected: every op is per row or per segment (on that segment's own state),
// and each output row of a matrix product is one dot product of that activation row alone
// (activations are converted per row), so the other rows of a batch cannot change a row's bits.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "helpers.h"

using namespace k3;
using namespace k3::test;

namespace {

// One segment of the schedule: n tokens of sequence seq, with the logits wanted.
struct Part {
  int seq;
  int64_t n;
  model::Logits want;
};
constexpr int kSeqs = 4;
// Steps of a serving-like schedule: sequences join late, prompts arrive in chunks of different
// lengths while others decode single tokens; every sequence appears at most once per step.
const std::vector<std::vector<Part>> kSteps = {
    {{0, 7, model::Logits::Last}, {1, 1, model::Logits::Last}, {2, 5, model::Logits::None}},
    {{0, 1, model::Logits::Last}, {1, 1, model::Logits::All}, {2, 9, model::Logits::All}, {3, 3, model::Logits::None}},
    {{3, 11, model::Logits::Last}, {0, 1, model::Logits::Last}, {2, 1, model::Logits::Last}},
    {{0, 1, model::Logits::Last}, {1, 4, model::Logits::All}, {2, 1, model::Logits::Last}, {3, 1, model::Logits::Last}},
    {{1, 1, model::Logits::Last}, {3, 1, model::Logits::Last}},
};

struct Outcome {
  std::vector<model::State> states;
  std::vector<std::vector<std::vector<float>>> logits;  // [step][part]
};

// Feeds each sequence its own deterministic ids, either one forward per step (batched) or one
// forward per part (each sequence alone).
Outcome run_schedule(const model::Model& m, bool batched, int threads) {
  ThreadPool pool(threads);
  const model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  Outcome r;
  std::vector<std::vector<int32_t>> ids;
  for (int s = 0; s < kSeqs; ++s) {
    r.states.push_back(m.new_state(64));
    ids.push_back(prompt_ids(40, m.n_vocab(), 100 + s));
  }
  std::vector<size_t> pos(kSeqs, 0);
  for (const auto& step : kSteps) {
    auto& out = r.logits.emplace_back(step.size());
    std::vector<model::Segment> batch;
    for (size_t i = 0; i < step.size(); ++i) {
      const Part& p = step[i];
      const model::Segment seg{&r.states[p.seq], ids[p.seq].data() + pos[p.seq], p.n, p.want, &out[i]};
      pos[p.seq] += p.n;
      if (batched) batch.push_back(seg);
      else m.forward(std::span<const model::Segment>(&seg, 1), opt);
    }
    if (batched) m.forward(batch, opt);
  }
  return r;
}

class Batch : public ::testing::TestWithParam<NamedConfig> {};

TEST_P(Batch, SegmentsEqualSeparateRuns) {
  const auto path = make_model(GetParam().make(1e-5f), std::string("batch_") + GetParam().name);
  auto m = model::Model::load(path);
  const Outcome solo = run_schedule(*m, false, 1);
  for (int threads : {1, 2}) {
    const Outcome batch = run_schedule(*m, true, threads);
    for (size_t st = 0; st < kSteps.size(); ++st)
      for (size_t i = 0; i < kSteps[st].size(); ++i) {
        const Part& p = kSteps[st][i];
        const size_t rows = p.want == model::Logits::None ? 0 : p.want == model::Logits::Last ? 1 : p.n;
        const auto& a = solo.logits[st][i];
        const auto& b = batch.logits[st][i];
        ASSERT_EQ(a.size(), rows * m->n_vocab()) << "step " << st << " sequence " << p.seq;
        EXPECT_TRUE(a == b) << "threads " << threads << " step " << st << " sequence " << p.seq;
      }
    for (int s = 0; s < kSeqs; ++s) {
      EXPECT_EQ(batch.states[s].n_past(), solo.states[s].n_past()) << "sequence " << s;
      EXPECT_EQ(model::State::max_abs_diff(batch.states[s], solo.states[s]), 0.0) << "sequence " << s;
    }
  }
  // The schedule ran something: sequences have different lengths, and their logits differ.
  EXPECT_EQ(solo.states[0].n_past(), 10);
  EXPECT_EQ(solo.states[1].n_past(), 7);
  EXPECT_EQ(solo.states[2].n_past(), 16);
  EXPECT_EQ(solo.states[3].n_past(), 16);
  EXPECT_FALSE(solo.logits[4][0] == solo.logits[4][1]);
}

INSTANTIATE_TEST_SUITE_P(Configs, Batch, ::testing::ValuesIn(kConfigs),
                         [](const auto& info) { return std::string(info.param.name); });

// Runs the batch and expects a SegmentError for segment `bad` whose message has `what` and names
// the sequence; every state must be bit for bit what it was.
void expect_refused(const model::Model& m, std::vector<model::State>& states,
                    const std::vector<model::Segment>& batch, size_t bad, const std::string& what) {
  ThreadPool pool(1);
  const model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  const std::vector<model::State> before = states;
  try {
    m.forward(batch, opt);
    ADD_FAILURE() << "no error for " << what;
  } catch (const model::SegmentError& e) {
    EXPECT_EQ(e.segment, bad) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find("sequence " + std::to_string(bad) + " of the batch"), std::string::npos) << msg;
  }
  for (size_t s = 0; s < states.size(); ++s) {
    EXPECT_EQ(states[s].n_past(), before[s].n_past()) << what << ": sequence " << s;
    EXPECT_EQ(model::State::max_abs_diff(states[s], before[s]), 0.0) << what << ": sequence " << s;
  }
}

TEST(BatchErrors, BadSegmentLeavesEveryStateUnchanged) {
  const auto path = make_model(config_a(1e-5f), "batch_a");
  auto m = model::Model::load(path);
  ThreadPool pool(1);
  const model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  std::vector<model::State> states;
  for (int s = 0; s < 3; ++s) states.push_back(m->new_state(s == 2 ? 8 : 32));
  const auto ids = prompt_ids(12, m->n_vocab(), 9);
  std::vector<std::vector<float>> l(3);
  // Give every state some history first, so "unchanged" is a real check.
  std::vector<model::Segment> warm;
  for (int s = 0; s < 3; ++s) warm.push_back({&states[s], ids.data() + s, 5, model::Logits::Last, &l[s]});
  m->forward(warm, opt);

  const int32_t oov[] = {ids[0], m->n_vocab()};
  expect_refused(*m, states,
                 {{&states[0], ids.data(), 1, model::Logits::Last, &l[0]},
                  {&states[1], oov, 2, model::Logits::Last, &l[1]},
                  {&states[2], ids.data(), 1, model::Logits::Last, &l[2]}},
                 1, strprintf("token id %d at index 1 is outside the vocabulary", m->n_vocab()));
  const int32_t neg = -1;
  expect_refused(*m, states,
                 {{&states[0], &neg, 1, model::Logits::Last, &l[0]}, {&states[1], ids.data(), 3, model::Logits::None}},
                 0, "outside the vocabulary");
  // Sequence 2 has room for 3 more tokens (context 8); 4 is refused even though the others fit.
  expect_refused(*m, states,
                 {{&states[0], ids.data(), 4, model::Logits::Last, &l[0]},
                  {&states[1], ids.data(), 1, model::Logits::All, &l[1]},
                  {&states[2], ids.data(), 4, model::Logits::Last, &l[2]}},
                 2, "context size exceeded: 5 tokens in the sequence + 4 new > context size 8");
  expect_refused(*m, states,
                 {{&states[0], ids.data(), 1, model::Logits::Last, &l[0]},
                  {&states[0], ids.data(), 1, model::Logits::Last, &l[1]}},
                 1, "the same state as sequence 0");
  expect_refused(*m, states,
                 {{&states[0], ids.data(), 1, model::Logits::Last, &l[0]}, {&states[1], ids.data(), 0, model::Logits::None}},
                 1, "no tokens");

  // The states are still usable: a valid batch runs.
  std::vector<model::Segment> ok;
  for (int s = 0; s < 3; ++s) ok.push_back({&states[s], ids.data() + 6, 3, model::Logits::Last, &l[s]});
  m->forward(ok, opt);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(states[s].n_past(), 8) << "sequence " << s;
}

}  // namespace
