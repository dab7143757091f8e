// The generation engine: continuous batching gives each sequence exactly what it gets alone;
// forced (canned) tokens, limits, cancellation, overload and shutdown; streamed experts and a
// failed expert read.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "helpers.h"
#include "common/error.h"
#include "model/expert_store.h"
#include "server/engine.h"

using namespace k3;
using namespace k3::server;
using namespace std::chrono_literals;

namespace {

std::vector<int32_t> run_to_end(const std::shared_ptr<Task>& t) {
  std::vector<int32_t> ids;
  while (!t->take(ids, 1000ms)) {
  }
  return ids;
}

GenRequest request(const std::string& text, int max_tokens, uint64_t seed, float temp = 0.8f) {
  const auto& m = test::tiny_model();
  GenRequest r;
  r.prompt = m.tok->encode(text, true);
  r.sampling = {temp, 40, 0.95f, 0.05f, seed};
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

EngineOptions opts(int parallel, int queue, int64_t n_ctx = 512) {
  EngineOptions o;
  o.parallel = parallel;
  o.queue = queue;
  o.n_ctx = n_ctx;
  o.n_batch = 16;  // several prompt chunks, interleaved with other sequences' decode steps
  o.threads = 1;
  return o;
}

}  // namespace

TEST(Engine, ConcurrentSequencesMatchSolo) {
  const auto& m = test::tiny_model();
  const char* prompts[] = {"The lighthouse keeper", "Once upon a time in a land far away, there lived", "abc",
                           "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15"};
  std::vector<std::vector<int32_t>> solo;
  {
    Engine e(*m.model, *m.tok, opts(1, 8));
    for (int i = 0; i < 4; ++i) {
      auto t = std::make_shared<Task>(request(prompts[i], 24 + 5 * i, 100 + i));
      ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
      solo.push_back(run_to_end(t));
      EXPECT_EQ(t->finish(), Finish::Length);
      EXPECT_EQ(static_cast<int>(solo.back().size()), 24 + 5 * i);
    }
  }
  Engine e(*m.model, *m.tok, opts(3, 8));  // 3 slots for 4 requests: one joins when a slot frees
  std::vector<std::shared_ptr<Task>> tasks;
  for (int i = 0; i < 4; ++i) tasks.push_back(std::make_shared<Task>(request(prompts[i], 24 + 5 * i, 100 + i)));
  ASSERT_EQ(e.submit(tasks), Engine::Admit::Ok);  // together, so the schedule does not depend on timing
  for (int i = 0; i < 4; ++i) EXPECT_EQ(run_to_end(tasks[i]), solo[i]) << "sequence " << i;
  const EngineStats s = e.stats();
  EXPECT_EQ(s.requests, 4);
  EXPECT_EQ(s.busy, 0);
  EXPECT_GT(s.generated_tokens, 0);
  EXPECT_GT(s.batch_sequences, s.forwards) << "sequences share forward passes";
}

// Eight sequences decoded in one batch per step, joined by prompts in chunks (n_batch 16 in all
// per step), with sampling seeds: each gets exactly its solo output.
TEST(Engine, EightSequencesBatchedMatchSolo) {
  const auto& m = test::tiny_model();
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    std::string text = "Sequence " + std::to_string(i) + ":";
    for (int w = 0; w < 3 * i; ++w) text += " lighthouse";
    reqs.push_back(request(text, 10 + 3 * i, 700 + i, 1.0f));
  }
  std::vector<std::vector<int32_t>> solo;
  {
    Engine e(*m.model, *m.tok, opts(1, 8));
    for (const auto& r : reqs) {
      auto t = std::make_shared<Task>(r);
      ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
      solo.push_back(run_to_end(t));
    }
  }
  Engine e(*m.model, *m.tok, opts(8, 8));
  std::vector<std::shared_ptr<Task>> tasks;
  size_t prompt_tokens = 0;
  for (const auto& r : reqs) {
    tasks.push_back(std::make_shared<Task>(r));
    prompt_tokens += r.prompt.size();
  }
  ASSERT_EQ(e.submit(tasks), Engine::Admit::Ok);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(run_to_end(tasks[i]), solo[i]) << "sequence " << i;
    EXPECT_EQ(static_cast<int>(solo[i].size()), 10 + 3 * i);
  }
  const EngineStats s = e.stats();
  // Every pass fills its prompt budget until all prompts are in, then each sequence decodes one
  // token per pass: the longest (31 tokens, the first sampled from its prompt) bounds the rest.
  const long long bound = static_cast<long long>((prompt_tokens + 15) / 16) + 31 - 1;
  EXPECT_LE(s.forwards, bound) << s.batch_sequences << " sequence steps in " << s.forwards << " passes";
  EXPECT_GT(s.batch_sequences, 3 * s.forwards) << s.batch_sequences << " sequence steps in " << s.forwards << " passes";
  EXPECT_EQ(s.batch_tokens, s.prompt_tokens + s.generated_tokens - 8);  // the last token of each is never fed
}

