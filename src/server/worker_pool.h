// The handler threads of k3's HTTP transport: a fixed number of threads and a queue of jobs whose
// length the caller bounds (a complete request that finds it full is refused, not queued).
#pragma once
#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace k3::server {

class WorkerPool {
 public:
  void start(int n) {
    for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { work(); });
  }
  // False (and nothing queued) when `backlog` requests already wait beyond the free threads.
  bool try_post(std::function<void()> fn, size_t backlog) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (jobs_.size() >= threads_.size() - busy_ + backlog) return false;
      jobs_.push_back(std::move(fn));
    }
    cv_.notify_one();
    return true;
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      jobs_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }
  void join() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      down_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return !jobs_.empty() || down_; });
        if (jobs_.empty()) return;
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        ++busy_;
      }
      fn();
      std::lock_guard<std::mutex> lk(mu_);
      --busy_;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t busy_ = 0;
  bool down_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace k3::server
