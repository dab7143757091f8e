// bpe_merge: a direct O(n^2) loop for short pieces, a heap over a linked list for long ones
// (identical results: lowest rank first, leftmost on ties).
#pragma once
#include <algorithm>
#include <queue>

namespace k3::tok {

template <class PairFn>
void bpe_merge(std::vector<BpePart>& parts, PairFn&& pair, bool force_heap) {
  const size_t n = parts.size();
  if (n < 2) return;
  if (n <= 64 && !force_heap) {
    BpePairRank pr[64];
    for (size_t i = 0; i + 1 < n; ++i) pr[i] = pair(parts[i], parts[i + 1]);
    size_t m = n;
    for (;;) {
      size_t best = m;
      int32_t best_rank = -1;
      for (size_t i = 0; i + 1 < m; ++i)
        if (pr[i].rank >= 0 && (best_rank < 0 || pr[i].rank < best_rank)) best_rank = pr[i].rank, best = i;
      if (best == m) break;
      parts[best].end = parts[best + 1].end;
      parts[best].sym = pr[best].result;
      for (size_t k = best + 1; k + 1 < m; ++k) parts[k] = parts[k + 1];
      for (size_t k = best + 1; k + 2 < m; ++k) pr[k] = pr[k + 1];
      --m;
      if (best > 0) pr[best - 1] = pair(parts[best - 1], parts[best]);
      if (best + 1 < m) pr[best] = pair(parts[best], parts[best + 1]);
    }
    parts.resize(m);
    return;
  }
  struct Node {
    BpePart p;
    int32_t prev, next;
  };
  struct Cand {
    int32_t rank;
    uint32_t start, left, left_end, right_end, result;
    bool operator<(const Cand& o) const {  // priority_queue pops the largest: invert
      return rank != o.rank ? rank > o.rank : start > o.start;
    }
  };
  std::vector<Node> nodes(n);
  for (size_t i = 0; i < n; ++i) nodes[i] = {parts[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  std::priority_queue<Cand> q;
  auto push = [&](int32_t l) {
    int32_t r = nodes[l].next;
    if (l < 0 || r < 0) return;
    BpePairRank pr = pair(nodes[l].p, nodes[r].p);
    if (pr.rank >= 0) q.push({pr.rank, nodes[l].p.start, static_cast<uint32_t>(l), nodes[l].p.end, nodes[r].p.end, pr.result});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  std::vector<bool> dead(n, false);
  while (!q.empty()) {
    Cand c = q.top();
    q.pop();
    Node& l = nodes[c.left];
    if (dead[c.left] || l.p.end != c.left_end || l.next < 0) continue;
    Node& r = nodes[l.next];
    if (r.p.end != c.right_end) continue;
    l.p.end = r.p.end;
    l.p.sym = c.result;
    dead[l.next] = true;
    l.next = r.next;
    if (r.next >= 0) nodes[r.next].prev = static_cast<int32_t>(c.left);
    if (l.prev >= 0) push(l.prev);
    push(static_cast<int32_t>(c.left));
  }
  parts.clear();
  for (int32_t i = 0; i >= 0; i = nodes[i].next) parts.push_back(nodes[i].p);
}

}  // namespace k3::tok