TEST(Engine, ForcedTokensThenEnd) {
  const auto& m = test::tiny_model();
  Engine e(*m.model, *m.tok, opts(2, 4));
  GenRequest r = request("Hi", 100, 1);
  r.ignore_eos = false;
  r.forced = true;
  r.forced_ids = m.tok->encode("Hello<|open|>tools<|sep|>", true);
  auto t = std::make_shared<Task>(r);
  ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
  EXPECT_EQ(run_to_end(t), r.forced_ids);
  EXPECT_EQ(t->finish(), Finish::Eog);

  // An end-of-generation id among the forced ones ends generation there (and is not emitted).
  r.forced_ids = {m.tok->encode("A", false)[0], m.tok->eos(), m.tok->encode("B", false)[0]};
  t = std::make_shared<Task>(r);
  ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
  EXPECT_EQ(run_to_end(t), std::vector<int32_t>{r.forced_ids[0]});
  EXPECT_EQ(t->finish(), Finish::Eog);

  // max_tokens cuts forced output too.
  r.forced_ids = m.tok->encode("abcdefgh", false);
  r.max_tokens = 3;
  t = std::make_shared<Task>(r);
  ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
  EXPECT_EQ(run_to_end(t).size(), 3u);
  EXPECT_EQ(t->finish(), Finish::Length);
}

TEST(Engine, ContextFull) {
  const auto& m = test::tiny_model();
  Engine e(*m.model, *m.tok, opts(1, 1, 64));
  GenRequest r = request("", 1000, 1);
  r.prompt.assign(60, m.tok->encode("a", false)[0]);
  auto t = std::make_shared<Task>(r);
  ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
  // Tokens sampled at positions 59..63: the last one is returned but never fed.
  EXPECT_EQ(run_to_end(t).size(), 5u);
  EXPECT_EQ(t->finish(), Finish::Context);
}

