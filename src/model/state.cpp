#include "model/state.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace k3::model {

State::State(const HParams& hp, int64_t n_ctx) : hp_(hp), n_ctx_(n_ctx) {
  if (n_ctx <= 0) fail("context size must be positive (got %lld)", static_cast<long long>(n_ctx));
  reset();
}

void State::reset() {
  const HParams& hp = hp_;
  layers.assign(hp.n_layer, LayerState{});
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    LayerState& s = layers[il];
    if (hp.attn_kind(il) == AttnKind::KDA) {
      const size_t D = hp.d_inner(il), d = hp.kda_head_dim;
      s.conv.assign(3 * D * (hp.ssm_d_conv - 1), 0.0f);
      s.rec.assign(static_cast<size_t>(hp.n_head[il]) * d * d, 0.0f);
    } else {
      // Address space for the whole context now, so the cache never moves while it grows (pages
      // are only touched, and resident, as rows are appended).
      s.kv.reserve(static_cast<size_t>(n_ctx_) * hp.mla_row());
    }
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
  for (uint32_t il = 0; il < hp_.n_layer; ++il)
    if (hp_.attn_kind(il) == AttnKind::MLA && layers[il].kv.size() != static_cast<size_t>(n) * hp_.mla_row())
      fail("layer %u: the restored MLA cache holds %zu values, not %lld rows", il, layers[il].kv.size(),
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
