// dspark.md §9.6: speculative sampling with deterministic drafts emits tokens with exactly the
// distribution of plain sampling. Over many seeds, the first two tokens after an anchor (drafts:
// a plausible but not the likeliest token, then the likeliest after it) are compared by a
// chi-square test with the exact two-token distribution computed from the model's logits. Plain
// sampling through the same harness passes; the common slip — resampling from pi including the
// rejected draft — fails the same bound.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "spec_helpers.h"

using namespace k3;
using namespace k3::test;

namespace {

constexpr int kSeeds = 3000;

// Chi-square critical value at p = 1e-4 (Wilson-Hilferty).
double chi2_critical(int df) {
  const double z = 3.719, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

using Pair = std::pair<int32_t, int32_t>;
struct Exact {
  std::map<Pair, double> p;
};

// Pearson's statistic over the cells with an expected count of at least 5 (the rest pooled).
double chi2(const Exact& e, const std::map<Pair, int>& counts, int n, int* df) {
  double stat = 0, rest_e = 0, rest_o = 0;
  int cells = 0;
  for (const auto& [k, p] : e.p) {
    const double ex = p * n;
    const auto it = counts.find(k);
    const double ob = it == counts.end() ? 0 : it->second;
    if (ex < 5) {
      rest_e += ex, rest_o += ob;
      continue;
    }
    stat += (ob - ex) * (ob - ex) / ex, ++cells;
  }
  for (const auto& [k, c] : counts)
    if (!e.p.count(k)) rest_o += c;  // outside the support: impossible under the exact law
  if (rest_e > 0 || rest_o > 0) stat += (rest_o - rest_e) * (rest_o - rest_e) / std::max(rest_e, 1e-9), ++cells;
  *df = cells - 1;
  return stat;
}

TEST(Sampling, SpeculativeMatchesPlainDistribution) {
  auto m = model::Model::load(make_model(config_b(1e-5f), "smp_b"));
  const int32_t V = m->n_vocab();
  ThreadPool pool(1);
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  model::SamplerParams sp;
  sp.temp = 1.3f, sp.top_k = 6;
  const std::vector<int32_t> prompt = prompt_ids(8, V, 4);
  const int32_t anchor = prompt[3];
  model::State base = m->new_state(32);
  std::vector<float> l0, l1;
  m->forward(base, prompt.data(), static_cast<int64_t>(prompt.size()), opt, model::Logits::None, nullptr);
  {
    model::State s = base;
    m->forward(s, &anchor, 1, opt, model::Logits::Last, &l0);
  }
  // exact law: pi0(x0) pi1(x1 | x0)
  model::Sampler ds(sp);
  const auto pi0 = ds.distribution(l0.data(), V);
  Exact ex;
  std::map<int32_t, std::vector<model::Sampler::Cand>> pi1;
  for (const auto& c0 : pi0) {
    model::State s = base;
    const int32_t two[2] = {anchor, c0.id};
    m->forward(s, two, 2, opt, model::Logits::Last, &l1);
    pi1[c0.id] = ds.distribution(l1.data(), V);
    for (const auto& c1 : pi1[c0.id]) ex.p[{c0.id, c1.id}] = double(c0.p) * c1.p;
  }
  const int32_t d0 = pi0.at(1).id, d1 = pi1.at(d0).at(0).id;  // drafts: the second likeliest, then the likeliest
  const double pd0 = pi0.at(1).p;
  ASSERT_GT(pd0, 0.1);
  ASSERT_LT(pd0, 0.6);

  // speculative: one step with drafts [d0, d1], then plain steps
  spec::SpecOptions so;
  so.type = spec::SpecType::Ngram;
  so.draft_max = 2;
  so.source = [&](std::span<const int32_t> x, int64_t, std::vector<int32_t>& out) {
    if (x.size() == prompt.size() + 1) out = {d0, d1};
  };
  spec::Drafting d(*m, nullptr, so, pool);
  std::map<Pair, int> spec_counts, plain_counts, wrong_counts;
  std::vector<float> logits;
  for (int seed = 0; seed < kSeeds; ++seed) {
    sp.seed = static_cast<uint64_t>(seed);
    model::Sampler s(sp);
    model::State st = base;
    spec::Speculator sq(d, st);
    sq.prompt(prompt, nullptr);
    sq.first(anchor);
    std::vector<int32_t> out;
    while (out.size() < 2) {
      const std::vector<int32_t>& ids = sq.plan(3);
      m->forward(st, ids.data(), static_cast<int64_t>(ids.size()), opt, model::Logits::All, &logits);
      const std::vector<int32_t>& e = sq.verify(logits.data(), s);
      int64_t r = 0;
      while (out.size() < 2 && r < static_cast<int64_t>(e.size())) out.push_back(e[r++]);
      sq.commit(r, nullptr);
    }
    ++spec_counts[{out[0], out[1]}];
    // plain sampling through the model, the control
    model::Sampler p(sp);
    const int32_t x0 = p.sample(l0.data(), V);
    model::State ps = base;
    const int32_t two[2] = {anchor, x0};
    m->forward(ps, two, 2, opt, model::Logits::Last, &l1);
    ++plain_counts[{x0, p.sample(l1.data(), V)}];
    // the slip: after a rejection, resample from pi including the draft
    model::Sampler w(sp);
    auto draw = [&](const std::vector<model::Sampler::Cand>& pi) {
      double u = w.uniform(), cum = 0;
      for (const auto& c : pi)
        if (u < (cum += c.p)) return c.id;
      return pi.back().id;
    };
    auto step = [&](const std::vector<model::Sampler::Cand>& pi, int32_t dr, bool* ok) {
      double pd = 0;
      for (const auto& c : pi) pd += c.id == dr ? c.p : 0;
      *ok = w.uniform() < pd;
      return *ok ? dr : draw(pi);
    };
    bool ok0 = false, ok1 = false;
    const int32_t w0 = step(pi0, d0, &ok0);
    ++wrong_counts[{w0, ok0 ? step(pi1.at(d0), d1, &ok1) : draw(pi1.at(w0))}];
  }
  int df = 0;
  const double s_spec = chi2(ex, spec_counts, kSeeds, &df), crit = chi2_critical(df);
  const double s_plain = chi2(ex, plain_counts, kSeeds, &df), crit_plain = chi2_critical(df);
  const double s_wrong = chi2(ex, wrong_counts, kSeeds, &df), crit_wrong = chi2_critical(df);
  std::printf("chi2 over %d seeds (p = 1e-4 bound): speculative %.1f (< %.1f), plain %.1f (< %.1f), wrong rule %.1f "
              "(> %.1f); P(d0) = %.3f, %.3f with the slip\n",
              kSeeds, s_spec, crit, s_plain, crit_plain, s_wrong, crit_wrong, pd0, pd0 * (2 - pd0));
  EXPECT_LT(s_plain, crit_plain) << "the harness itself";
  EXPECT_LT(s_spec, crit) << "speculative sampling";
  EXPECT_GT(s_wrong, crit_wrong) << "the test must catch the wrong rule";
}

}  // namespace
