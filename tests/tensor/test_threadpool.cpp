#include "tensor/threadpool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace k3 {
namespace {

TEST(ThreadPool, EveryThreadRunsOncePerJob) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.size(), n);
    // Many short jobs: fork/join must not lose a wake-up (fewer where 3 threads share 2 cores).
    for (int job = 0; job < (n <= ThreadPool::hardware_threads() ? 2000 : 200); ++job) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> bad_nth{0};
      pool.run([&](int ith, int nth) {
        if (nth != n) bad_nth++;
        hits[ith]++;
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "job " << job << " thread " << i;
      ASSERT_EQ(bad_nth.load(), 0);
    }
  }
}

TEST(ThreadPool, CallerIsWorkerZero) {
  ThreadPool pool(2);
  const auto self = std::this_thread::get_id();
  std::thread::id ids[2];
  pool.run([&](int ith, int) { ids[ith] = std::this_thread::get_id(); });
  EXPECT_EQ(ids[0], self);
  EXPECT_NE(ids[1], self);
}

TEST(ThreadPool, WakesAfterSleeping) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 3; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin phase
    std::atomic<int> count{0};
    pool.run([&](int, int) { count++; });
    EXPECT_EQ(count.load(), 2);
  }
}

TEST(ThreadPool, ParallelForCoversRangeOnce) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    for (int64_t len : {0, 1, 2, 5, 1000}) {
      std::vector<int> seen(len, 0);
      pool.parallel_for(len, [&](int64_t b, int64_t e) {
        ASSERT_LT(b, e);
        for (int64_t i = b; i < e; ++i) seen[i]++;
      });
      for (int64_t i = 0; i < len; ++i) ASSERT_EQ(seen[i], 1);
    }
  }
}

TEST(ThreadPool, ResultsIndependentOfThreadCount) {
  // Each output element computed by one thread: identical bits for any pool size.
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.001f * static_cast<float>(i));
  auto compute = [&](int threads) {
    ThreadPool pool(threads);
    std::vector<float> out(x.size() / 7);
    pool.parallel_for(static_cast<int64_t>(out.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float s = 0;
        for (int k = 0; k < 7; ++k) s += x[7 * i + k] * x[7 * i + k];
        out[i] = s;
      }
    });
    return out;
  };
  EXPECT_EQ(compute(1), compute(2));
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run([](int ith, int) {
                 if (ith == 1) throw std::runtime_error("worker failed");
               }),
               std::runtime_error);
  std::atomic<int> count{0};
  pool.run([&](int, int) { count++; });  // still usable
  EXPECT_EQ(count.load(), 2);
}

TEST(ThreadPool, ChunksCoverRangeOnceInOrderedChunks) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    for (int job = 0; job < 500; ++job) {  // many short jobs: no lost or repeated chunk
      const int64_t len = 1 + job % 97, grain = 1 + job % 7;
      std::vector<std::atomic<int>> seen(len);
      std::atomic<int> bad{0};
      pool.chunks(len, grain, [&](int64_t b, int64_t e) {
        if (b % grain != 0 || e - b > grain || e > len || b >= e) bad++;
        for (int64_t i = b; i < e; ++i) seen[i]++;
      });
      ASSERT_EQ(bad.load(), 0);
      for (int64_t i = 0; i < len; ++i) ASSERT_EQ(seen[i].load(), 1) << "job " << job << " index " << i;
    }
  }
}

// Chunks are claimed dynamically: while one thread is held inside a chunk (as a preempted worker
// would be), the other claims and finishes all the remaining ones.
TEST(ThreadPool, OtherThreadTakesOverChunks) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 20; ++rep) {
    std::atomic<int> done{0};
    bool others_done = false;
    pool.chunks(64, 1, [&](int64_t b, int64_t) {
      if (b == 1) {
        const auto t0 = std::chrono::steady_clock::now();
        while (done.load() < 63 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
          std::this_thread::yield();
        others_done = done.load() == 63;
      }
      done++;
    });
    EXPECT_EQ(done.load(), 64);
    EXPECT_TRUE(others_done) << "repetition " << rep;
  }
}

TEST(ThreadPool, ChunkExceptionsReachTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.chunks(100, 3, [](int64_t b, int64_t) {
                 if (b == 42) throw std::runtime_error("chunk failed");
               }),
               std::runtime_error);
  std::atomic<int> count{0};
  pool.chunks(10, 1, [&](int64_t, int64_t) { count++; });
  EXPECT_EQ(count.load(), 10);
}

TEST(ThreadPool, HardwareThreads) { EXPECT_GE(ThreadPool::hardware_threads(), 1); }

}  // namespace
}  // namespace k3
