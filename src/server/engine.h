// The generation engine behind `k3 serve` and `k3 chat`: a fixed number of slots, each with its
// own model::State, and one scheduler thread. Each iteration runs ONE Model::forward over a batch
// with a segment per active sequence: its last sampled token when decoding, or its next prompt
// chunk (prompt chunks take at most n_batch tokens per iteration in all, oldest request first, so
// a long prompt does not stall the others), so every weight matrix is read once per step for all
// sequences; then each sequence samples its next token from its own logits (continuous batching:
// a request that arrives while others generate joins the batch at the next iteration; a finished
// or cancelled one frees its slot at once). A sequence's tokens do not depend on what else is in
// the batch, nor on a failure inside a batched pass that was not its own (the batch's states are
// rebuilt from their tokens and retried one by one). With a prompt cache (EngineOptions::cache), a
// sequence starts from the deepest cached state of its prompt and its prefill stops at the
// cache's snapshot positions (src/cache/prefix_cache.h); results are the same bits.
//
//   auto t = std::make_shared<Task>(GenRequest{prompt_ids, sampling, max_tokens});
//   if (engine.submit(t) != Engine::Admit::Ok) -> 503
//   std::vector<int32_t> ids; while (!t->take(ids, 50ms)) { ... }   // tokens as they come
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"
#include "spec/speculator.h"
#include "tensor/threadpool.h"
#include "tokenizer/tokenizer.h"
#include "vision/prompt.h"

namespace k3::cache {
class PrefixCache;
class Sequence;
}  // namespace k3::cache

namespace k3::server {

enum class Finish : uint8_t {
  None,       // still running
  Eog,        // an end-of-generation token (or the end of the forced tokens)
  Length,     // max_tokens reached
  Context,    // the context is full
  Cancelled,  // cancel() (client gone, stop string, shutdown)
  Error,      // the model threw; Task::error() says why
};
const char* finish_name(Finish f);

struct GenRequest {
  std::vector<int32_t> prompt;      // non-empty, shorter than the context
  std::vector<vision::PromptImage> images;  // rows replacing the embeddings of prompt positions
  model::SamplerParams sampling;
  int32_t max_tokens = 16;          // >= 1
  bool ignore_eos = false;
  // Test mode: these tokens are emitted in order instead of sampled ones (each still goes through
  // the model like a sampled token), then generation ends as at an end-of-generation token.
  bool forced = false;
  std::vector<int32_t> forced_ids;
  // Prompt cache: positions worth a snapshot (message starts). The cache keys image positions by
  // their rows' hash too, so prompts that differ only in an image never share a state.
  std::vector<int64_t> snapshot_at;
  bool keep_logits = false;  // Task::logits() keeps the logits each token was chosen from (tests)
};

struct TaskTimes {
  double queued_ms = 0;  // submit -> slot
  double prompt_ms = 0;  // prompt processing
  double gen_ms = 0;     // first token -> end
  int32_t n_prompt = 0, n_gen = 0;
  int32_t n_cached = 0;  // prompt tokens restored from the prompt cache (not processed)
  int32_t n_draft = 0, n_draft_accepted = 0;  // speculative decoding: drafts verified, accepted
};

// One generation, shared by the HTTP handler that submitted it and the scheduler.
class Task {
 public:
  explicit Task(GenRequest r) : req_(std::move(r)) {}
  const GenRequest& request() const { return req_; }

  // Waits up to `timeout` for news; appends the tokens generated since the last call to `out`.
  // Returns true once generation has ended and every token has been taken.
  bool take(std::vector<int32_t>& out, std::chrono::milliseconds timeout);
  // Asks the scheduler to stop this sequence and free its slot (Engine::cancel also takes it out
  // of the queue at once).
  void cancel();
  bool cancelled() const { return cancel_.load(); }
  // Waits up to `timeout` until the task has a slot and its prompt's cached part is restored (times()
  // .n_cached known), or has ended; true when it has left the queue.
  bool wait_started(std::chrono::milliseconds timeout);

  Finish finish() const;
  std::string error() const;
  TaskTimes times() const;
  std::vector<std::vector<float>> logits() const;  // with GenRequest::keep_logits

 private:
  friend class Engine;
  void push(int32_t id);
  void end(Finish f, std::string error = {});

