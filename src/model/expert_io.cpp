#include "model/expert_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.h"

namespace k3::model {

ExpertReader::ExpertReader(const std::vector<std::string>& paths, int n_threads, Done done)
    : paths_(paths), done_(std::move(done)) {
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {  // tmpfs and some others: no O_DIRECT
      direct_ = false;
      fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
      const int e = errno;
      for (int f : fds_) ::close(f);
      fail("%s: cannot open for expert reads: %s", p.c_str(), std::strerror(e));
    }
    fds_.push_back(fd);
  }
  for (int i = 0; i < std::max(1, n_threads); ++i) threads_.emplace_back([this] { worker(); });
}

ExpertReader::~ExpertReader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  for (int f : fds_) ::close(f);
}

void ExpertReader::submit(std::vector<ReadJob> jobs) {
  std::sort(jobs.begin(), jobs.end(),
            [](const ReadJob& a, const ReadJob& b) { return a.file != b.file ? a.file < b.file : a.offset < b.offset; });
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& j : jobs) queue_.push_back(j);
  }
  cv_.notify_all();
}

uint64_t ExpertReader::bytes_read() const {
  std::lock_guard<std::mutex> lk(mu_);
  return bytes_;
}

double ExpertReader::busy_seconds() const {
  std::lock_guard<std::mutex> lk(mu_);
  double s = busy_s_;
  if (in_flight_ > 0) s += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  return s;
}

void ExpertReader::worker() {
  for (;;) {
    ReadJob j;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      j = queue_.front();
      queue_.pop_front();
      if (in_flight_++ == 0) busy_since_ = std::chrono::steady_clock::now();
    }
    size_t got = 0;
    std::string err;
    while (got < j.len) {
      const ssize_t r = ::pread(fds_[j.file], j.dst + got, j.len - got, static_cast<off_t>(j.offset + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        err = strprintf("%s: read error at file offset %llu: %s", paths_[j.file].c_str(),
                        static_cast<unsigned long long>(j.offset + got), std::strerror(errno));
        break;
      }
      if (r == 0) break;  // end of file
      got += static_cast<size_t>(r);
    }
    if (err.empty() && got < j.need)
      err = strprintf("%s: short read at file offset %llu: %zu of %zu bytes (file truncated?)", paths_[j.file].c_str(),
                      static_cast<unsigned long long>(j.offset), got, j.need);
    {
      std::lock_guard<std::mutex> lk(mu_);
      bytes_ += got;
      if (--in_flight_ == 0)
        busy_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
    }
    done_(j, err);
  }
}

}  // namespace k3::model
