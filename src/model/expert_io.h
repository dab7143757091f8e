// Parallel reads of expert slices that bypass the page cache: every file is opened with O_DIRECT
// (plain reads where the filesystem refuses it), offsets and lengths are multiples of kIoAlign and
// the buffers are aligned; each batch is sorted by file offset. Reads go through io_uring when
// k3 is built with liburing and the kernel allows it (up to kRingDepth in flight), else through a
// pool of threads issuing preads.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace k3::model {

inline constexpr size_t kIoAlign = 4096;
inline constexpr unsigned kRingDepth = 64;

struct ReadJob {
  uint32_t file = 0;
  uint64_t offset = 0;  // aligned
  size_t len = 0;       // aligned
  size_t need = 0;      // bytes from offset that must be read (the rest may lie past the end of the file)
  uint8_t* dst = nullptr;
  int32_t tag = 0, part = 0;  // the caller's
};

class ExpertReader {
 public:
  // done(job, error) runs on a reader thread; error is empty on success.
  using Done = std::function<void(const ReadJob&, const std::string& error)>;
  // n_threads: pread threads (without io_uring). uring: try io_uring first.
  ExpertReader(const std::vector<std::string>& paths, int n_threads, bool uring, Done done);
  ~ExpertReader();
  ExpertReader(const ExpertReader&) = delete;
  ExpertReader& operator=(const ExpertReader&) = delete;

  void submit(std::vector<ReadJob> jobs);  // sorted by (file, offset) here
  bool direct() const { return direct_; }
  const char* engine() const { return ring_ ? "io_uring" : "pread threads"; }
  // Totals: bytes read, seconds during which at least one read was in flight.
  uint64_t bytes_read() const;
  double busy_seconds() const;

 private:
  struct Ring;
  struct Active {  // a job in the ring
    ReadJob job;
    size_t got = 0;
  };
  void worker();
  void reaper();
  void pump_locked();  // ring: move queued jobs into the ring
  void start_locked();
  void finish(const ReadJob& j, size_t got, std::string err);
  std::string error_at(const ReadJob& j, size_t got, int err) const;

  std::vector<int> fds_;
  std::vector<std::string> paths_;
  bool direct_ = true;
  Done done_;
  std::unique_ptr<Ring> ring_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ReadJob> queue_;
  bool stop_ = false;
  unsigned in_ring_ = 0;
  int in_flight_ = 0;
  uint64_t bytes_ = 0;
  double busy_s_ = 0;
  std::chrono::steady_clock::time_point busy_since_;
  std::vector<std::thread> threads_;
};

}  // namespace k3::model
