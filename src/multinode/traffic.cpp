#include "multinode/traffic.h"

namespace k3::multinode {

Traffic decode_traffic(const model::HParams& hp, const model::Placement& p, bool leader) {
  Traffic t;
  const int N = p.tp_size;
  const double f = sizeof(float);
  // values of a width-`full` row (cut in units of `unit`) that this process does not hold
  auto others = [&](int64_t full, int64_t unit) {
    const int64_t units = full / unit;
    return static_cast<double>(full - (model::share_begin(units, N, p.tp_rank + 1) -
                                       model::share_begin(units, N, p.tp_rank)) * unit);
  };
  auto gather = [&](double values) {
    t.group += 1;
    t.group_bytes += values * f;
  };
  t.world = 1;  // the pass (its first broadcast of 64 words holds a decode step)
  if (!leader) t.world_bytes = 64 * 8;
  const int64_t H = hp.n_embd, V = hp.n_vocab;
  const model::LayerRange layers = model::stage_layers(hp.n_layer, p);
  if (N > 1) {
    if (p.stage == 0) gather(others(V, 1) / static_cast<double>(V) * static_cast<double>(H));  // one row
    for (uint32_t il = layers.first; il < layers.last; ++il) {
      const int64_t nh = hp.n_head[il];
      if (hp.attn_kind(il) == model::AttnKind::KDA) gather(others(nh * hp.kda_head_dim, hp.kda_head_dim));
      else gather(others(nh * hp.n_embd_head_v_mla, hp.n_embd_head_v_mla));
      gather(others(H, 1));  // attention output
      if (hp.ffn_kind(il) == model::FfnKind::Dense) {
        gather(others(hp.n_ff[il], 1));
      } else {
        double first = others(hp.n_expert, 1);  // router logits, z, the shared experts' hidden layer
        if (hp.latent()) first += others(hp.d_lat(), 1);
        if (hp.has_shexp) first += others(hp.n_ff_shexp(il), 1);
        gather(first);
        gather(static_cast<double>(hp.n_expert_used[il]) * others(hp.n_ff_exp[il], 1));  // the k experts' hidden rows
        if (hp.latent()) gather(others(hp.d_lat(), 1));  // their combined latent
      }
      gather(others(H, 1));  // FFN output
    }
  }
  const bool last = p.stage == p.n_stages - 1;
  if (last && N > 1) {  // logits to the stage's first process
    t.group += 1;
    if (p.tp_rank == 0) t.group_bytes += others(V, 1) * f;
  }
  if (p.n_stages > 1) {
    if (last && p.tp_rank == 0) t.p2p += 1;  // the logits to the leader
    if (leader) t.p2p += 1, t.p2p_bytes += static_cast<double>(V) * f;
    if (!last) t.p2p += 1;  // the stream to the next stage
    if (p.stage > 0) {      // the stream and the AttnRes bank from the previous one
      double entries = 1;
      for (uint32_t il = 0; il < layers.first; ++il) entries += hp.banks(il);
      t.p2p += 1, t.p2p_bytes += entries * static_cast<double>(H) * f;
    }
  }
  return t;
}

}  // namespace k3::multinode
