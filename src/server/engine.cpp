#include "server/engine.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cache/prefix_cache.h"
#include "common/error.h"

namespace k3::server {

using Clock = std::chrono::steady_clock;

static double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::None: return "none";
    case Finish::Eog: return "eog";
    case Finish::Length: return "length";
    case Finish::Context: return "context";
    case Finish::Cancelled: return "cancelled";
    case Finish::Error: return "error";
  }
  return "?";
}

// ---- Task ----

bool Task::take(std::vector<int32_t>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !out_.empty() || finish_ != Finish::None; });
  out.insert(out.end(), out_.begin(), out_.end());
  out_.clear();
  return finish_ != Finish::None;
}

void Task::cancel() {
  cancel_ = true;
  cv_.notify_all();
}

bool Task::wait_started(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return started_ || finish_ != Finish::None; });
}

Finish Task::finish() const {
  std::lock_guard<std::mutex> lk(mu_);
  return finish_;
}

std::string Task::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

TaskTimes Task::times() const {
  std::lock_guard<std::mutex> lk(mu_);
  return times_;
}

std::vector<std::vector<float>> Task::logits() const {
  std::lock_guard<std::mutex> lk(mu_);
  return logits_;
}

void Task::push(int32_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    out_.push_back(id);
    ++times_.n_gen;
  }
  cv_.notify_all();
}

void Task::end(Finish f, std::string error) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (finish_ != Finish::None) return;
    finish_ = f;
    error_ = std::move(error);
    if (t_first_ != Clock::time_point{}) times_.gen_ms = ms_between(t_first_, Clock::now());
  }
  cv_.notify_all();
}

// ---- Engine ----

// Picks the next token: the sampler's, or the next forced one in test mode.
class TokenSource {
 public:
  explicit TokenSource(const GenRequest& r) : r_(r), sampler_(r.sampling) {}
  // Returns -1 when the forced tokens are exhausted (end of generation).
  int32_t next(const float* logits, int32_t n_vocab) {
    if (!r_.forced) return sampler_.sample(logits, n_vocab);
    return i_ < r_.forced_ids.size() ? r_.forced_ids[i_++] : -1;
  }
  model::Sampler& sampler() { return sampler_; }

 private:
  const GenRequest& r_;
  model::Sampler sampler_;
  size_t i_ = 0;
};

struct Engine::Slot {
  std::shared_ptr<Task> task;
  std::unique_ptr<model::State> state;
  std::unique_ptr<TokenSource> src;
  std::vector<float> logits;
  size_t pos = 0;      // prompt tokens processed
  int32_t last = -1;   // token to run next (decode)
  std::vector<int32_t> fed;  // every token in `state`, to rebuild it after a failed batch
  std::vector<model::InputRows> rows;  // the images' rows for this step's prompt chunk
  std::unique_ptr<cache::Sequence> seq;  // with a prompt cache
  std::unique_ptr<spec::Speculator> sp;  // speculative decoding (forced requests: plain steps through it)
  bool fresh = false;        // admitted, not started
  size_t cached = 0;         // prompt tokens restored
  std::vector<int32_t> done;  // the last request's tokens (SlotInfo::last)
  bool busy = false;          // under Engine::mu_, for slots()
};

Engine::Engine(const model::Model& m, const tok::Tokenizer& tok, const EngineOptions& o)
    : m_(m), tok_(tok), o_(o), pool_(std::max(1, o.threads)), drafting_(m, o.draft, o.spec, pool_) {
  if (o_.parallel < 1) fail("--parallel must be >= 1 (got %d)", o_.parallel);
  if (o_.n_batch < 1) fail("n_batch must be >= 1");
  for (int i = 0; i < o_.parallel; ++i) {
    auto s = std::make_unique<Slot>();
    s->state = std::make_unique<model::State>(m_.new_state(o_.n_ctx));
    if (o_.draft) s->state->set_side_width(o_.draft->side_width());  // every slot keeps the draft's rows
    s->fed.reserve(static_cast<size_t>(o_.n_ctx));
    slots_.push_back(std::move(s));
  }
  st_.slots = o_.parallel;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    accepting_ = false;
    stop_ = true;
  }
  cancel_all();
  cv_.notify_all();
  thread_.join();
}

