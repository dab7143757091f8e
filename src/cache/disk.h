// The disk tier of the prompt cache (--cache-dir): one self-contained file per entry (a path of
// the tree with the snapshot at its end, see file.h), named by the identity and a hash of its
// tokens, so that servers of the same model share entries and others ignore them. Writes run on
// their own thread from data the tree no longer changes; a full disk pauses them (RAM only, with a
// warning). The index (tokens of every usable file) is read at start and again whenever the
// directory changes, so a server sees what another one on the same directory wrote.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>

#include "cache/file.h"
#include "cache/log.h"
#include "cache/peers.h"
#include "cache/tree.h"

namespace k3::cache {

// The hash of a token sequence that names its entries (one per process of an mpirun job, each
// named by that process's identity): IDENTITY-TOKENS.k3pc.
uint64_t tokens_hash(std::span<const int32_t> ids, std::span<const uint64_t> content);
std::string entry_name(uint64_t identity, uint64_t tokens);
// Removes the temporary files of writers that are gone (a killed process) from dir.
void remove_stale_temporaries(const std::string& dir);
// A temporary name beside `path` for it while this process writes it (remove_stale_temporaries
// knows it by its pid).
std::string temporary_for(const std::string& path);

struct DiskStats {
  long long files = 0, bytes = 0, budget = 0;
  long long writes = 0, write_bytes = 0, loads = 0, load_bytes = 0;
  double write_seconds = 0, load_seconds = 0;
  long long skipped = 0;     // unusable files (corrupt, truncated, another version or model)
  long long dropped = 0;     // writes not done (queue full, disk full, over budget)
  long long no_space = 0;    // times the disk refused bytes
  long long removed = 0;     // files deleted to stay within the budget
};

class DiskTier {
 public:
  // Its copies and files through s (every process's, under mpirun).
  DiskTier(const Shares& s, const Identity& id, const std::string& dir, int64_t budget, size_t max_queued, Log log);
  ~DiskTier();  // writes what is queued, then stops
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The longest entry whose tokens are a prefix of k and longer than `than` (null: none).
  std::shared_ptr<const FileInfo> find(Key k, int64_t than);
  // Restores entry f into st and returns its snapshot; null (with a warning, the entry forgotten)
  // when the file is gone or fails its checks.
  std::shared_ptr<Snapshot> load(const FileInfo& f, model::State& st, std::vector<float>* logits);
  // Queues a write of p (unless an entry with its tokens exists).
  void write(PathData p);
  void flush();  // waits until the queue is empty
  DiskStats stats() const;
  const std::string& dir() const { return dir_; }

 private:
  struct Entry {
    std::shared_ptr<const FileInfo> info;
    int64_t mtime_ns = 0;
  };
  void scan();  // with mu_ held
  void run();
  void write_one(PathData& p);
  void make_room(uint64_t need);  // with mu_ held

  Shares s_;
  Layout l_;
  Identity id_;
  std::string dir_;
  int64_t budget_;
  size_t max_queued_;
  Log log_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::map<std::string, Entry> index_;                     // file name -> entry
  std::map<std::string, std::pair<int64_t, int64_t>> bad_;  // name -> (size, mtime) already warned about
  std::set<std::string> foreign_seen_;
  int64_t dir_mtime_ns_ = -1;
  std::deque<PathData> queue_;
  size_t queued_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  std::chrono::steady_clock::time_point paused_until_{};
  DiskStats st_;
  std::thread thread_;
};

}  // namespace k3::cache
