// The prompt cache (docs/cache.md): reuses the work earlier requests did on the
// same prefix, in RAM and on disk, without changing a single bit of any result.
//
// K3's MLA caches can be cut back to any position, but its KDA layers carry a fixed-size state
// that can only be restored from a snapshot taken at that exact position. So the cache keeps a
// radix tree of token sequences (tree.h) whose nodes hold MLA rows and, at chosen positions,
// snapshots of every KDA state with the logits there. A request restores the deepest snapshot on
// its prompt's cached prefix and prefills only the rest, stopping to take snapshots at the
// positions later requests are likely to share: the start of every message, every
// snapshot_every tokens, where the prompt left the cache, the end of the prompt, and the end of
// the generation (the ones inside a prompt at least snapshot_min_gap tokens apart). Prefill may be cut anywhere without changing results (model.h), so a restored
// state is bit for bit the plain one.
//
//   auto seq = cache.begin(Key{ids}, message_starts);
//   int64_t pos = seq->restore(state, logits);          // == ids.size(): sample from logits now
//   while (pos < n) { int64_t stop = seq->next_stop(pos); ...forward ids[pos, stop) with logits...;
//                     pos = stop; seq->reached(pos, state, logits); }
//   ...generate...; seq->finish(fed, state, logits);
//
// The model knows nothing of this: the cache only copies State contents (state_copy.h).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/disk.h"
#include "cache/file.h"
#include "cache/log.h"
#include "cache/peers.h"
#include "cache/tree.h"
#include "model/model.h"

namespace k3::cache {

struct Options {
  int64_t ram_bytes = 0;       // budget of the tree (MLA rows + snapshots); 0: off, no reuse at all
  std::string dir;             // disk tier, "" for none
  int64_t disk_bytes = 0;      // budget of the disk tier
  int64_t snapshot_every = 0;  // also snapshot at multiples of this inside prompts (0: no)
  // A stop inside a prompt costs a forward pass of its own (on a MoE model, a read of most expert
  // weights: ~100 tokens of prefill on make-tiny --preset medium, docs/benchmarks.md), so the
  // snapshots inside a prompt are at least this many tokens apart, message starts first (the
  // prompt's end is always one).
  int64_t snapshot_min_gap = 64;
  Log log;                     // default: warnings on stderr
  Peers* peers = nullptr;      // under mpirun, the other processes (each keeps its share: peers.h)
  std::function<std::string(int32_t)> token_text;  // for the debug line where a prompt leaves the cache
  size_t side_width = 0;  // State::side floats per position cached with the MLA rows (a draft's context rows)
};

struct CacheStats {
  bool enabled = false, has_disk = false;
  long long lookups = 0, hits = 0, cached_tokens = 0;  // hits: lookups that restored something
  long long ram_bytes = 0, ram_budget = 0, snapshots = 0, nodes = 0, evictions = 0, snapshots_taken = 0;
  double snapshot_seconds = 0, restore_seconds = 0;  // copying states into the tree, and out of it
  DiskStats disk;
};

class PrefixCache;

// One request's use of the cache (see the top of the file). Not thread-safe; the cache is.
class Sequence {
 public:
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // st becomes the deepest cached state of the prompt (reset when there is none); returns its
  // position. When that is the whole prompt, logits holds the last token's.
  int64_t restore(model::State& st, std::vector<float>& logits);
  int64_t cached() const { return restored_; }
  // The next position after pos where prefill must stop for a snapshot (at last the prompt's end).
  int64_t next_stop(int64_t pos) const;
  // Prefill reached pos with st and the logits of token pos-1: a snapshot when pos is a stop.
  void reached(int64_t pos, const model::State& st, std::span<const float> logits);
  // The end of the generation: st holds every token of `fed` (the prompt, then each token fed
  // after it) and logits are those of its last token.
  void finish(std::span<const int32_t> fed, const model::State& st, std::span<const float> logits);

 private:
  friend class PrefixCache;
  Sequence(PrefixCache& c, Key prompt, std::vector<int64_t> boundaries);
  void snapshot_here(Key k, const model::State& st, std::span<const float> logits);
  void plan_stops(int64_t lcp);
  void log_lookup(const Tree::Match& m, bool from_disk) const;
  Key key() const { return {ids_, content_}; }

  PrefixCache& c_;
  std::vector<int32_t> ids_;
  std::vector<uint64_t> content_;
  std::vector<int64_t> boundaries_, stops_;
  Tree::Node* pinned_ = nullptr;
  int64_t restored_ = 0, last_snap_ = 0;
};

// Model::prefill through the cache: restores, then forward passes of at most n_batch tokens that
// stop at every snapshot position; logits become the last prompt token's; each_pass(first, n)
// after the pass over ids[first, first + n) (before a snapshot there). Returns the tokens restored
// (not processed).
int64_t prefill(const model::Model& m, Sequence& seq, model::State& st, std::span<const int32_t> ids, int64_t n_batch,
                const model::RunOptions& opt, std::vector<float>& logits,
                const std::function<void(int64_t, int64_t)>& each_pass = nullptr);

class PrefixCache {
 public:
  // template_text and compute (ISA, F16 rule) join the model in the identity (identity.h).
  PrefixCache(const model::Model& m, const std::string& template_text, const std::string& compute, Options o);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  bool enabled() const { return o_.ram_bytes > 0; }
  const Layout& layout() const { return l_; }
  const Identity& identity() const { return id_; }
  const Options& options() const { return o_; }
  // Bytes of one snapshot and of one token's MLA rows.
  size_t snapshot_bytes() const { return l_.snapshot_floats() * sizeof(float); }
  size_t token_bytes() const { return l_.row_floats() * sizeof(float); }

  // boundaries: positions worth a snapshot (the prompt's message starts).
  std::unique_ptr<Sequence> begin(Key prompt, std::vector<int64_t> boundaries = {});

  // Files of one cached path (slot API, chat sessions, k3 run --prompt-cache; file.h). save()
  // writes the deepest cached state on k's path with up to max_snaps snapshots (the deepest) and
  // `extra`; throws k3::Error when nothing of k is cached.
  struct Saved {
    int64_t n_tokens = 0;
    uint64_t bytes = 0;
    size_t snapshots = 0;
  };
  Saved save(const std::string& path, Key k, const nlohmann::ordered_json& extra = nullptr, size_t max_snaps = 4);
  // Puts a file's path and snapshots into the cache. Throws FileError (missing, foreign, corrupt).
  struct Loaded {
    std::vector<int32_t> ids;
    uint64_t bytes = 0;
    size_t snapshots = 0;
    nlohmann::ordered_json extra;
  };
  Loaded load(const std::string& path);
  // Forgets the branch that ends k's cached path (what no other cached sequence shares).
  void erase(Key k);

  CacheStats stats() const;
  void flush();  // waits for queued disk writes

 private:
  friend class Sequence;
  // With mu_ held: evicts to the budget; what leaves RAM for disk is appended to `writes`.
  void evict(std::vector<PathData>& writes);
  void write_all(std::vector<PathData>& writes);
  PathData path_of(const Tree::Node* n, size_t max_snaps) const;

  const model::Model& m_;
  Options o_;
  Shares shares_;
  const Layout& l_ = shares_.layout();
  Identity id_;
  mutable std::mutex mu_;
  Tree tree_;
  uint64_t tick_ = 0;
  CacheStats st_;
  std::unique_ptr<DiskTier> disk_;
};

}  // namespace k3::cache
