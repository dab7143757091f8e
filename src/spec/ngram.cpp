#include "spec/ngram.h"

namespace k3::spec {

// K3's ids are below 2^21 (163,840 of them), so three pack into a 64-bit key exactly (a larger
// vocabulary could collide: a worse draft, never a different output).
uint64_t NgramIndex::key(const int32_t* p, int n) {
  uint64_t k = 0;
  for (int i = 0; i < n; ++i) k = (k << 21) ^ static_cast<uint32_t>(p[i]);
  return k;
}

void NgramIndex::push(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    x_.push_back(id);
    // the n-grams ending at the token before the new last one become candidates
    const int64_t end = static_cast<int64_t>(x_.size()) - 2;
    for (int n = 1; n <= kMaxN; ++n)
      if (end - n + 1 >= 0) last_[n - 1][key(&x_[end - n + 1], n)] = end - n + 1;
  }
}

void NgramIndex::clear() {
  x_.clear();
  for (auto& m : last_) m.clear();
}

void NgramIndex::draft(int64_t max, std::vector<int32_t>& out) const {
  out.clear();
  const int64_t N = size();
  for (int n = kMaxN; n >= 1 && max > 0; --n) {
    if (N < n + 1) continue;
    const auto it = last_[n - 1].find(key(&x_[N - n], n));
    if (it == last_[n - 1].end()) continue;
    for (int64_t i = it->second + n; i < N && static_cast<int64_t>(out.size()) < max; ++i) out.push_back(x_[i]);
    return;
  }
}

}  // namespace k3::spec
