// The engine with a prompt cache: requests in parallel slots, sharing prefixes with each other and
// with earlier requests (turns, branches, edits, resends), give exactly the tokens and, bit for
// bit, the logits of an engine without a cache; the cached counts show the reuse.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "cache/prefix_cache.h"
#include "helpers.h"
#include "server/engine.h"

using namespace k3;
using namespace k3::server;
using namespace std::chrono_literals;

namespace {

struct Result {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;
  TaskTimes times;
};

Result wait(const std::shared_ptr<Task>& t) {
  Result r;
  while (!t->take(r.ids, 1000ms)) {
  }
  r.logits = t->logits();
  r.times = t->times();
  return r;
}

GenRequest greedy(std::vector<int32_t> prompt, std::vector<int64_t> starts, int n) {
  GenRequest r;
  r.prompt = std::move(prompt);
  r.snapshot_at = std::move(starts);
  r.sampling = {0.0f, 40, 0.95f, 0.05f, 1};
  r.max_tokens = n;
  r.ignore_eos = true;
  r.keep_logits = true;
  return r;
}

cache::Options cache_options(int64_t ram, int64_t every) {
  cache::Options o;
  o.ram_bytes = ram;
  o.snapshot_every = every;
  o.snapshot_min_gap = 1;
  o.log = [](cache::Level, const std::string&) {};
  return o;
}

}  // namespace

TEST(PromptCache, ParallelConversationsMatchAnEngineWithoutCache) {
  const auto& m = test::tiny_model();
  EngineOptions plain_o;
  plain_o.parallel = 1, plain_o.queue = 64, plain_o.n_ctx = 256, plain_o.n_batch = 256, plain_o.threads = 1;
  Engine plain(*m.model, *m.tok, plain_o);

  for (int64_t n_batch : {3, 16}) {
    cache::PrefixCache pc(*m.model, "", "test", cache_options(int64_t{1} << 30, 6));
    EngineOptions o = plain_o;
    o.parallel = 3, o.n_batch = n_batch, o.cache = &pc;
    Engine e(*m.model, *m.tok, o);

    std::mt19937_64 rng(77 + n_batch);
    auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    auto run = [&](int64_t n) {
      std::vector<int32_t> v;
      for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(pick(3, m.tok->n_vocab() - 1)));
      return v;
    };
    const std::vector<int32_t> system = run(13);
    std::vector<std::vector<std::vector<int32_t>>> convs;  // conversations as messages
    long long cached = 0, resends = 0, full = 0;
    for (int round = 0; round < 6; ++round) {
      std::vector<std::vector<std::vector<int32_t>>> next;
      for (int i = 0; i < 4; ++i) {
        std::vector<std::vector<int32_t>> c;
        const int op = convs.empty() ? 0 : static_cast<int>(pick(0, 4));
        if (op == 0) c = {system, run(pick(1, 9))};
        else c = convs[pick(0, static_cast<int64_t>(convs.size()) - 1)];
        if (op == 1) c.push_back(run(pick(1, 9)));                                     // the next turn
        if (op == 2) c.resize(pick(1, static_cast<int64_t>(c.size()))), c.push_back(run(4));  // a branch
        if (op == 3) c.back()[0] = 3;                                                  // an edit
        next.push_back(c);
        resends += op == 4;
      }
      std::vector<std::shared_ptr<Task>> tasks;
      std::vector<Result> want;
      for (const auto& c : next) {
        std::vector<int32_t> p;
        std::vector<int64_t> starts;
        for (const auto& msg : c) starts.push_back(static_cast<int64_t>(p.size())), p.insert(p.end(), msg.begin(), msg.end());
        const int n_gen = static_cast<int>(pick(1, 6));
        tasks.push_back(std::make_shared<Task>(greedy(p, starts, n_gen)));
        auto t = std::make_shared<Task>(greedy(p, starts, n_gen));
        ASSERT_EQ(plain.submit(t), Engine::Admit::Ok);
        want.push_back(wait(t));
      }
      ASSERT_EQ(e.submit(tasks), Engine::Admit::Ok);  // together: slots share batches and prefixes
      for (size_t i = 0; i < tasks.size(); ++i) {
        const Result got = wait(tasks[i]);
        ASSERT_EQ(got.ids, want[i].ids) << "batch " << n_batch << " round " << round << " request " << i;
        ASSERT_EQ(got.logits.size(), want[i].logits.size());
        for (size_t g = 0; g < got.logits.size(); ++g)
          ASSERT_EQ(0, std::memcmp(got.logits[g].data(), want[i].logits[g].data(), got.logits[g].size() * 4))
              << "batch " << n_batch << " round " << round << " request " << i << " token " << g;
        cached += got.times.n_cached;
        full += got.times.n_cached == got.times.n_prompt;
      }
      for (auto& c : next) convs.push_back(std::move(c));
    }
    const EngineStats s = e.stats();
    EXPECT_EQ(s.prompt_cached_tokens, cached);
    EXPECT_GT(cached, s.prompt_tokens / 2) << cached << " cached, " << s.prompt_tokens << " processed";
    EXPECT_GE(full, resends) << "a prompt sent again (in a later round) is restored whole";
    EXPECT_GT(pc.stats().hits, 0);
  }
}

// --cache-ram 0: a cache that is off reuses nothing, and the engine behaves as without one.
TEST(PromptCache, OffReusesNothing) {
  const auto& m = test::tiny_model();
  cache::PrefixCache pc(*m.model, "", "test", cache_options(0, 4));
  EngineOptions o;
  o.parallel = 2, o.n_ctx = 128, o.n_batch = 7, o.threads = 1, o.cache = &pc;
  Engine e(*m.model, *m.tok, o);
  const std::vector<int32_t> p = m.tok->encode("The lighthouse keeper climbed the stairs", true);
  for (int i = 0; i < 3; ++i) {
    auto t = std::make_shared<Task>(greedy(p, {0, 3}, 4));
    ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
    const Result r = wait(t);
    EXPECT_EQ(r.times.n_cached, 0);
    EXPECT_EQ(r.ids.size(), 4u);
  }
  EXPECT_EQ(e.stats().prompt_cached_tokens, 0);
  EXPECT_EQ(e.stats().prompt_tokens, 3 * static_cast<long long>(p.size()));
  EXPECT_EQ(pc.stats().ram_bytes, 0);
}