Engine::Admit Engine::submit(std::span<const std::shared_ptr<Task>> group) {
  for (const auto& t : group) K3_ASSERT(!t->request().prompt.empty());
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!accepting_) return Admit::ShuttingDown;
    // Room for `parallel` running and `queue` waiting sequences.
    if (static_cast<size_t>(active_) + queue_.size() + group.size() > static_cast<size_t>(o_.parallel + o_.queue)) {
      st_.rejected += static_cast<long long>(group.size());
      return Admit::Overloaded;
    }
    const auto now = Clock::now();
    for (const auto& t : group) {
      t->t_submit_ = now;
      queue_.push_back(t);
    }
    st_.requests += static_cast<long long>(group.size());
  }
  cv_.notify_all();
  return Admit::Ok;
}

void Engine::stop_accepting() {
  std::lock_guard<std::mutex> lk(mu_);
  accepting_ = false;
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] { return active_ == 0 && queue_.empty(); });
}

void Engine::cancel(const std::shared_ptr<Task>& t) {
  t->cancel();
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), t);
    if (it == queue_.end()) return;
    queue_.erase(it);
    ++st_.cancelled;
    if (queue_.empty() && active_ == 0) idle_cv_.notify_all();
  }
  t->end(Finish::Cancelled);
}

void Engine::cancel_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& t : queue_) t->cancel();
  for (auto& s : slots_)
    if (s->task) s->task->cancel();
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s = st_;
  s.busy = active_;
  s.queued = static_cast<int>(queue_.size());
  return s;
}

std::vector<Engine::SlotInfo> Engine::slots() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<SlotInfo> r;
  for (size_t i = 0; i < slots_.size(); ++i) r.push_back({static_cast<int>(i), slots_[i]->busy, slots_[i]->done});
  return r;
}

void Engine::set_last(int slot, std::vector<int32_t> ids) {
  std::lock_guard<std::mutex> lk(mu_);
  K3_ASSERT(slot >= 0 && static_cast<size_t>(slot) < slots_.size());
  slots_[static_cast<size_t>(slot)]->done = std::move(ids);
}

void Engine::exclusive(const std::function<void()>& fn) {
  std::future<void> done;
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.emplace_back(fn);
    done = jobs_.back().get_future();
  }
  cv_.notify_all();
  done.get();
}

void Engine::loop() {
  bool worked = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (worked && active_ == 0 && queue_.empty()) {
        // Idle again: hand freed per-sequence memory (caches, scratch) back to the system.
        lk.unlock();
        malloc_trim(0);
        lk.lock();
        worked = false;
      }
      cv_.wait(lk, [&] { return stop_ || active_ > 0 || !queue_.empty() || !jobs_.empty(); });
      while (!jobs_.empty()) {
        std::packaged_task<void()> job = std::move(jobs_.front());
        jobs_.pop_front();
        lk.unlock();
        job();
        lk.lock();
      }
      if (active_ == 0 && queue_.empty() && !stop_) continue;
      worked = true;
      if (stop_ && active_ == 0 && queue_.empty()) return;
      // Admit waiting tasks into free slots (dropping those cancelled while queued).
      for (auto& s : slots_) {
        while (!s->task && !queue_.empty()) {
          std::shared_ptr<Task> t = std::move(queue_.front());
          queue_.pop_front();
          if (t->cancelled()) {
            ++st_.cancelled;
            t->end(Finish::Cancelled);
            continue;
          }
          s->task = std::move(t);
          s->src = std::make_unique<TokenSource>(s->task->request());
          if (drafting_.enabled()) s->sp = std::make_unique<spec::Speculator>(drafting_, *s->state);
          s->pos = 0;
          s->last = -1;
          s->fresh = true;
          s->busy = true;
          s->task->t_start_ = Clock::now();
          {
            std::lock_guard<std::mutex> tl(s->task->mu_);
            s->task->times_.queued_ms = ms_between(s->task->t_submit_, s->task->t_start_);
            s->task->times_.n_prompt = static_cast<int32_t>(s->task->request().prompt.size());
          }
          ++active_;
        }
      }
      if (queue_.empty() && active_ == 0) idle_cv_.notify_all();
      ++st_.steps;
    }
    step();
  }
}

