#include "model/cache_policy.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "common/error.h"

namespace k3::model {

namespace {

class LruPolicy : public CachePolicy {
 public:
  explicit LruPolicy(size_t n_keys) : last_(n_keys, 0) {}
  const char* name() const override { return "lru"; }
  void tick(uint32_t) override {}
  void access(int32_t key) override { last_[key] = ++clock_; }
  double priority(int32_t key) const override { return static_cast<double>(last_[key]); }
  void seed(int32_t key, double) override { access(key); }

 private:
  std::vector<uint64_t> last_;
  uint64_t clock_ = 0;
};

class FreqPolicy : public CachePolicy {
 public:
  FreqPolicy(uint32_t n_layer, int32_t n_expert, double half_life)
      : E_(n_expert),
        lambda_(std::log(2.0) / half_life),
        now_(n_layer, 0),
        count_(size_t(n_layer) * n_expert, 0),
        at_(size_t(n_layer) * n_expert, 0),
        last_(size_t(n_layer) * n_expert, 0) {}
  const char* name() const override { return "freq"; }
  void tick(uint32_t il) override { ++now_[il]; }
  void access(int32_t key) override {
    count_[key] = decayed(key) + 1.0;
    at_[key] = now_[key / E_];
    last_[key] = ++clock_;
  }
  void seed(int32_t key, double count) override {
    count_[key] = count;
    at_[key] = now_[key / E_];
    last_[key] = ++clock_;
  }
  // The decayed count; among equal counts the least recently used goes first.
  double priority(int32_t key) const override { return decayed(key) + 1e-12 * static_cast<double>(last_[key]); }

 private:
  double decayed(int32_t key) const {
    return count_[key] * std::exp(-lambda_ * static_cast<double>(now_[key / E_] - at_[key]));
  }
  int32_t E_;
  double lambda_;
  std::vector<uint64_t> now_;
  std::vector<double> count_;
  std::vector<uint64_t> at_, last_;
  uint64_t clock_ = 0;
};

}  // namespace

std::unique_ptr<CachePolicy> make_policy(const std::string& name, uint32_t n_layer, int32_t n_expert,
                                         double half_life) {
  if (name == "lru") return std::make_unique<LruPolicy>(size_t(n_layer) * n_expert);
  if (name == "freq") return std::make_unique<FreqPolicy>(n_layer, n_expert, half_life);
  fail("unknown cache policy '%s' (expected lru or freq)", name.c_str());
}

RoutingTrace RoutingTrace::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("%s: cannot open routing trace", path.c_str());
  RoutingTrace tr;
  std::string line, magic;
  int version = 0;
  if (!std::getline(f, line)) fail("%s: empty routing trace", path.c_str());
  std::istringstream h(line);
  if (!(h >> magic >> version >> tr.n_layer >> tr.n_expert) || magic != "k3-routing-trace" || version != 1 ||
      tr.n_layer == 0 || tr.n_expert <= 0)
    fail("%s:1: not a k3 routing trace (expected 'k3-routing-trace 1 <n_layer> <n_expert>')", path.c_str());
  for (size_t ln = 2; std::getline(f, line); ++ln) {
    if (line.empty()) continue;
    std::istringstream s(line);
    Group g;
    long long v;
    if (!(s >> v) || v < 0 || v >= tr.n_layer) fail("%s:%zu: bad layer index", path.c_str(), ln);
    g.il = static_cast<uint32_t>(v);
    while (s >> v) {
      if (v < 0 || v >= tr.n_expert) fail("%s:%zu: expert %lld out of range", path.c_str(), ln, v);
      g.experts.push_back(static_cast<int32_t>(v));
    }
    if (!s.eof()) fail("%s:%zu: not a number", path.c_str(), ln);
    if (g.experts.empty()) fail("%s:%zu: no experts", path.c_str(), ln);
    tr.groups.push_back(std::move(g));
  }
  return tr;
}

SimResult simulate(const RoutingTrace& tr, const std::string& policy, int64_t capacity, double half_life) {
  SimResult r;
  r.policy = policy;
  r.capacity = capacity;
  const bool belady = policy == "belady";
  std::unique_ptr<CachePolicy> pol;
  if (!belady) pol = make_policy(policy, tr.n_layer, tr.n_expert, half_life);
  // Belady: for each access, the index of the group where its key is used next.
  std::vector<std::vector<size_t>> next_use;
  if (belady) {
    std::unordered_map<int32_t, size_t> seen;
    next_use.resize(tr.groups.size());
    for (size_t g = tr.groups.size(); g-- > 0;) {
      const auto& grp = tr.groups[g];
      for (int32_t e : grp.experts) {
        const int32_t key = static_cast<int32_t>(grp.il) * tr.n_expert + e;
        auto it = seen.find(key);
        next_use[g].push_back(it == seen.end() ? std::numeric_limits<size_t>::max() : it->second);
        seen[key] = g;
      }
    }
  }
  std::vector<int32_t> resident;  // keys
  std::vector<size_t> resident_next;
  std::vector<int32_t> slot_of(size_t(tr.n_layer) * tr.n_expert, -1);
  std::vector<char> in_group(slot_of.size(), 0);
  for (size_t g = 0; g < tr.groups.size(); ++g) {
    const auto& grp = tr.groups[g];
    if (static_cast<int64_t>(grp.experts.size()) > capacity)
      fail("cache-sim: capacity %lld is below a request of %zu experts", static_cast<long long>(capacity),
           grp.experts.size());
    if (pol) pol->tick(grp.il);
    for (int32_t e : grp.experts) in_group[size_t(grp.il) * tr.n_expert + e] = 1;
    for (size_t j = 0; j < grp.experts.size(); ++j) {
      const int32_t key = static_cast<int32_t>(grp.il) * tr.n_expert + grp.experts[j];
      if (pol) pol->access(key);
      int32_t s = slot_of[key];
      if (s >= 0) {
        ++r.hits;
      } else {
        ++r.misses;
        if (static_cast<int64_t>(resident.size()) < capacity) {
          s = static_cast<int32_t>(resident.size());
          resident.push_back(key);
          resident_next.push_back(0);
        } else {
          int32_t victim = -1;
          double best = 0;
          for (size_t i = 0; i < resident.size(); ++i) {
            if (in_group[resident[i]]) continue;
            const double p = belady ? -static_cast<double>(resident_next[i]) : pol->priority(resident[i]);
            if (victim < 0 || p < best) victim = static_cast<int32_t>(i), best = p;
          }
          slot_of[resident[victim]] = -1;
          s = victim;
          resident[s] = key;
        }
        slot_of[key] = s;
      }
      if (belady) resident_next[s] = next_use[g][j];
    }
    for (int32_t e : grp.experts) in_group[size_t(grp.il) * tr.n_expert + e] = 0;
  }
  return r;
}

}  // namespace k3::model
