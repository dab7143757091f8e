// Model-free drafts by prompt lookup (dspark.md §11): the continuation of the most recent earlier
// occurrence of the sequence's last n tokens, n = 3, 2, 1. Per n a hash map from an n-gram to its
// latest start, updated as tokens are committed, so a lookup costs O(1) at any length. It pays on
// repetitive output (code edits, quoted prompt text, lists) and costs nothing otherwise.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace k3::spec {

class NgramIndex {
 public:
  static constexpr int kMaxN = 3;
  // Appends committed tokens (the last one is the anchor of the next step).
  void push(std::span<const int32_t> ids);
  void push(int32_t id) { push(std::span<const int32_t>(&id, 1)); }
  void clear();
  int64_t size() const { return static_cast<int64_t>(x_.size()); }
  int32_t last() const { return x_.back(); }
  const std::vector<int32_t>& tokens() const { return x_; }
  // Up to max drafts after the sequence so far (none when no n-gram recurs).
  void draft(int64_t max, std::vector<int32_t>& out) const;

 private:
  static uint64_t key(const int32_t* p, int n);
  std::vector<int32_t> x_;
  std::unordered_map<uint64_t, int64_t> last_[kMaxN];  // [n-1]: n-gram -> latest start j, j + n <= size() - 1
};

}  // namespace k3::spec