void Engine::step() {
  for (auto& s : slots_)
    if (s->task && s->task->cancelled()) release(*s, Finish::Cancelled);
  for (auto& s : slots_)
    if (s->task && s->fresh) start(*s);
  // The batch: every decoding sequence's last token, then prompt chunks of at most n_batch tokens
  // in all, oldest request first, so one step's work stays bounded while long prompts are processed.
  std::vector<model::Segment> batch;
  std::vector<Slot*> seqs, prefill;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.task) continue;
    if (s.pos < s.task->request().prompt.size()) {
      prefill.push_back(&s);
      continue;
    }
    if (s.sp) {  // [anchor, drafts]: one row per token the step may emit
      const GenRequest& r = s.task->request();
      const int64_t budget = r.forced ? 1
                                      : std::min<int64_t>(r.max_tokens - s.task->times_.n_gen,
                                                          s.state->n_ctx() - s.state->n_past());
      const std::vector<int32_t>& ids = s.sp->plan(budget);
      const int64_t n = static_cast<int64_t>(ids.size());
      batch.push_back({s.state.get(), ids.data(), n, n > 1 ? model::Logits::All : model::Logits::Last, &s.logits});
    } else {
      batch.push_back({s.state.get(), &s.last, 1, model::Logits::Last, &s.logits});
    }
    seqs.push_back(&s);
  }
  std::stable_sort(prefill.begin(), prefill.end(),
                   [](const Slot* a, const Slot* b) { return a->task->t_start_ < b->task->t_start_; });
  int64_t budget = o_.n_batch;
  for (Slot* s : prefill) {
    if (budget == 0) break;
    const std::vector<int32_t>& prompt = s->task->request().prompt;
    int64_t n = std::min<int64_t>(budget, static_cast<int64_t>(prompt.size() - s->pos));
    bool stop = s->pos + n == prompt.size();  // a chunk that ends where logits or a snapshot are due
    if (s->seq) {
      const int64_t at = s->seq->next_stop(static_cast<int64_t>(s->pos));
      if (static_cast<int64_t>(s->pos) + n >= at) n = at - static_cast<int64_t>(s->pos), stop = true;
    }
    budget -= n;
    vision::input_rows(s->task->request().images, static_cast<int64_t>(s->pos), s->rows);
    batch.push_back({s->state.get(), prompt.data() + s->pos, n, stop ? model::Logits::Last : model::Logits::None,
                     &s->logits, s->rows});
    seqs.push_back(s);
  }
  if (batch.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++st_.forwards;
    st_.batch_sequences += static_cast<long long>(batch.size());
    for (const model::Segment& seg : batch) st_.batch_tokens += seg.n;
  }
  model::RunOptions opt{&pool_, o_.f16_rule, drafting_.taps()};
  opt.experts = o_.experts;
  const auto t0 = Clock::now();
  try {
    m_.forward(batch, opt);
  } catch (const model::SegmentError& e) {
    // Refused before any state changed: only that sequence fails, the others run next step.
    return release(*seqs[e.segment], Finish::Error, e.what());
  } catch (const std::exception& e) {
    if (seqs.size() == 1) return release(*seqs[0], Finish::Error, e.what());
    return retry_alone(seqs, batch, opt);
  }
  if (seqs.size() == 1 && seqs[0]->sp && seqs[0]->pos >= seqs[0]->task->request().prompt.size())
    drafting_.timed(batch[0].n, ms_between(t0, Clock::now()) / 1000.0);  // the verify cost by rows (§13)
  int64_t row0 = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    advance(*seqs[i], batch[i], row0);
    row0 += batch[i].n;
  }
}

// A failure inside a batched pass (an expert that cannot be read) leaves every state of the batch
// part-updated. Each sequence is rebuilt alone from the tokens it had been fed and its segment run
// again alone, so only the sequences whose own tokens meet the failure end with it; the others
// continue with exactly the tokens they would have had.
void Engine::retry_alone(const std::vector<Slot*>& seqs, const std::vector<model::Segment>& batch,
                         const model::RunOptions& opt) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    Slot& s = *seqs[i];
    try {
      s.state->reset();
      if (!s.fed.empty()) {
        std::vector<model::InputRows> rows;  // the fed tokens start at prompt position 0
        vision::input_rows(s.task->request().images, 0, rows);
        const model::Segment replay{s.state.get(), s.fed.data(), static_cast<int64_t>(s.fed.size()), model::Logits::None,
                                    nullptr, rows};
        m_.forward(std::span<const model::Segment>(&replay, 1), opt);
      }
      if (s.sp) s.sp->rebuilt(opt.trace ? drafting_.taps()->row(0) : nullptr);
      m_.forward(std::span<const model::Segment>(&batch[i], 1), opt);
    } catch (const std::exception& e) {
      release(s, Finish::Error, e.what());
      continue;
    }
    advance(s, batch[i], 0);
  }
}

