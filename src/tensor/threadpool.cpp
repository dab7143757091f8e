#include "tensor/threadpool.h"

#include <emmintrin.h>
#include <sched.h>

#include <algorithm>
#include <chrono>

#include "common/error.h"

namespace k3 {

namespace {
// How long an idle worker keeps polling before it sleeps: long enough to bridge the gap between
// the ops of one forward pass, short enough not to burn a core between requests.
constexpr auto kSpinTime = std::chrono::microseconds(200);
constexpr uint64_t kChunkJob = 1;                // generation bit 0: a chunks() job
constexpr uint64_t kOpen = uint64_t{1} << 31;    // ticket_: the job admits workers
constexpr uint64_t kInside = kOpen - 1;          // ticket_: workers inside the job
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1) fail("thread pool: %d threads requested, need at least 1", n_threads);
  threads_.reserve(n_threads - 1);
  for (int i = 1; i < n_threads; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
  for (std::thread& t : threads_) t.join();
}

int ThreadPool::hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

void ThreadPool::capture_error() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!error_) error_ = std::current_exception();
}

void ThreadPool::rethrow() {
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::swap(err, error_);
  }
  if (err) std::rethrow_exception(err);
}

void ThreadPool::run_job(int ith) {
  try {
    (*job_)(ith, n_threads_);
  } catch (...) {
    capture_error();
  }
}

void ThreadPool::run_chunks() {
  for (;;) {
    const int64_t b = next_chunk_.fetch_add(1, std::memory_order_relaxed) * chunk_grain_;
    if (b >= chunk_n_) return;
    try {
      (*chunk_fn_)(b, std::min(chunk_n_, b + chunk_grain_));
    } catch (...) {
      capture_error();
    }
  }
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 1; (g = generation_.load(std::memory_order_acquire)) == seen; ++i) {
        _mm_pause();
        if (i % 64 == 0 && std::chrono::steady_clock::now() - t0 > kSpinTime) break;
      }
    }
    if (g == seen) {
      // seq_cst on sleepers_ and generation_ here and in publish(): either the caller sees this
      // worker asleep and notifies under mu_, or the predicate below sees the new generation.
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lk, [&] { return (g = generation_.load()) != seen; });
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = g;
    if (!(g & kChunkJob)) {
      run_job(ith);
      pending_.fetch_sub(1, std::memory_order_release);
      continue;
    }
    // A chunk job: enter only if it is still the open job g (the caller may have finished it).
    const uint64_t want = (g << 32) | kOpen;
    uint64_t s = ticket_.load(std::memory_order_acquire);
    while ((s & ~kInside) == want)
      if (ticket_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
        run_chunks();
        ticket_.fetch_sub(1, std::memory_order_release);
        break;
      }
  }
}

// Generations are 32-bit job numbers with the kind in bit 0 (so a worker knows the kind of the job
// it was woken for). Only the calling thread writes generation_ (and the destructor, at the end).
uint64_t ThreadPool::next_generation(uint64_t kind) const {
  return ((((generation_.load(std::memory_order_relaxed) >> 1) + 1) << 1) | kind) & 0xFFFFFFFFu;
}

void ThreadPool::publish(uint64_t g) {
  generation_.store(g);  // seq_cst: publishes the job's fields
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
}

void ThreadPool::run(FnRef<void(int, int)> fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  publish(next_generation(0));
  run_job(0);
  for (int i = 1; pending_.load(std::memory_order_acquire) != 0; ++i) {
    _mm_pause();
    if (i % 1024 == 0) std::this_thread::yield();  // a worker may have been preempted
  }
  job_ = nullptr;
  rethrow();
}

void ThreadPool::chunks(int64_t n, int64_t grain, FnRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || grain >= n) {
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    return;
  }
  chunk_fn_ = &fn;
  chunk_n_ = n;
  chunk_grain_ = grain;
  next_chunk_.store(0, std::memory_order_relaxed);
  const uint64_t g = next_generation(kChunkJob);
  ticket_.store((g << 32) | kOpen, std::memory_order_relaxed);
  publish(g);
  run_chunks();
  // Close the job once no worker is inside; a worker that wakes later finds it closed.
  for (int i = 1;; ++i) {
    uint64_t s = ticket_.load(std::memory_order_acquire);
    if ((s & kInside) == 0 && ticket_.compare_exchange_weak(s, s & ~kOpen, std::memory_order_acq_rel)) break;
    _mm_pause();
    if (i % 1024 == 0) std::this_thread::yield();
  }
  chunk_fn_ = nullptr;
  rethrow();
}

void ThreadPool::parallel_for(int64_t n, FnRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  const int64_t parts = 4 * static_cast<int64_t>(n_threads_);
  chunks(n, (n + parts - 1) / parts, fn);
}

}  // namespace k3
