// Progress display for long conversions: one bar per part in flight and one overall (bytes,
// MB/s, ETA). On a terminal the bars are redrawn in place; otherwise a line is printed when a
// part finishes and an overall line every 10 s. Disabled (quiet) it prints nothing.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace k3::convert {

class Progress {
 public:
  explicit Progress(bool enabled, FILE* out = stderr);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set_total(uint64_t bytes, int parts);
  // A part (or any unit of work) with its own bar; returns a slot for add()/end().
  int begin(const std::string& label, uint64_t bytes);
  void add(int slot, uint64_t bytes);   // counts toward the slot and the overall bar
  void tick(int slot, uint64_t bytes);  // the slot's bar only (checking, verifying)
  void relabel(int slot, const std::string& label, uint64_t bytes);  // e.g. "verifying": restarts the bar
  void end(int slot, const std::string& line);  // line is printed (kept above the bars)
  void message(const std::string& line);        // printed above the bars, even when quiet if `force`
  void stop();                                  // final redraw of the overall line

  static std::string human_bytes(double b);
  static std::string human_time(double s);

 private:
  static constexpr size_t kMaxSlots = 1024;
  struct Slot {
    std::string label;
    uint64_t total = 0;
    std::atomic<uint64_t> done{0};
    double t0 = 0;
    bool used = false;
  };
  void loop();
  void draw_locked(bool final);
  void clear_locked();
  std::string bar(double frac, int width) const;
  double now() const;

  bool enabled_, tty_;
  FILE* out_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread th_;
  std::vector<Slot*> slots_;
  int drawn_lines_ = 0;
  uint64_t total_ = 0;
  int parts_total_ = 0, parts_done_ = 0;
  std::atomic<uint64_t> overall_{0};
  double t0_;
  double last_plain_ = 0;
};

}  // namespace k3::convert
