// Which routed experts the expert cache keeps (expert_store.h), and a replay of recorded routing
// traces against policies (k3 cache-sim). A key is il * n_expert + e.
//
// K3's routing is deliberately flat: every expert of a layer is chosen about equally often, so
// recency says little about the next use (LRU degenerates towards random eviction). FreqPolicy
// keeps the experts with the highest decayed use count: counts are kept for every expert, resident
// or not (a few bytes each), so a burst of one-off experts (a scan) cannot push out the frequently
// used ones, and an expert that becomes popular earns its place. Time is counted per layer
// (requests to that layer), so layers are accounted separately and a count means the same in every
// layer whatever the batch sizes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace k3::model {

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;
  virtual const char* name() const = 0;
  // A new request group of layer il starts (advances the layer's clock).
  virtual void tick(uint32_t il) = 0;
  // Every requested expert, resident or not.
  virtual void access(int32_t key) = 0;
  // Lower: evicted first.
  virtual double priority(int32_t key) const = 0;
  // A warmup loaded key with an expected use count (>= 1).
  virtual void seed(int32_t key, double count) = 0;
};

// "lru" | "freq"; n_keys = n_layer * n_expert. half_life: requests to a layer after which a
// FreqPolicy count has lost half its weight.
std::unique_ptr<CachePolicy> make_policy(const std::string& name, uint32_t n_layer, int32_t n_expert,
                                         double half_life = 4096);

// A routing trace: the request groups of a run in order (one per MoE layer per forward pass: the
// distinct experts the router chose for the batch).
struct RoutingTrace {
  uint32_t n_layer = 0;
  int32_t n_expert = 0;
  struct Group {
    uint32_t il;
    std::vector<int32_t> experts;
  };
  std::vector<Group> groups;
  // Text: "k3-routing-trace 1 <n_layer> <n_expert>" then one line per group "il e1 e2 ...".
  static RoutingTrace load(const std::string& path);  // throws k3::Error naming the file and line
};

struct SimResult {
  std::string policy;
  int64_t capacity = 0;  // experts
  int64_t hits = 0, misses = 0;
  double hit_rate() const { return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0; }
};

// Replays the trace against a cache of `capacity` experts (at least the largest group), the
// experts of the current group never being evicted while it is served, as in the store. policy:
// "lru", "freq" or "belady" (evicts the expert whose next use is furthest away: the optimum).
SimResult simulate(const RoutingTrace& tr, const std::string& policy, int64_t capacity, double half_life = 4096);

}  // namespace k3::model
