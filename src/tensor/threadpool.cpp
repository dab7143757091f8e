#include "tensor/threadpool.h"

#include <emmintrin.h>
#include <sched.h>

#include <chrono>

#include "common/error.h"

namespace k3 {

namespace {
// How long an idle worker keeps polling before it sleeps: long enough to bridge the gap between
// the ops of one forward pass, short enough not to burn a core between requests.
constexpr auto kSpinTime = std::chrono::microseconds(200);
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

void ThreadPool::run_job(int ith) {
  try {
    (*job_)(ith, n_threads_);
  } catch (...) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = std::current_exception();
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
      // seq_cst on sleepers_ and generation_ here and in run(): either run() sees this worker
      // asleep and notifies under mu_, or the predicate below sees the new generation.
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lk, [&] { return (g = generation_.load()) != seen; });
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = g;
    run_job(ith);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // publishes job_ and pending_
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
  run_job(0);
  for (int i = 1; pending_.load(std::memory_order_acquire) != 0; ++i) {
    _mm_pause();
    if (i % 1024 == 0) std::this_thread::yield();  // a worker may have been preempted
  }
  job_ = nullptr;
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::swap(err, error_);
  }
  if (err) std::rethrow_exception(err);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  run([&](int ith, int nth) {
    const int64_t begin = n * ith / nth, end = n * (ith + 1) / nth;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace k3
