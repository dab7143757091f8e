#include "cache/state_copy.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace k3::cache {

Layout Layout::of(const model::HParams& hp, size_t side_width) {
  Layout l;
  l.row = hp.mla_row();
  l.side = side_width;
  l.n_vocab = l.logits = hp.n_vocab;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.attn_kind(il) == model::AttnKind::MLA) {
      l.mla.push_back(il);
      continue;
    }
    const size_t D = hp.d_inner(il), d = hp.kda_head_dim;
    l.kda.push_back(il);
    l.conv.push_back(3 * D * (hp.ssm_d_conv - 1));
    l.rec.push_back(static_cast<size_t>(hp.n_head[il]) * d * d);
  }
  return l;
}

Layout Layout::of(const model::Model& m, bool logits, size_t side_width) {
  const model::HParams& hp = m.hparams();
  Layout l;
  l.row = hp.mla_row();
  l.side = side_width;
  l.n_vocab = hp.n_vocab;
  l.logits = logits ? hp.n_vocab : 0;
  const std::vector<model::LayerDims> dims = model::state_dims(hp, m.weights());
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (dims[il].kv_row) l.mla.push_back(il);
    if (!dims[il].rec) continue;
    l.kda.push_back(il);
    l.conv.push_back(dims[il].conv);
    l.rec.push_back(dims[il].rec);
  }
  return l;
}

size_t Layout::kda_floats() const {
  size_t n = 0;
  for (size_t j = 0; j < kda.size(); ++j) n += conv[j] + rec[j];
  return n;
}

int64_t Layout::default_snapshot_every() const {
  const double ratio = row_floats() ? static_cast<double>(snapshot_floats()) / static_cast<double>(row_floats()) : 8192;
  const double nearest = std::exp2(std::round(std::log2(std::max(ratio, 1.0))));
  return static_cast<int64_t>(std::clamp(nearest, 256.0, 8192.0));
}

uint64_t Layout::hash() const {
  std::vector<uint64_t> v = {row, n_vocab, mla.size(), kda.size()};
  if (logits != n_vocab) v.push_back(logits);  // a share without logits (files of one process keep their hash)
  if (side) v.push_back(side);  // layouts without side rows keep their hash
  for (uint32_t i : mla) v.push_back(i);
  for (size_t j = 0; j < kda.size(); ++j) v.insert(v.end(), {kda[j], conv[j], rec[j]});
  return XXH3_64bits(v.data(), v.size() * sizeof(uint64_t));
}

std::shared_ptr<Rows> copy_rows(const Layout& l, const model::State& st, int64_t a, int64_t b) {
  K3_ASSERT(0 <= a && a <= b && b <= st.n_past());
  auto r = std::make_shared<Rows>();
  r->n = b - a;
  r->v = Floats(static_cast<size_t>(r->n) * l.row_floats());
  for (size_t j = 0; j < l.parts(); ++j)
    std::copy_n(l.rows_of(st, j).data() + a * l.width(j), r->n * l.width(j), r->layer(l, j));
  return r;
}

std::shared_ptr<Rows> slice_rows(const Layout& l, const Rows& src, int64_t off, int64_t n) {
  K3_ASSERT(0 <= off && off + n <= src.n);
  auto r = std::make_shared<Rows>();
  r->n = n;
  r->v = Floats(static_cast<size_t>(n) * l.row_floats());
  for (size_t j = 0; j < l.parts(); ++j)
    std::copy_n(src.layer(l, j) + off * l.width(j), n * l.width(j), r->layer(l, j));
  return r;
}

std::shared_ptr<Snapshot> take_snapshot(const Layout& l, const model::State& st, std::span<const float> logits) {
  K3_ASSERT(logits.size() == l.logits);
  auto s = std::make_shared<Snapshot>();
  s->pos = st.n_past();
  s->v = Floats(l.snapshot_floats());
  float* o = s->v.data();
  for (size_t j = 0; j < l.kda.size(); ++j) {
    const model::LayerState& ls = st.layers[l.kda[j]];
    o = std::copy(ls.conv.begin(), ls.conv.end(), o);
    o = std::copy(ls.rec.begin(), ls.rec.end(), o);
  }
  std::copy(logits.begin(), logits.end(), o);
  return s;
}

void restore(const Layout& l, model::State& st, std::span<const Rows* const> pieces, const Snapshot& s,
             std::vector<float>* logits) {
  st.reset();
  for (size_t j = 0; j < l.parts(); ++j) {
    std::vector<float>& kv = l.rows_of(st, j);
    kv.resize(static_cast<size_t>(s.pos) * l.width(j));
    float* o = kv.data();
    for (const Rows* r : pieces) o = std::copy_n(r->layer(l, j), r->n * l.width(j), o);
    K3_ASSERT(o == kv.data() + kv.size());
  }
  apply_snapshot(l, st, s, logits);
}

void apply_snapshot(const Layout& l, model::State& st, const Snapshot& s, std::vector<float>* logits) {
  const float* in = s.v.data();
  for (size_t j = 0; j < l.kda.size(); ++j) {
    model::LayerState& ls = st.layers[l.kda[j]];
    std::copy_n(in, l.conv[j], ls.conv.data());
    std::copy_n(in + l.conv[j], l.rec[j], ls.rec.data());
    in += l.conv[j] + l.rec[j];
  }
  if (logits) logits->assign(in, in + l.logits);
  st.set_n_past(s.pos);
}

}  // namespace k3::cache
