#include "model/state.h"

#include <cmath>
#include <limits>

#include "common/error.h"
#include "model/kda.h"

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
      d.head_dim = hp.kda_head_dim;
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
      d.head_dim = hp.kda_head_dim;
    } else {
      d.kv_row = hp.mla_row();
    }
  }
  reset();
}

State::State(const State& o)
    : side(o.side), layers(o.layers), dims_(o.dims_), n_ctx_(o.n_ctx_), n_past_(o.n_past_), pass_(o.pass_),
      keep_(o.keep_), keep_mode_(o.keep_mode_), side_w_(o.side_w_), mirror_(o.mirror_) {
  for (size_t il = 0; il < layers.size(); ++il) layers[il].kv.reserve(o.layers[il].kv.capacity());
  side.reserve(o.side.capacity());
  if (mirror_) {
    id_ = mirror_->created();
    mirror_->copied(o.id_, id_);
  }
}

State::State(State&& o) noexcept
    : side(std::move(o.side)), layers(std::move(o.layers)), dims_(std::move(o.dims_)), n_ctx_(o.n_ctx_),
      n_past_(o.n_past_), pass_(o.pass_), keep_(o.keep_), keep_mode_(o.keep_mode_), side_w_(o.side_w_),
      mirror_(o.mirror_), id_(o.id_) {
  o.mirror_ = nullptr;
  o.id_ = 0;
}

State& State::operator=(const State& o) {
  if (this == &o) return *this;
  layers = o.layers;
  for (size_t il = 0; il < layers.size(); ++il) layers[il].kv.reserve(o.layers[il].kv.capacity());
  side = o.side;
  side.reserve(o.side.capacity());
  dims_ = o.dims_, n_ctx_ = o.n_ctx_, n_past_ = o.n_past_, pass_ = o.pass_;
  keep_ = o.keep_, keep_mode_ = o.keep_mode_, side_w_ = o.side_w_;
  if (!mirror_ && o.mirror_) mirror_ = o.mirror_, id_ = mirror_->created();
  if (mirror_) mirror_->copied(o.id_, id_);
  return *this;
}

State& State::operator=(State&& o) noexcept {
  if (this == &o) return *this;
  if (mirror_) mirror_->dropped(id_);
  layers = std::move(o.layers), dims_ = std::move(o.dims_), side = std::move(o.side);
  n_ctx_ = o.n_ctx_, n_past_ = o.n_past_, pass_ = o.pass_, mirror_ = o.mirror_, id_ = o.id_;
  keep_ = o.keep_, keep_mode_ = o.keep_mode_, side_w_ = o.side_w_;
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
  side.clear();
  n_past_ = pass_ = keep_ = 0;
}

void State::set_side_width(size_t w) {
  side_w_ = w;
  side.clear();
  side.reserve(static_cast<size_t>(n_ctx_) * w);
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
  if (side_w_ && side.size() != static_cast<size_t>(n) * side_w_)
    fail("the restored side rows hold %zu values, not %lld rows of %zu", side.size(), static_cast<long long>(n),
         side_w_);
  n_past_ = n;
  pass_ = 0;
}

void State::keep_rows(int64_t n, KeepMode mode) {
  K3_ASSERT(n >= 0);
  if (mirror_ && n > 0) fail("rewinding a sequence is not supported across processes (mpirun) yet");
  keep_ = n;
  keep_mode_ = mode;
  pass_ = 0;
}

// Per KDA layer: the conv window after the first m tokens of the pass is the last K-1 inputs of
// (the window before it, then the pass's inputs); the recurrent state is the recorded one (States)
// or the state before the pass run through the same delta-rule steps again (Inputs).
void State::rewind(int64_t pos, ThreadPool& pool) {
  const int64_t n0 = n_past_ - pass_, m = pos - n0;
  if (keep_ < pass_ || pass_ == 0 || m < 1 || m > pass_)
    fail("rewind to %lld: the last pass (%lld tokens from %lld) was not recorded or does not hold it",
         static_cast<long long>(pos), static_cast<long long>(pass_), static_cast<long long>(n0));
  if (m < pass_) {
    for (size_t il = 0; il < dims_.size(); ++il) {
      const LayerDims& d = dims_[il];
      LayerState& ls = layers[il];
      if (d.kv_row) {
        ls.kv.resize(static_cast<size_t>(pos) * d.kv_row);
        continue;
      }
      if (!d.rec) continue;
      const KdaJournal& j = ls.journal;
      const int64_t D = static_cast<int64_t>(d.rec / (d.head_dim * d.head_dim) * d.head_dim);
      const int64_t S = static_cast<int64_t>(d.conv) / (3 * D);
      for (int64_t s = 0; s < 3; ++s)
        for (int64_t c = 0; c < D; ++c) {
          float* w = ls.conv.data() + (s * D + c) * S;
          const float* w0 = j.conv0.data() + (s * D + c) * S;
          for (int64_t i = 0; i < S; ++i) {  // window entry i is input m - S + i (negative: the old window)
            const int64_t t = m - S + i;
            w[i] = t < 0 ? w0[S + t] : j.proj[(s * pass_ + t) * D + c];
          }
        }
      if (keep_mode_ == KeepMode::States)
        std::copy_n(j.recs.data() + (m - 1) * d.rec, d.rec, ls.rec.data());
      else
        kda_replay(j, static_cast<int64_t>(d.head_dim), pass_, m, ls.rec.data(), pool);
    }
    if (side_w_ && side.size() > static_cast<size_t>(pos) * side_w_) side.resize(static_cast<size_t>(pos) * side_w_);
  }
  n_past_ = pos;
  pass_ = 0;
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