// The prompt cache's content hash of each prompt position: an image's rows carry their image's
// (XXH3 of the rows), plain tokens none (empty when the prompt has no image).
static std::vector<uint64_t> image_hashes(const GenRequest& r) {
  std::vector<uint64_t> h;
  if (r.images.empty()) return h;
  h.assign(r.prompt.size(), 0);
  for (const vision::PromptImage& im : r.images) {
    const uint64_t v = std::strtoull(im.rows->hash.substr(0, 16).c_str(), nullptr, 16) | 1;
    for (int64_t p = im.at; p < im.at + im.rows->n_tokens && p < static_cast<int64_t>(h.size()); ++p) h[p] = v;
  }
  return h;
}

// A newly admitted sequence starts from the deepest cached state of its prompt; when that is the
// whole prompt, its first token is sampled from the cached logits at once.
void Engine::start(Slot& s) {
  s.fresh = false;
  const GenRequest& r = s.task->request();
  s.fed.clear();
  try {
    if (o_.cache) {
      const std::vector<uint64_t> content = image_hashes(r);
      s.seq = o_.cache->begin(cache::Key{r.prompt, content}, r.snapshot_at);
      s.pos = static_cast<size_t>(s.seq->restore(*s.state, s.logits));
    }
  } catch (const std::exception& e) {
    return release(s, Finish::Error, e.what());
  }
  s.cached = s.pos;
  s.fed.assign(r.prompt.begin(), r.prompt.begin() + static_cast<std::ptrdiff_t>(s.pos));
  if (s.sp) s.sp->prompt(s.fed, nullptr);  // the cache restored the draft's rows with the state
  {
    std::lock_guard<std::mutex> tl(s.task->mu_);
    s.task->times_.n_cached = static_cast<int32_t>(s.pos);
    s.task->started_ = true;  // with its cached part known (an Anthropic stream's first event reports it)
  }
  s.task->cv_.notify_all();
  if (s.pos == r.prompt.size()) {
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> tl(s.task->mu_);
      s.task->times_.prompt_ms = ms_between(s.task->t_start_, now);
      s.task->t_first_ = now;
    }
    sample(s);
  }
}

void Engine::advance(Slot& s, const model::Segment& seg, int64_t row0) {
  Task& t = *s.task;
  const GenRequest& r = t.request();
  if (s.sp && s.pos >= r.prompt.size()) return verify(s, row0);
  s.fed.insert(s.fed.end(), seg.ids, seg.ids + seg.n);
  try {
    if (s.pos < r.prompt.size()) {
      if (s.sp) s.sp->prompt({seg.ids, static_cast<size_t>(seg.n)}, drafting_.taps() ? drafting_.taps()->row(row0) : nullptr);
      s.pos += static_cast<size_t>(seg.n);
      if (seg.want == model::Logits::None) return;
      if (s.seq) s.seq->reached(static_cast<int64_t>(s.pos), *s.state, s.logits);
      if (s.pos < r.prompt.size()) return;
      const auto now = Clock::now();
      std::lock_guard<std::mutex> tl(t.mu_);
      t.times_.prompt_ms = ms_between(t.t_start_, now);
      t.t_first_ = now;
    }
  } catch (const std::exception& e) {
    return release(s, Finish::Error, e.what());
  }
  sample(s);
}

void Engine::sample(Slot& s) {
  Task& t = *s.task;
  const GenRequest& r = t.request();
  try {
    const int32_t id = s.src->next(s.logits.data(), m_.n_vocab());
    if (s.sp) s.sp->first(id);  // later tokens come from verify()
    if (r.keep_logits) {
      std::lock_guard<std::mutex> tl(t.mu_);
      t.logits_.push_back(s.logits);
    }
    if (id < 0 || (!r.ignore_eos && tok_.is_eog(id))) return release(s, Finish::Eog);
    t.push(id);
    s.last = id;
    if (t.times_.n_gen >= r.max_tokens) return release(s, Finish::Length);
    if (s.state->n_past() >= s.state->n_ctx()) return release(s, Finish::Context);
  } catch (const std::exception& e) {
    release(s, Finish::Error, e.what());
  }
}

