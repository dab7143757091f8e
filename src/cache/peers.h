// The prompt cache across the processes of an mpirun job (docs/multinode.md, "Prompt cache").
// Each process holds its share of every state (its stage's layers, its heads' KDA states), so each
// keeps its share of every cached one. The leader's cache decides everything: lookups, snapshots,
// evictions, the disk tier's files, slot saves and sessions. Every copy it makes between a State
// and the cache, and every file it writes, reads or removes, the others make on their shares
// (Replica), under the same ids and in order with the forward passes (Peers carries the
// operations). A file read that fails on any process fails on all of them, so a hit restores the
// same prefix everywhere or nothing: results stay the bits of one process.
#pragma once
#include <cstdint>
#include <deque>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cache/file.h"
#include "cache/state_copy.h"

namespace k3::cache {

// The leader's channel to the others (src/multinode implements it over MPI). Operations are words.
class Peers {
 public:
  virtual ~Peers() = default;
  virtual uint64_t new_id() = 0;  // unique in the job (cached data, cache instances)
  // Queued; every other process carries it out before the leader's next forward pass.
  virtual void post(std::vector<int64_t> op) = 0;
  // Carried out now, after everything queued; true when it succeeded on every other process.
  virtual bool ask(std::vector<int64_t> op) = 0;
};

// Where the files of one cached path are. Each process has its own: the leader the disk tier's
// DIR/NAME or the file PATH, process r > 0 DIR/rank-r/NAME (its identity in NAME) or PATH.rank-r.
struct FileRef {
  uint64_t entry = 0;  // the disk tier's entry of this token hash (tokens_hash), or 0: `path`
  std::string path;    // the leader's file
};

// The leader's copies and files, made by every process on its share: the local one here, then the
// same operation for the others (posted, or asked where the leader must know the outcome). Alone
// (no peers) only the local one.
class Shares {
 public:
  Shares(Layout l, Peers* peers = nullptr) : l_(std::move(l)), peers_(peers) {}
  const Layout& layout() const { return l_; }
  bool spread() const { return peers_ != nullptr; }

  // A cache instance of the others (its identity and disk tier): from the first file operation
  // to close(). False when a process cannot use its directory (it says why).
  bool open(uint64_t template_hash, const std::string& compute, const std::string& dir);
  void close();

  std::shared_ptr<const Rows> rows(const model::State& st, int64_t a, int64_t b) const;
  std::shared_ptr<const Rows> slice(const Rows& r, int64_t off, int64_t n) const;
  std::shared_ptr<const Snapshot> snapshot(const model::State& st, std::span<const float> logits) const;
  void restore(model::State& st, std::span<const Rows* const> pieces, const Snapshot& s,
               std::vector<float>* logits) const;

  // Writes p here (write_file) and has the others write theirs of `where`: queued, or at once and
  // all or none when `wait` (a failure elsewhere removes this file and throws FileError).
  uint64_t write(const std::string& path, const Identity& id, const PathData& p, const nlohmann::ordered_json& extra,
                 const FileRef& where, bool wait) const;
  // Every piece of f into st (read_pieces), and the others read theirs of `where` into their
  // shares of st; the snapshots come with ids. Throws FileError (Partial when only another process
  // failed); st is then reset.
  std::vector<std::shared_ptr<Snapshot>> read(const FileInfo& f, const FileRef& where, model::State& st) const;
  // The others remove theirs of `where` (after their queued writes).
  void remove(const FileRef& where) const;

 private:
  Layout l_;
  Peers* peers_;
  uint64_t cache_ = 0;  // the instance of open()
};

// Another process's side: carries out the leader's operations on this process's share, with its
// own files. Writes of the disk tier run on a thread of their own; a read or an asked write waits
// for them first.
class Replica {
 public:
  // state(id, n_ctx): this process's part of the leader's state `id` (made at that size when new).
  using StateOf = std::function<model::State&(uint64_t id, int64_t n_ctx)>;
  Replica(const model::Model& m, int rank, StateOf state);
  ~Replica();  // finishes the queued writes
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // One operation; returns false when one the leader asked for failed here (saying why on stderr).
  bool apply(std::span<const int64_t> op, bool asked);

 private:
  struct Instance {
    Identity id;
    std::string dir;  // DIR/rank-r, "" without a disk tier
  };
  std::string path_of(const Instance& c, const FileRef& f) const;
  void queue(std::function<void()> job);
  void flush();
  void warn(const std::string& what) const;

  const model::Model& m_;
  int rank_;
  StateOf state_;
  Layout l_;
  std::map<uint64_t, Instance> caches_;
  std::map<uint64_t, std::shared_ptr<const Rows>> rows_;
  std::map<uint64_t, std::shared_ptr<const Snapshot>> snaps_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace k3::cache
