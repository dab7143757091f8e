#include "model/expert_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

#if K3_HAVE_LIBURING
#include <liburing.h>
#endif

namespace k3::model {

struct ExpertReader::Ring {
#if K3_HAVE_LIBURING
  io_uring ring;
#endif
};

ExpertReader::ExpertReader(const std::vector<std::string>& paths, int n_threads, bool uring, Done done)
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
#if K3_HAVE_LIBURING
  if (uring) {
    ring_ = std::make_unique<Ring>();
    if (io_uring_queue_init(kRingDepth * 2, &ring_->ring, 0) != 0) ring_.reset();  // e.g. forbidden by seccomp
  }
#else
  (void)uring;
#endif
  if (ring_)
    threads_.emplace_back([this] { reaper(); });
  else
    for (int i = 0; i < std::max(1, n_threads); ++i) threads_.emplace_back([this] { worker(); });
}

ExpertReader::~ExpertReader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
#if K3_HAVE_LIBURING
    if (ring_) {  // wakes the reaper, which drains the reads in flight first
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data(sqe, nullptr);
      io_uring_submit(&ring_->ring);
    }
#endif
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
#if K3_HAVE_LIBURING
  if (ring_) io_uring_queue_exit(&ring_->ring);
#endif
  for (int f : fds_) ::close(f);
}

void ExpertReader::submit(std::vector<ReadJob> jobs) {
  std::sort(jobs.begin(), jobs.end(), [](const ReadJob& a, const ReadJob& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& j : jobs) queue_.push_back(j);
    if (ring_) pump_locked();
  }
  if (!ring_) cv_.notify_all();
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

void ExpertReader::start_locked() {
  if (in_flight_++ == 0) busy_since_ = std::chrono::steady_clock::now();
}

std::string ExpertReader::error_at(const ReadJob& j, size_t got, int err) const {
  if (err != 0)
    return strprintf("%s: read error at file offset %llu: %s", paths_[j.file].c_str(),
                     static_cast<unsigned long long>(j.offset + got), std::strerror(err));
  return strprintf("%s: short read at file offset %llu: %zu of %zu bytes (file truncated?)", paths_[j.file].c_str(),
                   static_cast<unsigned long long>(j.offset), got, j.need);
}

void ExpertReader::finish(const ReadJob& j, size_t got, std::string err) {
  if (err.empty() && got < j.need) err = error_at(j, got, 0);
  {
    std::lock_guard<std::mutex> lk(mu_);
    bytes_ += got;
    if (--in_flight_ == 0)
      busy_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  }
  done_(j, err);
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
      start_locked();
    }
    size_t got = 0;
    std::string err;
    while (got < j.len) {
      const ssize_t r = ::pread(fds_[j.file], j.dst + got, j.len - got, static_cast<off_t>(j.offset + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        err = error_at(j, got, errno);
        break;
      }
      if (r == 0) break;  // end of file
      got += static_cast<size_t>(r);
    }
    finish(j, got, err);
  }
}

#if K3_HAVE_LIBURING
void ExpertReader::pump_locked() {
  bool any = false;
  while (in_ring_ < kRingDepth && !queue_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    if (!sqe) break;
    auto* a = new Active{queue_.front(), 0};
    queue_.pop_front();
    io_uring_prep_read(sqe, fds_[a->job.file], a->job.dst, static_cast<unsigned>(a->job.len), a->job.offset);
    io_uring_sqe_set_data(sqe, a);
    ++in_ring_;
    start_locked();
    any = true;
  }
  if (any) io_uring_submit(&ring_->ring);
}

void ExpertReader::reaper() {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&ring_->ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) std::abort();  // the ring itself is broken: nothing sensible can continue
    auto* a = static_cast<Active*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_->ring, cqe);
    if (!a) {  // the destructor's wake-up
      std::unique_lock<std::mutex> lk(mu_);
      if (in_ring_ == 0) return;
      continue;
    }
    if (res == -EINTR || res == -EAGAIN || (res > 0 && a->got + static_cast<size_t>(res) < a->job.len)) {
      if (res > 0) a->got += static_cast<size_t>(res);  // partial: read the rest
      std::lock_guard<std::mutex> lk(mu_);
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
      io_uring_prep_read(sqe, fds_[a->job.file], a->job.dst + a->got, static_cast<unsigned>(a->job.len - a->got),
                         a->job.offset + a->got);
      io_uring_sqe_set_data(sqe, a);
      io_uring_submit(&ring_->ring);
      continue;
    }
    std::string err;
    if (res < 0)
      err = error_at(a->job, a->got, -res);
    else
      a->got += static_cast<size_t>(res);
    const ReadJob j = a->job;
    const size_t got = a->got;
    delete a;
    finish(j, got, err);
    std::lock_guard<std::mutex> lk(mu_);
    --in_ring_;
    pump_locked();
    if (stop_ && in_ring_ == 0 && queue_.empty()) return;
  }
}
#else
void ExpertReader::pump_locked() {}
void ExpertReader::reaper() {}
#endif

}  // namespace k3::model
