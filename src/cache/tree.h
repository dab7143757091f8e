// The radix tree of the prompt cache: one path per token sequence the cache has seen, nodes
// holding the MLA rows of their span and, at their end, optionally a snapshot of the KDA states
// (with the logits there). Snapshots sit only at node ends: a node is split where one is taken or
// where two sequences part. Not thread-safe (PrefixCache locks it).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/peers.h"

namespace k3::cache {

// A sequence as the cache keys it: token ids and, for positions whose meaning the id does not
// give alone (an image's rows, #17), a content hash per position (empty: none anywhere; 0: none
// at that position). Two positions match when both the id and the hash do.
struct Key {
  std::span<const int32_t> ids;
  std::span<const uint64_t> content;
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  uint64_t hash_at(int64_t i) const { return content.empty() ? 0 : content[i]; }
  Key prefix(int64_t n) const { return {ids.first(n), content.empty() ? content : content.first(n)}; }
};

class Tree {
 public:
  struct Node {
    Node* parent = nullptr;
    int64_t end = 0;                       // the span is positions [end - ids.size(), end)
    std::vector<int32_t> ids;
    std::vector<uint64_t> content;         // empty, or one hash per id
    std::shared_ptr<const Rows> rows;      // the span's MLA rows
    std::shared_ptr<const Snapshot> snap;  // at `end`, or null
    bool on_disk = false;                  // snap is in the disk tier already
    std::map<std::pair<int32_t, uint64_t>, std::unique_ptr<Node>> kids;  // by first (id, hash)
    int pins = 0;
    uint64_t used = 0;                     // last use (a tick), for LRU
    int64_t start() const { return end - static_cast<int64_t>(ids.size()); }
  };

  struct Match {
    int64_t lcp = 0;           // positions of the key found in the tree
    Node* best = nullptr;      // deepest node with a snapshot whose end <= lcp (root: nothing usable)
    int64_t other = -1;        // at lcp, the token the tree continues with (-1: none / the tree ends)
  };

  // What leaves the tree when a snapshot is evicted: enough to write it to disk.
  struct Evicted {
    std::vector<int32_t> ids;
    std::vector<uint64_t> content;
    std::vector<std::shared_ptr<const Rows>> rows;  // positions [0, snap->pos), in order
    std::shared_ptr<const Snapshot> snap;
    bool on_disk = false;
  };

  // Rows are copied through s (every process's share of them, under mpirun).
  explicit Tree(Shares s);
  ~Tree();

  Node* root() { return root_.get(); }
  // Longest prefix of k in the tree; marks the matched path used at `tick`.
  Match match(Key k, uint64_t tick);
  // The node that ends at position `upto` of k's path, creating or splitting nodes as needed; rows
  // the tree lacks are copied from st (which holds at least `upto` positions of k).
  Node* insert(Key k, int64_t upto, const model::State& st, uint64_t tick);
  // Gives n a snapshot unless it has one (both would be the same bits); returns whether it did.
  bool attach(Node* n, std::shared_ptr<const Snapshot> s);

  // Pinned nodes (and so their paths) are never evicted, nor their own snapshots.
  void pin(Node* n) { ++n->pins; }
  void unpin(Node* n);

  // Evicts until bytes() <= budget: the snapshot (with its node when a leaf) that saves the fewest
  // tokens per byte first (rounded down to a power of two), the least recently used among equals.
  // Each evicted snapshot goes to on_evict first.
  void evict_to(size_t budget, const std::function<void(Evicted&&)>& on_evict);
  // Drops the part of n's path that no other path shares (unpinned nodes only); n may be freed.
  void erase_branch(Node* n);

  std::vector<std::shared_ptr<const Rows>> path_rows(const Node* n) const;
  void path_key(const Node* n, std::vector<int32_t>& ids, std::vector<uint64_t>& content) const;
  // Snapshots on n's path (n included), deepest first.
  std::vector<const Node*> path_snapshots(const Node* n) const;

  size_t bytes() const { return bytes_; }
  size_t snapshots() const { return n_snaps_; }
  size_t nodes() const { return n_nodes_; }
  long long evictions() const { return evictions_; }

 private:
  Node* split(Node* n, int64_t m);
  size_t node_bytes(const Node& n) const;
  // Removes leaf n, then the ancestors it leaves as unpinned leaves: all (whole_branch), or only
  // those without a snapshot.
  void remove_leaf(Node* n, bool whole_branch);

  Shares s_;
  const Layout& l_ = s_.layout();
  std::unique_ptr<Node> root_;
  size_t bytes_ = 0, n_snaps_ = 0, n_nodes_ = 0;
  long long evictions_ = 0;
};

}  // namespace k3::cache