TEST(Engine, CancelFreesSlotAtOnce) {
  const auto& m = test::tiny_model();
  Engine e(*m.model, *m.tok, opts(1, 4, 4096));
  auto long_task = std::make_shared<Task>(request("The lighthouse keeper", 4000, 1));
  ASSERT_EQ(e.submit(long_task), Engine::Admit::Ok);
  std::vector<int32_t> got;
  while (got.size() < 5) long_task->take(got, 1000ms);
  auto next = std::make_shared<Task>(request("abc", 8, 2));
  ASSERT_EQ(e.submit(next), Engine::Admit::Ok);
  const auto t0 = std::chrono::steady_clock::now();
  long_task->cancel();
  EXPECT_EQ(run_to_end(next).size(), 8u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  while (!long_task->take(got, 100ms)) {
  }
  EXPECT_EQ(long_task->finish(), Finish::Cancelled);
  EXPECT_LT(got.size(), 4000u);
  EXPECT_EQ(e.stats().cancelled, 1);
}

// A queued task that is cancelled leaves the queue at once (while the slot is still busy): its
// place is free for the next request, and it ends without ever starting.
TEST(Engine, CancelWhileQueuedLeavesTheQueueAtOnce) {
  const auto& m = test::tiny_model();
  Engine e(*m.model, *m.tok, opts(1, 1, 4096));
  auto running = std::make_shared<Task>(request("a", 3000, 1));
  auto queued = std::make_shared<Task>(request("b", 8, 2));
  ASSERT_EQ(e.submit(running), Engine::Admit::Ok);
  EXPECT_TRUE(running->wait_started(10s));
  ASSERT_EQ(e.submit(queued), Engine::Admit::Ok);
  EXPECT_FALSE(queued->wait_started(20ms));
  EXPECT_EQ(e.stats().queued, 1);
  auto third = std::make_shared<Task>(request("c", 8, 3));
  EXPECT_EQ(e.submit(third), Engine::Admit::Overloaded);
  e.cancel(queued);
  EXPECT_EQ(e.stats().queued, 0);
  EXPECT_EQ(queued->finish(), Finish::Cancelled);
  EXPECT_TRUE(queued->wait_started(0ms));  // ended
  std::vector<int32_t> none;
  EXPECT_TRUE(queued->take(none, 0ms));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(e.submit(third), Engine::Admit::Ok);  // the place it left
  e.cancel(running);
  EXPECT_EQ(run_to_end(third).size(), 8u);
  EXPECT_EQ(e.stats().cancelled, 2);
}

TEST(Engine, OverloadAndShutdown) {
  const auto& m = test::tiny_model();
  Engine e(*m.model, *m.tok, opts(1, 1, 4096));
  auto a = std::make_shared<Task>(request("a", 3000, 1));
  auto b = std::make_shared<Task>(request("b", 3000, 2));
  auto c = std::make_shared<Task>(request("c", 3000, 3));
  ASSERT_EQ(e.submit(a), Engine::Admit::Ok);
  ASSERT_EQ(e.submit(b), Engine::Admit::Ok);  // waits in the queue
  EXPECT_EQ(e.submit(c), Engine::Admit::Overloaded);
  EXPECT_EQ(e.stats().rejected, 1);
  e.stop_accepting();
  EXPECT_EQ(e.submit(c), Engine::Admit::ShuttingDown);
  EXPECT_FALSE(e.wait_idle(10ms));
  e.cancel_all();
  EXPECT_TRUE(e.wait_idle(5s));
  EXPECT_EQ(a->finish(), Finish::Cancelled);
  EXPECT_EQ(b->finish(), Finish::Cancelled);
}

TEST(Engine, SeededSamplingIsReproducible) {
  const auto& m = test::tiny_model();
  Engine e(*m.model, *m.tok, opts(2, 4));
  auto a = std::make_shared<Task>(request("Seeds", 32, 42, 1.0f));
  auto b = std::make_shared<Task>(request("Seeds", 32, 42, 1.0f));
  auto c = std::make_shared<Task>(request("Seeds", 32, 43, 1.0f));
  ASSERT_EQ(e.submit(a), Engine::Admit::Ok);
  ASSERT_EQ(e.submit(b), Engine::Admit::Ok);
  ASSERT_EQ(e.submit(c), Engine::Admit::Ok);
  const auto ra = run_to_end(a), rb = run_to_end(b), rc = run_to_end(c);
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
}

// A sequence the model refuses (an id outside the vocabulary; requests are validated before they
// get here, so this is the engine's own safety net) ends with an error naming the problem; the
// sequences batched with it are untouched and still give their solo output.
TEST(Engine, RefusedSequenceFailsAloneOthersContinue) {
  const auto& m = test::tiny_model();
  const GenRequest good = request("The lighthouse keeper", 20, 9, 1.0f);
  std::vector<int32_t> solo;
  {
    Engine e(*m.model, *m.tok, opts(1, 4));
    auto t = std::make_shared<Task>(good);
    ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
    solo = run_to_end(t);
  }
  Engine e(*m.model, *m.tok, opts(3, 4));
  GenRequest bad = request("abc", 20, 1);
  bad.prompt.push_back(m.model->n_vocab());
  auto a = std::make_shared<Task>(good), b = std::make_shared<Task>(bad), c = std::make_shared<Task>(good);
  ASSERT_EQ(e.submit(a), Engine::Admit::Ok);
  ASSERT_EQ(e.submit(b), Engine::Admit::Ok);
  ASSERT_EQ(e.submit(c), Engine::Admit::Ok);
  EXPECT_TRUE(run_to_end(b).empty());
  EXPECT_EQ(b->finish(), Finish::Error);
  EXPECT_NE(b->error().find("outside the vocabulary"), std::string::npos) << b->error();
  EXPECT_EQ(run_to_end(a), solo);
  EXPECT_EQ(run_to_end(c), solo);
  EXPECT_EQ(a->finish(), Finish::Length);
  EXPECT_EQ(e.stats().errors, 1);
}

namespace {

// Serves experts from the mapping, but after `after` more reads the next `failures` reads fail like
// a bad drive, and expert `bad_expert` of layer `bad_layer` (if set) never reads.
class FlakyExperts : public model::ExpertSource {
 public:
  explicit FlakyExperts(const model::Model& m) : m_(m) {}
  int failures = 0, after = 0;
  long reads = 0;
  uint32_t bad_layer = 0;
  int32_t bad_expert = -1;
  void request(uint32_t, std::vector<int32_t>&, const float*, int64_t) override {}
  model::ExpertMats acquire(uint32_t il, int32_t e) override {
    ++reads;
    const bool blip = failures > 0 && after-- <= 0;
    if (blip || (il == bad_layer && e == bad_expert)) {
      failures -= blip;
      fail("reading expert %d of tensor blk.%u.ffn_gate_exps.weight (file offset 4096) failed: short read", e, il);
    }
    const auto& w = m_.weights().layers[il];
    return {w.gate_exps.mat(e), w.up_exps.mat(e), w.down_exps.mat(e)};
  }
  void done(uint32_t, int32_t) override {}
  void release(uint32_t) noexcept override {}

 private:
  const model::Model& m_;
};

}  // namespace

// A failed expert read fails that request with the reader's message; the engine keeps serving.
TEST(Engine, ExpertReadErrorFailsOnlyThatRequest) {
  const auto& m = test::tiny_model();
  FlakyExperts src(*m.model);
  EngineOptions o = opts(1, 4);
  o.experts = &src;
  Engine e(*m.model, *m.tok, o);
  auto solo = std::make_shared<Task>(request("The lighthouse keeper", 8, 7));
  ASSERT_EQ(e.submit(solo), Engine::Admit::Ok);
  const auto want = run_to_end(solo);
  src.failures = 1;
  auto bad = std::make_shared<Task>(request("The lighthouse keeper", 8, 7));
  ASSERT_EQ(e.submit(bad), Engine::Admit::Ok);
  run_to_end(bad);
  EXPECT_EQ(bad->finish(), Finish::Error);
  EXPECT_NE(bad->error().find("ffn_gate_exps"), std::string::npos) << bad->error();
  auto again = std::make_shared<Task>(request("The lighthouse keeper", 8, 7));
  ASSERT_EQ(e.submit(again), Engine::Admit::Ok);
  EXPECT_EQ(run_to_end(again), want);
  EXPECT_EQ(again->finish(), Finish::Length);
  EXPECT_EQ(e.stats().errors, 1);
}

// Failed expert reads inside a batch of three sequences. A transient failure costs nobody their
// output: the batch's states are rebuilt alone from their tokens and each segment retried alone.
// An expert that never reads fails exactly the sequences that route to it (found by running each
// alone); the others still get their solo output.
TEST(Engine, ExpertErrorInBatchFailsOnlyTheSequencesThatMeetIt) {
  const auto& m = test::tiny_model();
  const std::vector<GenRequest> reqs = {request("abc", 6, 1), request("The lighthouse", 4, 2),
                                        request("Numbers: 1 2", 6, 3)};
  auto run = [&](FlakyExperts& src, int parallel) {
    EngineOptions o = opts(parallel, 4);
    o.experts = &src;
    Engine e(*m.model, *m.tok, o);
    std::vector<std::shared_ptr<Task>> tasks;
    for (const auto& r : reqs) tasks.push_back(std::make_shared<Task>(r));
    std::vector<std::vector<int32_t>> out;
    if (parallel == 1) {
      for (const auto& t : tasks) {
        EXPECT_EQ(e.submit(t), Engine::Admit::Ok);
        out.push_back(run_to_end(t));
      }
    } else {
      EXPECT_EQ(e.submit(tasks), Engine::Admit::Ok);
      for (const auto& t : tasks) out.push_back(run_to_end(t));
    }
    std::vector<bool> failed;
    for (const auto& t : tasks) failed.push_back(t->finish() == Finish::Error);
    return std::make_pair(out, failed);
  };
  FlakyExperts src(*m.model);
  const auto [solo, solo_failed] = run(src, 1);
  ASSERT_EQ(solo_failed, std::vector<bool>(3, false));
  src.reads = 0;
  run(src, 3);
  const long batched_reads = src.reads;

  // One failed read half way through: the states already hold prompt and generated tokens.
  src.failures = 1, src.after = static_cast<int>(batched_reads / 2);
  const auto [after_blip, blip_failed] = run(src, 3);
  EXPECT_EQ(src.failures, 0);
  EXPECT_EQ(blip_failed, std::vector<bool>(3, false));
  EXPECT_EQ(after_blip, solo);

  // An expert some sequences use and some do not.
  const auto& hp = m.model->hparams();
  std::vector<bool> want;
  for (uint32_t il = 0; il < hp.n_layer && want.empty(); ++il) {
    if (hp.ffn_kind(il) != model::FfnKind::MoE) continue;
    for (int32_t e = 0; e < static_cast<int32_t>(hp.n_expert) && want.empty(); ++e) {
      src.bad_layer = il, src.bad_expert = e;
      const auto [out, failed] = run(src, 1);
      const auto n_failed = std::count(failed.begin(), failed.end(), true);
      if (n_failed > 0 && n_failed < 3) want = failed;
    }
  }
  ASSERT_FALSE(want.empty()) << "no expert is used by some sequences and not others";
  const auto [batched, failed] = run(src, 3);
  EXPECT_EQ(failed, want);
  for (size_t i = 0; i < reqs.size(); ++i)
    if (!want[i]) {
      EXPECT_EQ(batched[i], solo[i]) << "sequence " << i;
    }
}

// The engine streaming experts through a real ExpertStore (one expert per layer) generates the
// same tokens as with the mapping.
TEST(Engine, StreamedExpertsMatchMapped) {
  const auto& m = test::tiny_model();
  const std::string copy = "/tmp/k3_server_test_experts_" + std::to_string(getpid()) + ".gguf";
  model::write_synthetic(copy, model::synth_preset("tiny"));  // the same bytes as the tiny model
  model::ExpertStoreOptions so;
  so.quiet = true, so.budget_bytes = 1, so.read_paths = {copy};
  model::ExpertStore store(*m.model, so);
  std::vector<int32_t> mapped, streamed;
  for (model::ExpertSource* src : {static_cast<model::ExpertSource*>(nullptr), static_cast<model::ExpertSource*>(&store)}) {
    EngineOptions o = opts(2, 4);
    o.experts = src;
    Engine e(*m.model, *m.tok, o);
    auto t = std::make_shared<Task>(request("Once upon a time in a land far away", 12, 3));
    ASSERT_EQ(e.submit(t), Engine::Admit::Ok);
    (src ? streamed : mapped) = run_to_end(t);
  }
  std::remove(copy.c_str());
  EXPECT_EQ(mapped, streamed);
  EXPECT_GT(store.stats().misses, 0u);
}
