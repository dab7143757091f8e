// Exactness of the prompt cache at the model level: over many random conversations (new ones,
// turns that extend them with their own replies or with an edited reply, branches from every
// message, edits in the middle, truncations, identical resends, restarts from disk), a request
// served through the cache gives, bit for bit, the logits of every generated token, the tokens and
// the final state of the plain path (a fresh state, the whole prompt in one forward pass). Chunk
// sizes vary per request, so chunk edges fall on either side of every snapshot position; budgets
// small enough to evict, and a disk tier, change what is reused, never a result.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>

#include "driver.h"
#include "helpers.h"

using namespace k3;
using namespace k3::test;

namespace {

struct Conversation {
  std::vector<std::vector<int32_t>> msgs;  // token runs; the prompt adds a 2-token generation prompt
  std::vector<int32_t> last_reply;         // what the model generated for it
};

std::vector<int32_t> prompt_of(const Conversation& c, std::vector<int64_t>* starts) {
  std::vector<int32_t> p;
  for (const auto& m : c.msgs) {
    if (starts) starts->push_back(static_cast<int64_t>(p.size()));
    p.insert(p.end(), m.begin(), m.end());
  }
  if (starts) starts->push_back(static_cast<int64_t>(p.size()));
  p.push_back(1), p.push_back(2);
  return p;
}

struct CacheSetup {
  const char* name;
  model::SynthOptions (*config)(float);
  int64_t ram_snapshots;  // RAM budget in snapshots (0: unlimited)
  int64_t snapshot_every;
  bool disk;
  int64_t min_gap = 1;  // 64 is the default
};

class Exact : public ::testing::TestWithParam<CacheSetup> {};

TEST_P(Exact, RandomConversationsMatchThePlainPath) {
  const CacheSetup& s = GetParam();
  const auto path = make_model(s.config(1e-5f), std::string("cache_exact_") + s.name);
  auto m = model::Model::load(path);
  ThreadPool pool(1);
  const std::string dir = s.disk ? fresh_dir(std::string("exact_disk_") + s.name) : "";
  auto make_cache = [&] {
    const cache::Layout l = cache::Layout::of(m->hparams());
    const int64_t snap = static_cast<int64_t>(l.snapshot_floats() * 4);
    cache::Options o = ram_options(s.ram_snapshots ? s.ram_snapshots * snap : int64_t{1} << 34, dir);
    o.snapshot_every = s.snapshot_every;
    o.snapshot_min_gap = s.min_gap;
    return std::make_unique<cache::PrefixCache>(*m, "template", "test", o);
  };
  auto cache = make_cache();

  std::mt19937_64 rng(1234);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto run = [&](int64_t n) {
    std::vector<int32_t> r;
    for (int64_t i = 0; i < n; ++i) r.push_back(static_cast<int32_t>(pick(3, m->n_vocab() - 1)));
    return r;
  };
  const std::vector<std::vector<int32_t>> systems = {run(17), run(9)};
  std::vector<Conversation> pool_c;
  long long prompt_tokens = 0, cached_tokens = 0, resends = 0, full_hits = 0, restarts = 0;
  const int kRequests = 150;
  for (int r = 0; r < kRequests; ++r) {
    Conversation c;
    const int op = pool_c.empty() ? 0 : static_cast<int>(pick(0, 7));
    const bool resend = op == 6;
    if (op == 0) {  // a new conversation after one of two system prompts
      c.msgs = {systems[pick(0, 1)], run(pick(1, 12))};
    } else {
      c = pool_c[pick(0, static_cast<int64_t>(pool_c.size()) - 1)];
      if (op == 1 || op == 2) {  // the next turn: the reply (op 2: as a client edits it), a new message
        std::vector<int32_t> reply = c.last_reply;
        if (op == 2 && !reply.empty()) reply[pick(0, static_cast<int64_t>(reply.size()) - 1)] = 5;
        c.msgs.push_back(reply);
        c.msgs.push_back(run(pick(1, 10)));
      } else if (op == 3) {  // a branch after message k
        c.msgs.resize(pick(1, static_cast<int64_t>(c.msgs.size())));
        c.msgs.push_back(run(pick(1, 8)));
      } else if (op == 4) {  // an edit inside a middle message
        auto& msg = c.msgs[pick(0, static_cast<int64_t>(c.msgs.size()) - 1)];
        if (!msg.empty()) msg[pick(0, static_cast<int64_t>(msg.size()) - 1)] = static_cast<int32_t>(pick(3, 40));
      } else if (op == 5 && c.msgs.size() > 1) {  // a truncation
        c.msgs.resize(pick(1, static_cast<int64_t>(c.msgs.size()) - 1));
      } else if (op == 7 && s.disk) {  // a restart: RAM is gone, the disk tier stays
        cache->flush();
        cache.reset();
        cache = make_cache();
        ++restarts;
      }
    }
    std::vector<int64_t> starts;
    const std::vector<int32_t> prompt = prompt_of(c, &starts);
    if (prompt.size() > 160) continue;
    const int64_t n_batch = pick(1, 9);
    const int n_gen = static_cast<int>(pick(1, 4));
    const Outcome got = run_cached(*m, *cache, prompt, starts, n_batch, n_gen, pool);
    const Outcome want = run_plain(*m, prompt, n_gen, pool);
    ASSERT_EQ(got.tokens, want.tokens) << "request " << r << " (op " << op << ", batch " << n_batch << ")";
    ASSERT_EQ(got.logits.size(), want.logits.size());
    for (size_t g = 0; g < want.logits.size(); ++g)
      ASSERT_EQ(0, std::memcmp(got.logits[g].data(), want.logits[g].data(), want.logits[g].size() * sizeof(float)))
          << "request " << r << " (op " << op << "), generated token " << g << ", cached " << got.cached;
    ASSERT_TRUE(same_bits(*got.state, *want.state)) << "request " << r << " (op " << op << ")";
    prompt_tokens += static_cast<long long>(prompt.size());
    cached_tokens += got.cached;
    if (resend) ++resends, full_hits += got.cached == static_cast<int64_t>(prompt.size());
    c.last_reply = got.tokens;
    pool_c.push_back(c);
  }
  std::printf("%s: %lld of %lld prompt tokens cached, %lld/%lld resends full, %lld restarts, evictions %lld, disk loads %lld\n", s.name, cached_tokens, prompt_tokens, full_hits, resends, restarts, cache->stats().evictions, cache->stats().disk.loads);
  // The cache was used, not bypassed.
  // (Small budgets evict, and with the default gap these short messages get few snapshots.)
  EXPECT_GT(cached_tokens, prompt_tokens / (s.ram_snapshots ? 8 : s.min_gap > 1 ? 5 : 3)) << cached_tokens << " of " << prompt_tokens;
  const cache::CacheStats st = cache->stats();
  if (s.ram_snapshots) {
    EXPECT_LE(st.ram_bytes, st.ram_budget);
    EXPECT_GT(st.evictions, 0);
  } else if (!s.disk) {
    EXPECT_EQ(full_hits, resends) << "an identical resend restores everything";
  }
  if (s.disk) {
    EXPECT_GT(restarts, 0);
    cache->flush();
    EXPECT_GT(cache->stats().disk.loads + st.disk.loads, 0) << "restarts were served from disk";
  }
}

const CacheSetup kSetups[] = {
    {"ram_a", config_a, 0, 0, false},
    {"ram_c", config_c, 0, 0, false},
    {"small_ram_a", config_a, 6, 7, false},
    {"disk_a", config_a, 4, 7, true},
    {"disk_d", config_d, 4, 5, true},
    {"default_gap_a", config_a, 0, 0, false, 64},
};
INSTANTIATE_TEST_SUITE_P(Setups, Exact, ::testing::ValuesIn(kSetups),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
