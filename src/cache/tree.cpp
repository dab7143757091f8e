#include "cache/tree.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace k3::cache {

namespace {

std::pair<int32_t, uint64_t> tok(Key k, int64_t i) { return {k.ids[i], k.hash_at(i)}; }

// Positions of n's span that match k from position `pos`, at most `limit`.
int64_t common(const Tree::Node& n, Key k, int64_t pos, int64_t limit) {
  const int64_t span = std::min<int64_t>(static_cast<int64_t>(n.ids.size()), limit - pos);
  int64_t m = 0;
  while (m < span && n.ids[m] == k.ids[pos + m] && (n.content.empty() ? 0 : n.content[m]) == k.hash_at(pos + m)) ++m;
  return m;
}

}  // namespace

Tree::Tree(Shares s) : s_(std::move(s)), root_(std::make_unique<Node>()) {}

Tree::~Tree() = default;

size_t Tree::node_bytes(const Node& n) const {
  return (n.rows ? n.rows->v.bytes() : 0) + n.ids.size() * sizeof(int32_t) + n.content.size() * sizeof(uint64_t);
}

Tree::Match Tree::match(Key k, uint64_t tick) {
  Match r;
  Node* n = root_.get();
  r.best = n;
  int64_t pos = 0;
  while (pos < k.size()) {
    auto it = n->kids.find(tok(k, pos));
    if (it == n->kids.end()) {
      if (!n->kids.empty()) r.other = n->kids.begin()->first.first;
      break;
    }
    Node* c = it->second.get();
    const int64_t m = common(*c, k, pos, k.size());
    c->used = tick;
    if (m < static_cast<int64_t>(c->ids.size())) {
      pos += m;
      if (pos < k.size()) r.other = c->ids[m];
      break;
    }
    n = c;
    pos = c->end;
    if (c->snap) r.best = c;
  }
  r.lcp = pos;
  return r;
}

Tree::Node* Tree::split(Node* n, int64_t m) {
  K3_ASSERT(m > 0 && m < static_cast<int64_t>(n->ids.size()));
  auto head = std::make_unique<Node>();
  Node* h = head.get();
  h->parent = n->parent;
  h->end = n->start() + m;
  h->ids.assign(n->ids.begin(), n->ids.begin() + m);
  if (!n->content.empty()) h->content.assign(n->content.begin(), n->content.begin() + m);
  h->rows = s_.slice(*n->rows, 0, m);
  h->used = n->used;
  const int64_t rest = static_cast<int64_t>(n->ids.size()) - m;
  std::shared_ptr<const Rows> tail = s_.slice(*n->rows, m, rest);
  bytes_ -= node_bytes(*n);
  n->ids.erase(n->ids.begin(), n->ids.begin() + m);
  if (!n->content.empty()) n->content.erase(n->content.begin(), n->content.begin() + m);
  n->rows = std::move(tail);
  bytes_ += node_bytes(*n) + node_bytes(*h);
  ++n_nodes_;
  auto& slot = n->parent->kids[{h->ids[0], h->content.empty() ? 0 : h->content[0]}];
  std::unique_ptr<Node> self = std::move(slot);
  K3_ASSERT(self.get() == n);
  n->parent = h;
  h->kids[{n->ids[0], n->content.empty() ? 0 : n->content[0]}] = std::move(self);
  slot = std::move(head);
  return h;
}

Tree::Node* Tree::insert(Key k, int64_t upto, const model::State& st, uint64_t tick) {
  K3_ASSERT(upto <= k.size() && upto <= st.n_past());
  Node* n = root_.get();
  int64_t pos = 0;
  while (pos < upto) {
    auto it = n->kids.find(tok(k, pos));
    if (it == n->kids.end()) {
      auto fresh = std::make_unique<Node>();
      Node* f = fresh.get();
      f->parent = n;
      f->end = upto;
      f->ids.assign(k.ids.begin() + pos, k.ids.begin() + upto);
      if (!k.content.empty()) {
        f->content.assign(k.content.begin() + pos, k.content.begin() + upto);
        if (std::all_of(f->content.begin(), f->content.end(), [](uint64_t h) { return h == 0; })) f->content.clear();
      }
      f->rows = s_.rows(st, pos, upto);
      f->used = tick;
      bytes_ += node_bytes(*f);
      ++n_nodes_;
      n->kids[tok(k, pos)] = std::move(fresh);
      return f;
    }
    Node* c = it->second.get();
    const int64_t m = common(*c, k, pos, upto);
    c->used = tick;
    if (m < static_cast<int64_t>(c->ids.size())) c = split(c, m);
    n = c;
    pos = c->end;
  }
  return n;
}

