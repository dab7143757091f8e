#include "model/state.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace k3::model {

std::vector<LayerDims> state_dims(const HParams& hp, const Weights& w) {
  std::vector<LayerDims> dims(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& lw = w.layers[il];
    LayerDims& d = dims[il];
    if (lw.ssm_a) {  // KDA: this process's heads
      const size_t D = static_cast<size_t>(lw.conv_q.ne[2]), nh = static_cast<size_t>(lw.ssm_a.ne[0]);
      d.conv = 3 * D * (hp.ssm_d_conv - 1);
      d.rec = nh * hp.kda_head_dim * hp.kda_head_dim;
    } else if (lw.kv_a) {
      d.kv_row = hp.mla_row();
    }
  }
  return dims;
}

State::State(const HParams& hp, const Weights& w, int64_t n_ctx, StateMirror* mirror)
    : dims_(state_dims(hp, w)), n_ctx_(n_ctx), mirror_(mirror) {
  if (n_ctx <= 0) fail("context size must be positive (got %lld)", static_cast<long long>(n_ctx));
  if (mirror_) id_ = mirror_->created();
  reset();
}

State::State(const HParams& hp, int64_t n_ctx) : n_ctx_(n_ctx) {
  if (n_ctx <= 0) fail("context size must be positive (got %lld)", static_cast<long long>(n_ctx));
  dims_.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    LayerDims& d = dims_[il];
    if (hp.attn_kind(il) == AttnKind::KDA) {
      d.conv = 3 * static_cast<size_t>(hp.d_inner(il)) * (hp.ssm_d_conv - 1);
      d.rec = static_cast<size_t>(hp.n_head[il]) * hp.kda_head_dim * hp.kda_head_dim;
    } else {
      d.kv_row = hp.mla_row();
    }
  }
  reset();
}

State::State(const State& o)
    : layers(o.layers), dims_(o.dims_), n_ctx_(o.n_ctx_), n_past_(o.n_past_), mirror_(o.mirror_) {
  for (size_t il = 0; il < layers.size(); ++il) layers[il].kv.reserve(o.layers[il].kv.capacity());
  if (mirror_) {
    id_ = mirror_->created();
    mirror_->copied(o.id_, id_);
  }
}

State::State(State&& o) noexcept
    : layers(std::move(o.layers)), dims_(std::move(o.dims_)), n_ctx_(o.n_ctx_), n_past_(o.n_past_),
      mirror_(o.mirror_), id_(o.id_) {
  o.mirror_ = nullptr;
  o.id_ = 0;
}

State& State::operator=(const State& o) {
  if (this == &o) return *this;
  layers = o.layers;
  for (size_t il = 0; il < layers.size(); ++il) layers[il].kv.reserve(o.layers[il].kv.capacity());
  dims_ = o.dims_, n_ctx_ = o.n_ctx_, n_past_ = o.n_past_;
  if (!mirror_ && o.mirror_) mirror_ = o.mirror_, id_ = mirror_->created();
  if (mirror_) mirror_->copied(o.id_, id_);
  return *this;
}

State& State::operator=(State&& o) noexcept {
  if (this == &o) return *this;
  if (mirror_) mirror_->dropped(id_);
  layers = std::move(o.layers), dims_ = std::move(o.dims_);
  n_ctx_ = o.n_ctx_, n_past_ = o.n_past_, mirror_ = o.mirror_, id_ = o.id_;
  o.mirror_ = nullptr;
  o.id_ = 0;
  return *this;
}

State::~State() {
  if (mirror_) mirror_->dropped(id_);
}

void State::reset() {
  layers.assign(dims_.size(), LayerState{});
  for (size_t il = 0; il < dims_.size(); ++il) {
    LayerState& s = layers[il];
    s.conv.assign(dims_[il].conv, 0.0f);
    s.rec.assign(dims_[il].rec, 0.0f);
    // Address space for the whole context now, so the cache never moves while it grows (pages
    // are only touched, and resident, as rows are appended).
    if (dims_[il].kv_row) s.kv.reserve(static_cast<size_t>(n_ctx_) * dims_[il].kv_row);
  }
  n_past_ = 0;
}

uint64_t state_bytes(const HParams& hp, int64_t n_ctx) {
  uint64_t n = 0;
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    if (hp.attn_kind(il) == AttnKind::KDA) {
      const uint64_t D = hp.d_inner(il), d = hp.kda_head_dim;
      n += 3 * D * (hp.ssm_d_conv - 1) + static_cast<uint64_t>(hp.n_head[il]) * d * d;
    } else {
      n += static_cast<uint64_t>(n_ctx) * hp.mla_row();
    }
  }
  return n * sizeof(float);
}

void State::set_n_past(int64_t n) {
  if (n < 0 || n > n_ctx_)
    fail("a restored sequence of %lld tokens does not fit the context of %lld", static_cast<long long>(n),
         static_cast<long long>(n_ctx_));
  for (size_t il = 0; il < dims_.size(); ++il)
    if (dims_[il].kv_row > 0 && layers[il].kv.size() != static_cast<size_t>(n) * dims_[il].kv_row)
      fail("layer %zu: the restored MLA cache holds %zu values, not %lld rows", il, layers[il].kv.size(),
           static_cast<long long>(n));
  n_past_ = n;
}

double State::max_abs_diff(const State& a, const State& b) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (a.n_past_ != b.n_past_ || a.layers.size() != b.layers.size()) return inf;
  double m = 0;
  auto cmp = [&](const std::vector<float>& x, const std::vector<float>& y) {
    if (x.size() != y.size()) {
      m = inf;
      return;
    }
    for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(x[i]) - y[i]));
  };
  for (size_t il = 0; il < a.layers.size(); ++il) {
    cmp(a.layers[il].conv, b.layers[il].conv);
    cmp(a.layers[il].rec, b.layers[il].rec);
    cmp(a.layers[il].kv, b.layers[il].kv);
  }
  return m;
}

}  // namespace k3::model
