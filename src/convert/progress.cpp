#include "convert/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "common/error.h"

namespace k3::convert {

Progress::Progress(bool enabled, FILE* out) : enabled_(enabled), tty_(enabled && isatty(fileno(out))), out_(out) {
  t0_ = now();
  slots_.reserve(kMaxSlots);
  if (enabled_) th_ = std::thread([this] { loop(); });
}

Progress::~Progress() {
  stop();
  for (Slot* s : slots_) delete s;
}

double Progress::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Progress::human_bytes(double b) {
  const char* u[] = {"B", "KB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1000.0 && i < 4) {
    b /= 1000.0;
    ++i;
  }
  return i == 0 ? strprintf("%.0f %s", b, u[i]) : strprintf("%.2f %s", b, u[i]);
}

std::string Progress::human_time(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  long t = std::lround(s);
  if (t >= 3600) return strprintf("%ldh%02ldm", t / 3600, (t / 60) % 60);
  if (t >= 60) return strprintf("%ldm%02lds", t / 60, t % 60);
  return strprintf("%lds", t);
}

void Progress::set_total(uint64_t bytes, int parts) {
  std::lock_guard<std::mutex> lk(mu_);
  total_ = bytes;
  parts_total_ = parts;
  t0_ = now();
}

int Progress::begin(const std::string& label, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  size_t i = 0;
  while (i < slots_.size() && slots_[i]->used) ++i;
  if (i == slots_.size()) {
    K3_ASSERT(slots_.size() < kMaxSlots);  // add() reads slots_ without the lock: never reallocate
    slots_.push_back(new Slot());
  }
  Slot* s = slots_[i];
  s->label = label;
  s->total = bytes;
  s->done = 0;
  s->t0 = now();
  s->used = true;
  return static_cast<int>(i);
}

void Progress::add(int slot, uint64_t bytes) {
  slots_[slot]->done.fetch_add(bytes, std::memory_order_relaxed);
  overall_.fetch_add(bytes, std::memory_order_relaxed);
}

void Progress::tick(int slot, uint64_t bytes) { slots_[slot]->done.fetch_add(bytes, std::memory_order_relaxed); }

void Progress::relabel(int slot, const std::string& label, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  Slot* s = slots_[slot];
  s->label = label;
  s->total = bytes;
  s->done = 0;
  s->t0 = now();
}

void Progress::end(int slot, const std::string& line) {
  std::lock_guard<std::mutex> lk(mu_);
  slots_[slot]->used = false;
  ++parts_done_;
  if (!enabled_) return;
  clear_locked();
  std::fprintf(out_, "%s\n", line.c_str());
  if (tty_) draw_locked(false);
  std::fflush(out_);
}

void Progress::message(const std::string& line) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!enabled_) return;
  clear_locked();
  std::fprintf(out_, "%s\n", line.c_str());
  if (tty_) draw_locked(false);
  std::fflush(out_);
}

void Progress::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (th_.joinable()) th_.join();
  std::lock_guard<std::mutex> lk(mu_);
  if (enabled_ && tty_) {
    clear_locked();
    std::fflush(out_);
  }
}

std::string Progress::bar(double frac, int width) const {
  frac = std::min(1.0, std::max(0.0, frac));
  int full = static_cast<int>(frac * width);
  return "[" + std::string(full, '#') + std::string(width - full, '.') + "]";
}

void Progress::clear_locked() {
  if (!tty_) return;
  for (int i = 0; i < drawn_lines_; ++i) std::fprintf(out_, "\x1b[1A\x1b[2K");
  drawn_lines_ = 0;
}

void Progress::draw_locked(bool final) {
  const double t = now();
  if (tty_) clear_locked();
  if (parts_total_ == 0) return;  // nothing to show before set_total()
  if (tty_) {
    for (Slot* s : slots_) {
      if (!s->used) continue;
      const double el = std::max(1e-3, t - s->t0);
      const uint64_t d = s->done.load();
      const double rate = d / el;
      const double frac = s->total ? static_cast<double>(d) / s->total : 1.0;
      std::fprintf(out_, "  %-28s %s %3.0f%% %9s / %-9s %8s/s ETA %s\n", s->label.c_str(), bar(frac, 24).c_str(),
                   frac * 100, human_bytes(d).c_str(), human_bytes(s->total).c_str(), human_bytes(rate).c_str(),
                   human_time(rate > 0 ? (s->total - std::min(d, s->total)) / rate : NAN).c_str());
      ++drawn_lines_;
    }
  }
  const double el = std::max(1e-3, t - t0_);
  const uint64_t d = overall_.load();
  const double rate = d / el;
  const double frac = total_ ? static_cast<double>(d) / total_ : 1.0;
  std::fprintf(out_, "  %-28s %s %3.0f%% %9s / %-9s %8s/s ETA %s\n",
               strprintf("total (%d/%d parts)", parts_done_, parts_total_).c_str(), bar(frac, 24).c_str(), frac * 100,
               human_bytes(d).c_str(), human_bytes(total_).c_str(), human_bytes(rate).c_str(),
               human_time(rate > 0 ? (total_ - std::min(d, total_)) / rate : NAN).c_str());
  if (tty_) ++drawn_lines_;
  (void)final;
}

void Progress::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(tty_ ? 250 : 1000));
    if (stop_) break;
    if (tty_) {
      draw_locked(false);
      std::fflush(out_);
    } else if (now() - last_plain_ >= 10.0 && parts_total_ > 0) {
      last_plain_ = now();
      draw_locked(false);
      std::fflush(out_);
    }
  }
}

}  // namespace k3::convert
