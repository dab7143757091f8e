// The attention-residual mix keeps each bank entry's rms scales (Bank::scales) for the mixes after
// it: every mix of a bank that grows entry by entry, changes ε, or is reset to another batch shape
// must give the bits of the same mix on a fresh copy of the bank, which sums every scale anew.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/attnres.h"
#include "model/ops.h"

namespace k3::model {
namespace {

// The mix on `bank` (its scales kept from earlier mixes) and on a copy holding only its entries.
void expect_as_fresh(Ctx& ctx, Bank& bank, const std::vector<float>& c, const std::vector<float>& w, float eps,
                     const std::string& where) {
  Bank fresh;
  fresh.reset(bank.T, bank.H);
  for (size_t j = 0; j < bank.n; ++j) fresh.push(bank.entries[j].data());
  std::vector<float> kept(c.size()), anew(c.size());
  attnres_mix(ctx, bank, c.data(), w.data(), eps, kept.data());
  attnres_mix(ctx, fresh, c.data(), w.data(), eps, anew.data());
  EXPECT_EQ(std::memcmp(kept.data(), anew.data(), kept.size() * sizeof(float)), 0) << where;
}

TEST(AttnRes, KeptScalesGiveTheFreshMix) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rows = [&](int64_t n, float spread) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng) * spread;
    return v;
  };
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    Ctx ctx{pool};
    Bank bank;
    for (auto [T, H] : {std::pair<int64_t, int64_t>{3, 96}, {5, 64}}) {  // a reset to another shape
      bank.reset(T, H);
      const std::vector<float> w = rows(H, 1.0f);
      for (int e = 0; e < 6; ++e) {
        bank.push(rows(T * H, 0.5f + e).data());  // entries of different scales: a stale one shows
        const std::string where = std::to_string(T) + " tokens, entry " + std::to_string(e) + ", " +
                                  std::to_string(threads) + " threads";
        expect_as_fresh(ctx, bank, rows(T * H, 2.0f), w, 1e-5f, where);
        expect_as_fresh(ctx, bank, rows(T * H, 2.0f), w, 1e-5f, where + ", again");
        if (e == 3) expect_as_fresh(ctx, bank, rows(T * H, 2.0f), w, 0.5f, where + ", another eps");
      }
    }
  }
}

}  // namespace
}  // namespace k3::model
