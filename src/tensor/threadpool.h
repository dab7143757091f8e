// Fixed-size fork/join pool for per-op parallel work. The calling thread is worker 0, so a pool
// of n threads starts n-1 workers (no thread is created per call, and n threads run in all);
// workers spin briefly after a job, then sleep on a condition variable.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace k3 {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // CPUs this process may run on (its affinity mask): the largest pool that does not oversubscribe.
  static int hardware_threads();

  int size() const { return n_threads_; }
  // Runs fn(ith, nth) once on each of the nth = size() threads and returns when all are done.
  // An exception thrown by fn on any thread is rethrown here (the first one). Not reentrant.
  void run(const std::function<void(int ith, int nth)>& fn);
  // Splits [0, n) into contiguous chunks, one per thread: fn(begin, end); empty chunks are skipped.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker(int ith);
  void run_job(int ith);
  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per job (and at shutdown)
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<int> sleepers_{0};         // workers blocked on cv_, so run() can skip the notify
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;  // guarded by mu_
};

}  // namespace k3