  GenRequest req_;
  std::atomic<bool> cancel_{false};
  bool started_ = false;  // under mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> out_;
  std::vector<std::vector<float>> logits_;
  Finish finish_ = Finish::None;
  std::string error_;
  TaskTimes times_;
  std::chrono::steady_clock::time_point t_submit_, t_start_, t_first_;
};

struct EngineOptions {
  int parallel = 1;        // slots
  int64_t n_ctx = 4096;    // context of each slot
  int64_t n_batch = 256;   // prompt tokens per forward call
  int threads = 1;         // model thread pool
  int queue = 8;           // tasks waiting for a slot before submit() refuses
  model::F16Rule f16_rule = model::F16Rule::Round;
  model::ExpertSource* experts = nullptr;  // routed experts streamed from disk (null: mapped)
  cache::PrefixCache* cache = nullptr;     // reuse across requests (null: none)
  // Speculative decoding (src/spec) for every sampled request; the cache's side width must be
  // the draft's (cache::Options::side_width) when a DSpark draft is given.
  spec::SpecOptions spec;
  const spec::DraftModel* draft = nullptr;
};

struct EngineStats {
  int slots = 0, busy = 0, queued = 0;
  long long requests = 0, rejected = 0, cancelled = 0, errors = 0;
  long long prompt_tokens = 0, generated_tokens = 0;  // prompt tokens processed (cached ones not)
  long long prompt_cached_tokens = 0;
  double prompt_seconds = 0, gen_seconds = 0, ttft_seconds = 0;  // sums
  long long first_tokens = 0;                                     // count of ttft_seconds
  long long steps = 0;
  long long forwards = 0, batch_sequences = 0, batch_tokens = 0;  // batch width = batch_sequences / forwards
  spec::SpecStats spec;  // over finished requests
};

class Engine {
 public:
  Engine(const model::Model& m, const tok::Tokenizer& tok, const EngineOptions& o);
  ~Engine();  // cancels everything and joins the scheduler
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  enum class Admit { Ok, Overloaded, ShuttingDown };
  Admit submit(const std::shared_ptr<Task>& t) { return submit(std::span(&t, 1)); }
  // All or none, queued at once: the scheduler sees the whole group in its next step.
  Admit submit(std::span<const std::shared_ptr<Task>> group);

  // Shutdown, in steps: refuse new work; then wait for in-flight work (up to a deadline); then
  // cancel what is left.
  void stop_accepting();
  bool wait_idle(std::chrono::milliseconds timeout);
  void cancel_all();
  // Cancels one task: a queued one leaves the queue now (its place goes to the next request), a
  // running one frees its slot at the next step.
  void cancel(const std::shared_ptr<Task>& t);

  const EngineOptions& options() const { return o_; }
  EngineStats stats() const;

  // The slots, for the slot API: `last` is the token sequence of the slot's last request (prompt
  // and fed tokens; kept when there is a prompt cache), which set_last replaces (slot restore).
  struct SlotInfo {
    int id = 0;
    bool busy = false;
    std::vector<int32_t> last;
  };
  std::vector<SlotInfo> slots() const;
  void set_last(int slot, std::vector<int32_t> ids);

  // Runs fn on the scheduler thread between two steps; returns once it has run (rethrowing what it
  // threw). For the prompt cache's files under mpirun: their exchanges with the other processes
  // must not fall inside a forward pass.
  void exclusive(const std::function<void()>& fn);

 private:
  struct Slot;
  void loop();
  void step();
  void start(Slot& s);  // restores from the prompt cache
  void advance(Slot& s, const model::Segment& seg, int64_t row0);
  void sample(Slot& s);
  void verify(Slot& s, int64_t row0);  // a speculative step's candidates, emitted up to a stop
  void retry_alone(const std::vector<Slot*>& seqs, const std::vector<model::Segment>& batch,
                   const model::RunOptions& opt);
  void release(Slot& s, Finish f, const std::string& error = {});

  const model::Model& m_;
  const tok::Tokenizer& tok_;
  EngineOptions o_;
  ThreadPool pool_;
  spec::Drafting drafting_;
  std::vector<std::unique_ptr<Slot>> slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::deque<std::packaged_task<void()>> jobs_;  // exclusive()
  int active_ = 0;
  bool accepting_ = true, stop_ = false;
  EngineStats st_;
  std::thread thread_;
};

}  // namespace k3::server
