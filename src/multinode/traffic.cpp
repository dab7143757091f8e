#include "multinode/traffic.h"

#include "model/group.h"

namespace k3::multinode {

Traffic decode_traffic(const model::HParams& hp, const model::Placement& p, bool leader, const InputFormats& fmt) {
  Traffic t;
  const int N = p.tp_size;
  // bytes of a width-`full` row (cut in units of `unit`, travelling in `input` where it can) that
  // this process does not hold
  auto others = [&](int64_t full, int64_t unit, GgmlType input = GgmlType::F32) {
    const int64_t units = full / unit;
    const int64_t mine = (model::share_begin(units, N, p.tp_rank + 1) - model::share_begin(units, N, p.tp_rank)) * unit;
    const GgmlType f = model::exchange_format(input, full, unit, N, 1);
    return static_cast<double>(row_size(f, full) - row_size(f, mine));
  };
  auto gather = [&](double bytes) {
    t.group += 1;
    t.group_bytes += bytes;
  };
  t.world = 1;  // the pass (its first broadcast of 64 words holds a decode step)
  if (!leader) t.world_bytes = 64 * 8;
  const int64_t H = hp.n_embd, V = hp.n_vocab;
  const model::LayerRange layers = model::stage_layers(hp.n_layer, p);
  if (N > 1) {
    if (p.stage == 0) gather(others(V, 1) / static_cast<double>(V) * static_cast<double>(H));  // one row
    for (uint32_t il = layers.first; il < layers.last; ++il) {
      const int64_t nh = hp.n_head[il];
      if (hp.attn_kind(il) == model::AttnKind::KDA) gather(others(nh * hp.kda_head_dim, hp.kda_head_dim, fmt.trunk));
      else gather(others(nh * hp.n_embd_head_v_mla, hp.n_embd_head_v_mla, fmt.trunk));
      gather(others(H, 1));  // attention output
      if (hp.ffn_kind(il) == model::FfnKind::Dense) {
        gather(others(hp.n_ff[il], 1, fmt.trunk));
      } else {
        double first = others(hp.n_expert, 1);  // router logits, z, the shared experts' hidden layer
        if (hp.latent()) first += others(hp.d_lat(), 1, fmt.experts);
        if (hp.has_shexp) first += others(hp.n_ff_shexp(il), 1, fmt.trunk);
        gather(first);
        gather(static_cast<double>(hp.n_expert_used[il]) * others(hp.n_ff_exp[il], 1, fmt.experts));  // the k experts' hidden rows
        if (hp.latent()) gather(others(hp.d_lat(), 1));  // their combined latent
      }
      gather(others(H, 1));  // FFN output
    }
  }
  const bool last = p.stage == p.n_stages - 1;
  if (last && N > 1) {  // logits to the stage's first process
    t.group += 1;
    if (p.tp_rank == 0) t.group_bytes += others(V, 1);
  }
  if (p.n_stages > 1) {
    if (last && p.tp_rank == 0) t.p2p += 1;  // the logits to the leader
    if (leader) t.p2p += 1, t.p2p_bytes += static_cast<double>(V) * sizeof(float);
    if (!last) t.p2p += 1;  // the stream to the next stage
    if (p.stage > 0) {      // the stream and the AttnRes bank from the previous one
      double entries = 1;
      for (uint32_t il = 0; il < layers.first; ++il) entries += hp.banks(il);
      t.p2p += 1, t.p2p_bytes += entries * static_cast<double>(H) * sizeof(float);
    }
  }
  return t;
}

}  // namespace k3::multinode
