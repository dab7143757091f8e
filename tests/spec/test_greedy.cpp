// dspark.md §10: greedy speculative decoding emits exactly plain greedy decoding's tokens and
// leaves the same state, bit for bit, for every block size and drafting source — n-gram lookup,
// the DSpark draft, the true continuation, the true continuation with one token corrupted (every
// acceptance count m), random drafts — with and without a stop token inside a burst, with both
// journal modes, on F32, F16 + MXFP4, Q8_0 and K-quant files.
#include <gtest/gtest.h>

#include <random>

#include "spec_helpers.h"

using namespace k3;
using namespace k3::test;

namespace {

struct Model {
  const char* name;
  model::SynthOptions (*make)();
};

model::SynthOptions kquant() {
  model::SynthOptions o = model::synth_preset("small");
  o.n_layer = 6;
  o.type = GgmlType::Q4_K, o.expert_type = GgmlType::Q4_K;  // Q5_0 where a row is not a multiple of 256
  o.seed = 21;
  return o;
}
const Model kModels[] = {{"f32", [] { return config_a(1e-5f); }},
                         {"f16_mxfp4", [] { return config_c(1e-5f); }},
                         {"q8_0", [] { return config_d(1e-5f); }},
                         {"q4_k", kquant}};

enum class Source { Ngram, Dspark, Truth, Corrupt, Random };
const char* name_of(Source s) {
  switch (s) {
    case Source::Ngram: return "ngram";
    case Source::Dspark: return "dspark";
    case Source::Truth: return "truth";
    case Source::Corrupt: return "corrupt";
    case Source::Random: return "random";
  }
  return "?";
}

class Greedy : public ::testing::TestWithParam<Model> {};

TEST_P(Greedy, IdenticalToPlainDecoding) {
  const model::SynthOptions so = GetParam().make();
  auto m = model::Model::load(make_model(so, std::string("gr_") + GetParam().name));
  const int32_t V = m->n_vocab();
  const uint32_t L = m->hparams().n_layer;
  const std::string draft_path = make_draft(
      *m, std::string("gr_draft_") + GetParam().name,
      "--taps " + std::to_string(1) + "," + std::to_string(L / 2) + "," + std::to_string(L - 2) + " --seed 5");
  ASSERT_FALSE(draft_path.empty());
  auto draft = spec::DraftModel::load(draft_path, *m, 7);
  // a prompt that repeats itself, so n-gram drafts find matches
  std::vector<int32_t> prompt = prompt_ids(12, V, 9);
  prompt.insert(prompt.end(), prompt.begin() + 2, prompt.begin() + 10);
  const int n = 32;
  model::Sampler greedy({});
  const Generated plain = generate_plain(*m, prompt, n, greedy);
  ASSERT_EQ(plain.ids.size(), static_cast<size_t>(n));
  const std::vector<int32_t> stop = {plain.ids[13]};
  const Generated plain_stop = generate_plain(*m, prompt, n, greedy, stop);

  ThreadPool pool(1);
  std::mt19937 rng(3);
  int64_t accepted = 0, drafted = 0;
  for (Source src : {Source::Ngram, Source::Dspark, Source::Truth, Source::Corrupt, Source::Random})
    for (int B : src == Source::Corrupt ? std::vector<int>{1, 2, 3, 4, 5, 6, 7} : std::vector<int>{0, 2, 7})  // 0: chosen per step
      for (bool with_stop : {false, true}) {
        const Generated& want = with_stop ? plain_stop : plain;
        spec::SpecOptions o;
        o.type = src == Source::Dspark ? spec::SpecType::Dspark : spec::SpecType::Ngram;
        o.draft_max = B;
        o.keep = B % 2 ? model::KeepMode::States : model::KeepMode::Inputs;
        const int64_t P = static_cast<int64_t>(prompt.size());
        if (src == Source::Truth || src == Source::Corrupt || src == Source::Random)
          o.source = [&, src](std::span<const int32_t> x, int64_t k, std::vector<int32_t>& out) {
            const int64_t e = static_cast<int64_t>(x.size()) - P;  // emitted so far; the next is plain.ids[e]
            for (int64_t i = 0; i < k && e + i < n; ++i) out.push_back(src == Source::Random ? int32_t(rng() % V) : plain.ids[e + i]);
            if (src == Source::Corrupt && !out.empty()) out[e % out.size()] = (out[e % out.size()] + 1) % V;
          };
        spec::Drafting d(*m, src == Source::Dspark ? draft.get() : nullptr, o, pool);
        model::Sampler s({});
        const Generated got = generate_spec(*m, d, prompt, n, s, with_stop ? stop : std::vector<int32_t>{});
        const std::string what = std::string(name_of(src)) + " B=" + std::to_string(B) + (with_stop ? " stop" : "");
        ASSERT_EQ(got.ids, want.ids) << what;
        EXPECT_EQ(got.state.n_past(), want.state.n_past()) << what;
        EXPECT_EQ(model::State::max_abs_diff(got.state, want.state), 0.0) << what;
        if (src == Source::Dspark) {
          EXPECT_EQ(got.state.side_rows(), got.state.n_past()) << what << ": draft rows = p";
        }
        if (src == Source::Truth && B > 0 && !with_stop) {
          EXPECT_EQ(got.stats.accepted, got.stats.drafted) << what << ": the true continuation is always accepted";
        }
        if (src == Source::Corrupt && B > 1 && !with_stop) {
          EXPECT_LT(got.stats.accepted, got.stats.drafted) << what;
        }
        accepted += got.stats.accepted, drafted += got.stats.drafted;
      }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(accepted, 0);
}

INSTANTIATE_TEST_SUITE_P(Types, Greedy, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
