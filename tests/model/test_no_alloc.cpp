// Decoding allocates nothing once warm: after a few tokens have sized every scratch buffer, a
// one-token forward (one sequence, and a batch of sequences) makes no heap allocation at all, on
// 1 and 2 threads, for each test configuration. Counted by replacing the global operator new.
// Each case runs on a thread of its own with its own pool, as the server's engine does (per-thread
// scratch sized by an earlier case on the same thread would otherwise skip the workers' sizing).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

#include "helpers.h"
#include "model/expert_store.h"
#include "model/sampler.h"
#include "tensor/threadpool.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};
}  // namespace

// GCC 12 flags free() on memory from the replaced operator new once these are inlined; they are
// this file's own matching pair.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace k3;

namespace {

// Allocations made by `decode` calls 4..8 (the first ones may size buffers).
template <class F>
long steady_allocs(F&& decode) {
  for (int i = 0; i < 3; ++i) decode();
  g_allocs = 0;
  g_counting = true;
  for (int i = 0; i < 5; ++i) decode();
  g_counting = false;
  return g_allocs.load();
}

template <class F>
void on_own_thread(F&& f) {
  std::thread t(std::forward<F>(f));
  t.join();
}

}  // namespace

class NoAlloc : public ::testing::TestWithParam<test::NamedConfig> {};

TEST_P(NoAlloc, OneTokenDecode) {
  const auto path = test::make_model(GetParam().make(1e-6f), std::string("noalloc_") + GetParam().name + ".gguf");
  auto m = model::Model::load(path);
  for (int threads : {1, 2}) on_own_thread([&] {
    ThreadPool pool(threads);
    model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
    const auto prompt = test::prompt_ids(12, m->n_vocab());
    model::State st = m->new_state(64);
    std::vector<float> logits;
    m->prefill(st, prompt, 0, opt, model::Logits::Last, &logits);
    int32_t id = 0;
    const long n = steady_allocs([&] {
      id = model::Sampler::argmax(logits.data(), m->n_vocab());
      m->forward(st, &id, 1, opt, model::Logits::Last, &logits);
    });
    EXPECT_EQ(n, 0) << threads << " threads: heap allocations in 5 decode steps";
  });
}

TEST_P(NoAlloc, BatchedDecode) {
  const auto path = test::make_model(GetParam().make(1e-6f), std::string("noalloc_b_") + GetParam().name + ".gguf");
  auto m = model::Model::load(path);
  on_own_thread([&] {
    ThreadPool pool(2);
    model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
    constexpr int kSeqs = 3;
    std::vector<model::State> states;
    std::vector<std::vector<float>> logits(kSeqs);
    std::vector<int32_t> last(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {
      states.push_back(m->new_state(64));
      m->prefill(states.back(), test::prompt_ids(5 + 3 * s, m->n_vocab(), 11 + s), 0, opt, model::Logits::Last, &logits[s]);
    }
    std::vector<model::Segment> batch(kSeqs);
    const long n = steady_allocs([&] {
      for (int s = 0; s < kSeqs; ++s) {
        last[s] = model::Sampler::argmax(logits[s].data(), m->n_vocab());
        batch[s] = {&states[s], &last[s], 1, model::Logits::Last, &logits[s]};
      }
      m->forward(batch, opt);
    });
    EXPECT_EQ(n, 0) << "heap allocations in 5 batched decode steps of " << kSeqs << " sequences";
  });
}

// Experts streamed through an ExpertStore that holds all of them (warmed up first): the routing,
// the next layer's prediction and the cache bookkeeping allocate nothing either. (A miss submits
// reads, which is allowed to allocate.)
TEST_P(NoAlloc, StreamedExpertsAllResident) {
  const auto path = test::make_model(GetParam().make(1e-6f), std::string("noalloc_s_") + GetParam().name + ".gguf");
  auto m = model::Model::load(path);
  on_own_thread([&] {
    model::ExpertStoreOptions so;
    so.quiet = true, so.budget_bytes = 1ull << 30;
    model::ExpertStore store(*m, so);
    ASSERT_GT(store.warmup({}, 0.0), 0);
    ThreadPool pool(2);
    model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
    opt.experts = &store;
    model::State st = m->new_state(64);
    std::vector<float> logits;
    m->prefill(st, test::prompt_ids(9, m->n_vocab()), 0, opt, model::Logits::Last, &logits);
    int32_t id = 0;
    const long n = steady_allocs([&] {
      id = model::Sampler::argmax(logits.data(), m->n_vocab());
      m->forward(st, &id, 1, opt, model::Logits::Last, &logits);
    });
    EXPECT_EQ(store.stats().misses, 0u);
    EXPECT_EQ(n, 0) << "heap allocations in 5 decode steps with streamed experts";
  });
}

INSTANTIATE_TEST_SUITE_P(Configs, NoAlloc, ::testing::ValuesIn(test::kConfigs),
                         [](const auto& info) { return std::string(info.param.name); });
