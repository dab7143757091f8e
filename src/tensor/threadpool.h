// Fixed-size fork/join pool for per-op parallel work. The calling thread is worker 0, so a pool
// of n threads starts n-1 workers (no thread is created per call, and n threads run in all);
// workers spin briefly after a job, then sleep on a condition variable.
// Two kinds of job: run() gives each thread exactly one call (the caller waits for every worker);
// chunks() hands out chunks from an atomic counter, so the caller finishes the job alone when a
// worker has not woken up (a preempted worker on a shared host costs at most one chunk).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/fn_ref.h"

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
  void run(FnRef<void(int ith, int nth)> fn);
  // fn(begin, end) over [0, n) in chunks of `grain` (the last one shorter), each chunk claimed by
  // whichever thread is free, in increasing order; the caller only waits for chunks already claimed.
  // Exceptions as for run(). Not reentrant.
  void chunks(int64_t n, int64_t grain, FnRef<void(int64_t begin, int64_t end)> fn);
  // chunks() over [0, n) with about four chunks per thread; empty ranges are skipped.
  void parallel_for(int64_t n, FnRef<void(int64_t begin, int64_t end)> fn);

 private:
  void worker(int ith);
  void run_job(int ith);
  void run_chunks();
  uint64_t next_generation(uint64_t kind) const;
  void publish(uint64_t generation);
  void capture_error();
  void rethrow();
  int n_threads_;
  std::vector<std::thread> threads_;
  const FnRef<void(int, int)>* job_ = nullptr;                 // run()
  const FnRef<void(int64_t, int64_t)>* chunk_fn_ = nullptr;    // chunks()
  int64_t chunk_n_ = 0, chunk_grain_ = 1;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<uint64_t> generation_{0};  // bumped once per job (and at shutdown)
  // chunks() admission: job generation (high 32 bits), open flag (bit 31), workers inside (low
  // bits). A worker enters only the open job it was woken for; the caller closes it once empty.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> pending_{0};          // workers still running the current run() job
  std::atomic<int> sleepers_{0};         // workers blocked on cv_, so run() can skip the notify
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;  // guarded by mu_
};

}  // namespace k3