bool Tree::attach(Node* n, std::shared_ptr<const Snapshot> s) {
  K3_ASSERT(n != root_.get() && s->pos == n->end);
  if (n->snap) return false;
  n->snap = std::move(s);
  bytes_ += n->snap->v.bytes();
  ++n_snaps_;
  return true;
}

void Tree::unpin(Node* n) {
  K3_ASSERT(n->pins > 0);
  --n->pins;
}

std::vector<std::shared_ptr<const Rows>> Tree::path_rows(const Node* n) const {
  std::vector<std::shared_ptr<const Rows>> r;
  for (; n && n->parent; n = n->parent) r.push_back(n->rows);
  std::reverse(r.begin(), r.end());
  return r;
}

void Tree::path_key(const Node* n, std::vector<int32_t>& ids, std::vector<uint64_t>& content) const {
  std::vector<const Node*> path;
  bool hashed = false;
  for (; n && n->parent; n = n->parent) path.push_back(n), hashed |= !n->content.empty();
  ids.clear(), content.clear();
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    ids.insert(ids.end(), (*it)->ids.begin(), (*it)->ids.end());
    if (!hashed) continue;
    if ((*it)->content.empty()) content.insert(content.end(), (*it)->ids.size(), 0);
    else content.insert(content.end(), (*it)->content.begin(), (*it)->content.end());
  }
}

std::vector<const Tree::Node*> Tree::path_snapshots(const Node* n) const {
  std::vector<const Node*> r;
  for (; n && n->parent; n = n->parent)
    if (n->snap) r.push_back(n);
  return r;
}

void Tree::remove_leaf(Node* n, bool whole_branch) {
  while (n != root_.get() && n->kids.empty() && n->pins == 0) {
    Node* p = n->parent;
    if (n->snap) bytes_ -= n->snap->v.bytes(), --n_snaps_;
    bytes_ -= node_bytes(*n);
    --n_nodes_;
    p->kids.erase({n->ids[0], n->content.empty() ? 0 : n->content[0]});
    n = p;
    if (n->snap && !whole_branch) break;  // still a useful leaf
  }
}

void Tree::evict_to(size_t budget, const std::function<void(Evicted&&)>& on_evict) {
  while (bytes_ > budget) {
    // One pass finds the victim: tokens saved = distance to the snapshot above it on the path.
    Node* victim = nullptr;
    int victim_bucket = 0;
    auto visit = [&](auto&& self, Node* n, int64_t above) -> void {
      if (n->snap && n->pins == 0) {
        const size_t freed = n->snap->v.bytes() + (n->kids.empty() ? node_bytes(*n) : 0);
        const double per_byte = static_cast<double>(n->end - above) / static_cast<double>(freed);
        const int bucket = static_cast<int>(std::floor(std::log2(per_byte)));
        if (!victim || bucket < victim_bucket || (bucket == victim_bucket && n->used < victim->used))
          victim = n, victim_bucket = bucket;
      }
      const int64_t next = n->snap ? n->end : above;
      for (auto& [key, kid] : n->kids) self(self, kid.get(), next);
    };
    visit(visit, root_.get(), 0);
    if (!victim) return;  // everything left is pinned
    Evicted e;
    path_key(victim, e.ids, e.content);
    e.rows = path_rows(victim);
    e.snap = victim->snap;
    e.on_disk = victim->on_disk;
    ++evictions_;
    if (victim->kids.empty()) {
      remove_leaf(victim, false);
    } else {
      bytes_ -= victim->snap->v.bytes();
      --n_snaps_;
      victim->snap.reset();
      victim->on_disk = false;
    }
    on_evict(std::move(e));
  }
}

void Tree::erase_branch(Node* n) { remove_leaf(n, true); }

}  // namespace k3::cache