// A speculative step: the candidates (accepted drafts, then the target's token) are emitted one by
// one with plain decoding's stop rules; the state keeps the rows of the emitted ones.
void Engine::verify(Slot& s, int64_t row0) {
  Task& t = *s.task;
  const GenRequest& r = t.request();
  const int32_t V = m_.n_vocab();
  const float* taps = drafting_.taps() ? drafting_.taps()->row(row0) : nullptr;
  try {
    const std::vector<int32_t>& ids = s.sp->planned();
    const int64_t p = s.state->n_past() - static_cast<int64_t>(ids.size());
    int32_t forced = -1;
    if (r.forced) forced = s.src->next(s.logits.data(), V);
    const std::vector<int32_t> e = r.forced ? std::vector<int32_t>{forced} : s.sp->verify(s.logits.data(), s.src->sampler());
    Finish f = Finish::None;
    int64_t k = 0;
    while (f == Finish::None && k < static_cast<int64_t>(e.size())) {
      const int32_t id = e[k++];
      if (r.keep_logits) {
        std::lock_guard<std::mutex> tl(t.mu_);
        t.logits_.emplace_back(s.logits.begin() + (k - 1) * V, s.logits.begin() + k * V);
      }
      if (id < 0 || (!r.ignore_eos && tok_.is_eog(id))) {
        f = Finish::Eog;
        break;
      }
      t.push(id);
      if (t.times_.n_gen >= r.max_tokens) f = Finish::Length;
      else if (p + k >= s.state->n_ctx()) f = Finish::Context;
    }
    s.fed.insert(s.fed.end(), ids.begin(), ids.begin() + k);
    if (r.forced) s.sp->commit_plain(forced, taps);
    else s.sp->commit(k, taps);
    // the logits of the last token the state holds (the prompt cache's end snapshot)
    s.logits.erase(s.logits.begin(), s.logits.begin() + (k - 1) * V);
    s.logits.resize(V);
    {
      std::lock_guard<std::mutex> tl(t.mu_);
      t.times_.n_draft = static_cast<int32_t>(s.sp->stats().drafted);
      t.times_.n_draft_accepted = static_cast<int32_t>(s.sp->stats().accepted);
    }
    if (f != Finish::None) release(s, f);
  } catch (const std::exception& e) {
    release(s, Finish::Error, e.what());
  }
}

void Engine::release(Slot& s, Finish f, const std::string& error) {
  std::shared_ptr<Task> t = std::move(s.task);
  const bool decoded = s.pos >= t->request().prompt.size();
  if (s.seq) {
    // The end of the generation is a snapshot too (its logits are current once decoding began).
    if (f != Finish::Error && decoded) {
      try {
        s.seq->finish(s.fed, *s.state, s.logits);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "k3: warning: prompt cache: %s\n", e.what());
      }
    }
    s.seq.reset();
  }
  s.task.reset();
  s.src.reset();
  s.state->reset();
  const spec::SpecStats ss = s.sp ? s.sp->stats() : spec::SpecStats{};
  s.sp.reset();
  const TaskTimes tt = [&] {
    std::lock_guard<std::mutex> tl(t->mu_);
    return t->times_;
  }();
  {
    // The slot is free before the task reports its end.
    std::lock_guard<std::mutex> lk(mu_);
    --active_;
    s.busy = false;
    st_.prompt_tokens += static_cast<long long>(std::min(s.pos, t->request().prompt.size()) - s.cached);
    st_.prompt_cached_tokens += static_cast<long long>(s.cached);
    if (o_.cache && f != Finish::Error) s.done = s.fed;
    s.fed.clear();
    s.cached = 0;
    st_.generated_tokens += tt.n_gen;
    st_.prompt_seconds += tt.prompt_ms / 1000.0;
    if (t->t_first_ != Clock::time_point{}) {
      st_.gen_seconds += ms_between(t->t_first_, Clock::now()) / 1000.0;
      st_.ttft_seconds += ms_between(t->t_submit_, t->t_first_) / 1000.0;
      ++st_.first_tokens;
    }
    st_.spec.add(ss);
    if (f == Finish::Cancelled) ++st_.cancelled;
    if (f == Finish::Error) ++st_.errors;
    if (active_ == 0 && queue_.empty()) idle_cv_.notify_all();
  }
  t->end(f, error);
}

}  // namespace k3::server
