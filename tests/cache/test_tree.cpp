// The radix tree alone, on states filled with known values: splits keep every row where it was,
// eviction takes the snapshot that saves the fewest tokens per byte first and the least recently
// used among equals, pins protect, and the byte count is always the sum of what the tree holds.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cache/tree.h"
#include "model/synthetic.h"

using namespace k3;
using namespace k3::cache;

namespace {

struct Fixture {
  model::HParams hp = model::synth_hparams(model::synth_preset("tiny"));
  Layout l = Layout::of(hp);
  std::vector<float> logits = std::vector<float>(hp.n_vocab, 0.5f);

  // A state holding ids: row values encode (position, token, layer), KDA values the length.
  model::State state(const std::vector<int32_t>& ids) const {
    model::State st(hp, 512);
    for (size_t j = 0; j < l.mla.size(); ++j) {
      auto& kv = st.layers[l.mla[j]].kv;
      kv.resize(ids.size() * l.row);
      for (size_t p = 0; p < ids.size(); ++p)
        for (size_t i = 0; i < l.row; ++i) kv[p * l.row + i] = static_cast<float>(p * 1000 + ids[p] * 10 + j) + i * 1e-3f;
    }
    for (uint32_t il : l.kda) std::fill(st.layers[il].rec.begin(), st.layers[il].rec.end(), static_cast<float>(ids.size()));
    st.set_n_past(static_cast<int64_t>(ids.size()));
    return st;
  }
  Tree::Node* add(Tree& t, const std::vector<int32_t>& ids, int64_t upto, uint64_t tick) const {
    const model::State st = state(ids);
    model::State part = state(std::vector<int32_t>(ids.begin(), ids.begin() + upto));
    Tree::Node* n = t.insert(Key{ids, {}}, upto, st, tick);
    t.attach(n, take_snapshot(l, part, logits));
    return n;
  }
};

std::vector<int32_t> seq(int32_t first, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

size_t recount(const Tree::Node* n) {
  size_t b = n->rows ? n->rows->v.bytes() + n->ids.size() * 4 + n->content.size() * 8 : 0;
  if (n->snap) b += n->snap->v.bytes();
  for (const auto& [k, kid] : n->kids) b += recount(kid.get());
  return b;
}

}  // namespace

TEST(Tree, SplitsKeepRowsAndMatchFindsTheDeepestSnapshot) {
  Fixture f;
  Tree t(f.l);
  std::vector<int32_t> a = seq(10, 12), b = a;
  b[7] = 99;  // parts from a at position 7
  f.add(t, a, 12, 1);
  f.add(t, b, 9, 2);   // splits a's node at 7
  f.add(t, a, 4, 3);   // splits again at 4, inside the shared part
  EXPECT_EQ(t.snapshots(), 3u);
  for (const auto& ids : {a, b}) {
    const Tree::Match m = t.match(Key{ids, {}}, 4);
    const model::State want = f.state(ids);
    ASSERT_NE(m.best, t.root());
    std::vector<float> got;
    for (const auto& r : t.path_rows(m.best)) got.insert(got.end(), r->layer(f.l, 1), r->layer(f.l, 1) + r->n * f.l.row);
    const auto& kv = want.layers[f.l.mla[1]].kv;
    ASSERT_EQ(got.size(), static_cast<size_t>(m.best->end) * f.l.row);
    EXPECT_EQ(0, std::memcmp(got.data(), kv.data(), got.size() * 4)) << "rows moved by a split";
  }
  EXPECT_EQ(t.match(Key{a, {}}, 5).best->end, 12);
  EXPECT_EQ(t.match(Key{b, {}}, 5).best->end, 9);
  std::vector<int32_t> c = a;
  c[10] = 98;  // a until 10: the deepest snapshot at or before is at 4
  const Tree::Match mc = t.match(Key{c, {}}, 6);
  EXPECT_EQ(mc.lcp, 10);
  EXPECT_EQ(mc.best->end, 4);
  EXPECT_EQ(mc.other, a[10]);
  EXPECT_EQ(t.bytes(), recount(t.root()));
}

TEST(Tree, EvictsFewestTokensPerByteFirstThenLeastRecentlyUsed) {
  Fixture f;
  Tree t(f.l);
  // Three leaves under a shared 20-token stem with a snapshot at 20: after it they save 1, 1 and 100
  // tokens (the last, with its rows, twice as many per byte as the stem). The two 1-token ones are
  // equal; the older one goes first.
  const std::vector<int32_t> stem = seq(3, 20);
  auto branch = [&](int32_t tok, int n) {
    std::vector<int32_t> v = stem;
    for (int i = 0; i < n; ++i) v.push_back(tok + i);
    return v;
  };
  f.add(t, stem, 20, 1);
  Tree::Node* x = f.add(t, branch(100, 1), 21, 5);
  Tree::Node* y = f.add(t, branch(200, 1), 21, 2);
  f.add(t, branch(300, 100), 120, 3);
  (void)x, (void)y;
  std::vector<int64_t> gone;
  std::vector<int32_t> first;
  auto note = [&](Tree::Evicted&& e) {
    gone.push_back(e.snap->pos);
    first.push_back(e.ids.back());
  };
  t.evict_to(t.bytes() - 1, note);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(first[0], 200) << "the least recently used of two equals";
  t.evict_to(t.bytes() - 1, note);
  EXPECT_EQ(first[1], 100);
  t.evict_to(t.bytes() - 1, note);
  EXPECT_EQ(gone[2], 20) << "the stem (20 tokens per snapshot) before the 100-token leaf";
  EXPECT_EQ(t.bytes(), recount(t.root()));
  t.evict_to(0, note);
  EXPECT_EQ(t.bytes(), 0u);
  EXPECT_EQ(t.nodes(), 0u);
}

TEST(Tree, PinnedNodesAreNeverEvicted) {
  Fixture f;
  Tree t(f.l);
  Tree::Node* keep = f.add(t, seq(5, 8), 8, 1);
  f.add(t, seq(40, 8), 8, 2);
  t.pin(keep);
  t.evict_to(0, [](Tree::Evicted&&) {});
  EXPECT_EQ(t.snapshots(), 1u);
  EXPECT_EQ(t.match(Key{seq(5, 8), {}}, 3).best, keep);
  t.unpin(keep);
  t.evict_to(0, [](Tree::Evicted&&) {});
  EXPECT_EQ(t.bytes(), 0u);
}

TEST(Tree, ContentHashesKeepImagesApart) {
  Fixture f;
  Tree t(f.l);
  const std::vector<int32_t> ids = seq(7, 6);
  const std::vector<uint64_t> img1 = {0, 0, 11, 11, 0, 0}, img2 = {0, 0, 12, 12, 0, 0};
  const model::State st = f.state(ids);
  t.attach(t.insert(Key{ids, img1}, 6, st, 1), take_snapshot(f.l, st, f.logits));
  EXPECT_EQ(t.match(Key{ids, img1}, 2).best->end, 6);
  EXPECT_EQ(t.match(Key{ids, img2}, 3).lcp, 2) << "same ids, other image: no match past it";
  EXPECT_EQ(t.match(Key{ids, {}}, 4).lcp, 2);
}

TEST(Tree, RandomWorkKeepsTheByteCount) {
  Fixture f;
  Tree t(f.l);
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> seen;
  for (int i = 0; i < 300; ++i) {
    std::vector<int32_t> ids;
    if (!seen.empty() && rng() % 2) {
      ids = seen[rng() % seen.size()];
      ids.resize(1 + rng() % ids.size());
    }
    for (int k = 0, n = 1 + static_cast<int>(rng() % 6); k < n; ++k) ids.push_back(3 + static_cast<int32_t>(rng() % 5));
    f.add(t, ids, 1 + static_cast<int64_t>(rng() % ids.size()), static_cast<uint64_t>(i));
    seen.push_back(ids);
    if (i % 7 == 0) t.evict_to(t.bytes() / 2, [](Tree::Evicted&&) {});
    if (i % 11 == 0) t.erase_branch(t.match(Key{ids, {}}, static_cast<uint64_t>(i)).best);
    ASSERT_EQ(t.bytes(), recount(t.root())) << "step " << i;
  }
}
